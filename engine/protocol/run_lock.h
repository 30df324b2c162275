// The exclusive lock on a run folder, held for the run's lifetime: flock(2) on <run>/run.lock,
// which the kernel releases when the holder dies, so a crashed run never leaves it stuck. The
// file names the holder (pid, host, start time) for the message a second start gets.
#pragma once

#include <memory>
#include <string>

namespace shard::protocol {

class RunLock {
public:
    // Takes the lock on `lockFile` (created if missing) without waiting and writes this
    // process's pid, host and start time into it. Throws std::runtime_error saying who holds it
    // when another process does, or why the file cannot be written (a full disk).
    static std::unique_ptr<RunLock> acquire(const std::string& lockFile);

    // Who holds `lockFile` now ("pid 12 on host a since 2026-12-01T20:00:00Z"), or "" when
    // nobody does.
    static std::string holder(const std::string& lockFile);

    ~RunLock();
    RunLock(const RunLock&) = delete;
    RunLock& operator=(const RunLock&) = delete;

private:
    explicit RunLock(int fd)
        : m_fd(fd)
    {
    }
    int m_fd = -1;
};

} // namespace shard::protocol
