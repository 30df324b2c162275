// OpenSSH client invocation and error classification (see ssh_client.h).
#include "jobs/ssh_client.h"

#include <unistd.h>

#include <QDir>
#include <QFileInfo>
#include <QProcess>
#include <QRegularExpression>

namespace shard::jobs {

Result<SshHost> SshHost::parse(const QString& spec)
{
    SshHost h;
    QString rest = spec.trimmed();
    if (rest.isEmpty())
        return fail(QStringLiteral("empty host: give [user@]host[:port] or an ssh_config alias"));
    if (rest.startsWith('-')
        || rest.contains(QRegularExpression(QStringLiteral("[\\s'\"`;$&|<>]"))))
        return fail(QStringLiteral("'%1' is not a host name: give [user@]host[:port] or an "
                                   "ssh_config alias")
                        .arg(spec));
    const int at = rest.lastIndexOf('@');
    if (at >= 0) {
        h.user = rest.left(at);
        rest = rest.mid(at + 1);
    }
    const int colon = rest.lastIndexOf(':');
    if (colon >= 0 && rest.count(':') == 1) {
        bool ok = false;
        h.port = rest.mid(colon + 1).toInt(&ok);
        if (!ok || h.port <= 0 || h.port > 65535)
            return fail(QStringLiteral("'%1': port must be a number from 1 to 65535").arg(spec));
        rest = rest.left(colon);
    }
    if (rest.isEmpty())
        return fail(QStringLiteral("'%1': no host name").arg(spec));
    h.host = rest;
    return h;
}

std::optional<RemotePath> splitRemotePath(const QString& text)
{
    // The host part is anything up to the first ':' without a '/' or a space, so a bad host
    // ("a;b:/x") reaches SshHost::parse and its message rather than passing for a local path.
    static const QRegularExpression re(QStringLiteral("^([^/:\\s]+(:[0-9]+)?):(.+)$"));
    const auto m = re.match(text);
    if (!m.hasMatch())
        return std::nullopt;
    return RemotePath {m.captured(1), m.captured(3)};
}

QString SshHost::toString() const
{
    QString s = user.isEmpty() ? host : user + '@' + host;
    if (port > 0)
        s += ':' + QString::number(port);
    return s;
}

SshOptions SshOptions::fromEnvironment()
{
    SshOptions o;
    o.configFile = qEnvironmentVariable("SHARD_SSH_CONFIG");
    return o;
}

SshClient::SshClient(SshOptions options)
    : m_options(std::move(options))
{
}

QStringList SshClient::sshArgs(const SshHost& host) const
{
    QString controlDir = m_options.controlDir;
    if (controlDir.isEmpty())
        controlDir = QStringLiteral("/tmp/shard-ssh-%1").arg(::getuid());
    QDir().mkpath(controlDir);
    QFile::setPermissions(controlDir, QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
    QStringList args;
    if (!m_options.configFile.isEmpty())
        args << QStringLiteral("-F") << m_options.configFile;
    // Never a prompt, and never a host key accepted on the user's behalf.
    args << QStringLiteral("-o") << QStringLiteral("BatchMode=yes") << QStringLiteral("-o")
         << QStringLiteral("StrictHostKeyChecking=yes") << QStringLiteral("-o")
         << QStringLiteral("ConnectTimeout=%1").arg(m_options.connectTimeoutSec)
         << QStringLiteral("-o") << QStringLiteral("ControlMaster=auto") << QStringLiteral("-o")
         << QStringLiteral("ControlPath=%1/%C").arg(controlDir) << QStringLiteral("-o")
         << QStringLiteral("ControlPersist=%1").arg(m_options.controlPersistSec)
         << QStringLiteral("-o") << QStringLiteral("ServerAliveInterval=5") << QStringLiteral("-o")
         << QStringLiteral("ServerAliveCountMax=3");
    for (const QString& o : m_options.extraOptions)
        args << QStringLiteral("-o") << o;
    if (host.port > 0)
        args << QStringLiteral("-p") << QString::number(host.port);
    args << QStringLiteral("--") << (host.user.isEmpty() ? host.host : host.user + '@' + host.host);
    return args;
}

Result<SshResult> SshClient::run(
    const SshHost& host, const QString& script, const QByteArray& stdinData, int timeoutMs) const
{
    QProcess p;
    p.start(QStringLiteral("ssh"), sshArgs(host) << script);
    if (!p.waitForStarted(10000))
        return fail(
            QStringLiteral("cannot run ssh (install openssh-client): %1").arg(p.errorString()));
    if (!stdinData.isEmpty())
        p.write(stdinData);
    p.closeWriteChannel();
    if (!p.waitForFinished(timeoutMs)) {
        p.kill();
        p.waitForFinished(2000);
        return fail(QStringLiteral("ssh %1: no answer within %2 s (host unreachable or command "
                                   "hung)")
                        .arg(host.toString())
                        .arg(timeoutMs / 1000));
    }
    SshResult r;
    r.exitCode = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
    r.out = p.readAllStandardOutput();
    r.err = p.readAllStandardError();
    if (r.exitCode == 255 || r.exitCode == -1)
        return fail(describeFailure(host, r.exitCode, r.err));
    return r;
}

Result<void> SshClient::upload(
    const SshHost& host, const QString& localPath, const QString& remoteDir, int timeoutMs) const
{
    const QFileInfo info(localPath);
    if (!info.exists())
        return fail(QStringLiteral("%1: no such file or folder to copy to %2")
                        .arg(localPath, host.toString()));
    QProcess tar;
    QProcess ssh;
    tar.setStandardOutputProcess(&ssh);
    tar.setWorkingDirectory(info.absolutePath());
    const QString dir = homeRelative(remoteDir);
    ssh.start(QStringLiteral("ssh"),
        sshArgs(host) << QStringLiteral("mkdir -p -- %1 && tar -C %1 -xf -").arg(shellQuote(dir)));
    tar.start(QStringLiteral("tar"), {QStringLiteral("-cf"), QStringLiteral("-"), info.fileName()});
    if (!tar.waitForStarted(10000) || !ssh.waitForStarted(10000))
        return fail(QStringLiteral("cannot run tar and ssh to copy %1 to %2")
                        .arg(localPath, host.toString()));
    const bool done = tar.waitForFinished(timeoutMs) && ssh.waitForFinished(timeoutMs);
    if (!done) {
        tar.kill();
        ssh.kill();
        tar.waitForFinished(2000);
        ssh.waitForFinished(2000);
        return fail(QStringLiteral("copying %1 to %2 did not finish within %3 s")
                        .arg(localPath, host.toString())
                        .arg(timeoutMs / 1000));
    }
    const QByteArray err = ssh.readAllStandardError();
    if (ssh.exitStatus() != QProcess::NormalExit || ssh.exitCode() == 255)
        return fail(describeFailure(host, ssh.exitCode(), err));
    if (tar.exitCode() != 0 || ssh.exitCode() != 0)
        return fail(QStringLiteral("copying %1 to %2:%3 failed: %4")
                        .arg(localPath, host.toString(), dir,
                            QString::fromLocal8Bit(err + tar.readAllStandardError())
                                .trimmed()
                                .section('\n', -1)));
    return {};
}

Result<QString> SshClient::resolveHostName(const SshHost& host) const
{
    QStringList args = sshArgs(host);
    args.prepend(QStringLiteral("-G"));
    QProcess p;
    p.start(QStringLiteral("ssh"), args);
    if (!p.waitForFinished(10000) || p.exitCode() != 0)
        return fail(
            QStringLiteral("ssh -G %1 failed: %2")
                .arg(host.toString(), QString::fromLocal8Bit(p.readAllStandardError()).trimmed()));
    for (const QByteArray& line : p.readAllStandardOutput().split('\n'))
        if (line.startsWith("hostname "))
            return QString::fromLocal8Bit(line.mid(9)).trimmed();
    return host.host;
}

void SshClient::closeMaster(const SshHost& host) const
{
    QStringList args = sshArgs(host);
    args.prepend(QStringLiteral("exit"));
    args.prepend(QStringLiteral("-O"));
    QProcess p;
    p.start(QStringLiteral("ssh"), args);
    p.waitForFinished(5000);
}

QString SshClient::describeFailure(const SshHost& host, int exitCode, const QByteArray& err)
{
    const QString e = QString::fromLocal8Bit(err);
    QString last;
    for (const QString& line : e.split('\n', Qt::SkipEmptyParts))
        if (!line.startsWith(QLatin1String("Warning:")) && !line.startsWith(QLatin1String("@")))
            last = line.trimmed();
    const QString h = host.toString();
    if (e.contains(QLatin1String("REMOTE HOST IDENTIFICATION HAS CHANGED"))
        || e.contains(QLatin1String("Host key verification failed"))
        || e.contains(QLatin1String("No ED25519 host key is known"))
        || e.contains(QLatin1String("host key is known")))
        return QStringLiteral("ssh %1: host key verification failed (the key is unknown or has "
                              "changed); check it and update known_hosts yourself, e.g. "
                              "`ssh %1` once; Shard Studio never accepts host keys on its own")
            .arg(h);
    if (e.contains(QLatin1String("Permission denied"))
        || e.contains(QLatin1String("Too many authentication failures")))
        return QStringLiteral("ssh %1: authentication refused (%2): %1 refused authentication; "
                              "load your key into ssh-agent or copy it with ssh-copy-id, check "
                              "the user name, or set IdentityFile in ~/.ssh/config (no password "
                              "prompts here)")
            .arg(h, last);
    // A refused connection is an answer (nothing listens on that port), not an unreachable host.
    if (e.contains(QLatin1String("Connection refused")))
        return QStringLiteral("ssh %1: connection refused (%2): %1 refused the connection, so no "
                              "SSH server listens there; check the address and port, and that "
                              "sshd runs on the host")
            .arg(h, last);
    if (e.contains(QLatin1String("Could not resolve hostname")))
        return QStringLiteral("ssh %1: unknown host name (%2); check the spelling or add it to "
                              "~/.ssh/config")
            .arg(h, last);
    if (e.contains(QLatin1String("timed out")) || e.contains(QLatin1String("No route to host"))
        || e.contains(QLatin1String("Network is unreachable")))
        return QStringLiteral("ssh %1: host unreachable (%2); check the name, network, VPN or "
                              "ProxyJump")
            .arg(h, last);
    if (e.contains(QLatin1String("Connection closed by"))
        || e.contains(QLatin1String("Connection reset")))
        return QStringLiteral("ssh %1: the host closed the connection (%2); check its sshd "
                              "(MaxStartups, AllowUsers) and your ProxyJump")
            .arg(h, last);
    if (exitCode == -1)
        return QStringLiteral("ssh %1: connection lost (%2)")
            .arg(h, last.isEmpty() ? "killed" : last);
    return QStringLiteral("ssh %1 failed (exit %2): %3").arg(h).arg(exitCode).arg(last);
}

QString SshClient::homeRelative(const QString& path)
{
    return path.startsWith(QLatin1String("~/")) ? path.mid(2) : path;
}

QString SshClient::shellQuote(const QString& s)
{
    if (!s.isEmpty()
        && QRegularExpression(QStringLiteral("^[A-Za-z0-9_./=:,+@%-]+$")).match(s).hasMatch())
        return s;
    QString out = s;
    out.replace('\'', QStringLiteral("'\\''"));
    return '\'' + out + '\'';
}

QString SshClient::shellJoin(const QStringList& args)
{
    QStringList quoted;
    for (const QString& a : args)
        quoted << shellQuote(a);
    return quoted.join(' ');
}

} // namespace shard::jobs
