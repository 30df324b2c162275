// What a machine can train with, and for each missing piece the command that fixes it: the
// checks of `shard doctor` and of the Hosts page's Doctor panel, for this machine or an SSH host.
//
// One shell script (doctorScript) gathers the facts wherever it runs (locally through sh, on a
// host through jobs::SshClient): the system, the worker's `--version`, the NVIDIA driver and
// `nvidia-smi`'s GPUs, NCCL and cuDNN in the linker cache and dpkg's state of nvidia-cudnn, and
// the SSH and Slurm clients. diagnose() judges them, so a host is judged exactly as this machine.
// The script and the judgement are plan/doctor.h's (Qt-free: `shard-worker doctor` prints the
// same checks on a node without the studio); these are them in Qt's types.
#pragma once

#include <QByteArray>
#include <QJsonArray>
#include <QList>
#include <QString>

#include "jobs/result.h"

namespace shard::jobs {

class SshClient;
struct SshHost;

struct DoctorCheck {
    QString name; // system, shard-worker, gpu, driver, cuda-libtorch, gpu-memory, nccl, cudnn, ...
    QString status; // ok, warn (works, with less), missing (something a run needs)
    QString detail;
    QString fix; // the command or step that fixes it; empty when there is nothing to do
};

// What doctorScript printed, section by section (nothing judged yet).
struct DoctorFacts {
    QString os; // PRETTY_NAME of /etc/os-release
    int cores = 0;
    double ramGiB = 0;
    QString workerProgram; // what was asked for
    QString workerPath;    // where it was found; empty: not found
    int workerExit = -1;   // its `--version` exit status
    QString workerVersion; // its `--version` output (stdout and stderr)
    QString driverProc;    // first line of /proc/driver/nvidia/version; empty: no driver
    bool smiFound = false; // nvidia-smi on the PATH
    int smiExit = -1;      // its exit status
    QString smiOutput;     // name, memory.total, compute_cap, driver_version per GPU
    QString linkerLibs;    // `ldconfig -p` lines naming libnccl, libcudnn or libcuda
    QString cudnnPackage;  // dpkg's "Status Version" of nvidia-cudnn; empty: not installed
    QString ssh;           // `ssh -V`; empty: no client
    QString slurm;         // `sinfo --version` (stdout and stderr); empty: no client
    bool complete = false; // the script ran to its end
};

// The POSIX shell script that prints the facts (its worker: a path or a name on the PATH).
QString doctorScript(const QString& workerProgram);
DoctorFacts parseDoctorFacts(const QByteArray& output, const QString& workerProgram);

// The checks, in the order `shard doctor` prints them.
QList<DoctorCheck> diagnose(const DoctorFacts& facts);
// True when something a run needs is missing (the worker itself).
bool workerMissing(const QList<DoctorCheck>& checks);

// This machine: the script through sh (blocking, up to ~1 min when tools hang).
Result<QList<DoctorCheck>> doctorLocal(const QString& workerProgram);
// An SSH host: the same script there (blocking; ssh-level failures in SshClient's words).
Result<QList<DoctorCheck>> doctorRemote(
    const SshClient& ssh, const SshHost& host, const QString& workerProgram);

// {"checks": [{name, status, detail, fix}]} as `shard doctor --json` prints it.
QJsonArray toJson(const QList<DoctorCheck>& checks);
// The text `shard doctor` prints: one line a check, an indented "fix:" line under it.
QString formatDoctor(const QList<DoctorCheck>& checks);

} // namespace shard::jobs
