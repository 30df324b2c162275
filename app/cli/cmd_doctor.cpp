// `shard doctor [--json]`: what this machine can train with, and for each missing piece the
// command that fixes it: the system (cores, RAM for CPU ranks and offload), shard-worker and the
// LibTorch it was built with (CUDA, NCCL), the NVIDIA driver and GPUs (memory, compute
// capability), the NCCL and cuDNN libraries, and the SSH and Slurm clients that remote launches
// use. Exit status 1 when shard-worker itself is missing (nothing can train), else 0.
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>
#include <QProcess>
#include <QStandardPaths>
#include <QString>

#include <nlohmann/json.hpp>
#include <sys/sysinfo.h>

#include "command.h"

namespace shard::cli {
namespace {

struct Check {
    std::string name;
    std::string status; // ok, warn (works with less), missing
    std::string detail;
    std::string fix; // the command or step that fixes it; "" when nothing to do
};

struct Run {
    bool started = false;
    int code = -1;
    std::string out;
};

Run run(const QString& program, const QStringList& args, int timeoutMs = 15000)
{
    Run r;
    if (program.isEmpty())
        return r;
    QProcess p;
    p.setProcessChannelMode(QProcess::MergedChannels);
    p.start(program, args);
    if (!p.waitForStarted(timeoutMs))
        return r;
    r.started = true;
    if (!p.waitForFinished(timeoutMs)) {
        p.kill();
        p.waitForFinished(2000);
        return r;
    }
    r.code = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
    r.out = QString::fromUtf8(p.readAll()).trimmed().toStdString();
    return r;
}

std::string firstLine(const std::string& s)
{
    return s.substr(0, s.find('\n'));
}

std::string fileText(const std::string& path)
{
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// $SHARD_WORKER, next to this program (an install), the build tree's, then PATH.
QString findWorker()
{
    const QString env = qEnvironmentVariable("SHARD_WORKER");
    if (!env.isEmpty())
        return QFileInfo(env).isExecutable() ? env : QString();
    const QString dir = QCoreApplication::applicationDirPath();
    for (const QString& c : {dir + QStringLiteral("/shard-worker"),
             dir + QStringLiteral("/../engine/worker/shard-worker")})
        if (QFileInfo(c).isExecutable())
            return QFileInfo(c).canonicalFilePath();
    return QStandardPaths::findExecutable(QStringLiteral("shard-worker"));
}

// The shared libraries the dynamic linker knows (`ldconfig -p`).
std::string linkerCache()
{
    Run r = run(QStringLiteral("/sbin/ldconfig"), {QStringLiteral("-p")});
    if (!r.started)
        r = run(QStringLiteral("ldconfig"), {QStringLiteral("-p")});
    return r.out;
}

std::vector<Check> diagnose()
{
    std::vector<Check> checks;
    // The system.
    std::string os;
    std::istringstream release(fileText("/etc/os-release"));
    for (std::string line; std::getline(release, line);)
        if (line.rfind("PRETTY_NAME=", 0) == 0)
            os = line.substr(12);
    if (os.size() >= 2 && os.front() == '"')
        os = os.substr(1, os.size() - 2);
    struct sysinfo si { };
    ::sysinfo(&si);
    const double ramGiB = double(si.totalram) * si.mem_unit / double(1ull << 30);
    char sys[160];
    std::snprintf(sys, sizeof sys,
        "%s, %u CPU cores, %.1f GiB RAM (CPU ranks and offloaded state "
        "live here)",
        os.empty() ? "unknown Linux" : os.c_str(), std::thread::hardware_concurrency(), ramGiB);
    checks.push_back({"system", "ok", sys, ""});

    // shard-worker and its LibTorch.
    const QString worker = findWorker();
    const Run version = run(worker, {QStringLiteral("--version")});
    bool workerCuda = false;
    bool workerNccl = false;
    if (version.code != 0) {
        checks.push_back({"shard-worker", "missing",
            worker.isEmpty() ? "not found ($SHARD_WORKER, next to shard, or on the PATH)"
                             : "found at " + worker.toStdString()
                    + " but `--version` failed: " + firstLine(version.out),
            "build it (cmake --build build/release --target shard-worker) or install the "
            "shard-studio package; or set SHARD_WORKER=/path/to/shard-worker"});
    } else {
        std::string libtorch;
        std::istringstream lines(version.out);
        for (std::string line; std::getline(lines, line);)
            if (line.rfind("LibTorch", 0) == 0)
                libtorch = line;
        workerCuda = libtorch.find("built with CUDA") != std::string::npos;
        workerNccl = libtorch.find("NCCL backend on") != std::string::npos;
        checks.push_back({"shard-worker", "ok",
            worker.toStdString() + ": " + firstLine(version.out)
                + (libtorch.empty() ? "" : "; " + libtorch),
            ""});
    }

    // The NVIDIA driver and GPUs.
    const bool driver = QFileInfo::exists(QStringLiteral("/proc/driver/nvidia/version"));
    const QString smi = QStandardPaths::findExecutable(QStringLiteral("nvidia-smi"));
    std::vector<std::string> gpus;
    std::string driverVersion;
    if (!smi.isEmpty()) {
        const Run q = run(smi,
            {QStringLiteral("--query-gpu=name,memory.total,compute_cap,driver_version"),
                QStringLiteral("--format=csv,noheader")});
        std::istringstream lines(q.code == 0 ? q.out : std::string());
        for (std::string line; std::getline(lines, line);) {
            if (line.empty())
                continue;
            gpus.push_back(line.substr(0, line.rfind(',')));
            driverVersion = line.substr(line.rfind(',') + 1);
        }
    }
    if (gpus.empty()) {
        checks.push_back({"gpu", driver ? "warn" : "ok",
            driver ? "an NVIDIA driver is loaded but nvidia-smi lists no GPU"
                   : "no NVIDIA driver: runs train on the CPU (Gloo between ranks), which suits "
                     "small models and trying the studio",
            driver ? "check `nvidia-smi` (a driver older than the GPU, or a container without "
                     "the device)"
                   : ""});
    } else {
        std::string list;
        for (const auto& g : gpus)
            list += (list.empty() ? "" : "; ") + g;
        checks.push_back({"gpu", "ok",
            std::to_string(gpus.size()) + " GPU(s), driver" + driverVersion + ": " + list, ""});
        if (!workerCuda && version.code == 0)
            checks.push_back({"cuda-libtorch", "missing",
                "this machine has GPUs but shard-worker was built against a CPU-only LibTorch "
                "(Debian 12's libtorch-dev), so it cannot use them",
                "build the worker against a CUDA PyTorch's LibTorch: `bash "
                "bench/gpu/build_worker.sh` does it (python3 -m pip install torch, then the "
                "README's GPU section), or on Debian 13 install libtorch-cuda-dev and rebuild"});
        const std::string libs = linkerCache(); // read once for NCCL and cuDNN
        const bool nccl = libs.find("libnccl.so.2") != std::string::npos;
        if (!workerNccl || !nccl)
            checks.push_back({"nccl", gpus.size() > 1 ? "missing" : "warn",
                !workerNccl ? "shard-worker was built without the NCCL backend (no nccl.h at "
                              "configure time): GPUs cannot exchange gradients"
                            : "libnccl.so.2 is not in the linker cache: shard-worker finds it "
                              "only through LD_LIBRARY_PATH or the PyTorch it was built against",
                !workerNccl ? "install libnccl-dev (Debian 13) or NCCL's headers and rebuild "
                              "shard-worker"
                            : "apt install libnccl2 (Debian 13, non-free) or point "
                              "LD_LIBRARY_PATH at a PyTorch wheel's nvidia/nccl/lib"});
        else
            checks.push_back({"nccl", "ok", "NCCL backend built in, libnccl.so.2 installed", ""});
        const bool cudnn = libs.find("libcudnn") != std::string::npos;
        checks.push_back({"cudnn", cudnn ? "ok" : "warn",
            cudnn ? "cuDNN installed"
                  : "cuDNN not installed: the engine's Llama and Qwen models do not use it, but a "
                    "CUDA LibTorch built with cuDNN may need it to load",
            cudnn ? ""
                  : "apt install nvidia-cudnn (Debian, contrib: it fetches "
                    "cuDNN from NVIDIA)"});
    }

    // Remote launches.
    const Run ssh
        = run(QStandardPaths::findExecutable(QStringLiteral("ssh")), {QStringLiteral("-V")});
    checks.push_back({"ssh", ssh.started ? "ok" : "warn",
        ssh.started ? firstLine(ssh.out) + " (SSH launches)"
                    : "no ssh client: runs cannot be launched or followed on other machines",
        ssh.started ? "" : "apt install openssh-client"});
    const Run sinfo = run(
        QStandardPaths::findExecutable(QStringLiteral("sinfo")), {QStringLiteral("--version")});
    std::string slurmVersion = firstLine(sinfo.out);
    std::istringstream sinfoLines(sinfo.out); // a misconfigured client prints errors first
    for (std::string line; std::getline(sinfoLines, line);)
        if (line.rfind("slurm ", 0) == 0)
            slurmVersion = line;
    checks.push_back({"slurm", sinfo.started ? "ok" : "warn",
        sinfo.started ? slurmVersion + " (sbatch launches from this machine)"
                      : "no Slurm client here: Slurm launches go through an SSH host that has one",
        sinfo.started ? "" : "apt install slurm-client, or add a login node on the Hosts page"});
    return checks;
}

int doctor(bool asJson)
{
    const std::vector<Check> checks = diagnose();
    bool workerMissing = false;
    for (const auto& c : checks)
        workerMissing = workerMissing || (c.name == "shard-worker" && c.status == "missing");
    if (asJson) {
        nlohmann::json out = nlohmann::json::array();
        for (const auto& c : checks)
            out.push_back(
                {{"name", c.name}, {"status", c.status}, {"detail", c.detail}, {"fix", c.fix}});
        std::printf("%s\n", nlohmann::json({{"checks", out}}).dump(1).c_str());
    } else {
        for (const auto& c : checks) {
            const char* mark = c.status == "ok" ? "ok     "
                : c.status == "warn"            ? "note   "
                                                : "MISSING";
            std::printf("%s %-14s %s\n", mark, c.name.c_str(), c.detail.c_str());
            if (!c.fix.empty())
                std::printf("        %-14s fix: %s\n", "", c.fix.c_str());
        }
    }
    return workerMissing ? 1 : 0;
}

const CommandRegistration kDoctor([](CLI::App& app) {
    auto* sub = app.add_subcommand(
        "doctor", "What this machine can train with, and how to fix what is missing");
    auto asJson = std::make_shared<bool>(false);
    sub->add_flag(
        "--json", *asJson, "One JSON object: {\"checks\": [{name, status, detail, fix}]}");
    sub->callback([asJson] { exitCode() = doctor(*asJson); });
});

} // namespace
} // namespace shard::cli
