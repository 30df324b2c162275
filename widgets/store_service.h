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
#include "widgets/run_dir_follower.h"
#include "widgets/run_series.h"

namespace shard::widgets {

class StoreWorker;

// Where a run starts: this machine, one SSH host, or a Slurm cluster (submitted here or on a
// login node over SSH).
struct LaunchTarget {
    QString kind = QStringLiteral("local"); // local, ssh, slurm
    QString sshHost;                        // [user@]host[:port] (ssh; slurm: the login node)
    QString partition;                      // slurm
};

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
    // Starts a run (`shard-worker launch` detached, over SSH, or as a Slurm job) and watches it
    // into the store.
    void launch(const jobs::LaunchRequest& request, const LaunchTarget& target = {});
    void stopRun(qint64 runId);
    // Follows a recorded run through the store, whatever its target: makes sure a watcher ingests
    // it, then answers runFollowed(ticket, ...) with everything so far and again with what is
    // new (points, events, status, the tail of rank 0's log fetched over SSH for a remote run)
    // until another followRun or unfollow().
    void followRun(qint64 runId, quint64 ticket);
    void unfollow();
    // Starts a recorded run again in its directory, on its target, from its latest complete
    // checkpoint (its spec with "resume": "auto"); answered by resumed().
    void resumeRun(qint64 runId);
    // Continues a run `moreSteps` past its recorded step count, from its latest complete
    // checkpoint, in the same record; answered by resumed().
    void continueRun(qint64 runId, qint64 moreSteps);
    void renameRun(qint64 runId, const QString& name);
    void setNotes(qint64 runId, const QString& notes);
    // Removes the run's record and points; removeFolder: its folder too when it is on this
    // machine. Refused (errorOccurred) while the run is live. Answered by runDeleted().
    void deleteRun(qint64 runId, bool removeFolder);

Q_SIGNALS:
    void opened(const QString& path, bool readOnly, const QString& warning);
    void openFailed(const QString& message);
    void runsListed(const QVector<shard::jobs::RunRecord>& runs);
    void seriesLoaded(quint64 ticket, const std::vector<shard::widgets::RunSeries>& runs);
    void runImported(qint64 runId);
    // `remote`: the run directory is on another host (SSH, Slurm over a login node).
    void launched(qint64 runId, const QString& runDir, bool remote);
    void runChanged(qint64 runId); // points, events or status of a watched run changed
    void stopped(qint64 runId);
    void runFollowed(quint64 ticket, const shard::widgets::FollowUpdate& update);
    // The answer to resumeRun: the new run's id, or 0 and the error in words.
    void resumed(qint64 runId, qint64 newRunId, const QString& error);
    void runDeleted(qint64 runId, const QString& note);
    // A watched run's trouble (an SSH host that does not answer, a file it cannot read).
    void runError(qint64 runId, const QString& message);
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
