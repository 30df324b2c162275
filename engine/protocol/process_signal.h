// The one way this project signals processes: never pid 0, 1 or below (kill(0, ...) would hit
// the caller's own process group, kill(-1, ...) every process it may signal), and never a
// process group that is the caller's own.
#pragma once

#include <string>

#include <sys/types.h>

namespace shard::protocol {

// kill(pid, sig) for pid > 1. Returns 0, or -1 with errno set (EINVAL for a refused pid) and,
// when `why` is given, the reason in words.
int signalProcess(pid_t pid, int sig, std::string* why = nullptr);

// kill(-pgid, sig) for a group this process created (pgid > 1 and not the caller's own group).
int signalGroup(pid_t pgid, int sig, std::string* why = nullptr);

} // namespace shard::protocol
