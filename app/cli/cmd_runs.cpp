// `shard runs list|show|compare|export|delete`: browse the run store. compare prints the config
// values that differ and, with --png, draws overlaid loss and memory curves. Drawing text needs
// a QGuiApplication, which the CLI's main() does not create: the PNG is drawn by this same
// executable re-run as a child with SHARD_RENDER_PNG_REQUEST set (caught before main()).
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <QFile>
#include <QFileInfo>
#include <QGuiApplication>
#include <QImage>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QPainter>
#include <QPainterPath>
#include <QProcess>
#include <QTemporaryFile>

#include "command.h"
#include "jobs/csv.h"
#include "jobs/run_import.h"
#include "jobs/run_series.h"
#include "protocol/memory_categories.h"
#include "run_follow.h"
#include "terminal_text.h"

namespace shard::cli {
namespace {

// ---- PNG drawing (runs in the child) -------------------------------------------------------

const QColor kPalette[] = {QColor(31, 119, 180), QColor(255, 127, 14), QColor(44, 160, 44),
    QColor(214, 39, 40), QColor(148, 103, 189), QColor(140, 86, 75), QColor(227, 119, 194),
    QColor(127, 127, 127), QColor(188, 189, 34), QColor(23, 190, 207)};

QString tickLabel(double v)
{
    const double a = std::fabs(v);
    if (a >= 1e9)
        return QString::number(v / 1e9, 'g', 3) + 'G';
    if (a >= 1e6)
        return QString::number(v / 1e6, 'g', 3) + 'M';
    if (a >= 1e4)
        return QString::number(v / 1e3, 'g', 3) + 'k';
    return QString::number(v, 'g', 4);
}

// About five round tick values (1, 2 or 5 x 10^k apart) inside [lo, hi].
QVector<double> niceTicks(double lo, double hi)
{
    const double raw = (hi - lo) / 5;
    const double mag = std::pow(10.0, std::floor(std::log10(raw)));
    const double step = raw / mag >= 5 ? 5 * mag : raw / mag >= 2 ? 2 * mag : mag;
    QVector<double> ticks;
    for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9 && ticks.size() < 20;
         v += step)
        ticks << (std::fabs(v) < step * 1e-9 ? 0.0 : v);
    return ticks;
}

void drawPanel(QPainter& p, const QRect& area, const QString& title, const QString& xLabel,
    const QJsonArray& runs, const char* xKey, const char* yKey)
{
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (const auto& rv : runs) {
        const QJsonObject r = rv.toObject();
        const QJsonArray xs = r[QLatin1String(xKey)].toArray();
        const QJsonArray ys = r[QLatin1String(yKey)].toArray();
        for (int i = 0; i < std::min(xs.size(), ys.size()); ++i) {
            const double x = xs[i].toDouble(NAN);
            const double y = ys[i].toDouble(NAN);
            if (!std::isfinite(x) || !std::isfinite(y))
                continue;
            x0 = std::min(x0, x);
            x1 = std::max(x1, x);
            y0 = std::min(y0, y);
            y1 = std::max(y1, y);
        }
    }
    const QRect plot = area.adjusted(80, 40, -20, -50);
    p.setPen(Qt::black);
    QFont f = p.font();
    f.setPixelSize(18);
    f.setBold(true);
    p.setFont(f);
    p.drawText(QRect(area.left(), area.top() + 5, area.width(), 30), Qt::AlignHCenter, title);
    f.setBold(false);
    f.setPixelSize(13);
    p.setFont(f);
    p.drawRect(plot);
    if (!std::isfinite(x0)) {
        p.drawText(plot, Qt::AlignCenter, QStringLiteral("no data"));
        return;
    }
    if (x1 <= x0)
        x1 = x0 + 1;
    if (y1 <= y0) {
        y0 -= 0.5;
        y1 += 0.5;
    }
    const double pad = (y1 - y0) * 0.05;
    y0 -= pad;
    y1 += pad;
    auto px = [&](double x) { return plot.left() + (x - x0) / (x1 - x0) * plot.width(); };
    auto py = [&](double y) { return plot.bottom() - (y - y0) / (y1 - y0) * plot.height(); };
    for (double xv : niceTicks(x0, x1)) {
        p.setPen(QColor(225, 225, 225));
        p.drawLine(QPointF(px(xv), plot.top()), QPointF(px(xv), plot.bottom()));
        p.setPen(Qt::black);
        p.drawText(QRectF(px(xv) - 40, plot.bottom() + 4, 80, 18), Qt::AlignHCenter, tickLabel(xv));
    }
    for (double yv : niceTicks(y0, y1)) {
        p.setPen(QColor(225, 225, 225));
        p.drawLine(QPointF(plot.left(), py(yv)), QPointF(plot.right(), py(yv)));
        p.setPen(Qt::black);
        p.drawText(QRectF(plot.left() - 78, py(yv) - 9, 72, 18), Qt::AlignRight, tickLabel(yv));
    }
    p.drawText(QRect(plot.left(), plot.bottom() + 24, plot.width(), 20), Qt::AlignHCenter, xLabel);
    p.setRenderHint(QPainter::Antialiasing);
    int index = 0;
    for (const auto& rv : runs) {
        const QJsonObject r = rv.toObject();
        const QJsonArray xs = r[QLatin1String(xKey)].toArray();
        const QJsonArray ys = r[QLatin1String(yKey)].toArray();
        QPainterPath path;
        bool started = false;
        for (int i = 0; i < std::min(xs.size(), ys.size()); ++i) {
            const double x = xs[i].toDouble(NAN);
            const double y = ys[i].toDouble(NAN);
            if (!std::isfinite(x) || !std::isfinite(y))
                continue;
            if (!started)
                path.moveTo(px(x), py(y));
            else
                path.lineTo(px(x), py(y));
            started = true;
        }
        p.setPen(QPen(kPalette[index % 10], 2));
        p.drawPath(path);
        ++index;
    }
    p.setRenderHint(QPainter::Antialiasing, false);
    // Legend.
    index = 0;
    for (const auto& rv : runs) {
        const QJsonObject r = rv.toObject();
        const int y = plot.top() + 10 + index * 20;
        p.fillRect(QRect(plot.right() - 250, y + 4, 18, 6), kPalette[index % 10]);
        p.setPen(Qt::black);
        p.drawText(QRect(plot.right() - 226, y - 2, 220, 18), Qt::AlignLeft,
            r["label"].toString().left(32));
        ++index;
    }
}

int renderRequest(const char* requestPath)
{
    QFile f(QString::fromLocal8Bit(requestPath));
    if (!f.open(QIODevice::ReadOnly))
        return 3;
    const QJsonObject req = QJsonDocument::fromJson(f.readAll()).object();
    const QJsonArray runs = req["runs"].toArray();
    QImage img(1400, 1000, QImage::Format_RGB32);
    img.fill(Qt::white);
    QPainter p(&img);
    const QString xLabel = req["x_label"].toString();
    drawPanel(p, QRect(0, 0, 1400, 500), QStringLiteral("Loss"), xLabel, runs, "x", "loss");
    drawPanel(p, QRect(0, 500, 1400, 500), QStringLiteral("Peak memory per rank (max, MiB)"),
        xLabel, runs, "mem_x", "mem");
    p.end();
    return img.save(req["out"].toString(), "PNG") ? 0 : 4;
}

// Before main(): the PNG child draws and exits.
const int kPngChild = [] {
    const char* request = std::getenv("SHARD_RENDER_PNG_REQUEST");
    if (!request)
        return 0;
    qputenv("QT_QPA_PLATFORM", "offscreen");
    int rc = 0;
    {
        static char arg0[] = "shard";
        static char* argv[] = {arg0, nullptr};
        int argc = 1;
        QGuiApplication app(argc, argv);
        rc = renderRequest(request);
    }
    std::fflush(stdout);
    std::_Exit(rc);
}();

// Keeps at most ~2 points per bucket (min and max) so long histories stay small and exact in
// shape.
void decimate(const QVector<double>& x, const QVector<double>& y, QJsonArray* ox, QJsonArray* oy)
{
    const int n = std::min(x.size(), y.size());
    const int buckets = 1000;
    if (n <= 2 * buckets) {
        for (int i = 0; i < n; ++i) {
            ox->append(x[i]);
            oy->append(std::isfinite(y[i]) ? QJsonValue(y[i]) : QJsonValue());
        }
        return;
    }
    for (int b = 0; b < buckets; ++b) {
        const int lo = int(qint64(b) * n / buckets);
        const int hi = int(qint64(b + 1) * n / buckets);
        int iMin = lo, iMax = lo;
        for (int i = lo; i < hi; ++i) {
            if (y[i] < y[iMin])
                iMin = i;
            if (y[i] > y[iMax])
                iMax = i;
        }
        for (int i : {std::min(iMin, iMax), std::max(iMin, iMax)}) {
            ox->append(x[i]);
            oy->append(y[i]);
        }
    }
}

} // namespace

