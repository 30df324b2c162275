// The doctor's facts and their judgement (see doctor.h).
#include "jobs/doctor.h"

#include <algorithm>
#include <cmath>

#include <QJsonObject>
#include <QObject>
#include <QProcess>
#include <QRegularExpression>
#include <QStringList>

#include "jobs/format_bytes.h"
#include "jobs/ssh_client.h"
#include "plan/model_spec.h"
#include "plan/planner.h"
#include "protocol/cuda_driver.h"

namespace shard::jobs {

namespace {

// The Debian 13 commands of the GPU build (scripts/setup.sh with the detection forced).
const char* const kGpuSetup
    = "on Debian 13: SHARD_GPU=1 bash scripts/setup.sh (CUDA LibTorch, toolkit, NCCL, cuDNN), "
      "then rebuild; elsewhere a PyTorch wheel's LibTorch (README, \"The engine on a cluster\")";

struct Gpu {
    QString name;
    double memoryMiB = 0;
    QString computeCap; // "9.0"; empty when unknown
    QString driver;
};

QList<Gpu> parseGpus(const QString& smiOutput)
{
    // "NVIDIA H200, 143771 MiB, 9.0, 550.54.15" (older drivers answer [N/A] for compute_cap).
    static const QRegularExpression row(
        QStringLiteral("^\\s*(.+?)\\s*,\\s*(\\d+)\\s*MiB\\s*,\\s*([^,]*?)\\s*,\\s*(\\S+)\\s*$"));
    QList<Gpu> gpus;
    for (const QString& line : smiOutput.split('\n')) {
        const auto m = row.match(line);
        if (!m.hasMatch())
            continue;
        QString cap = m.captured(3);
        if (!QRegularExpression(QStringLiteral("^\\d+\\.\\d+$")).match(cap).hasMatch())
            cap.clear();
        gpus.append({m.captured(1), m.captured(2).toDouble(), cap, m.captured(4)});
    }
    return gpus;
}

// Dotted versions compared as numbers (protocol/cuda_driver.h).
int compareVersions(const QString& a, const QString& b)
{
    return protocol::compareDottedVersions(a.toStdString(), b.toStdString());
}

// The planner's answer to "what fits on these GPUs": per method, the largest preset (by
// parameters) that trains at 2048 tokens, micro-batch 1, full activation checkpointing, zero3
// over `gpus` cards of `memoryMiB` each. Empty names where none fits.
struct Fit {
    QString full, lora, qlora;
    QString smallest; // the smallest preset the studio offers a GPU (not a tiny test model)
    double smallestQloraGiB = 0; // what it needs with QLoRA on one card
};

Fit presetFit(double memoryMiB, int gpus, bool bf16)
{
    Fit fit;
    std::vector<plan::ModelSpec> models;
    for (const plan::ModelSpec& m : plan::presets())
        if (m.name.rfind("tiny-", 0) != 0 && !m.isMoe())
            models.push_back(m);
    std::sort(models.begin(), models.end(), [](const plan::ModelSpec& a, const plan::ModelSpec& b) {
        return plan::parameterCount(a) < plan::parameterCount(b);
    });
    if (models.empty())
        return fit;
    const auto planFor = [&](const plan::ModelSpec& m, plan::Method method, int n) {
        plan::PlanInput in;
        in.model = m;
        in.strategy = plan::Strategy::Zero3;
        in.precision = bf16 ? plan::Precision::Bf16Mixed : plan::Precision::Fp32;
        in.checkpointing = plan::Checkpointing::Full;
        in.microBatch = 1;
        in.seqLen = std::min<int64_t>(2048, m.maxPositionEmbeddings);
        in.gpusPerNode = n;
        in.device = plan::DeviceSpec::gpu(memoryMiB / 1024.0);
        in.method = method;
        return plan::plan(in);
    };
    fit.smallest = QString::fromStdString(models.front().name);
    {
        const plan::PlanResult r = planFor(models.front(), plan::Method::Qlora, 1);
        fit.smallestQloraGiB = double(r.perDevice.total()) / double(1ull << 30);
    }
    for (const plan::ModelSpec& m : models) {
        const QString name = QString::fromStdString(m.name);
        if (planFor(m, plan::Method::Full, gpus).fits)
            fit.full = name;
        if (planFor(m, plan::Method::Lora, gpus).fits)
            fit.lora = name;
        if (planFor(m, plan::Method::Qlora, gpus).fits)
            fit.qlora = name;
    }
    return fit;
}

} // namespace

QString doctorScript(const QString& workerProgram)
{
    // Sections start with "@@name" lines; every command's failure is a fact, not an error.
    return QStringLiteral(
        "w=%1\n"
        "echo @@os; (. /etc/os-release 2>/dev/null && echo \"$PRETTY_NAME\")\n"
        "echo @@cores; env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc 2>/dev/null || "
        "getconf _NPROCESSORS_ONLN 2>/dev/null\n"
        "echo @@mem-kib; awk '/^MemTotal:/ {print $2}' /proc/meminfo 2>/dev/null\n"
        "echo @@worker-path; command -v \"$w\" 2>/dev/null\n"
        "if command -v \"$w\" >/dev/null 2>&1; then echo @@worker; \"$w\" --version 2>&1; "
        "rc=$?; echo @@worker-exit; echo $rc; fi\n"
        "echo @@driver; head -n 1 /proc/driver/nvidia/version 2>/dev/null\n"
        "if command -v nvidia-smi >/dev/null 2>&1; then echo @@smi; "
        "nvidia-smi --query-gpu=name,memory.total,compute_cap,driver_version "
        "--format=csv,noheader 2>&1; rc=$?; echo @@smi-exit; echo $rc; fi\n"
        "echo @@libs; { /sbin/ldconfig -p 2>/dev/null || ldconfig -p 2>/dev/null; } | "
        "grep -E 'libnccl\\.so|libcudnn|libcuda\\.so'\n"
        "echo @@cudnn-package; dpkg-query -W -f='${Status} ${Version}\\n' nvidia-cudnn "
        "2>/dev/null | grep -v '^unknown ok not-installed'\n"
        "echo @@ssh; command -v ssh >/dev/null 2>&1 && ssh -V 2>&1\n"
        "echo @@slurm; command -v sinfo >/dev/null 2>&1 && sinfo --version 2>&1\n"
        "echo @@end\n")
        .arg(SshClient::shellQuote(workerProgram));
}

DoctorFacts parseDoctorFacts(const QByteArray& output, const QString& workerProgram)
{
    DoctorFacts f;
    f.workerProgram = workerProgram;
    QString section;
    QStringList body;
    bool workerRan = false;
    const auto close = [&] {
        const QString text = body.join('\n').trimmed();
        if (section == "os")
            f.os = text;
        else if (section == "cores")
            f.cores = text.toInt();
        else if (section == "mem-kib")
            f.ramGiB = text.toDouble() / (1024.0 * 1024.0);
        else if (section == "worker-path")
            f.workerPath = text;
        else if (section == "worker") {
            f.workerVersion = text;
            workerRan = true;
        } else if (section == "worker-exit")
            f.workerExit = text.toInt();
        else if (section == "driver")
            f.driverProc = text;
        else if (section == "smi") {
            f.smiFound = true;
            f.smiOutput = text;
        } else if (section == "smi-exit")
            f.smiExit = text.toInt();
        else if (section == "libs")
            f.linkerLibs = text;
        else if (section == "cudnn-package")
            f.cudnnPackage = text;
        else if (section == "ssh")
            f.ssh = text.section('\n', 0, 0);
        else if (section == "slurm")
            f.slurm = text;
        body.clear();
    };
    for (const QByteArray& raw : output.split('\n')) {
        const QString line = QString::fromUtf8(raw);
        if (line.startsWith("@@")) {
            close();
            section = line.mid(2).trimmed();
            if (section == "end")
                f.complete = true;
            continue;
        }
        body << line;
    }
    close();
    if (!workerRan)
        f.workerExit = -1;
    return f;
}

QList<DoctorCheck> diagnose(const DoctorFacts& f)
{
    QList<DoctorCheck> checks;
    const auto add = [&checks](const QString& name, const QString& status, const QString& detail,
                         const QString& fix = {}) {
        checks.append({name, status, detail, fix});
    };
    if (!f.complete)
        add("doctor", "warn",
            QObject::tr("the checks stopped before their end (a command hung or the connection "
                        "dropped): what follows may be partial"),
            QObject::tr("run `shard doctor` again on that machine"));

    // The system.
    add("system", "ok",
        QObject::tr("%1, %2 CPU cores, %3 GiB RAM (CPU ranks and offloaded state live here)")
            .arg(f.os.isEmpty() ? QObject::tr("unknown Linux") : f.os)
            .arg(f.cores)
            .arg(f.ramGiB, 0, 'f', 1));

    // shard-worker and its LibTorch.
    // Its version and LibTorch lines (the dynamic loader may warn before them).
    QString workerFirst = f.workerVersion.section('\n', 0, 0);
    QString libtorch;
    for (const QString& line : f.workerVersion.split('\n')) {
        if (line.startsWith("LibTorch"))
            libtorch = line;
        if (line.startsWith("shard-worker "))
            workerFirst = line;
    }
    const bool workerOk = !f.workerPath.isEmpty() && f.workerExit == 0;
    const auto cudaMatch
        = QRegularExpression(QStringLiteral("built with CUDA (\\d+)\\.(\\d+)")).match(libtorch);
    const bool workerCuda = workerOk && cudaMatch.hasMatch();
    const bool workerNccl = workerOk && libtorch.contains("NCCL backend on");
    const QString cudnnMissingLib = [&] {
        const auto m = QRegularExpression(QStringLiteral("(libcudnn[^:\\s]*): cannot open"))
                           .match(f.workerVersion);
        return m.hasMatch() ? m.captured(1) : QString();
    }();
    if (f.workerPath.isEmpty()) {
        add("shard-worker", "missing",
            QObject::tr("'%1' not found ($SHARD_WORKER, next to shard, or on the PATH)")
                .arg(f.workerProgram),
            QObject::tr("build it (cmake --build build/release --target shard-worker) or install "
                        "the shard-studio package; or set SHARD_WORKER=/path/to/shard-worker"));
    } else if (!workerOk) {
        QString why = f.workerVersion.section('\n', -1).trimmed();
        if (why.isEmpty())
            why = QObject::tr("no output");
        QString fix = QObject::tr("rebuild it (cmake --build build/release --target "
                                  "shard-worker) or reinstall the shard-studio package");
        if (!cudnnMissingLib.isEmpty())
            fix = QObject::tr("cuDNN is half installed: its CUDA LibTorch cannot load without "
                              "%1. sudo apt-get install --reinstall nvidia-cudnn (it downloads "
                              "cuDNN from NVIDIA: needs internet access), then run this again")
                      .arg(cudnnMissingLib);
        else if (f.workerVersion.contains("cannot open shared object file"))
            fix = QObject::tr("a library it was built against is gone (a package removed or "
                              "switched between the CPU and CUDA builds): bash "
                              "scripts/setup.sh, then rebuild");
        add("shard-worker", "missing",
            QObject::tr("found at %1 but `--version` failed (exit %2): %3")
                .arg(f.workerPath)
                .arg(f.workerExit)
                .arg(why),
            fix);
    } else {
        add("shard-worker", "ok",
            f.workerPath + ": " + workerFirst + (libtorch.isEmpty() ? "" : "; " + libtorch));
    }

    // The NVIDIA driver and GPUs.
    const QList<Gpu> gpus = parseGpus(f.smiOutput);
    QString driver = gpus.isEmpty() ? QString() : gpus.front().driver;
    if (driver.isEmpty())
        driver
            = QString::fromStdString(protocol::driverVersionFromProc(f.driverProc.toStdString()));
    const bool driverLoaded = !f.driverProc.isEmpty();
    if (gpus.isEmpty()) {
        if (f.smiFound && f.smiExit != 0) {
            add("gpu", "missing",
                QObject::tr("nvidia-smi failed (exit %1): %2")
                    .arg(f.smiExit)
                    .arg(f.smiOutput.section('\n', 0, 0).trimmed()),
                f.smiOutput.contains("version mismatch")
                    ? QObject::tr("the driver's kernel module and its libraries differ (a driver "
                                  "upgrade without a reboot): reboot, or reload the nvidia "
                                  "modules")
                    : QObject::tr("check `nvidia-smi`: the driver is not running (install "
                                  "nvidia-driver from Debian's non-free and reboot)"));
        } else if (driverLoaded) {
            add("gpu", "warn",
                QObject::tr("an NVIDIA driver is loaded (%1) but nvidia-smi lists no GPU")
                    .arg(driver.isEmpty() ? f.driverProc : driver),
                QObject::tr("check `nvidia-smi` (a driver older than the GPU, a missing "
                            "nvidia-smi, or a container without the device)"));
        } else {
            add("gpu", "ok",
                workerCuda ? QObject::tr("no NVIDIA driver: runs train on the CPU (this CUDA "
                                         "build's --device auto falls back to it; Gloo between "
                                         "ranks)")
                           : QObject::tr("no NVIDIA driver: runs train on the CPU (Gloo between "
                                         "ranks), which suits small models and trying the "
                                         "studio"));
        }
    } else {
        // Alike cards once, with their count: "8 × NVIDIA H200 (140.4 GiB, ...)".
        QStringList kinds;
        QList<int> counts;
        for (const Gpu& g : gpus) {
            const QString kind
                = QStringLiteral("%1 (%2%3)")
                      .arg(g.name, formatBytes(g.memoryMiB * 1024.0 * 1024.0),
                          g.computeCap.isEmpty()
                              ? QString()
                              : QObject::tr(", compute capability %1").arg(g.computeCap));
            const int at = int(kinds.indexOf(kind));
            if (at >= 0) {
                ++counts[at];
            } else {
                kinds << kind;
                counts << 1;
            }
        }
        QStringList list;
        for (int i = 0; i < kinds.size(); ++i)
            list << (counts[i] > 1 ? QStringLiteral("%1 × %2").arg(counts[i]).arg(kinds[i])
                                   : kinds[i]);
        add("gpu", "ok",
            QObject::tr("%n GPU(s), driver %1: %2", nullptr, int(gpus.size()))
                .arg(driver, list.join("; ")));
    }

    // The driver against the CUDA the worker was built with.
    if (workerCuda && !driver.isEmpty()) {
        const int major = cudaMatch.captured(1).toInt();
        const QString needed = QString::fromStdString(protocol::minimumDriverForCuda(major));
        if (!needed.isEmpty() && compareVersions(driver, needed) < 0)
            add("driver", "missing",
                QObject::tr("driver %1 is older than CUDA %2's minimum, %3: shard-worker (built "
                            "with CUDA %2.%4) cannot start on these GPUs, and --device auto "
                            "trains on the CPU")
                    .arg(driver)
                    .arg(major)
                    .arg(needed, cudaMatch.captured(2)),
                QObject::tr("install a driver of %1 or newer (Debian 13: sudo apt install "
                            "nvidia-driver from non-free), then reboot")
                    .arg(needed));
        else if (!needed.isEmpty())
            add("driver", "ok",
                QObject::tr("driver %1 runs CUDA %2 (needs %3 or newer)")
                    .arg(driver)
                    .arg(major)
                    .arg(needed));
    }

    if (!gpus.isEmpty()) {
        if (workerOk && !workerCuda)
            add("cuda-libtorch", "missing",
                QObject::tr("this machine has GPUs but shard-worker was built against a CPU-only "
                            "LibTorch, so it cannot use them"),
                QString::fromLatin1(kGpuSetup));

        // Compute capability: bf16 needs Ampere.
        QString oldest;
        for (const Gpu& g : gpus)
            if (!g.computeCap.isEmpty()
                && (oldest.isEmpty() || compareVersions(g.computeCap, oldest) < 0))
                oldest = g.computeCap;
        const bool bf16 = oldest.isEmpty() || compareVersions(oldest, "8.0") >= 0;
        if (!bf16)
            add("precision", "warn",
                QObject::tr("compute capability %1: bf16-mixed needs 8.0 (Ampere) or newer, so "
                            "these GPUs train in fp32 (twice the activation memory)")
                    .arg(oldest),
                QObject::tr("choose fp32 on the Plan and Launch pages"));

        // Memory: what the planner fits on them.
        double smallest = gpus.front().memoryMiB;
        for (const Gpu& g : gpus)
            smallest = std::min(smallest, g.memoryMiB);
        if (smallest > 0) {
            const Fit one = presetFit(smallest, 1, bf16);
            const QString card = formatBytes(smallest * 1024.0 * 1024.0);
            const QString how = QObject::tr("2048 tokens, micro-batch 1, full checkpointing, %1")
                                    .arg(bf16 ? "bf16-mixed" : "fp32");
            if (one.qlora.isEmpty()) {
                add("gpu-memory", "warn",
                    QObject::tr("%1 a GPU is too little for any preset model on one GPU: the "
                                "smallest, %2, needs %3 GiB with QLoRA (%4)")
                        .arg(card, one.smallest)
                        .arg(one.smallestQloraGiB, 0, 'f', 1)
                        .arg(how),
                    gpus.size() > 1 ? QObject::tr("shard the model over the %1 GPUs (zero3; "
                                                  "the Plan page shows what fits), or train "
                                                  "on the CPU (--device cpu)")
                                          .arg(gpus.size())
                                    : QObject::tr("train on the CPU (--device cpu), or on a "
                                                  "host with more GPU memory"));
            } else {
                const auto upTo = [](const QString& name) {
                    return name.isEmpty() ? QObject::tr("none") : QObject::tr("up to %1").arg(name);
                };
                QString detail
                    = QObject::tr("one %1 GPU fits full fine-tuning %2, LoRA %3, "
                                  "QLoRA %4 (%5)")
                          .arg(card, upTo(one.full), upTo(one.lora), upTo(one.qlora), how);
                if (gpus.size() > 1) {
                    const Fit all = presetFit(smallest, int(gpus.size()), bf16);
                    detail += QObject::tr("; all %1 under zero3: full fine-tuning %2")
                                  .arg(gpus.size())
                                  .arg(upTo(all.full));
                }
                add("gpu-memory", "ok", detail);
            }
        }
    }

    // NCCL and cuDNN matter to a CUDA build or a machine with GPUs.
    if (!gpus.isEmpty() || workerCuda) {
        const bool nccl = f.linkerLibs.contains("libnccl.so.2");
        if (workerOk && (!workerNccl || !nccl))
            add("nccl", gpus.size() > 1 ? "missing" : "warn",
                !workerNccl ? QObject::tr("shard-worker was built without the NCCL backend (no "
                                          "nccl.h at configure time): GPUs cannot exchange "
                                          "gradients")
                            : QObject::tr("libnccl.so.2 is not in the linker cache: shard-worker "
                                          "finds it only through LD_LIBRARY_PATH or the PyTorch "
                                          "it was built against"),
                !workerNccl ? QObject::tr("install libnccl-dev (Debian 13) or NCCL's headers and "
                                          "rebuild shard-worker")
                            : QObject::tr("sudo apt install libnccl2 (Debian 13, non-free) or "
                                          "point LD_LIBRARY_PATH at a PyTorch wheel's "
                                          "nvidia/nccl/lib"));
        else if (workerOk)
            add("nccl", "ok", QObject::tr("NCCL backend built in, libnccl.so.2 installed"));

        const bool cudnnLib = f.linkerLibs.contains("libcudnn.so");
        const bool packageBroken
            = !f.cudnnPackage.isEmpty() && !f.cudnnPackage.startsWith("install ok installed");
        if (packageBroken || (!f.cudnnPackage.isEmpty() && !cudnnLib) || !cudnnMissingLib.isEmpty())
            add("cudnn", "missing",
                packageBroken
                    ? QObject::tr("nvidia-cudnn is half installed (dpkg: %1): its download of "
                                  "cuDNN from NVIDIA did not finish")
                          .arg(f.cudnnPackage)
                    : QObject::tr("nvidia-cudnn is installed but no libcudnn is in the linker "
                                  "cache: its download of cuDNN from NVIDIA did not finish, or "
                                  "the files were removed"),
                QObject::tr("sudo dpkg --configure -a && sudo apt-get install --reinstall "
                            "nvidia-cudnn (needs internet access to NVIDIA), or run "
                            "scripts/setup.sh again"));
        else if (!cudnnLib)
            add("cudnn", "warn",
                QObject::tr("cuDNN not installed: the engine's Llama and Qwen models do not use "
                            "it, but a CUDA LibTorch built with cuDNN needs it to load"),
                QObject::tr("sudo apt install nvidia-cudnn (Debian, contrib: it fetches cuDNN "
                            "from NVIDIA)"));
        else
            add("cudnn", "ok", QObject::tr("cuDNN installed"));
    }

    // Remote launches.
    add("ssh", f.ssh.isEmpty() ? "warn" : "ok",
        f.ssh.isEmpty()
            ? QObject::tr("no ssh client: runs cannot be launched or followed on other machines")
            : QObject::tr("%1 (SSH launches)").arg(f.ssh),
        f.ssh.isEmpty() ? QObject::tr("sudo apt install openssh-client") : QString());
    // Slurm: the version line, or what a misconfigured client says instead.
    QString slurmVersion;
    for (const QString& line : f.slurm.split('\n'))
        if (line.startsWith("slurm "))
            slurmVersion = line.trimmed();
    if (f.slurm.isEmpty())
        add("slurm", "warn",
            QObject::tr("no Slurm client here: Slurm launches go through an SSH host that has one"),
            QObject::tr("sudo apt install slurm-client, or add a login node on the Hosts page"));
    else if (slurmVersion.isEmpty())
        add("slurm", "warn",
            QObject::tr("Slurm's client is installed but does not answer: %1")
                .arg(f.slurm.section('\n', -1).trimmed()),
            QObject::tr("give it the cluster's slurm.conf (/etc/slurm/slurm.conf or SLURM_CONF), "
                        "or launch through the cluster's login node on the Hosts page"));
    else
        add("slurm", "ok", QObject::tr("%1 (sbatch launches from this machine)").arg(slurmVersion));
    return checks;
}

bool workerMissing(const QList<DoctorCheck>& checks)
{
    for (const DoctorCheck& c : checks)
        if (c.name == "shard-worker" && c.status == "missing")
            return true;
    return false;
}

Result<QList<DoctorCheck>> doctorLocal(const QString& workerProgram)
{
    QProcess p;
    p.setProcessChannelMode(QProcess::SeparateChannels);
    p.start(QStringLiteral("sh"), {QStringLiteral("-c"), doctorScript(workerProgram)});
    if (!p.waitForStarted(15000))
        return fail(QObject::tr("could not start sh for the checks: %1").arg(p.errorString()));
    if (!p.waitForFinished(60000)) {
        p.kill();
        p.waitForFinished(2000);
    }
    return diagnose(parseDoctorFacts(p.readAllStandardOutput(), workerProgram));
}

Result<QList<DoctorCheck>> doctorRemote(
    const SshClient& ssh, const SshHost& host, const QString& workerProgram)
{
    auto r = ssh.run(host, doctorScript(workerProgram), {}, 60000);
    if (!r)
        return fail(r.error());
    return diagnose(parseDoctorFacts(r->out, workerProgram));
}

QJsonArray toJson(const QList<DoctorCheck>& checks)
{
    QJsonArray out;
    for (const DoctorCheck& c : checks)
        out.append(QJsonObject {
            {"name", c.name}, {"status", c.status}, {"detail", c.detail}, {"fix", c.fix}});
    return out;
}

QString formatDoctor(const QList<DoctorCheck>& checks)
{
    QString text;
    for (const DoctorCheck& c : checks) {
        const QString mark = c.status == "ok" ? QStringLiteral("ok     ")
            : c.status == "warn"              ? QStringLiteral("note   ")
                                              : QStringLiteral("MISSING");
        text += QStringLiteral("%1 %2 %3\n").arg(mark, c.name.leftJustified(14), c.detail);
        if (!c.fix.isEmpty())
            text += QStringLiteral("        %1 fix: %2\n").arg(QString().leftJustified(14), c.fix);
    }
    return text;
}

} // namespace shard::jobs
