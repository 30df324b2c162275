// What a machine can train with, and for each missing piece the command that fixes it: the
// checks of `shard doctor` and of the Hosts page's Doctor panel, for this machine or an SSH host.
//
// One shell script (doctorScript) gathers the facts wherever it runs (locally through sh, on a
// host through jobs::SshClient): the system, the worker's `--version`, the NVIDIA driver and
// `nvidia-smi`'s GPUs, NCCL and cuDNN in the linker cache and dpkg's state of nvidia-cudnn, and
// the SSH and Slurm clients. diagnoseFacts() judges them, so a host is judged exactly as this
// machine.
// The script and the judgement are plan/doctor.h's (Qt-free: `shard-worker doctor` prints the
// same checks on a node without the studio); these are them in Qt's types.
#pragma once

#include <QByteArray>
#include <QList>
#include <QString>

#include "jobs/result.h"
#include "plan/doctor.h"

namespace shard::jobs {

class SshClient;
struct SshHost;

struct DoctorCheck {
    QString name; // system, shard-worker, gpu, driver, cuda-libtorch, gpu-memory, nccl, cudnn, ...
    QString status; // ok, warn (works, with less), missing (something a run needs)
    QString detail;
    QString fix; // the command or step that fixes it; empty when there is nothing to do
};

// What doctorScript printed, section by section (nothing judged yet): plan/doctor.h's facts.
using DoctorFacts = doctor::Facts;

// The POSIX shell script that prints the facts (its worker: a path or a name on the PATH).
QString doctorScript(const QString& workerProgram);
DoctorFacts parseDoctorFacts(const QByteArray& output, const QString& workerProgram);

// The checks, in the order `shard doctor` prints them (doctor::diagnose in Qt's types).
QList<DoctorCheck> diagnoseFacts(const DoctorFacts& facts);
// True when something a run needs is missing (the worker itself).
bool workerMissing(const QList<DoctorCheck>& checks);

// This machine: the script through sh (blocking, up to ~1 min when tools hang).
Result<QList<DoctorCheck>> doctorLocal(const QString& workerProgram);
// An SSH host: the same script there (blocking; ssh-level failures in SshClient's words).
Result<QList<DoctorCheck>> doctorRemote(
    const SshClient& ssh, const SshHost& host, const QString& workerProgram);

// {"checks": [{name, status, detail, fix}]} as `shard doctor --json` prints it (doctor::toJson,
// as `shard-worker doctor --json` does).
std::string doctorJson(const QList<DoctorCheck>& checks);
// The text `shard doctor` prints: one line a check, an indented "fix:" line under it.
QString formatDoctor(const QList<DoctorCheck>& checks);

} // namespace shard::jobs
