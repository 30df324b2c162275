// Worker command lines and run-spec touch-ups shared by all launchers.
#include "jobs/launch_request.h"

#include <QRandomGenerator>
#include <nlohmann/json.hpp>

namespace shard::jobs {

QStringList workerLaunchArgs(const LaunchRequest& request, const QString& runDir,
    const QString& nodeRunDir, int nnodes, int nodeRank, const QString& masterAddr, int masterPort)
{
    QStringList args {QStringLiteral("launch"), QStringLiteral("--nproc-per-node"),
        QString::number(std::max(1, request.procsPerNode))};
    if (nnodes > 1) {
        args << QStringLiteral("--nnodes") << QString::number(nnodes)
             << QStringLiteral("--node-rank") << QString::number(nodeRank)
             << QStringLiteral("--master-addr") << masterAddr;
    }
    if (masterPort > 0)
        args << QStringLiteral("--master-port") << QString::number(masterPort);
    args << QStringLiteral("--run-dir") << nodeRunDir << QStringLiteral("--")
         << QStringLiteral("train");
    if (!request.specJson.isEmpty()) {
        args << QStringLiteral("--config") << runDir + QStringLiteral("/launch-spec.json");
    } else {
        args << request.trainArgs;
        if (!request.trainArgs.contains(QStringLiteral("--out")))
            args << QStringLiteral("--out") << runDir;
    }
    return args;
}

QByteArray specWithOut(const QByteArray& specJson, const QString& runDir)
{
    auto j = nlohmann::json::parse(
        specJson.constData(), specJson.constData() + specJson.size(), nullptr, false);
    if (!j.is_object())
        return specJson;
    j["out"] = runDir.toStdString();
    return QByteArray::fromStdString(j.dump(2)) + '\n';
}

LaunchRequest resumeRequest(nlohmann::json spec, const QString& name, const QString& runDir)
{
    LaunchRequest r;
    r.name = name;
    r.runDir = runDir;
    r.resume = true;
    if (spec.contains("args") && spec["args"].is_array()) {
        for (const auto& a : spec["args"])
            if (a.is_string())
                r.trainArgs << QString::fromStdString(a.get<std::string>());
        const int at = r.trainArgs.indexOf(QStringLiteral("--resume"));
        if (at >= 0)
            r.trainArgs.remove(at, std::min<qsizetype>(2, r.trainArgs.size() - at));
        r.trainArgs << QStringLiteral("--resume") << QStringLiteral("auto");
    } else {
        spec["resume"] = "auto";
        r.specJson = QByteArray::fromStdString(spec.dump(2));
        r.procsPerNode = specProcsPerNode(r.specJson, 1);
    }
    return r;
}

QByteArray specForTrainArgs(const QStringList& trainArgs)
{
    nlohmann::json j = nlohmann::json::object();
    std::vector<std::string> args;
    for (const QString& a : trainArgs)
        args.push_back(a.toStdString());
    j["args"] = args;
    for (int i = 0; i + 1 < trainArgs.size(); ++i) {
        const QString& flag = trainArgs[i];
        const QString& value = trainArgs[i + 1];
        bool isNumber = false;
        const qint64 n = value.toLongLong(&isNumber);
        if (flag == QLatin1String("--steps") && isNumber)
            j["steps"] = n;
        else if (flag == QLatin1String("--strategy"))
            j["strategy"] = value.toStdString();
        else if (flag == QLatin1String("--model"))
            j["model"] = value.toStdString();
    }
    return QByteArray::fromStdString(j.dump());
}

int specProcsPerNode(const QByteArray& specJson, int fallback)
{
    auto j = nlohmann::json::parse(
        specJson.constData(), specJson.constData() + specJson.size(), nullptr, false);
    if (j.is_object())
        if (auto it = j.find("procs_per_node"); it != j.end() && it->is_number_integer())
            return std::max(1, it->get<int>());
    return fallback;
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
