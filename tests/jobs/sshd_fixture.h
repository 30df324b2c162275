// A real OpenSSH server for tests: sshd on 127.0.0.1 only, its own port, host and user keys and
// config in a temp dir; started and stopped (by its pid) by the test. Also writes the client
// config (-F) with aliases for every server and for the failure cases.
#pragma once

#include <csignal>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <QDir>
#include <QFile>
#include <QProcess>
#include <QTcpServer>
#include <QTcpSocket>
#include <QTemporaryDir>
#include <QTest>

#include "protocol/process_signal.h"

// A loopback port bound without listening: connections to it are refused while it lives, and no
// server (this test's or another's running alongside) can take it.
class ClosedPort {
public:
    ClosedPort()
    {
        m_fd = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a {};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof a;
        if (m_fd >= 0 && ::bind(m_fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0
            && ::getsockname(m_fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
            m_port = ntohs(a.sin_port);
    }
    ~ClosedPort()
    {
        if (m_fd >= 0)
            ::close(m_fd);
    }
    ClosedPort(const ClosedPort&) = delete;
    ClosedPort& operator=(const ClosedPort&) = delete;
    int port() const { return m_port; } // -1 if none could be bound

private:
    int m_fd = -1;
    int m_port = -1;
};

class SshdFixture {
public:
    struct Server {
        QProcess* process = nullptr;
        int port = 0;
    };

    static int freePort()
    {
        QTcpServer s;
        s.listen(QHostAddress::LocalHost, 0);
        return s.serverPort();
    }

    static bool keygen(const QString& path)
    {
        return QProcess::execute("ssh-keygen", {"-q", "-t", "ed25519", "-N", "", "-f", path}) == 0;
    }

    static QByteArray read(const QString& path)
    {
        QFile f(path);
        return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
    }

    static void write(const QString& path, const QByteArray& data)
    {
        QFile f(path);
        f.open(QIODevice::WriteOnly);
        f.write(data);
    }

    // More sshd_config lines for every server, set before start() (e.g. "SetEnv PATH=...\n": a
    // session's PATH there, for programs a test puts on the "host").
    QString extraServerConfig;

    // Starts `count` servers; false (with a reason) when sshd is not usable here.
    bool start(int count, QString* why)
    {
        if (!QFile::exists("/usr/sbin/sshd")) {
            *why = "sshd not installed (apt-get install openssh-server)";
            return false;
        }
        QDir().mkpath("/run/sshd");
        const QString d = m_dir.path();
        if (!keygen(d + "/host_key") || !keygen(d + "/user_key") || !keygen(d + "/other_key")
            || !keygen(d + "/wrong_host_key")) {
            *why = "ssh-keygen failed";
            return false;
        }
        write(d + "/authorized_keys", read(d + "/user_key.pub"));
        const QByteArray hostPub = read(d + "/host_key.pub").trimmed();
        const QByteArray wrongPub = read(d + "/wrong_host_key.pub").trimmed();
        QByteArray knownHosts;
        QByteArray wrongKnownHosts;
        // "down": a port this fixture keeps bound without listening, so a connection is refused
        // and no server (ours or another test's) can take it while the fixture lives.
        const int downPort = m_closed.port();
        if (downPort <= 0) {
            *why = "cannot reserve a closed loopback port";
            return false;
        }
        QList<int> used {downPort};
        for (int i = 0; i < count; ++i) {
            Server s;
            do
                s.port = freePort();
            while (used.contains(s.port));
            used << s.port;
            const QString cfg = d + QString("/sshd_%1.conf").arg(i);
            write(cfg,
                QString("Port %1\nListenAddress 127.0.0.1\nHostKey %2/host_key\n"
                        "AuthorizedKeysFile %2/authorized_keys\nStrictModes no\n"
                        "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                        "PubkeyAuthentication yes\nPermitRootLogin prohibit-password\n"
                        "UsePAM no\nPidFile %2/sshd_%3.pid\nLogLevel ERROR\n"
                        "MaxSessions 50\nMaxStartups 50\n")
                        .arg(s.port)
                        .arg(d)
                        .arg(i)
                        .toUtf8()
                    + extraServerConfig.toUtf8());
            s.process = new QProcess;
            s.process->setProcessChannelMode(QProcess::ForwardedErrorChannel);
            s.process->start(
                "/usr/sbin/sshd", {"-D", "-f", cfg, "-E", d + QString("/sshd_%1.log").arg(i)});
            if (!s.process->waitForStarted(5000)) {
                *why = "cannot start sshd: " + s.process->errorString();
                return false;
            }
            m_servers.push_back(s);
            knownHosts += QString("[127.0.0.1]:%1 ").arg(s.port).toUtf8() + hostPub + "\n";
            wrongKnownHosts += QString("[127.0.0.1]:%1 ").arg(s.port).toUtf8() + wrongPub + "\n";
        }
        write(d + "/known_hosts", knownHosts);
        write(d + "/known_hosts_wrong", wrongKnownHosts);
        QString client;
        for (int i = 0; i < count; ++i)
            client += QString("Host node%1\n  HostName 127.0.0.1\n  Port %2\n  IdentityFile "
                              "%3/user_key\n")
                          .arg(i)
                          .arg(m_servers[i].port)
                          .arg(d);
        client
            += QString("Host badkey\n  HostName 127.0.0.1\n  Port %1\n  IdentityFile %2/user_key\n"
                       "  UserKnownHostsFile %2/known_hosts_wrong\n"
                       "Host noauth\n  HostName 127.0.0.1\n  Port %1\n  IdentityFile "
                       "%2/other_key\n"
                       "Host down\n  HostName 127.0.0.1\n  Port %3\n  IdentityFile %2/user_key\n"
                       "Host *\n  User %4\n  IdentitiesOnly yes\n  UserKnownHostsFile "
                       "%2/known_hosts\n  GlobalKnownHostsFile /dev/null\n"
                       "  StrictHostKeyChecking yes\n  LogLevel ERROR\n")
                   .arg(m_servers[0].port)
                   .arg(d)
                   .arg(downPort)
                   .arg(QString::fromLocal8Bit(::getpwuid(::getuid())->pw_name));
        write(configFile(), client.toUtf8());
        // Wait until every server accepts connections.
        for (const Server& s : m_servers) {
            bool up = false;
            for (int i = 0; i < 100 && !up; ++i) {
                QTcpSocket sock;
                sock.connectToHost(QHostAddress::LocalHost, s.port);
                up = sock.waitForConnected(100);
                if (!up)
                    QTest::qWait(50);
            }
            if (!up) {
                *why = QString("sshd on port %1 did not come up: %2")
                           .arg(s.port)
                           .arg(QString::fromUtf8(read(d + "/sshd_0.log")));
                return false;
            }
        }
        return true;
    }

    QString configFile() const { return m_dir.path() + "/ssh_config"; }
    QString path() const { return m_dir.path(); }
    int port(int i) const { return m_servers[i].port; }
    // A loopback port that refuses connections while the fixture lives (the "down" alias's).
    int closedPort() const { return m_closed.port(); }

    // Drops every open connection of server i: SIGKILL to the per-connection sshd processes
    // that our sshd forked (children of the pid this fixture started).
    int dropConnections(int i)
    {
        const qint64 parent = m_servers[i].process->processId();
        int killed = 0;
        for (const QString& entry : QDir("/proc").entryList(QDir::Dirs)) {
            bool isPid = false;
            const qint64 pid = entry.toLongLong(&isPid);
            if (!isPid)
                continue;
            const QByteArray stat = read("/proc/" + entry + "/stat");
            const int close = stat.lastIndexOf(')');
            if (close < 0)
                continue;
            const QList<QByteArray> f = stat.mid(close + 2).split(' ');
            if (f.size() > 1 && f[1].toLongLong() == parent) {
                shard::protocol::signalProcess(static_cast<pid_t>(pid), SIGKILL);
                ++killed;
            }
        }
        return killed;
    }

    ~SshdFixture()
    {
        for (Server& s : m_servers) {
            dropConnectionsOf(s);
            s.process->terminate();
            if (!s.process->waitForFinished(3000))
                s.process->kill();
            s.process->waitForFinished(3000);
            delete s.process;
        }
    }

private:
    void dropConnectionsOf(Server& s)
    {
        for (int i = 0; i < m_servers.size(); ++i)
            if (m_servers[i].process == s.process)
                dropConnections(i);
    }

    QTemporaryDir m_dir;
    QList<Server> m_servers;
    ClosedPort m_closed; // the "down" alias's port
};
