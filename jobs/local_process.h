// Processes of local runs: started detached in their own session (the run outlives the studio
// and the CLI), identified by pid + kernel start time (so a reused pid is never mistaken for the
// run), stopped with TERM then KILL of the whole session after a grace period.
#pragma once

#include <optional>

#include <QDateTime>
#include <QProcessEnvironment>
#include <QString>
#include <QStringList>

#include "jobs/result.h"

namespace shard::jobs {

class LocalProcess {
public:
    struct Spawned {
        qint64 pid = 0;
        qint64 startTime = 0; // /proc/<pid>/stat field 22 (clock ticks since boot)
    };

    // fork twice (reparented to init, never a zombie of ours), setsid, stdin from /dev/null,
    // stdout+stderr appended to logFile, exec. Fails with a clear line if the program is missing.
    static Result<Spawned> spawnDetached(const QString& program, const QStringList& args,
        const QString& workDir, const QString& logFile,
        const QProcessEnvironment& env = QProcessEnvironment::systemEnvironment());

    // -1 when the process does not exist.
    static qint64 startTime(qint64 pid);
    // When the process started (from its start time and the boot time); invalid if it is gone.
    static QDateTime startedAt(qint64 pid);
    // A launcher's pid file (`<run>/launcher.pid`): whether the process it names is still the
    // one that wrote it (alive, not a zombie, started no later than the file was written).
    // nullopt when the file is missing or unreadable.
    static std::optional<bool> pidFileAlive(const QString& pidFile);
    // Alive, not a zombie, and (when startTime > 0) the same process that was started.
    static bool isAlive(qint64 pid, qint64 startTime);
    // TERM to pid; after graceMs, KILL to its whole process group. true if it is gone.
    static bool terminate(qint64 pid, qint64 startTime, int graceMs);
};

} // namespace shard::jobs
