// The doctor's facts and their judgement (see doctor.h).
#include "plan/doctor.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <sstream>
#include <stdexcept>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "plan/model_spec.h"
#include "plan/planner.h"
#include "protocol/cuda_driver.h"

namespace shard::doctor {

namespace {

// The Debian 13 commands of the GPU build (scripts/setup.sh with the detection forced).
const char* const kGpuSetup
    = "on Debian 13: SHARD_GPU=1 bash scripts/setup.sh (CUDA LibTorch, toolkit, NCCL, cuDNN), "
      "then rebuild; elsewhere a PyTorch wheel's LibTorch (README, \"The engine on a cluster\")";

std::string trim(const std::string& s)
{
    const auto b = s.find_first_not_of(" \t\r\n");
    if (b == std::string::npos)
        return {};
    return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

std::vector<std::string> lines(const std::string& text)
{
    std::vector<std::string> out;
    std::string::size_type at = 0;
    while (true) {
        const auto nl = text.find('\n', at);
        out.push_back(text.substr(at, nl == std::string::npos ? std::string::npos : nl - at));
        if (nl == std::string::npos)
            return out;
        at = nl + 1;
    }
}

std::string firstLine(const std::string& text)
{
    return lines(text).front();
}
std::string lastLine(const std::string& text)
{
    return lines(text).back();
}

bool contains(const std::string& s, const std::string& what)
{
    return s.find(what) != std::string::npos;
}
bool startsWith(const std::string& s, const std::string& prefix)
{
    return s.rfind(prefix, 0) == 0;
}

int toInt(const std::string& s)
{
    try {
        return std::stoi(trim(s));
    } catch (const std::exception&) {
        return 0;
    }
}

std::string fixed(double v, int decimals)
{
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
    return buf;
}

std::string shellQuote(const std::string& s)
{
    std::string out = "'";
    for (char c : s)
        out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

struct Gpu {
    std::string name;
    double memoryMiB = 0;
    std::string computeCap; // "9.0"; empty when unknown
    std::string driver;
};

std::vector<Gpu> parseGpus(const std::string& smiOutput)
{
    // "NVIDIA H200, 143771 MiB, 9.0, 550.54.15" (older drivers answer [N/A] for compute_cap).
    static const std::regex row(R"(^\s*(.+?)\s*,\s*(\d+)\s*MiB\s*,\s*([^,]*?)\s*,\s*(\S+)\s*$)");
    static const std::regex cap(R"(^\d+\.\d+$)");
    std::vector<Gpu> gpus;
    for (const std::string& line : lines(smiOutput)) {
        std::smatch m;
        if (!std::regex_match(line, m, row))
            continue;
        std::string c = m[3].str();
        if (!std::regex_match(c, cap))
            c.clear();
        gpus.push_back({m[1].str(), std::stod(m[2].str()), c, m[4].str()});
    }
    return gpus;
}

// The planner's answer to "what fits on these GPUs": per method, the largest preset (by
// parameters) that trains at 2048 tokens, micro-batch 1, full activation checkpointing, zero3
// over `gpus` cards of `memoryMiB` each. Empty names where none fits.
struct Fit {
    std::string full, lora, qlora;
    std::string smallest; // the smallest preset the studio offers a GPU (not a tiny test model)
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
    fit.smallest = models.front().name;
    {
        const plan::PlanResult r = planFor(models.front(), plan::Method::Qlora, 1);
        fit.smallestQloraGiB = double(r.perDevice.total()) / double(1ull << 30);
    }
    for (const plan::ModelSpec& m : models) {
        if (planFor(m, plan::Method::Full, gpus).fits)
            fit.full = m.name;
        if (planFor(m, plan::Method::Lora, gpus).fits)
            fit.lora = m.name;
        if (planFor(m, plan::Method::Qlora, gpus).fits)
            fit.qlora = m.name;
    }
    return fit;
}

} // namespace

std::string script(const std::string& workerProgram)
{
    // Sections start with "@@name" lines; every command's failure is a fact, not an error.
    return "w=" + shellQuote(workerProgram)
        + "\n"
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
          "echo @@end\n";
}

Facts parseFacts(const std::string& output, const std::string& workerProgram)
{
    Facts f;
    f.workerProgram = workerProgram;
    std::string section;
    std::string body;
    bool workerRan = false;
    const auto close = [&] {
        const std::string text = trim(body);
        if (section == "os")
            f.os = text;
        else if (section == "cores")
            f.cores = toInt(text);
        else if (section == "mem-kib")
            f.ramGiB = std::atof(text.c_str()) / (1024.0 * 1024.0);
        else if (section == "worker-path")
            f.workerPath = text;
        else if (section == "worker") {
            f.workerVersion = text;
            workerRan = true;
        } else if (section == "worker-exit")
            f.workerExit = toInt(text);
        else if (section == "driver")
            f.driverProc = text;
        else if (section == "smi") {
            f.smiFound = true;
            f.smiOutput = text;
        } else if (section == "smi-exit")
            f.smiExit = toInt(text);
        else if (section == "libs")
            f.linkerLibs = text;
        else if (section == "cudnn-package")
            f.cudnnPackage = text;
        else if (section == "ssh")
            f.ssh = firstLine(text);
        else if (section == "slurm")
            f.slurm = text;
        body.clear();
    };
    for (const std::string& line : lines(output)) {
        if (startsWith(line, "@@")) {
            close();
            section = trim(line.substr(2));
            if (section == "end")
                f.complete = true;
            continue;
        }
        body += line + "\n";
    }
    close();
    if (!workerRan)
        f.workerExit = -1;
    return f;
}

std::vector<Check> diagnose(const Facts& f)
{
    std::vector<Check> checks;
    const auto add = [&checks](const std::string& name, const std::string& status,
                         const std::string& detail, const std::string& fix = {}) {
        checks.push_back({name, status, detail, fix});
    };
    if (!f.complete)
        add("doctor", "warn",
            "the checks stopped before their end (a command hung or the connection dropped): "
            "what follows may be partial",
            "run `shard doctor` again on that machine");

    // The system.
    add("system", "ok",
        (f.os.empty() ? std::string("unknown Linux") : f.os) + ", " + std::to_string(f.cores)
            + " CPU cores, " + fixed(f.ramGiB, 1)
            + " GiB RAM (CPU ranks and offloaded state live here)");

    // shard-worker and its LibTorch (the dynamic loader may warn before their lines).
    std::string workerFirst = firstLine(f.workerVersion);
    std::string libtorch;
    for (const std::string& line : lines(f.workerVersion)) {
        if (startsWith(line, "LibTorch"))
            libtorch = line;
        if (startsWith(line, "shard-worker "))
            workerFirst = line;
    }
    const bool workerOk = !f.workerPath.empty() && f.workerExit == 0;
    std::smatch cudaMatch;
    static const std::regex cudaRe(R"(built with CUDA (\d+)\.(\d+))");
    const bool workerCuda = workerOk && std::regex_search(libtorch, cudaMatch, cudaRe);
    const bool workerNccl = workerOk && contains(libtorch, "NCCL backend on");
    std::string cudnnMissingLib;
    {
        static const std::regex re(R"((libcudnn[^:\s]*): cannot open)");
        std::smatch m;
        if (std::regex_search(f.workerVersion, m, re))
            cudnnMissingLib = m[1].str();
    }
    if (f.workerPath.empty()) {
        add("shard-worker", "missing",
            "'" + f.workerProgram + "' not found ($SHARD_WORKER, next to shard, or on the PATH)",
            "build it (cmake --build build/release --target shard-worker) or install the "
            "shard-studio package; or set SHARD_WORKER=/path/to/shard-worker");
    } else if (!workerOk) {
        std::string why = trim(lastLine(f.workerVersion));
        if (why.empty())
            why = "no output";
        std::string fix = "rebuild it (cmake --build build/release --target shard-worker) or "
                          "reinstall the shard-studio package";
        if (!cudnnMissingLib.empty())
            fix = "cuDNN is half installed: its CUDA LibTorch cannot load without "
                + cudnnMissingLib
                + ". sudo apt-get install --reinstall nvidia-cudnn (it downloads cuDNN from "
                  "NVIDIA: needs internet access), then run this again";
        else if (contains(f.workerVersion, "cannot open shared object file"))
            fix = "a library it was built against is gone (a package removed or switched "
                  "between the CPU and CUDA builds): bash scripts/setup.sh, then rebuild";
        add("shard-worker", "missing",
            "found at " + f.workerPath + " but `--version` failed (exit "
                + std::to_string(f.workerExit) + "): " + why,
            fix);
    } else {
        add("shard-worker", "ok",
            f.workerPath + ": " + workerFirst + (libtorch.empty() ? "" : "; " + libtorch));
    }

    // The NVIDIA driver and GPUs.
    const std::vector<Gpu> gpus = parseGpus(f.smiOutput);
    std::string driver = gpus.empty() ? std::string() : gpus.front().driver;
    if (driver.empty())
        driver = protocol::driverVersionFromProc(f.driverProc);
    const bool driverLoaded = !f.driverProc.empty();
    if (gpus.empty()) {
        if (f.smiFound && f.smiExit != 0) {
            add("gpu", "missing",
                "nvidia-smi failed (exit " + std::to_string(f.smiExit)
                    + "): " + trim(firstLine(f.smiOutput)),
                contains(f.smiOutput, "version mismatch")
                    ? "the driver's kernel module and its libraries differ (a driver upgrade "
                      "without a reboot): reboot, or reload the nvidia modules"
                    : "check `nvidia-smi`: the driver is not running (install nvidia-driver "
                      "from Debian's non-free and reboot)");
        } else if (driverLoaded) {
            add("gpu", "warn",
                "an NVIDIA driver is loaded (" + (driver.empty() ? f.driverProc : driver)
                    + ") but nvidia-smi lists no GPU",
                "check `nvidia-smi` (a driver older than the GPU, a missing nvidia-smi, or a "
                "container without the device)");
        } else {
            add("gpu", "ok",
                workerCuda ? "no NVIDIA driver: runs train on the CPU (this CUDA build's "
                             "--device auto falls back to it; Gloo between ranks)"
                           : "no NVIDIA driver: runs train on the CPU (Gloo between ranks), "
                             "which suits small models and trying the studio");
        }
    } else {
        // Alike cards once, with their count: "8 × NVIDIA H200 (140.4 GiB, ...)".
        std::vector<std::string> kinds;
        std::vector<int> counts;
        for (const Gpu& g : gpus) {
            const std::string kind = g.name + " ("
                + plan::formatBytesShort(g.memoryMiB * 1024.0 * 1024.0)
                + (g.computeCap.empty() ? "" : ", compute capability " + g.computeCap) + ")";
            const auto at = std::find(kinds.begin(), kinds.end(), kind);
            if (at != kinds.end()) {
                ++counts[size_t(at - kinds.begin())];
            } else {
                kinds.push_back(kind);
                counts.push_back(1);
            }
        }
        std::string list;
        for (size_t i = 0; i < kinds.size(); ++i)
            list += (i ? "; " : "")
                + (counts[i] > 1 ? std::to_string(counts[i]) + " × " + kinds[i] : kinds[i]);
        add("gpu", "ok",
            std::to_string(gpus.size()) + (gpus.size() == 1 ? " GPU" : " GPUs") + ", driver "
                + driver + ": " + list);
    }

    // The driver against the CUDA the worker was built with.
    if (workerCuda && !driver.empty()) {
        const int major = std::stoi(cudaMatch[1].str());
        const std::string minor = cudaMatch[2].str();
        const std::string needed = protocol::minimumDriverForCuda(major);
        if (!needed.empty() && protocol::compareDottedVersions(driver, needed) < 0)
            add("driver", "missing",
                "driver " + driver + " is older than CUDA " + std::to_string(major) + "'s minimum, "
                    + needed + ": shard-worker (built with CUDA " + std::to_string(major) + "."
                    + minor + ") cannot start on these GPUs, and --device auto trains on the CPU",
                "install a driver of " + needed
                    + " or newer (Debian 13: sudo apt install nvidia-driver from non-free), "
                      "then reboot");
        else if (!needed.empty())
            add("driver", "ok",
                "driver " + driver + " runs CUDA " + std::to_string(major) + " (needs " + needed
                    + " or newer)");
    }

    if (!gpus.empty()) {
        if (workerOk && !workerCuda)
            add("cuda-libtorch", "missing",
                "this machine has GPUs but shard-worker was built against a CPU-only LibTorch, "
                "so it cannot use them",
                kGpuSetup);

        // Compute capability: bf16 needs Ampere.
        std::string oldest;
        for (const Gpu& g : gpus)
            if (!g.computeCap.empty()
                && (oldest.empty() || protocol::compareDottedVersions(g.computeCap, oldest) < 0))
                oldest = g.computeCap;
        const bool bf16 = oldest.empty() || protocol::compareDottedVersions(oldest, "8.0") >= 0;
        if (!bf16)
            add("precision", "warn",
                "compute capability " + oldest
                    + ": bf16-mixed needs 8.0 (Ampere) or newer, so these GPUs train in fp32 "
                      "(twice the activation memory)",
                "choose fp32 on the Plan and Launch pages");

        // Memory: what the planner fits on them.
        double smallest = gpus.front().memoryMiB;
        for (const Gpu& g : gpus)
            smallest = std::min(smallest, g.memoryMiB);
        if (smallest > 0) {
            const Fit one = presetFit(smallest, 1, bf16);
            const std::string card = plan::formatBytesShort(smallest * 1024.0 * 1024.0);
            const std::string how = std::string("2048 tokens, micro-batch 1, full checkpointing, ")
                + (bf16 ? "bf16-mixed" : "fp32");
            const std::string n = std::to_string(gpus.size());
            if (one.qlora.empty()) {
                add("gpu-memory", "warn",
                    card + " a GPU is too little for any preset model on one GPU: the smallest, "
                        + one.smallest + ", needs " + fixed(one.smallestQloraGiB, 1)
                        + " GiB with QLoRA (" + how + ")",
                    gpus.size() > 1 ? "shard the model over the " + n
                            + " GPUs (zero3; the Plan page shows what fits), or train on the "
                              "CPU (--device cpu)"
                                    : std::string("train on the CPU (--device cpu), or on a host "
                                                  "with more GPU memory"));
            } else {
                const auto upTo = [](const std::string& name) {
                    return name.empty() ? std::string("none") : "up to " + name;
                };
                std::string detail = "one " + card + " GPU fits full fine-tuning " + upTo(one.full)
                    + ", LoRA " + upTo(one.lora) + ", QLoRA " + upTo(one.qlora) + " (" + how + ")";
                if (gpus.size() > 1) {
                    const Fit all = presetFit(smallest, int(gpus.size()), bf16);
                    detail += "; all " + n + " under zero3: full fine-tuning " + upTo(all.full);
                }
                add("gpu-memory", "ok", detail);
            }
        }
    }

    // NCCL and cuDNN matter to a CUDA build or a machine with GPUs.
    if (!gpus.empty() || workerCuda) {
        const bool nccl = contains(f.linkerLibs, "libnccl.so.2");
        if (workerOk && (!workerNccl || !nccl))
            add("nccl", gpus.size() > 1 ? "missing" : "warn",
                !workerNccl ? "shard-worker was built without the NCCL backend (no nccl.h at "
                              "configure time): GPUs cannot exchange gradients"
                            : "libnccl.so.2 is not in the linker cache: shard-worker finds it "
                              "only through LD_LIBRARY_PATH or the PyTorch it was built against",
                !workerNccl ? "install libnccl-dev (Debian 13) or NCCL's headers and rebuild "
                              "shard-worker"
                            : "sudo apt install libnccl2 (Debian 13, non-free) or point "
                              "LD_LIBRARY_PATH at a PyTorch wheel's nvidia/nccl/lib");
        else if (workerOk)
            add("nccl", "ok", "NCCL backend built in, libnccl.so.2 installed");

        const bool cudnnLib = contains(f.linkerLibs, "libcudnn.so");
        const bool packageBroken
            = !f.cudnnPackage.empty() && !startsWith(f.cudnnPackage, "install ok installed");
        if (packageBroken || (!f.cudnnPackage.empty() && !cudnnLib) || !cudnnMissingLib.empty())
            add("cudnn", "missing",
                packageBroken ? "nvidia-cudnn is half installed (dpkg: " + f.cudnnPackage
                        + "): its download of cuDNN from NVIDIA did not finish"
                              : std::string("nvidia-cudnn is installed but no libcudnn is in the "
                                            "linker cache: its download of cuDNN from NVIDIA "
                                            "did not finish, or the files were removed"),
                "sudo dpkg --configure -a && sudo apt-get install --reinstall nvidia-cudnn "
                "(needs internet access to NVIDIA), or run scripts/setup.sh again");
        else if (!cudnnLib)
            add("cudnn", "warn",
                "cuDNN not installed: the engine's Llama and Qwen models do not use it, but a "
                "CUDA LibTorch built with cuDNN needs it to load",
                "sudo apt install nvidia-cudnn (Debian, contrib: it fetches cuDNN from NVIDIA)");
        else
            add("cudnn", "ok", "cuDNN installed");
    }

    // Remote launches.
    if (f.ssh.empty())
        add("ssh", "warn", "no ssh client: runs cannot be launched or followed on other machines",
            "sudo apt install openssh-client");
    else
        add("ssh", "ok", f.ssh + " (SSH launches)");
    // Slurm: the version line, or what a misconfigured client says instead.
    std::string slurmVersion;
    for (const std::string& line : lines(f.slurm))
        if (startsWith(line, "slurm "))
            slurmVersion = trim(line);
    if (f.slurm.empty())
        add("slurm", "warn",
            "no Slurm client here: Slurm launches go through an SSH host that has one",
            "sudo apt install slurm-client, or add a login node on the Hosts page");
    else if (slurmVersion.empty())
        add("slurm", "warn",
            "Slurm's client is installed but does not answer: " + trim(lastLine(f.slurm)),
            "give it the cluster's slurm.conf (/etc/slurm/slurm.conf or SLURM_CONF), or launch "
            "through the cluster's login node on the Hosts page");
    else
        add("slurm", "ok", slurmVersion + " (sbatch launches from this machine)");
    return checks;
}

bool workerMissing(const std::vector<Check>& checks)
{
    for (const Check& c : checks)
        if (c.name == "shard-worker" && c.status == "missing")
            return true;
    return false;
}

std::vector<Check> runLocal(const std::string& workerProgram)
{
    // The script from a file (popen's command line would need it quoted whole); a minute at most
    // where coreutils' timeout is there (a hung nvidia-smi leaves the facts partial, said so).
    char path[] = "/tmp/shard-doctor-XXXXXX";
    const int fd = ::mkstemp(path);
    if (fd < 0)
        throw std::runtime_error("doctor: cannot write its script to /tmp");
    const std::string text = script(workerProgram);
    const bool written = ::write(fd, text.data(), text.size()) == ssize_t(text.size());
    ::close(fd);
    if (!written) {
        ::unlink(path);
        throw std::runtime_error("doctor: cannot write its script to /tmp (disk full?)");
    }
    const std::string command = std::string("if command -v timeout >/dev/null 2>&1; then "
                                            "timeout 60 sh ")
        + path + "; else sh " + path + "; fi";
    FILE* p = ::popen(command.c_str(), "r");
    if (!p) {
        ::unlink(path);
        throw std::runtime_error("doctor: could not start sh for the checks");
    }
    std::string output;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0)
        output.append(buf, n);
    ::pclose(p);
    ::unlink(path);
    return diagnose(parseFacts(output, workerProgram));
}

std::string toJson(const std::vector<Check>& checks)
{
    nlohmann::json out = nlohmann::json::array();
    for (const Check& c : checks)
        out.push_back(
            {{"name", c.name}, {"status", c.status}, {"detail", c.detail}, {"fix", c.fix}});
    return nlohmann::json {{"checks", out}}.dump(4);
}

std::string format(const std::vector<Check>& checks)
{
    std::string text;
    const auto pad = [](std::string s, size_t width) {
        if (s.size() < width)
            s.append(width - s.size(), ' ');
        return s;
    };
    for (const Check& c : checks) {
        const char* mark = c.status == "ok" ? "ok     "
            : c.status == "warn"            ? "note   "
                                            : "MISSING";
        text += std::string(mark) + " " + pad(c.name, 14) + " " + c.detail + "\n";
        if (!c.fix.empty())
            text += "        " + pad("", 14) + " fix: " + c.fix + "\n";
    }
    return text;
}

} // namespace shard::doctor
