// The torchrun job of the command-run tests: Debian's PyTorch training a small model on two CPU
// ranks over Gloo (tests/jobs/scripts), and what the tests check about processes.
#pragma once

#include <QDir>
#include <QDirIterator>
#include <QFile>
#include <QHostAddress>
#include <QProcess>
#include <QString>
#include <QTcpServer>

namespace shard::test {

inline const QString kScripts = QStringLiteral(SHARD_SOURCE_DIR "/tests/jobs/scripts");

inline int freePort()
{
    QTcpServer s;
    s.listen(QHostAddress::LocalHost, 0);
    return s.serverPort();
}

// torchrun through Debian's python3 (/usr/bin/python3 has python3-torch), with a static
// rendezvous on loopback. --redirects 1 --tee 1: Debian 12's torchrun (PyTorch 1.13 under
// Python 3.11) fails on its default "0" (its Std enum no longer iterates the zero member).
// torchrun_nolibuv.py: Debian 13's PyTorch 2.6 is built without libuv and torchrun asks for it
// whatever USE_LIBUV says; under USE_LIBUV=0 (--env) the wrapper and the script mend that, and
// elsewhere the wrapper is plain torchrun. The studio sets none of this on its own (README,
// "Your command as a run").
inline QString torchrunCommand()
{
    return QStringLiteral("/usr/bin/python3 '%1/torchrun_nolibuv.py' --nnodes 1 --master_addr "
                          "127.0.0.1 --master_port %2 --nproc_per_node 2 --redirects 1 --tee 1 "
                          "'%1/torchrun_train.py'")
        .arg(kScripts)
        .arg(freePort());
}

inline bool haveTorch()
{
    QProcess p;
    p.start("/usr/bin/python3", {"-c", "import torch.distributed.run"});
    return p.waitForFinished(60000) && p.exitStatus() == QProcess::NormalExit && p.exitCode() == 0;
}

// Processes (not zombies) in process group `pgid`.
inline int liveInGroup(qint64 pgid)
{
    int n = 0;
    QDirIterator it("/proc", QDir::Dirs | QDir::NoDotAndDotDot);
    while (it.hasNext()) {
        const QString dir = it.next();
        QFile stat(dir + "/stat");
        if (!stat.open(QIODevice::ReadOnly))
            continue;
        const QByteArray s = stat.readAll();
        const int close = s.lastIndexOf(')');
        const QList<QByteArray> f = s.mid(close + 2).split(' ');
        if (f.size() > 3 && f[0] != "Z" && f[2].toLongLong() == pgid)
            ++n;
    }
    return n;
}

// The process group of a live process (0 when it is gone).
inline qint64 processGroupOf(qint64 pid)
{
    QFile stat(QStringLiteral("/proc/%1/stat").arg(pid));
    if (!stat.open(QIODevice::ReadOnly))
        return 0;
    const QByteArray s = stat.readAll();
    const QList<QByteArray> f = s.mid(s.lastIndexOf(')') + 2).split(' ');
    return f.size() > 2 ? f[2].toLongLong() : 0;
}

} // namespace shard::test
