// SshClient: runs commands on remote hosts through the system OpenSSH client, so the user's
// ~/.ssh/config, agent, ProxyJump and known_hosts apply as they are. BatchMode (never a prompt),
// connection multiplexing (ControlMaster/ControlPersist), host keys checked by OpenSSH only.
// Every value put into a remote command goes through shellQuote().
#pragma once

#include <optional>

#include <QByteArray>
#include <QString>
#include <QStringList>

#include "jobs/result.h"

namespace shard::jobs {

// "[user@]host[:port]" or an ssh_config alias.
struct SshHost {
    QString user;
    QString host;
    int port = 0;

    static Result<SshHost> parse(const QString& spec);
    QString toString() const; // back to "[user@]host[:port]"
};

// "[user@]host[:port]:PATH" (the port: digits between the two colons; the host: no '/' and no
// space; SshHost::parse judges it), split into the host and the path. nullopt when `text` has no
// such host part or no path. Whether it rather names a file here is the caller's to rule out
// (`shard attach`, `shard runs import`).
struct RemotePath {
    QString host; // [user@]host[:port]
    QString path;
};
std::optional<RemotePath> splitRemotePath(const QString& text);

struct SshOptions {
    QString configFile; // -F FILE (tests; empty: the user's own config)
    QString controlDir; // ControlPath folder; empty: /tmp/shard-ssh-<uid>
    int connectTimeoutSec = 10;
    int controlPersistSec = 60;
    QStringList extraOptions; // more -o KEY=VALUE

    // $SHARD_SSH_CONFIG sets configFile.
    static SshOptions fromEnvironment();
};

struct SshResult {
    int exitCode = -1;
    QByteArray out;
    QByteArray err;
};

class SshClient {
public:
    explicit SshClient(SshOptions options = SshOptions::fromEnvironment());

    const SshOptions& options() const { return m_options; }

    // The ssh arguments up to and including the destination (the remote command follows).
    QStringList sshArgs(const SshHost& host) const;

    // Runs `script` (a POSIX shell command line, already quoted) on the host; stdin is fed.
    // Fails with a one-line message on ssh-level errors (exit 255) or a timeout; a remote
    // command's own non-zero exit is returned in SshResult for the caller to judge.
    Result<SshResult> run(const SshHost& host, const QString& script,
        const QByteArray& stdinData = {}, int timeoutMs = 60000) const;

    // Copies a local file or folder into `remoteDir` on the host (created if needed), keeping its
    // name: a tar stream over the same ssh connection (no scp or rsync needed on either side).
    Result<void> upload(const SshHost& host, const QString& localPath, const QString& remoteDir,
        int timeoutMs = 30 * 60 * 1000) const;

    // The address other nodes can reach this host by (`ssh -G`'s hostname).
    Result<QString> resolveHostName(const SshHost& host) const;

    // Ends the multiplexing master for the host (ssh -O exit), if one is running.
    void closeMaster(const SshHost& host) const;

    // One line for the user from ssh's exit code and stderr.
    static QString describeFailure(const SshHost& host, int exitCode, const QByteArray& err);

    // 'single-quoted' for a POSIX shell: any string arrives as the same literal string.
    static QString shellQuote(const QString& s);
    static QString shellJoin(const QStringList& args);
    // A remote path as the remote shell takes it: "~/x" is "x" (it starts in the home folder,
    // and a quoted "~" is not expanded); other paths as given.
    static QString homeRelative(const QString& path);

private:
    SshOptions m_options;
};

} // namespace shard::jobs
