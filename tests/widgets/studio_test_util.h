// Shared by the studio's end-to-end tests: the real shard-worker of this build, a tiny seeded
// model, a learnable pre-tokenized copy task, and settings kept inside the test's folder.
#pragma once

#include <algorithm>
#include <string>

#include <QComboBox>
#include <QCoreApplication>
#include <QFile>
#include <QFileInfo>
#include <QProcess>
#include <QSettings>
#include <QString>
#include <QStringList>
#include <QTest>
#include <QWidget>

namespace shard::test {

// The worker of this build tree, or $SHARD_WORKER; it must have both `launch` and `train`.
inline QString findWorker()
{
    QString w = qEnvironmentVariable("SHARD_WORKER");
    if (w.isEmpty())
        w = QStringLiteral(SHARD_BINARY_DIR "/engine/worker/shard-worker");
    if (!QFileInfo(w).isExecutable())
        return {};
    QProcess p;
    p.start(w, {"--help"});
    if (!p.waitForFinished(20000))
        return {};
    const QByteArray help = p.readAllStandardOutput();
    return help.contains(" launch") && help.contains(" train") ? w : QString();
}

// The page's child widget of that object name and type; the test stops when it is missing.
template<class T> T* field(QWidget& page, const char* name)
{
    auto* w = page.findChild<T*>(name);
    if (!w)
        qFatal("no field %s", name);
    return w;
}

// Selects the entry whose data is `data` (a failed check when there is none).
inline void selectData(QComboBox* box, const QString& data)
{
    const int i = box->findData(data);
    QVERIFY2(i >= 0, qPrintable(data));
    box->setCurrentIndex(i);
}

// QSettings of the window under test go to `dir`, never to the user's.
inline void isolateSettings(const QString& dir)
{
    QCoreApplication::setOrganizationName("ShardStudioTest");
    QSettings::setDefaultFormat(QSettings::IniFormat);
    QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, dir);
}

// `shard-worker init-model --preset tiny-1m --seed 1`; returns an error or empty.
inline QString initTinyModel(const QString& worker, const QString& out)
{
    QProcess init;
    init.start(worker, {"init-model", "--preset", "tiny-1m", "--out", out, "--seed", "1"});
    if (!init.waitForFinished(60000))
        return QStringLiteral("init-model did not finish");
    if (init.exitStatus() != QProcess::NormalExit || init.exitCode() != 0)
        return QString::fromUtf8(init.readAllStandardError());
    return {};
}

// `rows` lines of {"input_ids": [1, x1..x12, 2, x1..x12]} from a fixed LCG; false if unwritable.
inline bool writeCopyTask(const QString& path, int rows)
{
    QFile data(path);
    if (!data.open(QIODevice::WriteOnly))
        return false;
    uint32_t rng = 7;
    for (int i = 0; i < rows; ++i) {
        QStringList half;
        for (int k = 0; k < 12; ++k) {
            rng = rng * 1664525u + 1013904223u;
            half << QString::number(10 + (rng >> 16) % 100);
        }
        const QByteArray h = half.join(", ").toUtf8();
        data.write("{\"input_ids\": [1, " + h + ", 2, " + h + "]}\n");
    }
    return data.error() == QFileDevice::NoError;
}

// Everything an end-to-end test needs in `dir`: the worker for the studio ($SHARD_WORKER),
// settings kept there, a tiny model in dir/model and `rows` of the copy task in dir/copy.jsonl.
// Returns an error or empty.
inline QString setUpTinyTask(const QString& dir, const QString& worker, int rows)
{
    qputenv("SHARD_WORKER", worker.toUtf8());
    isolateSettings(dir + "/settings");
    const QString error = initTinyModel(worker, dir + "/model");
    if (!error.isEmpty())
        return error;
    if (!writeCopyTask(dir + "/copy.jsonl", rows))
        return QStringLiteral("cannot write %1/copy.jsonl").arg(dir);
    return {};
}

// `worker train` on setUpTinyTask's model and copy task (in `dir`) into `run`, with `args`
// added; returns an error (the worker's stderr) or empty.
inline QString trainTinyRun(
    const QString& worker, const QString& dir, const QString& run, const QStringList& args)
{
    QProcess train;
    train.start(worker,
        QStringList {"train", "--model", dir + "/model", "--data", dir + "/copy.jsonl"} + args
            + QStringList {"--out", run});
    if (!train.waitForFinished(120000))
        return QStringLiteral("training %1 did not finish").arg(run);
    if (train.exitStatus() != QProcess::NormalExit || train.exitCode() != 0)
        return QString::fromUtf8(train.readAllStandardError());
    return {};
}

// The highest step of a `kind` event in `events`, or -1 when there is none.
template<typename Events> qint64 lastEventStep(const Events& events, const std::string& kind)
{
    qint64 step = -1;
    for (const auto& e : events)
        if (e.kind == kind)
            step = std::max<qint64>(step, e.step);
    return step;
}

} // namespace shard::test
