// Guarded kill(2) (see process_signal.h).
#include "protocol/process_signal.h"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

#include <unistd.h>

namespace shard::protocol {

namespace {

int refuse(const std::string& reason, std::string* why)
{
    // Loud on purpose: a refused signal is a bug in the caller (a pid that was never known).
    std::fprintf(stderr, "shard: %s\n", reason.c_str());
    if (why)
        *why = reason;
    errno = EINVAL;
    return -1;
}

int result(int rc, std::string* why, const std::string& what)
{
    if (rc != 0 && why)
        *why = what + ": " + std::strerror(errno);
    return rc;
}

} // namespace

int signalProcess(pid_t pid, int sig, std::string* why)
{
    if (pid <= 1)
        return refuse("refusing to send signal " + std::to_string(sig) + " to pid "
                + std::to_string(pid) + " (not a process this program started)",
            why);
    return result(::kill(pid, sig), why, "kill " + std::to_string(pid));
}

int signalGroup(pid_t pgid, int sig, std::string* why)
{
    if (pgid <= 1)
        return refuse("refusing to send signal " + std::to_string(sig) + " to process group "
                + std::to_string(pgid) + " (not a group this program created)",
            why);
    if (pgid == ::getpgrp())
        return refuse("refusing to send signal " + std::to_string(sig)
                + " to this program's own process group " + std::to_string(pgid),
            why);
    return result(::kill(-pgid, sig), why, "kill -" + std::to_string(pgid));
}

} // namespace shard::protocol
