// The studio's door to the run store and the launchers: a worker thread owns the RunStore
// connection (SQLite), the local launcher and the watchers that ingest live runs, so the UI
// thread never waits on SQLite or a process. Requests are queued calls; answers are signals
// delivered on the UI thread, errors as readable messages.
#pragma once

#include <memory>
#include <vector>

#include <QObject>
#include <QThread>
#include <QVector>

#include "jobs/launch_request.h"
#include "jobs/run_store.h"
#include "widgets/run_series.h"

namespace shard::widgets {

class StoreWorker;

class StoreService : public QObject {
    Q_OBJECT
public:
    // Opens `path` (read-write if it can, else read-only with a warning) on the worker thread.
    explicit StoreService(const QString& path, QObject* parent = nullptr);
    ~StoreService() override;

    QString path() const { return m_path; }

    void listRuns(const QString& filter = {});
    // Loads runs as plot columns plus their specs; answered by seriesLoaded with the ticket.
    void loadSeries(const QVector<qint64>& runIds, quint64 ticket);
    // Creates a run record for a run folder made elsewhere (CLI, another studio) and ingests it.
    void importRunDirectory(const QString& directory);
    // Starts a local run (`shard-worker launch` detached) and watches it into the store.
    void launchLocal(const jobs::LaunchRequest& request);
    void stopRun(qint64 runId);

Q_SIGNALS:
    void opened(const QString& path, bool readOnly, const QString& warning);
    void openFailed(const QString& message);
    void runsListed(const QVector<shard::jobs::RunRecord>& runs);
    void seriesLoaded(quint64 ticket, const std::vector<shard::widgets::RunSeries>& runs);
    void runImported(qint64 runId);
    void launched(qint64 runId, const QString& runDir);
    void runChanged(qint64 runId); // points, events or status of a watched run changed
    void stopped(qint64 runId);
    // Any request that failed, in words.
    void errorOccurred(const QString& message);

private:
    QThread m_thread;
    StoreWorker* m_worker = nullptr;
    QString m_path;
};

} // namespace shard::widgets

Q_DECLARE_METATYPE(QVector<shard::jobs::RunRecord>)
Q_DECLARE_METATYPE(std::vector<shard::widgets::RunSeries>)
