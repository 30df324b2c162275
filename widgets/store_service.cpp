// StoreService: a QThread with a StoreWorker that owns RunStore, LocalLauncher and watchers.
#include "widgets/store_service.h"

#include <map>

#include <QDir>
#include <QFileInfo>

#include "jobs/ingestor.h"
#include "jobs/local_launcher.h"
#include "jobs/local_run_watcher.h"

namespace shard::widgets {

class StoreWorker : public QObject {
    Q_OBJECT
public:
    void open(const QString& path)
    {
        QDir().mkpath(QFileInfo(path).absolutePath());
        QString warning;
        auto store = jobs::RunStore::openBestEffort(path, &warning);
        if (!store) {
            Q_EMIT openFailed(tr("Run store %1: %2").arg(path, store.error()));
            return;
        }
        m_store = std::make_unique<jobs::RunStore>(std::move(store.value()));
        Q_EMIT opened(path, m_store->isReadOnly(), warning);
        // Runs this studio (or another) started and that are still alive are watched again.
        if (!m_store->isReadOnly()) {
            auto alive = jobs::LocalLauncher::reconcile(*m_store);
            if (alive)
                for (qint64 id : alive.value())
                    watch(id);
        }
    }

    void listRuns(const QString& filter)
    {
        if (!ready())
            return;
        jobs::RunQuery q;
        q.text = filter;
        auto runs = m_store->listRuns(q);
        if (!runs) {
            Q_EMIT errorOccurred(tr("Could not list runs: %1").arg(runs.error()));
            return;
        }
        Q_EMIT runsListed(runs.value());
    }

    void loadSeries(const QVector<qint64>& ids, quint64 ticket)
    {
        if (!ready())
            return;
        std::vector<RunSeries> out;
        for (qint64 id : ids) {
            auto run = m_store->run(id);
            auto metrics = run ? m_store->metricSeries(id)
                               : jobs::Result<jobs::MetricSeries>(jobs::fail(run.error()));
            auto memory = run ? m_store->memorySeries(id)
                              : jobs::Result<QVector<jobs::MemorySeries>>(jobs::fail(run.error()));
            if (!run || !metrics || !memory) {
                Q_EMIT errorOccurred(tr("Could not load run %1: %2")
                                         .arg(id)
                                         .arg(!run          ? run.error()
                                                 : !metrics ? metrics.error()
                                                            : memory.error()));
                continue;
            }
            RunSeries s;
            s.id = QString::number(id);
            s.name = run->name;
            s.directory = run->runDir;
            try {
                s.config = nlohmann::json::parse(run->specJson.toStdString());
            } catch (const std::exception&) {
                s.config = nlohmann::json::object();
            }
            const jobs::MetricSeries& m = metrics.value();
            s.step = m.step;
            s.tokens = m.tokens;
            s.wallTimeSec = m.wallTime;
            s.loss = m.loss;
            s.lr = m.lr;
            s.gradNorm = m.gradNorm;
            s.tokensPerSec = m.tokensPerSec;
            // Peak over ranks per step, aligned with the metric steps.
            std::map<double, double> peakAt;
            for (const auto& rank : memory.value())
                for (int i = 0; i < rank.step.size(); ++i)
                    peakAt[rank.step[i]] = std::max(peakAt[rank.step[i]], rank.peak.value(i));
            s.peakBytes.reserve(s.step.size());
            for (double step : s.step) {
                auto it = peakAt.find(step);
                s.peakBytes.append(it == peakAt.end() ? 0.0 : it->second);
            }
            out.push_back(std::move(s));
        }
        Q_EMIT seriesLoaded(ticket, out);
    }

    void importRunDirectory(const QString& directory)
    {
        if (!writable())
            return;
        const QString dir = QDir(directory).absolutePath();
        QFile spec(dir + "/run.json");
        if (!spec.open(QIODevice::ReadOnly)) {
            Q_EMIT errorOccurred(tr("%1: no run.json, so this is not a run folder; pick the "
                                    "folder given to --out when the run started")
                                     .arg(directory));
            return;
        }
        const QByteArray specJson = spec.readAll();
        jobs::NewRun nr;
        try {
            const auto j = nlohmann::json::parse(specJson.toStdString());
            nr.name = QString::fromStdString(j.value("name", std::string()));
        } catch (const std::exception& e) {
            Q_EMIT errorOccurred(tr("%1/run.json is not valid JSON (%2)")
                                     .arg(directory, QString::fromUtf8(e.what())));
            return;
        }
        if (nr.name.isEmpty())
            nr.name = QFileInfo(dir).fileName();
        nr.specJson = specJson;
        nr.runDir = dir;
        nr.status = jobs::RunStatus::Running;
        auto id = m_store->createRun(nr);
        if (!id) {
            Q_EMIT errorOccurred(id.error());
            return;
        }
        jobs::Ingestor ingestor(*m_store);
        auto stats = ingestor.ingestRunDir(id.value(), dir);
        if (!stats) {
            Q_EMIT errorOccurred(tr("Importing %1: %2").arg(directory, stats.error()));
            return;
        }
        if (!stats->status)
            (void)jobs::settleVanishedRun(*m_store, id.value(), dir);
        Q_EMIT runImported(id.value());
    }

