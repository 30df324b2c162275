// flock(2)-based run-folder lock (see run_lock.h).
#include "protocol/run_lock.h"

#include <cerrno>
#include <cstring>
#include <ctime>
#include <stdexcept>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

namespace shard::protocol {

namespace {

std::string errnoText(int err)
{
    return std::strerror(err);
}

std::string readHolder(int fd)
{
    std::string text;
    char buf[512];
    ssize_t n = 0;
    off_t at = 0;
    while ((n = ::pread(fd, buf, sizeof buf, at)) > 0) {
        text.append(buf, static_cast<size_t>(n));
        at += n;
    }
    const auto j = nlohmann::json::parse(text, nullptr, false);
    if (!j.is_object())
        return "another process (it has not written its name yet)";
    return "pid " + std::to_string(j.value("pid", 0L)) + " on host " + j.value("host", "?")
        + " since " + j.value("started_utc", "?");
}

} // namespace

std::unique_ptr<RunLock> RunLock::acquire(const std::string& lockFile)
{
    const int fd = ::open(lockFile.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        throw std::runtime_error(
            lockFile + ": cannot create the run lock (" + errnoText(errno) + ")");
    while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno == EINTR)
            continue;
        const int err = errno;
        std::string who = err == EWOULDBLOCK ? readHolder(fd) : std::string();
        ::close(fd);
        if (err == EWOULDBLOCK)
            throw std::runtime_error("the run folder is in use: " + who + " holds " + lockFile
                + "; stop that run first (or wait for it to end), or choose another folder");
        throw std::runtime_error(lockFile + ": cannot lock (" + errnoText(err) + ")");
    }
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    const std::time_t now = std::time(nullptr);
    std::tm tm {};
    gmtime_r(&now, &tm);
    char when[32];
    std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    const std::string text
        = nlohmann::json {{"pid", ::getpid()}, {"host", host}, {"started_utc", when}}.dump() + "\n";
    auto fail = [&](const std::string& why) {
        ::close(fd);
        throw std::runtime_error(lockFile + ": cannot write the run lock (" + why + ")");
    };
    if (::ftruncate(fd, 0) != 0)
        fail(errnoText(errno));
    size_t done = 0;
    while (done < text.size()) {
        const ssize_t n
            = ::pwrite(fd, text.data() + done, text.size() - done, static_cast<off_t>(done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            fail(n < 0 ? errnoText(errno) : "short write");
        done += static_cast<size_t>(n);
    }
    if (::fsync(fd) != 0)
        fail(errnoText(errno));
    return std::unique_ptr<RunLock>(new RunLock(fd));
}

std::string RunLock::holder(const std::string& lockFile)
{
    const int fd = ::open(lockFile.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return {};
    std::string who;
    if (::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK)
        who = readHolder(fd);
    ::close(fd); // also drops the shared lock if we got it
    return who;
}

RunLock::~RunLock()
{
    if (m_fd >= 0)
        ::close(m_fd);
}

} // namespace shard::protocol
