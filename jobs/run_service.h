// The studio's run service: owns the run store connection (SQLite), the watchers that ingest live
// runs and the following of one run, on a thread of its own, so the UI thread never waits on
// SQLite, a process or a host. Launches, stops and resumes go through the Launcher interface on a
// thread pool, each with its own store connection, so one slow SSH host stalls neither the other
// runs nor the followed one. Requests are queued calls; answers are signals delivered on the
// receiver's thread, errors as readable messages (docs/ARCHITECTURE.md, "The run service").
#pragma once

#include <vector>

#include <QList>
#include <QMetaType>
#include <QObject>
#include <QString>
#include <QStringList>
#include <QThread>
#include <QVector>

#include <nlohmann/json.hpp>

#include "jobs/command_run.h"
#include "jobs/launch_request.h"
#include "jobs/launcher.h"
#include "jobs/run_series.h"
#include "jobs/run_store.h"

namespace shard::jobs {

// What is new in a followed run since the last update.
struct FollowUpdate {
    quint64 generation = 0; // the followRun ticket it answers; stale ones are dropped
    bool specChanged = false;
    nlohmann::json spec; // run.json as recorded, when specChanged
    RunSeries points;    // the new points and events, as columns
    QStringList logLines;
    // The rank whose log logLines come from; logReset: the shown log changed (clear it first).
    int logRank = 0;
    bool logReset = false;
    QList<int> logRanks; // ranks that have a log, when that list changed
    // What the store says of the run now; stateChanged when it differs from the last update.
    struct State {
        qint64 runId = 0;
        QString status;  // queued, running, finished, failed, interrupted, stopped
        QString message; // the finish reason or last error
        QString where;   // [host:]directory
        bool ended = false;
        bool resumable = false; // ended, with a complete checkpoint that has steps left
    };
    State state;
    bool stateChanged = false;
};

class RunServiceWorker;

class RunService : public QObject {
    Q_OBJECT
public:
    // Opens `path` (read-write if it can, else read-only with a warning) on the service thread.
    explicit RunService(const QString& path, QObject* parent = nullptr);
    ~RunService() override;

    QString path() const { return m_path; }

    void listRuns(const QString& filter = {});
    // Loads runs as series plus their specs; answered by seriesLoaded with the ticket.
    void loadSeries(const QVector<qint64>& runIds, quint64 ticket);
    // A run's scalar tags (imported runs keep every scalar under its tag) and one tag's points:
    // `tag`, or the first tag when the run has no such tag. Answered by scalarsLoaded.
    void loadScalars(qint64 runId, const QString& tag, quint64 ticket);
    // The run recorded for a run folder on this machine, recorded and ingested first when it is
    // not (made by the CLI, another studio, or a copy); answered by runAttached.
    void attachRunDirectory(const QString& directory);
    // Another tool's logs (jobs::importRuns: a folder or file here, or HOST:PATH over ssh), and
    // when `slurmJob` is given, the one run they hold tied to the Slurm job that writes it and
    // followed until the job ends (jobs::followSlurmJob). A run folder of Shard Studio here is
    // attached as attachRunDirectory does. Off the service thread (a host may be slow);
    // answered by runAttached with `path` and the first run's id.
    void importLogs(const QString& path, const QString& slurmJob = {});
    // Starts a run on its target and watches it into the store; answered by launched (or
    // errorOccurred). Off the service thread: a host that does not answer delays only this.
    void launch(const LaunchRequest& request, const LaunchTarget& target = {});
    // Starts a command as a run on this machine (jobs/command_run.h); answered like launch().
    void launchCommand(const CommandRunRequest& request);
    void stopRun(qint64 runId);
    // Follows a recorded run, whatever its target: makes sure a watcher ingests it, then answers
    // runFollowed(ticket, ...) with everything so far and again with what is new (points,
    // events, status, the tail of a rank's log) until another followRun or unfollow().
    void followRun(qint64 runId, quint64 ticket);
    void unfollow();
    // Whose log the follow tails: a rank, or kFailingRank (the default): rank 0 until a rank
    // reports an error, then the first rank that did.
    static constexpr int kFailingRank = -1;
    void setLogRank(int rank);
    // Starts a recorded run again in its directory, on its target, from its latest complete
    // checkpoint (its spec with "resume": "auto"), in the same record; answered by resumed().
    void resumeRun(qint64 runId);
    // The same, `moreSteps` past its recorded step count, the learning rate after the
    // checkpoint as `schedule` says.
    void continueRun(
        qint64 runId, qint64 moreSteps, ContinueSchedule schedule = ContinueSchedule::Stretch);
    void renameRun(qint64 runId, const QString& name);
    void setNotes(qint64 runId, const QString& notes);
    // Removes the run's record and points; removeFolder: its folder too when it is on this
    // machine. Refused (errorOccurred) while the run is live. Answered by runDeleted(); a
    // followed run that is deleted is no longer followed.
    void deleteRun(qint64 runId, bool removeFolder);

Q_SIGNALS:
    void opened(const QString& path, bool readOnly, const QString& warning);
    void openFailed(const QString& message);
    void runsListed(const QVector<shard::jobs::RunRecord>& runs);
    void seriesLoaded(quint64 ticket, const std::vector<shard::jobs::RunSeries>& runs);
    void scalarsLoaded(quint64 ticket, qint64 runId, const QStringList& tags, const QString& tag,
        const shard::jobs::ScalarSeries& series);
    // The answer to attachRunDirectory: the run's id, or 0 and the error in words.
    void runAttached(const QString& directory, qint64 runId, const QString& error);
    // `remote`: the run directory is on another host (SSH, Slurm over a login node).
    void launched(qint64 runId, const QString& runDir, bool remote);
    void runChanged(qint64 runId); // points, events or status of a watched run changed
    void stopped(qint64 runId);
    void runFollowed(quint64 ticket, const shard::jobs::FollowUpdate& update);
    // The answer to resumeRun and continueRun: the run's id, or 0 and the error in words.
    void resumed(qint64 runId, qint64 newRunId, const QString& error);
    void runDeleted(qint64 runId, const QString& note);
    // A watched run's trouble (an SSH host that does not answer, a file it cannot read).
    void runError(qint64 runId, const QString& message);
    // Any request that failed, in words.
    void errorOccurred(const QString& message);
    // Another process (or connection) changed the store: runs may have come, gone or changed.
    void storeChanged();

private:
    QThread m_thread;
    RunServiceWorker* m_worker = nullptr;
    QString m_path;
};

} // namespace shard::jobs

Q_DECLARE_METATYPE(QVector<shard::jobs::RunRecord>)
Q_DECLARE_METATYPE(std::vector<shard::jobs::RunSeries>)
Q_DECLARE_METATYPE(shard::jobs::FollowUpdate)
Q_DECLARE_METATYPE(shard::jobs::ScalarSeries)