    void launchLocal(const jobs::LaunchRequest& request)
    {
        if (!writable())
            return;
        jobs::LocalLauncher launcher(*m_store);
        auto id = launcher.start(request);
        if (!id) {
            Q_EMIT errorOccurred(tr("Could not start the run: %1").arg(id.error()));
            return;
        }
        auto run = m_store->run(id.value());
        if (!run) {
            Q_EMIT errorOccurred(run.error());
            return;
        }
        watch(id.value());
        Q_EMIT launched(id.value(), run->runDir);
    }

    void stopRun(qint64 runId)
    {
        if (!writable())
            return;
        jobs::LocalLauncher launcher(*m_store);
        auto status = launcher.stop(runId);
        if (!status) {
            Q_EMIT errorOccurred(tr("Could not stop run %1: %2").arg(runId).arg(status.error()));
            return;
        }
        Q_EMIT stopped(runId);
    }

Q_SIGNALS:
    void opened(const QString& path, bool readOnly, const QString& warning);
    void openFailed(const QString& message);
    void runsListed(const QVector<shard::jobs::RunRecord>& runs);
    void seriesLoaded(quint64 ticket, const std::vector<shard::widgets::RunSeries>& runs);
    void runImported(qint64 runId);
    void launched(qint64 runId, const QString& runDir);
    void runChanged(qint64 runId);
    void stopped(qint64 runId);
    void errorOccurred(const QString& message);

private:
    bool ready()
    {
        if (m_store)
            return true;
        Q_EMIT errorOccurred(tr("The run store is not open."));
        return false;
    }
    bool writable()
    {
        if (!ready())
            return false;
        if (!m_store->isReadOnly())
            return true;
        Q_EMIT errorOccurred(tr("The run store is open read-only (%1); close the other program "
                                "that holds it, or check the disk, then restart the studio.")
                                 .arg(m_store->path()));
        return false;
    }
    void watch(qint64 runId)
    {
        auto run = m_store->run(runId);
        if (!run || run->target != "local")
            return;
        auto* w = new jobs::LocalRunWatcher(*m_store, runId, run->runDir, this);
        w->setProcess(run->pid, jobs::LocalLauncher::startTimeOf(run.value()));
        connect(
            w, &jobs::RunWatcher::pointsAdded, this, [this](qint64 id) { Q_EMIT runChanged(id); });
        connect(w, &jobs::RunWatcher::statusChanged, this,
            [this](qint64 id) { Q_EMIT runChanged(id); });
        connect(w, &jobs::RunWatcher::errorOccurred, this,
            [this](qint64, const QString& message) { Q_EMIT errorOccurred(message); });
        connect(w, &jobs::RunWatcher::finished, this, [this, w](qint64 id) {
            Q_EMIT runChanged(id);
            w->deleteLater();
        });
        w->start();
    }

    std::unique_ptr<jobs::RunStore> m_store;
};

StoreService::StoreService(const QString& path, QObject* parent)
    : QObject(parent)
    , m_path(path)
{
    qRegisterMetaType<QVector<shard::jobs::RunRecord>>();
    qRegisterMetaType<std::vector<shard::widgets::RunSeries>>();
    m_worker = new StoreWorker;
    m_worker->moveToThread(&m_thread);
    connect(&m_thread, &QThread::finished, m_worker, &QObject::deleteLater);
    connect(m_worker, &StoreWorker::opened, this, &StoreService::opened);
    connect(m_worker, &StoreWorker::openFailed, this, &StoreService::openFailed);
    connect(m_worker, &StoreWorker::runsListed, this, &StoreService::runsListed);
    connect(m_worker, &StoreWorker::seriesLoaded, this, &StoreService::seriesLoaded);
    connect(m_worker, &StoreWorker::runImported, this, &StoreService::runImported);
    connect(m_worker, &StoreWorker::launched, this, &StoreService::launched);
    connect(m_worker, &StoreWorker::runChanged, this, &StoreService::runChanged);
    connect(m_worker, &StoreWorker::stopped, this, &StoreService::stopped);
    connect(m_worker, &StoreWorker::errorOccurred, this, &StoreService::errorOccurred);
    m_thread.setObjectName("run-store");
    m_thread.start();
    QMetaObject::invokeMethod(m_worker, [w = m_worker, path] { w->open(path); });
}

StoreService::~StoreService()
{
    m_thread.quit();
    m_thread.wait();
}

void StoreService::listRuns(const QString& filter)
{
    QMetaObject::invokeMethod(m_worker, [w = m_worker, filter] { w->listRuns(filter); });
}

void StoreService::loadSeries(const QVector<qint64>& runIds, quint64 ticket)
{
    QMetaObject::invokeMethod(
        m_worker, [w = m_worker, runIds, ticket] { w->loadSeries(runIds, ticket); });
}

void StoreService::importRunDirectory(const QString& directory)
{
    QMetaObject::invokeMethod(
        m_worker, [w = m_worker, directory] { w->importRunDirectory(directory); });
}

void StoreService::launchLocal(const jobs::LaunchRequest& request)
{
    QMetaObject::invokeMethod(m_worker, [w = m_worker, request] { w->launchLocal(request); });
}

void StoreService::stopRun(qint64 runId)
{
    QMetaObject::invokeMethod(m_worker, [w = m_worker, runId] { w->stopRun(runId); });
}

} // namespace shard::widgets

#include "store_service.moc"
