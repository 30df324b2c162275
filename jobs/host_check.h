// What checking a host found: the worker answering there, and the GPUs `nvidia-smi` lists, so
// the studio can plan for the cards a host has (the Hosts page's Test, Launcher::checkHost).
#pragma once

#include <QByteArray>
#include <QList>
#include <QString>

namespace shard::jobs {

struct GpuInfo {
    QString name;         // as nvidia-smi names it: "NVIDIA H200"
    double memoryMiB = 0; // memory.total; 0 when unknown
};

struct HostCheck {
    QString answer;      // the worker's `--version` line (a Slurm check: its partitions)
    QList<GpuInfo> gpus; // none: no NVIDIA driver there (a CPU host), or a Slurm login node

    // "shard-worker 0.1.0 (...); 8 GPUs: NVIDIA H200, 140 GiB each" (or "; no NVIDIA GPU").
    QString summary() const;
};

// The shell command that lists a host's GPUs, one "name, memory MiB" line each; prints nothing
// and succeeds where nvidia-smi is missing.
QString gpuQueryScript();
// Its output read back; lines that are not "name, N MiB" are passed over.
QList<GpuInfo> parseGpuList(const QByteArray& output);
// This machine's GPUs (nvidia-smi on PATH), or none.
QList<GpuInfo> localGpus();

} // namespace shard::jobs
