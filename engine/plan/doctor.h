// What a machine can train with, and for each missing piece the command that fixes it: the
// checks behind `shard doctor`, the Hosts page's Doctor panel (jobs/doctor.h wraps them for Qt)
// and `shard-worker doctor` (a node with the worker alone: a cluster's compute node, a GPU
// machine without Qt). No Qt, no Torch.
//
// One shell script (script()) gathers the facts wherever it runs (locally through sh, on a host
// through SSH): the system, the worker's `--version`, the NVIDIA driver and `nvidia-smi`'s GPUs,
// NCCL and cuDNN in the linker cache and dpkg's state of nvidia-cudnn, and the SSH and Slurm
// clients. diagnose() judges them, so a host is judged exactly as this machine; what fits on its
// GPUs is the planner's answer.
#pragma once

#include <string>
#include <vector>

namespace shard::doctor {

struct Check {
    std::string name;   // system, shard-worker, gpu, driver, cuda-libtorch, gpu-memory, nccl, ...
    std::string status; // ok, warn (works, with less), missing (something a run needs)
    std::string detail;
    std::string fix; // the command or step that fixes it; empty when there is nothing to do
};

// What script() printed, section by section (nothing judged yet).
struct Facts {
    std::string os; // PRETTY_NAME of /etc/os-release
    int cores = 0;
    double ramGiB = 0;
    std::string workerProgram; // what was asked for
    std::string workerPath;    // where it was found; empty: not found
    int workerExit = -1;       // its `--version` exit status
    std::string workerVersion; // its `--version` output (stdout and stderr)
    std::string driverProc;    // first line of /proc/driver/nvidia/version; empty: no driver
    bool smiFound = false;     // nvidia-smi on the PATH
    int smiExit = -1;          // its exit status
    std::string smiOutput;     // name, memory.total, compute_cap, driver_version per GPU
    std::string linkerLibs;    // `ldconfig -p` lines naming libnccl, libcudnn or libcuda
    std::string cudnnPackage;  // dpkg's "Status Version" of nvidia-cudnn; empty: not installed
    std::string ssh;           // `ssh -V`; empty: no client
    std::string slurm;         // `sinfo --version` (stdout and stderr); empty: no client
    bool complete = false;     // the script ran to its end
};

// The POSIX shell script that prints the facts (its worker: a path or a name on the PATH).
std::string script(const std::string& workerProgram);
Facts parseFacts(const std::string& output, const std::string& workerProgram);

// The checks, in the order `shard doctor` prints them.
std::vector<Check> diagnose(const Facts& facts);
// True when something a run needs is missing (the worker itself).
bool workerMissing(const std::vector<Check>& checks);

// This machine: the script through sh (blocking; a hung tool makes the facts partial, which
// diagnose() says). Throws std::runtime_error when sh cannot be started.
std::vector<Check> runLocal(const std::string& workerProgram);

// {"checks": [{name, status, detail, fix}]} as `shard doctor --json` prints it (indented).
std::string toJson(const std::vector<Check>& checks);
// The text `shard doctor` prints: one line a check, an indented "fix:" line under it.
std::string format(const std::vector<Check>& checks);

} // namespace shard::doctor
