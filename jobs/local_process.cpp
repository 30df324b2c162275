// Detached process start and identity checks through POSIX (see local_process.h).
#include "jobs/local_process.h"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QStandardPaths>
#include <QThread>

#include "protocol/process_signal.h"

namespace shard::jobs {

namespace {

bool readAll(int fd, void* buf, size_t n)
{
    auto* p = static_cast<char*>(buf);
    size_t got = 0;
    while (got < n) {
        const ssize_t r = ::read(fd, p + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        got += static_cast<size_t>(r);
    }
    return true;
}

// Fields after the ")" of /proc/<pid>/stat: state is field 3, starttime field 22.
bool procStat(qint64 pid, char* state, qint64* start)
{
    QFile f(QStringLiteral("/proc/%1/stat").arg(pid));
    if (!f.open(QIODevice::ReadOnly))
        return false;
    const QByteArray s = f.readAll();
    const int close = s.lastIndexOf(')');
    if (close < 0)
        return false;
    const QList<QByteArray> fields = s.mid(close + 2).split(' ');
    if (fields.size() < 20)
        return false;
    *state = fields[0].isEmpty() ? '?' : fields[0][0];
    *start = fields[19].toLongLong();
    return true;
}

} // namespace

Result<LocalProcess::Spawned> LocalProcess::spawnDetached(const QString& program,
    const QStringList& args, const QString& workDir, const QString& logFile,
    const QProcessEnvironment& env)
{
    const QString exe = program.contains('/') ? program : QStandardPaths::findExecutable(program);
    if (exe.isEmpty() || !QFile::exists(exe))
        return fail(QStringLiteral("cannot start '%1': not found (install it, put it on PATH, or "
                                   "pass its path)")
                        .arg(program));
    std::vector<QByteArray> argStore {QFile::encodeName(exe)};
    for (const QString& a : args)
        argStore.push_back(a.toLocal8Bit());
    std::vector<char*> argv;
    for (auto& a : argStore)
        argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<QByteArray> envStore;
    for (const QString& kv : env.toStringList())
        envStore.push_back(kv.toLocal8Bit());
    std::vector<char*> envp;
    for (auto& e : envStore)
        envp.push_back(e.data());
    envp.push_back(nullptr);
    const QByteArray log = QFile::encodeName(logFile);
    const QByteArray dir = QFile::encodeName(workDir);

    int pidPipe[2];
    int errPipe[2];
    if (::pipe2(pidPipe, O_CLOEXEC) != 0)
        return fail(QStringLiteral("cannot start '%1': pipe: %2").arg(program, strerror(errno)));
    if (::pipe2(errPipe, O_CLOEXEC) != 0) {
        ::close(pidPipe[0]);
        ::close(pidPipe[1]);
        return fail(QStringLiteral("cannot start '%1': pipe: %2").arg(program, strerror(errno)));
    }
    const pid_t mid = ::fork();
    if (mid < 0)
        return fail(QStringLiteral("cannot start '%1': fork: %2").arg(program, strerror(errno)));
    if (mid == 0) {
        // Only async-signal-safe calls from here on.
        ::close(pidPipe[0]);
        ::close(errPipe[0]);
        const pid_t child = ::fork();
        if (child < 0)
            ::_exit(1);
        if (child > 0) {
            const int64_t p = child;
            ssize_t w = ::write(pidPipe[1], &p, sizeof p);
            (void)w;
            ::_exit(0);
        }
        ::setsid();
        int err = 0;
        if (!dir.isEmpty() && ::chdir(dir.constData()) != 0)
            err = errno;
        const int in = ::open("/dev/null", O_RDONLY);
        const int out = ::open(log.constData(), O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (!err && (in < 0 || out < 0))
            err = errno;
        if (!err) {
            ::dup2(in, 0);
            ::dup2(out, 1);
            ::dup2(out, 2);
            ::execve(argv[0], argv.data(), envp.data());
            err = errno;
        }
        ssize_t w = ::write(errPipe[1], &err, sizeof err);
        (void)w;
        ::_exit(127);
    }
    ::close(pidPipe[1]);
    ::close(errPipe[1]);
    int status = 0;
    ::waitpid(mid, &status, 0);
    int64_t pid = 0;
    const bool gotPid = readAll(pidPipe[0], &pid, sizeof pid);
    int childErr = 0;
    const bool execFailed = readAll(errPipe[0], &childErr, sizeof childErr);
    ::close(pidPipe[0]);
    ::close(errPipe[0]);
    if (!gotPid)
        return fail(QStringLiteral("cannot start '%1': fork failed").arg(program));
    if (execFailed)
        return fail(QStringLiteral("cannot start '%1' (log %2): %3")
                        .arg(exe, logFile, QString::fromLocal8Bit(strerror(childErr))));
    Spawned s;
    s.pid = pid;
    s.startTime = startTime(pid);
    return s;
}

qint64 LocalProcess::startTime(qint64 pid)
{
    char state = 0;
    qint64 start = -1;
    if (pid <= 0 || !procStat(pid, &state, &start))
        return -1;
    return start;
}

QDateTime LocalProcess::startedAt(qint64 pid)
{
    const qint64 ticks = startTime(pid);
    if (ticks < 0)
        return {};
    QFile stat(QStringLiteral("/proc/stat"));
    if (!stat.open(QIODevice::ReadOnly))
        return {};
    qint64 bootSec = -1;
    for (const QByteArray& line : stat.readAll().split('\n'))
        if (line.startsWith("btime "))
            bootSec = line.mid(6).trimmed().toLongLong();
    const long hz = ::sysconf(_SC_CLK_TCK);
    if (bootSec <= 0 || hz <= 0)
        return {};
    return QDateTime::fromMSecsSinceEpoch(bootSec * 1000 + ticks * 1000 / hz);
}

std::optional<bool> LocalProcess::pidFileAlive(const QString& pidFile)
{
    QFile file(pidFile);
    if (!file.open(QIODevice::ReadOnly))
        return std::nullopt;
    const qint64 pid = file.readAll().trimmed().toLongLong();
    if (pid <= 0)
        return std::nullopt;
    if (!isAlive(pid, 0))
        return false;
    // A pid reused by a later process: it started after the launcher wrote the file (btime has
    // one-second resolution, hence the margin).
    const QDateTime started = startedAt(pid);
    const QDateTime written = QFileInfo(file).lastModified();
    return !started.isValid() || !written.isValid() || started <= written.addSecs(2);
}

bool LocalProcess::isAlive(qint64 pid, qint64 startTime)
{
    char state = 0;
    qint64 start = -1;
    if (pid <= 0 || !procStat(pid, &state, &start))
        return false;
    if (state == 'Z' || state == 'X')
        return false;
    return startTime <= 0 || start == startTime;
}

bool LocalProcess::terminate(qint64 pid, qint64 startTime, int graceMs)
{
    if (!isAlive(pid, startTime))
        return true;
    protocol::signalProcess(static_cast<pid_t>(pid), SIGTERM);
    QElapsedTimer t;
    t.start();
    while (t.elapsed() < graceMs) {
        if (!isAlive(pid, startTime))
            return true;
        QThread::msleep(50);
    }
    // The launcher leads its own session and process group: take every rank with it.
    protocol::signalGroup(static_cast<pid_t>(pid), SIGKILL);
    protocol::signalProcess(static_cast<pid_t>(pid), SIGKILL);
    for (int i = 0; i < 40 && isAlive(pid, startTime); ++i)
        QThread::msleep(50);
    return !isAlive(pid, startTime);
}

} // namespace shard::jobs