void writeComparePng(jobs::RunStore& store, const QVector<jobs::RunRecord>& runs,
    const QString& xAxis, const QString& out)
{
    QJsonArray arr;
    for (const auto& r : runs) {
        // The one series shape (jobs::RunSeries) the studio's Monitor and Compare draw.
        auto m = jobs::loadStoredSeries(store, r.id);
        if (!m)
            throw std::runtime_error(m.error().toStdString());
        const QVector<double>& xs = xAxis == "tokens" ? m->tokens
            : xAxis == "time"                         ? m->wallTimeSec
                                                      : m->step;
        QJsonObject o;
        o["label"] = QStringLiteral("%1 %2").arg(r.id).arg(r.name);
        QJsonArray x, loss;
        decimate(xs, m->loss, &x, &loss);
        o["x"] = x;
        o["loss"] = loss;
        // Memory: the max over ranks of each step's peak (MiB), where a step recorded one.
        QVector<double> mx, my;
        for (int i = 0; i < m->size(); ++i)
            if (m->peakBytes.value(i) > 0) {
                mx << xs[i];
                my << m->peakBytes[i] / (1024.0 * 1024.0);
            }
        QJsonArray jx, jy;
        decimate(mx, my, &jx, &jy);
        o["mem_x"] = jx;
        o["mem"] = jy;
        arr.append(o);
    }
    QJsonObject req;
    req["runs"] = arr;
    req["out"] = QFileInfo(out).absoluteFilePath();
    req["x_label"] = xAxis == "tokens" ? "tokens" : xAxis == "time" ? "wall time (s)" : "step";
    QTemporaryFile file;
    if (!file.open())
        throw std::runtime_error("cannot create a temporary file for the chart");
    file.write(QJsonDocument(req).toJson(QJsonDocument::Compact));
    file.flush();
    QProcess child;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("SHARD_RENDER_PNG_REQUEST", file.fileName());
    env.insert("QT_QPA_PLATFORM", "offscreen");
    child.setProcessEnvironment(env);
    child.start(QCoreApplication::applicationFilePath(), {});
    if (!child.waitForFinished(120000) || child.exitCode() != 0)
        throw std::runtime_error("drawing " + out.toStdString() + " failed: "
            + QString::fromLocal8Bit(child.readAllStandardError()).trimmed().toStdString());
}

