// Worker command lines and the launch spec shared by all launchers.
#include "jobs/launch_request.h"

#include <QDateTime>

#include <QRandomGenerator>
#include <nlohmann/json.hpp>

#include "protocol/launch_args.h"

namespace shard::jobs {

QStringList workerLaunchArgs(const LaunchRequest& request, const QString& runDir,
    const QString& nodeRunDir, int nnodes, int nodeRank, const QString& masterAddr, int masterPort)
{
    protocol::LaunchArgs a;
    a.nprocPerNode = std::max(1, request.spec.procsPerNode);
    if (nnodes > 1) {
        a.nnodes = nnodes;
        a.nodeRank = nodeRank;
        a.masterAddr = masterAddr.toStdString();
    }
    if (masterPort > 0)
        a.masterPort = masterPort;
    a.runDir = nodeRunDir.toStdString();
    if (request.spec.maxRestarts > 0)
        a.maxRestarts = request.spec.maxRestarts;
    a.workerArgs
        = {"train", "--config", (runDir + QStringLiteral("/launch-spec.json")).toStdString()};
    QStringList args;
    for (const std::string& word : a.toArgv())
        args << QString::fromStdString(word);
    return args;
}

QByteArray launchSpecJson(const protocol::RunSpec& spec, const QString& runDir)
{
    protocol::RunSpec s = spec;
    s.outDir = runDir.toStdString();
    return QByteArray::fromStdString(protocol::toJson(s).dump(2)) + '\n';
}

QByteArray recordedSpecJson(const protocol::RunSpec& spec)
{
    return QByteArray::fromStdString(protocol::toJson(spec).dump(2));
}

Result<LaunchRequest> resumeRequest(
    const QByteArray& specJson, const QString& name, const QString& runDir)
{
    const auto j = nlohmann::json::parse(
        specJson.constData(), specJson.constData() + specJson.size(), nullptr, false);
    LaunchRequest r;
    try {
        r.spec = protocol::runSpecFromJson(j);
    } catch (const std::exception& e) {
        return fail(QStringLiteral("%1/run.json cannot be resumed: %2 (resume it with `shard run "
                                   "--run-dir %1 RUN.json` and \"resume\": \"auto\" in the spec)")
                        .arg(runDir, QString::fromUtf8(e.what())));
    }
    r.spec.resume = "auto";
    r.name = name;
    r.runDir = runDir;
    r.resume = true;
    return r;
}

QString newRunDirName(const QString& name)
{
    return safeDirName(name) + QLatin1Char('-')
        + QDateTime::currentDateTime().toString(QStringLiteral("yyyyMMdd-HHmmss-zzz"));
}

QString safeDirName(const QString& name)
{
    QString out;
    for (QChar c : name) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
            || c == '.' || c == '_' || c == '-';
        out += ok ? c : QChar('_');
    }
    while (out.startsWith('.'))
        out.remove(0, 1);
    if (out.isEmpty())
        out = QStringLiteral("run");
    return out.left(60);
}

int pickMasterPort()
{
    return 20000 + static_cast<int>(QRandomGenerator::global()->bounded(20000));
}

} // namespace shard::jobs
