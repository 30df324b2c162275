// Shared by the run commands (run, attach, demo, runs, stop): opening the store, following a
// run with a terminal progress bar, and one-line summaries. Header-only: the CLI globs only
// cmd_*.cpp files.
#pragma once

#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <unistd.h>

#include <QElapsedTimer>
#include <QEventLoop>
#include <QTimer>

#include "jobs/format_bytes.h"
#include "jobs/launcher.h"
#include "jobs/local_launcher.h"
#include "jobs/local_run_watcher.h"
#include "jobs/remote_run_watcher.h"
#include "jobs/run_store.h"
#include "jobs/slurm_launcher.h"
#include "jobs/ssh_launcher.h"
#include "terminal_text.h"

namespace shard::cli {

// Overlaid loss and peak-memory curves of `runs` by step, tokens or time (cmd_runs.cpp).
void writeComparePng(jobs::RunStore& store, const QVector<jobs::RunRecord>& runs,
    const QString& xAxis, const QString& out);

inline jobs::RunStore openStore(const std::string& path, bool readOnlyOk = false)
{
    const QString p = path.empty() ? jobs::RunStore::defaultPath() : QString::fromStdString(path);
    if (readOnlyOk) {
        QString warning;
        auto s = jobs::RunStore::openBestEffort(p, &warning);
        if (!s)
            throw std::runtime_error(s.error().toStdString());
        if (!warning.isEmpty())
            std::fprintf(stderr, "shard: warning: %s\n", qPrintable(warning));
        return std::move(s).value();
    }
    auto s = jobs::RunStore::open(p);
    if (!s)
        throw std::runtime_error(s.error().toStdString());
    return std::move(s).value();
}

inline jobs::RunRecord findRun(jobs::RunStore& store, const std::string& idOrName)
{
    auto r = store.findRun(QString::fromStdString(idOrName));
    if (!r)
        throw std::runtime_error(r.error().toStdString());
    return *r;
}

inline QString humanDuration(qint64 ms)
{
    return jobs::formatDuration(static_cast<double>(ms / 1000)); // whole seconds, as before
}

inline QString lossText(const std::optional<double>& v)
{
    return v ? QString::number(*v, 'f', 4) : QStringLiteral("-");
}

inline std::atomic<bool>& interrupted()
{
    static std::atomic<bool> flag {false};
    return flag;
}

// Prints a progress bar (or, without a terminal, one line every ~10%) until the run ends or
// the user presses Ctrl-C (which only detaches: the run goes on). Returns the final record.
inline jobs::RunRecord followRun(jobs::RunStore& store, qint64 runId)
{
    auto run = store.run(runId);
    if (!run)
        throw std::runtime_error(run.error().toStdString());
    if (jobs::isTerminal(run->status))
        return *run;
    auto launcher = jobs::launcherOf(store, *run);
    if (!launcher)
        throw std::runtime_error(launcher.error().toStdString());
    auto made = launcher.value()->watch(*run);
    if (!made)
        throw std::runtime_error(made.error().toStdString());
    std::unique_ptr<jobs::RunWatcher> watcher = std::move(made).value();
    const bool tty = ::isatty(STDOUT_FILENO);
    QEventLoop loop;
    QElapsedTimer clock;
    clock.start();
    qint64 firstStep = -1;
    qint64 lastPrinted = -1;
    QElapsedTimer sinceLine;
    sinceLine.start();
    QString lastError;
    auto draw = [&] {
        auto r = store.run(runId);
        if (!r)
            return;
        const qint64 total = r->totalSteps;
        const qint64 step = r->lastStep;
        if (firstStep < 0 && step > 0)
            firstStep = step;
        QString eta = QStringLiteral("--:--");
        if (total > 0 && step > firstStep && firstStep >= 0) {
            const double perStep = static_cast<double>(clock.elapsed()) / double(step - firstStep);
            eta = humanDuration(static_cast<qint64>(perStep * double(total - step)));
        }
        auto series = store.metricSeries(runId, std::max<qint64>(step - 1, 0) - 1);
        // A run that logs no throughput (a command's engine may not) shows "-", not 0.
        const double tps = series && series->size() > 0 ? series->tokensPerSec.back() : qQNaN();
        const QString stats
            = QStringLiteral("step %1%2  loss %3  %4 tok/s  ETA %5")
                  .arg(step)
                  .arg(total > 0 ? QStringLiteral("/%1").arg(total) : QString())
                  .arg(lossText(r->finalLoss))
                  .arg(std::isfinite(tps) ? QString::number(tps, 'f', 0) : QStringLiteral("-"))
                  .arg(eta);
        if (tty) {
            const int width = 24;
            const int filled = total > 0 ? int(width * std::min<qint64>(step, total) / total) : 0;
            std::printf("\r[%s%s] %s   ", std::string(size_t(filled), '#').c_str(),
                std::string(size_t(width - filled), '.').c_str(), qPrintable(stats));
            std::fflush(stdout);
        } else if (step != lastPrinted
            && (lastPrinted < 0 || step == total || sinceLine.elapsed() >= 2000
                || (total > 0 && (step - lastPrinted) * 10 >= total))) {
            // Without a terminal: a line per ~10% of the run or every 2 s, not per step.
            std::printf("%s\n", qPrintable(stats));
            std::fflush(stdout);
            lastPrinted = step;
            sinceLine.restart();
        }
    };
    QObject::connect(watcher.get(), &jobs::RunWatcher::pointsAdded, &loop, [&] { draw(); });
    QObject::connect(watcher.get(), &jobs::RunWatcher::finished, &loop, [&] { loop.quit(); });
    QObject::connect(watcher.get(), &jobs::RunWatcher::errorOccurred, &loop,
        [&](qint64, const QString& message) {
            if (message == lastError)
                return;
            lastError = message;
            std::fprintf(stderr, "%sshard: %s\n", tty ? "\n" : "", qPrintable(message));
        });
    QTimer sigPoll;
    QObject::connect(&sigPoll, &QTimer::timeout, &loop, [&] {
        if (interrupted().load())
            loop.quit();
    });
    sigPoll.start(100);
    std::signal(SIGINT, [](int) { interrupted().store(true); });
    draw();
    loop.exec();
    std::signal(SIGINT, SIG_DFL);
    if (tty) {
        draw();
        std::printf("\n");
    }
    if (interrupted().load())
        std::printf("detached from run %lld; it goes on (`shard attach %lld` to follow, `shard "
                    "stop %lld` to stop it)\n",
            static_cast<long long>(runId), static_cast<long long>(runId),
            static_cast<long long>(runId));
    return *store.run(runId);
}

inline void printSummary(const jobs::RunRecord& r)
{
    std::printf("run %lld '%s': %s%s\n", static_cast<long long>(r.id),
        terminalText(r.name).constData(), qPrintable(jobs::toString(r.status)),
        r.message.isEmpty() ? ""
                            : terminalText(QStringLiteral(" (%1)").arg(r.message)).constData());
    // Throughput and memory only when the run reported them (a command run may not).
    QString measured;
    if (r.tokensPerSec > 0)
        measured += QStringLiteral(", %1 tokens/s").arg(r.tokensPerSec, 0, 'f', 0);
    if (r.peakMemoryBytes() > 0)
        measured += QStringLiteral(", peak memory %1 per rank (max)")
                        .arg(jobs::formatBytes(double(r.peakMemoryBytes())));
    std::printf("  steps %lld, final loss %s, best loss %s%s, %s\n",
        static_cast<long long>(r.lastStep), qPrintable(lossText(r.finalLoss)),
        qPrintable(lossText(r.bestLoss)), qPrintable(measured),
        qPrintable(humanDuration(r.durationMs())));
    std::printf("  run directory: %s%s\n",
        qPrintable(r.host.isEmpty() ? QString() : r.host.section(',', 0, 0) + ':'),
        qPrintable(r.runDir));
}

inline int exitCodeFor(jobs::RunStatus s)
{
    switch (s) {
    case jobs::RunStatus::Finished:
    case jobs::RunStatus::Running:
    case jobs::RunStatus::Queued:
        return 0;
    case jobs::RunStatus::Stopped:
        return 3;
    default:
        return 2;
    }
}

} // namespace shard::cli