namespace {

// ---- commands ------------------------------------------------------------------------------

struct RunsOptions {
    std::string store;
    std::vector<std::string> runs;
    std::string status;
    std::string filter;
    int limit = 50;
    bool json = false;
    std::string png;
    std::string xAxis = "step";
    std::string out;
    bool memory = false;
    bool force = false;
    std::string slurmJob; // import: the Slurm job that writes the run
    bool follow = false;  // import --slurm-job: follow the run until the job ends
};

void listRuns(const RunsOptions& o)
{
    jobs::RunStore store = openStore(o.store, true);
    if (!store.isReadOnly())
        (void)jobs::LocalLauncher::reconcile(store); // settle local runs that vanished
    jobs::RunQuery q;
    q.text = QString::fromStdString(o.filter);
    q.limit = o.limit;
    if (!o.status.empty()) {
        q.status = jobs::runStatusFromString(QString::fromStdString(o.status));
        if (!q.status)
            throw std::runtime_error("unknown status '" + o.status
                + "' (queued, running, finished, failed, interrupted, stopped)");
    }
    auto runs = store.listRuns(q);
    if (!runs)
        throw std::runtime_error(runs.error().toStdString());
    if (o.json) {
        nlohmann::json arr = nlohmann::json::array();
        for (const auto& r : *runs) {
            nlohmann::json j = {{"id", r.id}, {"name", r.name.toStdString()},
                {"status", jobs::toString(r.status).toStdString()},
                {"target", jobs::toString(r.target).toStdString()}, {"host", r.host.toStdString()},
                {"run_dir", r.runDir.toStdString()}, {"model", r.model.toStdString()},
                {"strategy", r.strategy.toStdString()}, {"layout", r.layout.toStdString()},
                {"world_size", r.worldSize}, {"last_step", r.lastStep},
                {"total_steps", r.totalSteps}, {"tokens_per_sec", r.tokensPerSec},
                {"peak_memory_bytes", r.peakMemoryBytes()}, {"duration_ms", r.durationMs()},
                {"job_id", r.jobId.toStdString()}};
            j["final_loss"] = r.finalLoss ? nlohmann::json(*r.finalLoss) : nlohmann::json();
            j["best_loss"] = r.bestLoss ? nlohmann::json(*r.bestLoss) : nlohmann::json();
            arr.push_back(j);
        }
        std::printf("%s\n", arr.dump(2).c_str());
        return;
    }
    if (runs->isEmpty()) {
        std::printf("no runs in %s (start one with `shard run` or `shard demo`)\n",
            qPrintable(store.path()));
        return;
    }
    std::printf("%5s  %-22s %-11s %-6s %-8s %-6s %11s %9s %9s %9s %10s  %s\n", "ID", "NAME",
        "STATUS", "TARGET", "STRATEGY", "RANKS", "STEPS", "FINAL", "BEST", "TOK/S", "PEAK MEM",
        "STARTED");
    for (const auto& r : *runs) {
        const QString steps = r.totalSteps > 0
            ? QStringLiteral("%1/%2").arg(r.lastStep).arg(r.totalSteps)
            : QString::number(r.lastStep);
        std::printf("%5lld  %-22s %-11s %-6s %-8s %-6d %11s %9s %9s %9.0f %10s  %s\n",
            static_cast<long long>(r.id), terminalText(r.name.left(22)).constData(),
            qPrintable(jobs::toString(r.status)), qPrintable(jobs::toString(r.target)),
            qPrintable(r.strategy.isEmpty() ? QStringLiteral("-") : r.strategy), r.worldSize,
            qPrintable(steps), qPrintable(lossText(r.finalLoss)), qPrintable(lossText(r.bestLoss)),
            r.tokensPerSec, qPrintable(jobs::formatBytes(double(r.peakMemoryBytes()))),
            qPrintable(r.startedAt.isValid() ? r.startedAt.toString("yyyy-MM-dd HH:mm")
                                             : QStringLiteral("-")));
    }
}

void showRun(const RunsOptions& o)
{
    if (o.runs.size() != 1)
        throw std::runtime_error("give one run id or name");
    jobs::RunStore store = openStore(o.store, true);
    const jobs::RunRecord r = findRun(store, o.runs[0]);
    printSummary(r);
    std::printf("  target %s%s%s, created %s\n", qPrintable(jobs::toString(r.target)),
        r.jobId.isEmpty() ? "" : ", Slurm job ", qPrintable(r.jobId),
        qPrintable(r.createdAt.toString(Qt::ISODate)));
    if (r.pid > 0)
        std::printf("  launcher pid %lld\n", static_cast<long long>(r.pid));
    if (!r.notes.trimmed().isEmpty()) {
        std::printf("  notes:\n");
        for (const QString& line : r.notes.trimmed().split('\n'))
            std::printf("    %s\n", terminalText(line).constData());
    }
    for (int rank = 0; rank < r.peakMemoryPerRank.size(); ++rank)
        std::printf("  rank %d peak memory %s\n", rank,
            qPrintable(jobs::formatBytes(double(r.peakMemoryPerRank[rank]))));
    auto events = store.events(r.id);
    if (events && !events->isEmpty()) {
        std::printf("  events:\n");
        for (const auto& e : *events)
            std::printf("    %-12s step %-6lld %s %s\n", qPrintable(e.kind),
                static_cast<long long>(e.step), terminalText(e.message).constData(),
                e.dataJson == "{}" ? "" : e.dataJson.constData());
    }
    if (!r.source.isEmpty()) {
        std::printf("  imported: %s\n", r.source.constData());
        if (auto tags = store.scalarTags(r.id); tags && !tags->isEmpty())
            std::printf("  scalars (%lld tags): %s\n", static_cast<long long>(tags->size()),
                terminalText(tags->join(", ")).constData());
    }
    std::printf("  spec: %s\n", r.specJson.constData());
}

void importRuns(const RunsOptions& o)
{
    if (o.runs.empty())
        throw std::runtime_error("give the folders or files to import");
    if (!o.slurmJob.empty() && o.runs.size() != 1)
        throw std::runtime_error("--slurm-job ties one run to the job that writes it: give one "
                                 "folder (got "
            + std::to_string(o.runs.size()) + ")");
    if (o.follow && o.slurmJob.empty())
        throw std::runtime_error("--follow follows an imported run until its Slurm job ends: "
                                 "give --slurm-job ID (a run without a job is never done)");
    jobs::RunStore store = openStore(o.store);
    int failed = 0;
    for (const auto& path : o.runs) {
        auto report = jobs::importRuns(store, QString::fromStdString(path));
        if (report && !o.slurmJob.empty() && report->runs.size() != 1)
            throw std::runtime_error("--slurm-job ties one run to the job that writes it, and "
                + path + " holds " + std::to_string(report->runs.size())
                + " runs: give the folder of the job's run");
        if (!report) {
            std::fprintf(stderr, "shard runs import: %s\n", qPrintable(report.error()));
            ++failed;
            continue;
        }
        for (const auto& r : report->runs) {
            std::printf("%s run %lld %s: %s, %d steps, %d scalar tags, %lld %spoints from %s\n",
                r.created ? "imported" : "updated", static_cast<long long>(r.runId),
                terminalText(r.name).constData(), qPrintable(r.tool), r.steps, r.tags,
                static_cast<long long>(r.points), r.created ? "" : "new ",
                terminalText(r.folder).constData());
            for (const QString& note : r.notes)
                std::printf("  note: %s\n", terminalText(note).constData());
        }
        for (const QString& why : report->skipped)
            std::printf("skipped %s\n", terminalText(why).constData());
        if (o.slurmJob.empty())
            continue;
        const qint64 id = report->runs.front().runId;
        if (auto s = jobs::followSlurmJob(store, id, QString::fromStdString(o.slurmJob)); !s)
            throw std::runtime_error(s.error().toStdString());
        const jobs::RunRecord run = *store.run(id);
        std::printf("run %lld follows Slurm job %s: %s\n", static_cast<long long>(id),
            o.slurmJob.c_str(), qPrintable(jobs::toString(run.status)));
        if (o.follow) {
            const jobs::RunRecord final = followRun(store, id);
            printSummary(final);
            exitCode() = exitCodeFor(final.status);
        }
    }
    if (failed > 0)
        exitCode() = 1;
}

void compareRuns(const RunsOptions& o)
{
    if (o.runs.size() < 2)
        throw std::runtime_error("give at least two runs to compare");
    if (o.xAxis != "step" && o.xAxis != "tokens" && o.xAxis != "time")
        throw std::runtime_error("--x must be step, tokens or time");
    jobs::RunStore store = openStore(o.store, true);
    QVector<jobs::RunRecord> runs;
    QVector<qint64> ids;
    for (const auto& name : o.runs) {
        runs << findRun(store, name);
        ids << runs.back().id;
    }
    std::printf("%5s  %-24s %-11s %9s %9s %9s %10s\n", "ID", "NAME", "STATUS", "FINAL", "BEST",
        "TOK/S", "PEAK MEM");
    for (const auto& r : runs)
        std::printf("%5lld  %-24s %-11s %9s %9s %9.0f %10s\n", static_cast<long long>(r.id),
            terminalText(r.name.left(24)).constData(), qPrintable(jobs::toString(r.status)),
            qPrintable(lossText(r.finalLoss)), qPrintable(lossText(r.bestLoss)), r.tokensPerSec,
            qPrintable(jobs::formatBytes(double(r.peakMemoryBytes()))));
    auto diff = store.compareConfigs(ids);
    if (!diff)
        throw std::runtime_error(diff.error().toStdString());
    if (diff->isEmpty()) {
        std::printf("\nno config values differ\n");
    } else {
        std::printf("\nconfig values that differ:\n");
        for (const auto& d : *diff) {
            std::printf("  %-20s", qPrintable(d.key));
            for (int i = 0; i < d.values.size(); ++i)
                std::printf("  [%lld] %s", static_cast<long long>(ids[i]),
                    qPrintable(d.values[i].isEmpty() ? QStringLiteral("(unset)") : d.values[i]));
            std::printf("\n");
        }
    }
    if (!o.png.empty()) {
        writeComparePng(
            store, runs, QString::fromStdString(o.xAxis), QString::fromStdString(o.png));
        std::printf("\nwrote %s (loss and peak memory by %s)\n", o.png.c_str(), o.xAxis.c_str());
    }
}

void exportRun(const RunsOptions& o)
{
    if (o.runs.size() != 1)
        throw std::runtime_error("give one run id or name");
    jobs::RunStore store = openStore(o.store, true);
    const jobs::RunRecord r = findRun(store, o.runs[0]);
    QByteArray csv;
    if (o.memory) {
        // Every memory category (protocol/memory_categories.h), then the allocator's figures.
        const auto& categories = protocol::memoryCategories();
        csv = "step,rank";
        for (const protocol::MemoryCategory& c : categories)
            csv += QByteArray(",") + c.key;
        csv += ",current,peak\n";
        auto mem = store.memorySeries(r.id);
        if (!mem)
            throw std::runtime_error(mem.error().toStdString());
        for (const auto& m : *mem)
            for (int i = 0; i < m.step.size(); ++i) {
                csv += QByteArray::number(qint64(m.step[i])) + "," + QByteArray::number(m.rank);
                for (size_t c = 0; c < categories.size(); ++c)
                    csv += "," + QByteArray::number(qint64(m.byCategory[c][i]));
                csv += "," + QByteArray::number(qint64(m.current[i])) + ","
                    + QByteArray::number(qint64(m.peak[i])) + "\n";
            }
    } else {
        csv = "step,tokens,wall_time,loss,lr,grad_norm,tokens_per_sec,step_time,comm_bytes,"
              "eval_loss\n";
        auto m = store.metricSeries(r.id);
        if (!m)
            throw std::runtime_error(m.error().toStdString());
        // An absent value (a command run that logs no gradient norm) is an empty field.
        const auto num = jobs::csvNumber;
        int e = 0;
        for (int i = 0; i < m->size(); ++i) {
            QString eval;
            if (e < m->evalStep.size() && m->evalStep[e] == m->step[i])
                eval = QString::number(m->evalLoss[e++], 'g', 10);
            csv += QStringLiteral("%1,%2,%3,%4,%5,%6,%7,%8,%9,%10\n")
                       .arg(qint64(m->step[i]))
                       .arg(qint64(m->tokens[i]))
                       .arg(num(m->wallTime[i]), num(m->loss[i]), num(m->lr[i]),
                           num(m->gradNorm[i]), num(m->tokensPerSec[i]), num(m->stepTime[i]))
                       .arg(qint64(m->commBytes[i]))
                       .arg(eval)
                       .toUtf8();
        }
    }
    if (o.out.empty() || o.out == "-") {
        std::fwrite(csv.constData(), 1, size_t(csv.size()), stdout);
        return;
    }
    QFile f(QString::fromStdString(o.out));
    if (!f.open(QIODevice::WriteOnly) || f.write(csv) != csv.size())
        throw std::runtime_error("cannot write " + o.out + ": " + f.errorString().toStdString());
    std::printf("wrote %s\n", o.out.c_str());
}

void deleteRuns(const RunsOptions& o)
{
    if (o.runs.empty())
        throw std::runtime_error("give the runs to delete");
    jobs::RunStore store = openStore(o.store);
    for (const auto& name : o.runs) {
        const jobs::RunRecord r = findRun(store, name);
        if (!jobs::isTerminal(r.status) && !o.force)
            throw std::runtime_error("run " + std::to_string(r.id) + " is "
                + jobs::toString(r.status).toStdString()
                + "; stop it first (`shard stop`) or pass --force (its files stay)");
        if (auto s = store.deleteRun(r.id); !s)
            throw std::runtime_error(s.error().toStdString());
        std::printf("deleted run %lld from the store (its directory %s is kept)\n",
            static_cast<long long>(r.id), qPrintable(r.runDir));
    }
}

const CommandRegistration kRegistration([](CLI::App& app) {
    auto o = std::make_shared<RunsOptions>();
    auto* cmd
        = app.add_subcommand("runs", "list, show, compare, export, import or delete recorded runs");
    cmd->require_subcommand(1);
    cmd->add_option("--store", o->store, "run store (default $SHARD_STORE or the app data folder)");

    auto* list = cmd->add_subcommand("list", "runs with their summaries, newest first");
    list->add_option("--status", o->status, "only runs with this status");
    list->add_option("--filter", o->filter, "text in the name, model, strategy, host or folder");
    list->add_option("--limit", o->limit, "at most this many (default 50, -1: all)");
    list->add_flag("--json", o->json, "JSON instead of a table");
    list->fallthrough();
    list->callback([o] { listRuns(*o); });

    auto* show = cmd->add_subcommand("show", "one run: summary, per-rank memory, events, spec");
    show->add_option("run", o->runs, "run id or name")->required();
    show->fallthrough();
    show->callback([o] { showRun(*o); });

    auto* compare = cmd->add_subcommand("compare", "config values that differ; --png draws curves");
    compare->add_option("runs", o->runs, "run ids or names")->required();
    compare->add_option("--png", o->png, "write overlaid loss and memory curves to this PNG");
    compare->add_option("--x", o->xAxis, "x axis: step, tokens or time");
    compare->fallthrough();
    compare->callback([o] { compareRuns(*o); });

    auto* exp = cmd->add_subcommand("export", "metric points as CSV");
    exp->add_option("run", o->runs, "run id or name")->required();
    exp->add_option("--out", o->out, "CSV file (default: stdout)");
    exp->add_flag("--memory", o->memory, "per-rank memory points instead of metrics");
    exp->fallthrough();
    exp->callback([o] { exportRun(*o); });

    auto* imp = cmd->add_subcommand("import",
        "record runs other tools logged: TensorBoard event files (Hugging Face Trainer, "
        "torchtitan, DeepSpeed, Megatron-LM, Lightning), trainer_state.json or a stdout log; "
        "again to update");
    imp->add_option("paths", o->runs,
           "folders (searched recursively) or files, here or as HOST:PATH over ssh")
        ->required();
    imp->add_option("--slurm-job", o->slurmJob,
        "the Slurm job that writes the run (asked where the files are: HOST, or here): the run "
        "takes the job's state and ends with it");
    imp->add_flag("--follow", o->follow, "with --slurm-job: follow the run until the job ends");
    imp->fallthrough();
    imp->callback([o] { importRuns(*o); });

    auto* del = cmd->add_subcommand("delete", "remove runs from the store (files are kept)");
    del->add_option("runs", o->runs, "run ids or names")->required();
    del->add_flag("--force", o->force, "also runs that are still marked running");
    del->fallthrough();
    del->callback([o] { deleteRuns(*o); });
});

} // namespace
} // namespace shard::cli
