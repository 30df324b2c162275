// A real one-node Slurm cluster for tests: slurmctld + slurmd (slurm-wlm) started by the test
// with a generated slurm.conf (AuthType=auth/none, CredType=cred/none, select/cons_tres, the
// node at 127.0.0.1, state in a temp dir), and stopped by the pids it started.
#pragma once

#include <unistd.h>

#include <QDir>
#include <QFile>
#include <QProcess>
#include <QTcpServer>
#include <QTemporaryDir>
#include <QTest>

class SlurmFixture {
public:
    static int freePort()
    {
        QTcpServer s;
        s.listen(QHostAddress::LocalHost, 0);
        return s.serverPort();
    }

    QString confPath() const { return m_dir.path() + "/slurm.conf"; }
    QString path() const { return m_dir.path(); }

    static QString run(const QString& cmd)
    {
        QProcess p;
        p.start("/bin/sh", {"-c", cmd});
        p.waitForFinished(20000);
        return QString::fromUtf8(p.readAllStandardOutput()).trimmed();
    }

    bool start(QString* why)
    {
        if (!QFile::exists("/usr/sbin/slurmctld") || !QFile::exists("/usr/sbin/slurmd")) {
            *why = "slurm-wlm is not installed (apt-get install slurm-wlm)";
            return false;
        }
        char host[256] = {};
        ::gethostname(host, sizeof host - 1);
        const QString h = QString::fromLocal8Bit(host).section('.', 0, 0);
        const QString d = m_dir.path();
        QDir().mkpath(d + "/state");
        QDir().mkpath(d + "/spool");
        QFile conf(confPath());
        conf.open(QIODevice::WriteOnly);
        conf.write(QString("ClusterName=shardtest\nSlurmctldHost=%1(127.0.0.1)\n"
                           "SlurmctldPort=%2\nSlurmdPort=%3\nAuthType=auth/none\n"
                           "CredType=cred/none\nSlurmUser=root\nSlurmdUser=root\n"
                           "StateSaveLocation=%4/state\nSlurmdSpoolDir=%4/spool\n"
                           "SlurmctldPidFile=%4/slurmctld.pid\nSlurmdPidFile=%4/slurmd.pid\n"
                           "SlurmctldLogFile=%4/slurmctld.log\nSlurmdLogFile=%4/slurmd.log\n"
                           "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
                           "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n"
                           "SchedulerType=sched/builtin\nJobAcctGatherType=jobacct_gather/none\n"
                           "AccountingStorageType=accounting_storage/none\nMpiDefault=none\n"
                           "ReturnToService=2\nKillWait=2\nMinJobAge=300\n"
                           // A requeued job may start again 5 s later (the default is 120 s),
                           // and the scheduler looks at the queue every second.
                           "AuthInfo=cred_expire=5\nSchedulerParameters=sched_interval=1\n"
                           "NodeName=shardnode NodeAddr=127.0.0.1 NodeHostname=%1 CPUs=2 "
                           "RealMemory=1000 State=UNKNOWN\n"
                           "PartitionName=debug Nodes=shardnode Default=YES MaxTime=INFINITE "
                           "State=UP\n")
                       .arg(h)
                       .arg(freePort())
                       .arg(freePort())
                       .arg(d)
                       .toUtf8());
        conf.close();
        qputenv("SLURM_CONF", confPath().toUtf8());
        m_ctld.start("/usr/sbin/slurmctld", {"-D", "-i", "-f", confPath()});
        if (!m_ctld.waitForStarted(5000)) {
            *why = "cannot start slurmctld";
            return false;
        }
        m_d.start("/usr/sbin/slurmd", {"-D", "-N", "shardnode", "-f", confPath()});
        if (!m_d.waitForStarted(5000)) {
            *why = "cannot start slurmd";
            return false;
        }
        for (int i = 0; i < 100; ++i) {
            if (run("sinfo -h -o %T").startsWith("idle"))
                return true;
            QTest::qWait(200);
        }
        *why = "Slurm did not come up: "
            + run("tail -n 5 " + d + "/slurmctld.log " + d + "/slurmd.log");
        return false;
    }

    ~SlurmFixture()
    {
        // Jobs this cluster still runs are ours: cancel them before the daemons go.
        run("scancel --partition=debug 2>/dev/null");
        for (int i = 0; i < 50 && !run("squeue -h -o %i").isEmpty(); ++i)
            QTest::qWait(200);
        for (QProcess* p : {&m_d, &m_ctld}) {
            if (p->state() == QProcess::NotRunning)
                continue;
            p->terminate();
            if (!p->waitForFinished(10000))
                p->kill();
            p->waitForFinished(3000);
        }
        qunsetenv("SLURM_CONF");
    }

private:
    QTemporaryDir m_dir;
    QProcess m_ctld;
    QProcess m_d;
};
