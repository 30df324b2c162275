// `shard doctor [--json] [--host [user@]host[:port]]`: what this machine (or an SSH host) can
// train with, and for each missing piece the command that fixes it. The checks are jobs::doctor's,
// the same the Hosts page's Doctor panel shows: the system (cores, RAM for CPU ranks and
// offload), shard-worker and the LibTorch it was built with (CUDA, NCCL), the NVIDIA driver
// against that CUDA, the GPUs (memory, compute capability, which presets fit), NCCL and cuDNN,
// and the SSH and Slurm clients. Exit status 1 when shard-worker itself is missing or cannot
// start (nothing can train), 2 when the host cannot be reached, else 0.
#include <cstdio>
#include <memory>
#include <string>

#include <QCoreApplication>
#include <QFileInfo>
#include <QStandardPaths>
#include <QString>

#include "command.h"
#include "jobs/doctor.h"
#include "jobs/ssh_client.h"

namespace shard::cli {
namespace {

// $SHARD_WORKER, next to this program (an install), the build tree's, then PATH; the name alone
// when none is found (the doctor then says where it looked).
QString findWorker()
{
    const QString env = qEnvironmentVariable("SHARD_WORKER");
    if (!env.isEmpty())
        return env;
    const QString dir = QCoreApplication::applicationDirPath();
    for (const QString& c : {dir + QStringLiteral("/shard-worker"),
             dir + QStringLiteral("/../engine/worker/shard-worker")})
        if (QFileInfo(c).isExecutable())
            return QFileInfo(c).canonicalFilePath();
    const QString onPath = QStandardPaths::findExecutable(QStringLiteral("shard-worker"));
    return onPath.isEmpty() ? QStringLiteral("shard-worker") : onPath;
}

int doctor(bool asJson, const std::string& hostSpec, const std::string& workerOnHost)
{
    jobs::Result<QList<jobs::DoctorCheck>> checks = jobs::fail({});
    if (hostSpec.empty()) {
        checks = jobs::doctorLocal(findWorker());
    } else {
        auto host = jobs::SshHost::parse(QString::fromStdString(hostSpec));
        if (!host) {
            std::fprintf(stderr, "shard doctor: --host: %s\n", qPrintable(host.error()));
            return 2;
        }
        checks = jobs::doctorRemote(jobs::SshClient(), host.value(),
            QString::fromStdString(workerOnHost.empty() ? "shard-worker" : workerOnHost));
    }
    if (!checks) {
        std::fprintf(stderr, "shard doctor: %s\n", qPrintable(checks.error()));
        return 2;
    }
    if (asJson)
        std::printf("%s\n", jobs::doctorJson(checks.value()).c_str());
    else
        std::printf("%s", qPrintable(jobs::formatDoctor(checks.value())));
    return jobs::workerMissing(checks.value()) ? 1 : 0;
}

const CommandRegistration kDoctor([](CLI::App& app) {
    auto* sub = app.add_subcommand(
        "doctor", "What this machine (or an SSH host) can train with, and how to fix the rest");
    auto asJson = std::make_shared<bool>(false);
    auto host = std::make_shared<std::string>();
    auto worker = std::make_shared<std::string>();
    sub->add_flag(
        "--json", *asJson, "One JSON object: {\"checks\": [{name, status, detail, fix}]}");
    sub->add_option("--host", *host,
        "Check an SSH host instead ([user@]host[:port] or a ~/.ssh/config alias), as the Hosts "
        "page's Doctor does");
    sub->add_option("--worker", *worker,
        "With --host: the worker program there (default shard-worker on its PATH)");
    sub->callback([asJson, host, worker] { exitCode() = doctor(*asJson, *host, *worker); });
});

} // namespace
} // namespace shard::cli
