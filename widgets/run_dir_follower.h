// Follows a run directory while a process appends to it: polls metrics.jsonl, events.jsonl and
// a rank's log (the failing rank's by default) from stored byte offsets on its own thread, and
// posts complete records to the UI thread in batches. The UI thread never touches the files.
// Events and logs are read before run.json exists, so a run that fails before it writes
// run.json shows why.
#pragma once

#include <optional>
#include <vector>

#include <QMetaType>
#include <QObject>
#include <QString>
#include <QStringList>
#include <QThread>

#include <nlohmann/json.hpp>

#include "protocol/records.h"

namespace shard::widgets {

struct FollowUpdate {
    quint64 generation = 0; // which follow() call produced it; stale ones are dropped
    bool specChanged = false;
    nlohmann::json spec; // run.json, when specChanged
    std::vector<protocol::MetricRecord> metrics;
    std::vector<protocol::EventRecord> events;
    QStringList logLines;
    // The rank whose log logLines come from; logReset: the shown log changed (clear it first).
    int logRank = 0;
    bool logReset = false;
    QList<int> logRanks; // ranks that have a log, when that list changed
    int badLines = 0;
    // Set once when the run's launcher is gone but the run wrote no finish event after its last
    // start (killed, or its machine restarted): the reason in words.
    QString endedWithoutFinish;

    // A run followed through the run store (a remote run: SSH, Slurm over a login node) rather
    // than in its folder: what the store says of it now.
    struct StoreState {
        qint64 runId = 0;
        QString status;  // queued, running, finished, failed, interrupted, stopped
        QString message; // the finish reason or last error
        QString where;   // host:directory
        bool ended = false;
        bool resumable = false; // ended, with a checkpoint recorded
    };
    std::optional<StoreState> store;
};

class RunDirFollowerWorker;

class RunDirFollower : public QObject {
    Q_OBJECT
public:
    explicit RunDirFollower(QObject* parent = nullptr);
    ~RunDirFollower() override;

    static constexpr int kPollMs = 200;

    // Starts following `directory` from its beginning; replaces any previous directory.
    void follow(const QString& directory);
    void stop();
    // Whose log to tail: a rank, or kFailingRank (the default): rank 0 until a rank fails, then
    // the rank that failed first.
    static constexpr int kFailingRank = -1;
    void setLogRank(int rank);
    QString directory() const { return m_directory; }

Q_SIGNALS:
    void updated(const shard::widgets::FollowUpdate& update);
    // A readable one-line message (missing run.json, unreadable file).
    void failed(const QString& message);

private:
    QThread m_thread;
    RunDirFollowerWorker* m_worker = nullptr;
    QString m_directory;
    quint64 m_generation = 0;
};

} // namespace shard::widgets

Q_DECLARE_METATYPE(shard::widgets::FollowUpdate)
