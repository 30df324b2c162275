// Host checks' GPU listing (see host_check.h).
#include "jobs/host_check.h"

#include <QObject>
#include <QProcess>
#include <QRegularExpression>
#include <QStandardPaths>

#include "jobs/format_bytes.h"

namespace shard::jobs {

QString HostCheck::summary() const
{
    if (gpus.isEmpty())
        return answer + QObject::tr("; no NVIDIA GPU (nvidia-smi found none)");
    const GpuInfo& first = gpus.front();
    bool same = true;
    for (const GpuInfo& g : gpus)
        same = same && g.name == first.name;
    const QString memory = first.memoryMiB > 0
        ? QObject::tr(", %1 each").arg(formatBytes(first.memoryMiB * 1024.0 * 1024.0))
        : QString();
    const QString count
        = gpus.size() == 1 ? QObject::tr("1 GPU") : QObject::tr("%1 GPUs").arg(gpus.size());
    if (same)
        return answer + QStringLiteral("; %1: %2%3").arg(count, first.name, memory);
    QStringList names;
    for (const GpuInfo& g : gpus)
        names << g.name;
    return answer + QStringLiteral("; %1: %2").arg(count, names.join(", "));
}

QString gpuQueryScript()
{
    return QStringLiteral("nvidia-smi --query-gpu=name,memory.total --format=csv,noheader "
                          "2>/dev/null || true");
}

QList<GpuInfo> parseGpuList(const QByteArray& output)
{
    static const QRegularExpression line(QStringLiteral("^\\s*(.+?)\\s*,\\s*(\\d+)\\s*MiB\\s*$"));
    QList<GpuInfo> gpus;
    for (const QByteArray& raw : output.split('\n')) {
        const auto m = line.match(QString::fromUtf8(raw));
        if (m.hasMatch())
            gpus.append({m.captured(1), m.captured(2).toDouble()});
    }
    return gpus;
}

QList<GpuInfo> localGpus()
{
    if (QStandardPaths::findExecutable(QStringLiteral("nvidia-smi")).isEmpty())
        return {};
    QProcess p;
    p.start(QStringLiteral("sh"), {QStringLiteral("-c"), gpuQueryScript()});
    if (!p.waitForFinished(15000)) {
        p.kill();
        p.waitForFinished(2000);
        return {};
    }
    return parseGpuList(p.readAllStandardOutput());
}

} // namespace shard::jobs
