// `shard runs import`: the fixtures other tools wrote (../shared/fixtures) become runs with the
// right tool, tags and points (each tag's stored series equals the independently decoded
// scalars, one point per step where a file repeats a step: the later wall time wins), known
// tags fill the metric columns, trainer_state.json's log_history, importing again updates without
// duplicating, a restarted job's two files merge, an engine run's folder is not imported over,
// and bad input is refused with its name; the CLI prints the new run ids. The engine's own
// event files (shard-worker train) hold what metrics.jsonl holds, read by this reader and by a
// Python reader written here on Debian's python3-protobuf.
#include <cmath>
#include <map>

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>

#include "jobs/launcher.h"
#include "jobs/run_import.h"
#include "jobs/run_store.h"
#include "jobs/ssh_client.h"
#include "peak_memory.h"
#include "sshd_fixture.h"
#include "tbio/event_reader.h"
#include "tbio/event_writer.h"
#include "tbio/tfrecord.h"

using namespace shard::jobs;

namespace {

const QString kFixtures = QStringLiteral(SHARD_SOURCE_DIR "/../shared/fixtures");

QByteArray readAll(const QString& path)
{
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

void writeAll(const QString& path, const QByteArray& bytes)
{
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    QCOMPARE(f.write(bytes), bytes.size());
}

// Event{wall_time, step, summary{value{tag, simple_value}}} in protobuf's wire format by hand.
QByteArray scalarEvent(double wall, int step, const QByteArray& tag, float value)
{
    QByteArray val = QByteArray("\x0a") + char(tag.size()) + tag + '\x15';
    val.append(reinterpret_cast<const char*>(&value), 4);
    const QByteArray summary = QByteArray("\x0a") + char(val.size()) + val;
    QByteArray e("\x09");
    e.append(reinterpret_cast<const char*>(&wall), 8);
    e += '\x10';
    e += char(step);
    e += '\x2a';
    e += char(summary.size());
    e += summary;
    return QByteArray::fromStdString(shard::tbio::frameRecord(e.toStdString()));
}

QByteArray versionRecord()
{
    return QByteArray::fromStdString(
        shard::tbio::frameRecord(std::string("\x1a\x0d", 2) + "brain.Event:2"));
}

const ImportedRun* runNamed(const ImportReport& r, const QString& suffix)
{
    for (const auto& run : r.runs)
        if (run.folder.endsWith(suffix))
            return &run;
    return nullptr;
}

// The config keys on which the runs differ (the store's config diff; none when it fails, which
// the callers' expected keys then catch).
QStringList differingKeys(const RunStore& store, const QVector<qint64>& ids)
{
    QStringList keys;
    auto diff = store.compareConfigs(ids);
    if (diff)
        for (const auto& d : *diff)
            keys << d.key;
    return keys;
}

} // namespace

class TestRunImport : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void fixtures();
    void trainerState();
    void restartedJobMerges();
    void badInput();
    void cli();
    void engineWritesTensorboard();
    void followsAGrowingRun();
    void hugeFileInBoundedMemory();
    void laterImportsReadWhatWasAdded();
    void logs();
    void configBesideTheRun();
    void torchtitanConfigBesideTheRun();
    void overSsh();

private:
    QTemporaryDir m_tmp;
};

void TestRunImport::fixtures()
{
    if (!QDir(kFixtures).exists())
        QSKIP(qPrintable(kFixtures + " is absent (files other tools wrote); skipping"));
    auto store = RunStore::open(m_tmp.filePath("fixtures.sqlite"));
    QVERIFY2(store, qPrintable(store.error()));
    auto report = importRuns(*store, kFixtures);
    QVERIFY2(report, qPrintable(report.error()));
    QCOMPARE(report->runs.size(), 9); // 6 event-file folders + 3 trainer_state.json
    for (const auto& r : report->runs)
        QVERIFY(r.created);

    // Each event file's tags equal the decoded ones; a repeated step keeps the later point.
    int compared = 0;
    for (const auto& r : report->runs) {
        if (r.format != "tensorboard")
            continue;
        QDir dir(r.folder);
        std::map<QString, std::map<qint64, std::pair<double, double>>>
            expected; // tag->step->(wall,v)
        for (const QString& name : dir.entryList({"*.scalars.json"}, QDir::Files)) {
            const QJsonObject tags = QJsonDocument::fromJson(readAll(dir.filePath(name))).object();
            for (auto it = tags.begin(); it != tags.end(); ++it)
                for (const QJsonValue& p : it.value().toArray()) {
                    const QJsonArray a = p.toArray();
                    auto& slot = expected[it.key()][a[0].toInteger()];
                    if (a[1].toDouble() >= slot.first)
                        slot = {a[1].toDouble(), a[2].toDouble()};
                }
        }
        auto tags = store->scalarTags(r.runId);
        QVERIFY(tags);
        QCOMPARE(tags->size(), int(expected.size()));
        for (const auto& [tag, points] : expected) {
            auto s = store->scalarSeries(r.runId, tag);
            QVERIFY(s);
            QCOMPARE(s->step.size(), int(points.size()));
            int i = 0;
            for (const auto& [step, wv] : points) {
                QCOMPARE(qint64(s->step[i]), step);
                QCOMPARE(s->wallTime[i], wv.first);
                QCOMPARE(s->value[i], wv.second);
                ++i;
            }
            ++compared;
        }
    }
    QVERIFY(compared >= 40);

    // Tools and the metric columns.
    const ImportedRun* hf = runNamed(*report, "runs/Jul09_15-21-15_Doan");
    QVERIFY(hf);
    QCOMPARE(hf->tool, QString("Hugging Face Trainer"));
    auto m = store->metricSeries(hf->runId);
    QVERIFY(m);
    QCOMPARE(m->step.first(), 10.0);
    QCOMPARE(float(m->loss.first()), 10.4023f); // trainer_state.json's first loss
    QCOMPARE(float(m->lr.first()), 1e-05f);
    QCOMPARE(m->evalStep, QVector<double>({200, 400, 600}));
    QCOMPARE(float(m->evalLoss[2]), 7.1875f); // trainer_state's best_metric at checkpoint-600
    const ImportedRun* titan = runNamed(*report, "tb/20260814-1704");
    QVERIFY(titan);
    QCOMPARE(titan->tool, QString("torchtitan"));
    QCOMPARE(titan->tags, 17);
    auto t = store->metricSeries(titan->runId);
    QVERIFY(t && t->size() == 1 && t->tokensPerSec[0] > 0 && t->gradNorm[0] > 0 && t->lr[0] > 0);
    QCOMPARE(runNamed(*report, "classification/ResNet")->tool, QString("PyTorch Lightning"));
    QCOMPARE(runNamed(*report, "JAX/tutorial5/tensorboards/ResNet")->tool, QString("TensorBoard"));
    QVERIFY(report->skipped.join('\n').contains("hparams 3")); // the HF hparams side folder
    QVERIFY(report->skipped.join('\n').contains("checkpoint-600/trainer_state.json: the same run's "
                                                "event files are imported instead"));

    // The run's record: imported, finished, with its source.
    auto rec = store->run(hf->runId);
    QVERIFY(rec);
    QCOMPARE(toString(rec->target), QString("import"));
    QVERIFY(rec->status == RunStatus::Finished);
    const QJsonObject source = QJsonDocument::fromJson(rec->source).object();
    QCOMPARE(source["tool"].toString(), QString("Hugging Face Trainer"));
    QCOMPARE(source["writer"].toString(), QString("tensorboard.summary.writer.event_file_writer"));
    QCOMPARE(rec->lastStep, 800);

    // Again: the same runs are updated, nothing is stored twice.
    const qint64 before = *store->metricCount(hf->runId);
    auto again = importRuns(*store, kFixtures);
    QVERIFY(again);
    QCOMPARE(again->runs.size(), 9);
    for (int i = 0; i < 9; ++i) {
        QVERIFY(!again->runs[i].created);
        QCOMPARE(again->runs[i].runId, report->runs[i].runId);
    }
    QCOMPARE(*store->metricCount(hf->runId), before);
    QCOMPARE(store->listRuns()->size(), 9);
    // An event file is read from where the last import stopped: nothing new, nothing read.
    QCOMPARE(runNamed(*again, "runs/Jul09_15-21-15_Doan")->points, qint64(0));
    QCOMPARE(runNamed(*again, "runs/Jul09_15-21-15_Doan")->tool, QString("Hugging Face Trainer"));
    QCOMPARE(runNamed(*again, "runs/Jul09_15-21-15_Doan")->steps, int(before));
}

void TestRunImport::trainerState()
{
    const QString file = kFixtures + "/ljh696__MetaMath/output/trainer_state.json";
    if (!QFile::exists(file))
        QSKIP(qPrintable(file + " is absent; skipping"));
    auto store = RunStore::open(m_tmp.filePath("state.sqlite"));
    QVERIFY(store);
    auto report = importRuns(*store, file);
    QVERIFY2(report, qPrintable(report.error()));
    QCOMPARE(report->runs.size(), 1);
    const ImportedRun& r = report->runs[0];
    QCOMPARE(r.format, QString("trainer_state"));
    QCOMPARE(r.tool, QString("Hugging Face Trainer"));
    const QJsonArray history
        = QJsonDocument::fromJson(readAll(file)).object()["log_history"].toArray();
    std::map<qint64, double> losses, gradNorms;
    for (const QJsonValue& v : history) {
        const QJsonObject e = v.toObject();
        if (e.contains("loss"))
            losses[e["step"].toInteger()] = e["loss"].toDouble();
        if (e.contains("grad_norm"))
            gradNorms[e["step"].toInteger()] = e["grad_norm"].toDouble();
    }
    QVERIFY(losses.size() > 100 && !gradNorms.empty());
    auto m = store->metricSeries(r.runId);
    QVERIFY(m);
    int checked = 0;
    for (int i = 0; i < m->size(); ++i) {
        const qint64 step = qint64(m->step[i]);
        if (auto it = losses.find(step); it != losses.end()) {
            QCOMPARE(m->loss[i], it->second);
            ++checked;
        }
        if (auto it = gradNorms.find(step); it != gradNorms.end())
            QCOMPARE(m->gradNorm[i], it->second);
    }
    QCOMPARE(checked, int(losses.size()));
    auto tags = store->scalarTags(r.runId);
    QVERIFY(tags && tags->contains("train/loss") && tags->contains("train/grad_norm"));
}

void TestRunImport::restartedJobMerges()
{
    // A job that died after step 3 and restarted from step 2 writes a second, later file: the
    // repeated steps take the second file's values, the others stay.
    QDir dir(m_tmp.filePath("restarted/run"));
    QVERIFY(dir.mkpath("."));
    writeAll(dir.filePath("events.out.tfevents.1000.host.1.0"),
        versionRecord() + scalarEvent(1000, 1, "train/loss", 4.0f)
            + scalarEvent(1001, 2, "train/loss", 3.0f) + scalarEvent(1002, 3, "train/loss", 2.5f));
    writeAll(dir.filePath("events.out.tfevents.2000.host.2.0"),
        versionRecord() + scalarEvent(2000, 2, "train/loss", 3.1f)
            + scalarEvent(2001, 3, "train/loss", 2.6f) + scalarEvent(2002, 4, "train/loss", 2.0f));
    auto store = RunStore::open(m_tmp.filePath("restart.sqlite"));
    QVERIFY(store);
    auto report = importRuns(*store, m_tmp.filePath("restarted"));
    QVERIFY2(report, qPrintable(report.error()));
    QCOMPARE(report->runs.size(), 1);
    auto m = store->metricSeries(report->runs[0].runId);
    QVERIFY(m);
    QCOMPARE(m->step, QVector<double>({1, 2, 3, 4}));
    QCOMPARE(m->loss, QVector<double>({4.0, double(3.1f), double(2.6f), 2.0}));
    QCOMPARE(m->wallTime, QVector<double>({0, 1000, 1001, 1002})); // from the first point
    QCOMPARE(report->runs[0].name, QString("restarted/run"));

    // A folder the engine ran in is its own record, not imported over.
    auto engineRun
        = store->createRun(NewRun {"mine", "{}", TargetKind::Local, "", dir.absolutePath()});
    QVERIFY(engineRun);
    // (the import above owns the newest record of that folder; the engine's is newer now)
    auto again = importRuns(*store, m_tmp.filePath("restarted"));
    QVERIFY(!again);
    QVERIFY2(again.error().contains("which Shard Studio ran"), qPrintable(again.error()));
}

void TestRunImport::badInput()
{
    auto store = RunStore::open(m_tmp.filePath("bad.sqlite"));
    QVERIFY(store);
    auto missing = importRuns(*store, m_tmp.filePath("absent"));
    QVERIFY(!missing && missing.error().endsWith("absent does not exist"));
    writeAll(m_tmp.filePath("notes.txt"), "hello");
    auto text = importRuns(*store, m_tmp.filePath("notes.txt"));
    QVERIFY2(
        !text && text.error().contains("notes.txt has no metric lines of Hugging Face Trainer"),
        qPrintable(text.error()));
    QDir empty(m_tmp.filePath("empty"));
    QVERIFY(empty.mkpath("."));
    auto none = importRuns(*store, empty.absolutePath());
    QVERIFY(!none && none.error().contains("holds no TensorBoard event files"));
    QDir broken(m_tmp.filePath("broken/checkpoint-10"));
    QVERIFY(broken.mkpath("."));
    writeAll(broken.filePath("trainer_state.json"), "{\"log_history\": [ {\"step\": 1,");
    auto json = importRuns(*store, m_tmp.filePath("broken"));
    QVERIFY(!json);
    QVERIFY2(
        json.error().contains("trainer_state.json is not valid JSON"), qPrintable(json.error()));
    QDir fake(m_tmp.filePath("fake"));
    QVERIFY(fake.mkpath("."));
    writeAll(fake.filePath("events.out.tfevents.1.x"), "{\"this\": \"is JSON, not TFRecord\"}");
    auto notEvents = importRuns(*store, fake.absolutePath());
    QVERIFY(!notEvents);
    QVERIFY2(notEvents.error().contains("events.out.tfevents.1.x is not a TensorBoard event file"),
        qPrintable(notEvents.error()));
    QCOMPARE(store->listRuns()->size(), 0); // nothing half-recorded
}

void TestRunImport::cli()
{
    const QString shard = QStringLiteral(SHARD_BINARY_DIR "/app/shard");
    QDir dir(m_tmp.filePath("cli/run"));
    QVERIFY(dir.mkpath("."));
    writeAll(dir.filePath("events.out.tfevents.5.host.1.0"),
        versionRecord() + scalarEvent(10, 1, "train/loss", 2.0f)
            + scalarEvent(11, 2, "train/loss", 1.0f));
    QProcess p;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("SHARD_STORE", m_tmp.filePath("cli.sqlite"));
    p.setProcessEnvironment(env);
    p.start(shard, {"runs", "import", m_tmp.filePath("cli")});
    QVERIFY(p.waitForFinished(60000));
    const QString out = QString::fromUtf8(p.readAllStandardOutput());
    QCOMPARE(p.exitCode(), 0);
    QVERIFY2(
        out.startsWith("imported run 1 cli/run: TensorBoard, 2 steps, 1 scalar tags, 2 points"),
        qPrintable(out));
    p.start(shard, {"runs", "import", m_tmp.filePath("cli/absent")});
    QVERIFY(p.waitForFinished(60000));
    QCOMPARE(p.exitCode(), 1);
    QVERIFY(QString::fromUtf8(p.readAllStandardError()).contains("does not exist"));
    // --slurm-job ties one run to its job; --follow needs one (tst_slurm_launcher runs them).
    for (const auto& [args, why] : {std::pair {QStringList {"runs", "import", m_tmp.filePath("cli"),
                                                   m_tmp.filePath("cli"), "--slurm-job", "7"},
                                        "give one folder (got 2)"},
             {QStringList {"runs", "import", m_tmp.filePath("cli"), "--follow"},
                 "give --slurm-job ID"},
             {QStringList {"runs", "import", m_tmp.filePath("cli"), "--slurm-job", "7; ls"},
                 "is not a Slurm job id"}}) {
        p.start(shard, args);
        QVERIFY(p.waitForFinished(60000));
        const QString err = QString::fromUtf8(p.readAllStandardError());
        QVERIFY2(p.exitCode() != 0 && err.contains(why), qPrintable(err));
    }
    QCOMPARE(RunStore::open(m_tmp.filePath("cli.sqlite"))->run(1)->jobId, QString());
}

namespace {

// The framing (with its CRC-32C, table-driven here) and the messages in Python, the messages
// through protoc's Python code for the project's schema subset.
const char* const kPythonReader = R"py(
import json, struct, sys
sys.path.insert(0, sys.argv[1])
import tensorboard_event_pb2 as pb

def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF

def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF

out = {}
with open(sys.argv[2], "rb") as f:
    while True:
        header = f.read(12)
        if len(header) < 12:
            break
        (length,) = struct.unpack("<Q", header[:8])
        assert struct.unpack("<I", header[8:])[0] == masked(header[:8]), "length crc"
        data = f.read(length)
        assert struct.unpack("<I", f.read(4))[0] == masked(data), "data crc"
        e = pb.Event()
        e.ParseFromString(data)
        if e.HasField("summary"):
            for v in e.summary.value:
                out.setdefault(v.tag, []).append([e.step, v.simple_value])
        elif e.HasField("file_version"):
            out["__version__"] = e.file_version
            out["__writer__"] = e.source_metadata.writer
print(json.dumps(out))
)py";

} // namespace

void TestRunImport::engineWritesTensorboard()
{
    const QString worker = QStringLiteral(SHARD_BINARY_DIR "/engine/worker/shard-worker");
    if (!QFile::exists(worker))
        QSKIP("this build has no shard-worker (SHARD_BUILD_ENGINE=OFF)");
    QDir dir(m_tmp.filePath("engine"));
    QVERIFY(dir.mkpath("."));
    auto run = [&](const QStringList& args) {
        QProcess p;
        p.setProcessChannelMode(QProcess::MergedChannels);
        p.start(worker, args);
        const bool done = p.waitForFinished(120000);
        const QString out = QString::fromUtf8(p.readAll());
        return done && p.exitCode() == 0 ? QString() : out;
    };
    QCOMPARE(run({"init-model", "--preset", "tiny-1m", "--out", dir.filePath("model")}), QString());
    QCOMPARE(run({"make-data", "--task", "arithmetic", "--out", dir.filePath("data.jsonl"),
                 "--count", "200"}),
        QString());
    QCOMPARE(run({"train", "--model", dir.filePath("model"), "--data", dir.filePath("data.jsonl"),
                 "--out", dir.filePath("run"), "--steps", "6", "--micro-batch", "4", "--seq-len",
                 "64", "--threads", "1", "--eval-every", "3", "--eval-fraction", "0.1"}),
        QString());
    QCOMPARE(run({"train", "--model", dir.filePath("model"), "--data", dir.filePath("data.jsonl"),
                 "--out", dir.filePath("quiet"), "--steps", "2", "--micro-batch", "4", "--seq-len",
                 "64", "--threads", "1", "--no-tensorboard"}),
        QString());
    QVERIFY(
        QDir(dir.filePath("quiet")).entryList({"events.out.tfevents.*"}, QDir::Files).isEmpty());
    const QStringList files
        = QDir(dir.filePath("run")).entryList({"events.out.tfevents.*"}, QDir::Files);
    QCOMPARE(files.size(), 1);
    const QString eventFile = dir.filePath("run/" + files[0]);

    // metrics.jsonl, the reference.
    std::map<qint64, QJsonObject> records;
    for (const QByteArray& line : readAll(dir.filePath("run/metrics.jsonl")).split('\n'))
        if (!line.trimmed().isEmpty()) {
            const QJsonObject o = QJsonDocument::fromJson(line).object();
            records[o["step"].toInteger()] = o;
        }
    QCOMPARE(int(records.size()), 6);

    // This project's reader.
    const auto scan = shard::tbio::readEventFile(eventFile.toStdString());
    QCOMPARE(scan.writer, std::string("shard-studio"));
    std::map<std::string, std::map<qint64, double>> got;
    for (const auto& p : scan.scalars)
        got[p.tag][p.step] = p.value;
    const std::pair<const char*, const char*> columns[]
        = {{"train/loss", "loss"}, {"train/learning_rate", "lr"}, {"train/grad_norm", "grad_norm"},
            {"train/tokens_per_sec", "tokens_per_sec"}, {"train/num_input_tokens_seen", "tokens"}};
    for (const auto& [tag, key] : columns) {
        QCOMPARE(int(got[tag].size()), 6);
        for (const auto& [step, o] : records)
            QCOMPARE(got[tag][step], double(float(o[key].toDouble())));
    }
    int evals = 0;
    for (const auto& [step, o] : records)
        if (o.contains("eval_loss")) {
            QCOMPARE(got["eval/loss"][step], double(float(o["eval_loss"].toDouble())));
            ++evals;
        }
    QVERIFY(evals >= 1);
    QCOMPARE(int(got["eval/loss"].size()), evals);

    // A Python reader on Debian's protobuf (/usr/bin/python3: the python3-protobuf package).
    QProcess check;
    check.start("/usr/bin/python3", {"-c", "import google.protobuf"});
    check.waitForFinished(60000);
    if (check.exitCode() != 0 || QStandardPaths::findExecutable("protoc").isEmpty())
        QSKIP("python3-protobuf or protoc is not installed (scripts/setup.sh installs them)");
    const QString proto = QStringLiteral(SHARD_SOURCE_DIR "/engine/tbio");
    QProcess protoc;
    protoc.start("protoc",
        {"--proto_path=" + proto, "--python_out=" + dir.absolutePath(),
            proto + "/tensorboard_event.proto"});
    QVERIFY(protoc.waitForFinished(60000) && protoc.exitCode() == 0);
    QProcess py;
    py.start("/usr/bin/python3", {"-c", kPythonReader, dir.absolutePath(), eventFile});
    QVERIFY(py.waitForFinished(60000));
    QVERIFY2(py.exitCode() == 0, py.readAllStandardError().constData());
    const QJsonObject fromPython = QJsonDocument::fromJson(py.readAllStandardOutput()).object();
    QCOMPARE(fromPython["__version__"].toString(), QString("brain.Event:2"));
    QCOMPARE(fromPython["__writer__"].toString(), QString("shard-studio"));
    for (const auto& [tag, points] : got) {
        const QJsonArray list = fromPython[QString::fromStdString(tag)].toArray();
        QCOMPARE(list.size(), int(points.size()));
        int i = 0;
        for (const auto& [step, value] : points) {
            QCOMPARE(list[i].toArray()[0].toInteger(), step);
            QCOMPARE(list[i].toArray()[1].toDouble(), value);
            ++i;
        }
    }

    // And the importer names the tool.
    auto store = RunStore::open(m_tmp.filePath("engine.sqlite"));
    QVERIFY(store);
    auto report = importRuns(*store, dir.filePath("run"));
    QVERIFY2(report, qPrintable(report.error()));
    QCOMPARE(report->runs[0].tool, QString("Shard Studio"));
    QCOMPARE(report->runs[0].steps, 6);
}

void TestRunImport::followsAGrowingRun()
{
    // A job still writing: the watcher imports what each write adds (a record split across two
    // writes, then a new file after a restart), every point once, in step order.
    QDir dir(m_tmp.filePath("growing/run"));
    QVERIFY(dir.mkpath("."));
    const QString first = dir.filePath("events.out.tfevents.100.host.1.0");
    writeAll(first, versionRecord() + scalarEvent(100, 1, "train/loss", 5.0f));
    auto store = RunStore::open(m_tmp.filePath("growing.sqlite"));
    QVERIFY(store);
    auto report = importRuns(*store, dir.absolutePath());
    QVERIFY(report);
    const qint64 id = report->runs[0].runId;
    auto launcher = launcherOf(*store, *store->run(id));
    QVERIFY2(launcher, qPrintable(launcher.error()));
    QVERIFY(launcher.value()->kind() == TargetKind::Import);
    QVERIFY(!launcher.value()->stop(id, 0)); // not the studio's to stop
    auto watcher = launcher.value()->watch(*store->run(id), nullptr);
    QVERIFY2(watcher, qPrintable(watcher.error()));
    QSignalSpy added(watcher.value().get(), &RunWatcher::pointsAdded);
    auto append = [](const QString& path, const QByteArray& bytes) {
        QFile f(path);
        QVERIFY(f.open(QIODevice::Append));
        QCOMPARE(f.write(bytes), bytes.size());
    };
    const QByteArray second = scalarEvent(101, 2, "train/loss", 4.0f);
    append(first, second.left(9)); // half a record: nothing new yet
    append(first, second.mid(9));
    QTRY_COMPARE_WITH_TIMEOUT(*store->metricCount(id), qint64(2), 20000);
    writeAll(dir.filePath("events.out.tfevents.200.host.2.0"),
        versionRecord() + scalarEvent(200, 2, "train/loss", 3.5f)
            + scalarEvent(201, 3, "train/loss", 3.0f));
    QTRY_COMPARE_WITH_TIMEOUT(*store->metricCount(id), qint64(3), 20000);
    QVERIFY(added.count() >= 2);
    auto m = store->metricSeries(id);
    QCOMPARE(m->step, QVector<double>({1, 2, 3}));
    QCOMPARE(m->loss, QVector<double>({5.0, 3.5, 3.0}));
    QCOMPARE(store->listRuns()->size(), 1);
}

namespace {

QByteArray varint(quint64 v)
{
    QByteArray out;
    for (; v >= 0x80; v >>= 7)
        out += char((v & 0x7f) | 0x80);
    return out + char(v);
}

QByteArray field(int number, const QByteArray& bytes) // a length-delimited protobuf field
{
    return varint(quint64(number) << 3 | 2) + varint(bytes.size()) + bytes;
}

// Event{step, summary{value{tag, image{encoded_image_string}}}}: a large record that is not a
// scalar (TensorBoard's images are what make event files big).
QByteArray imageEvent(int step, int bytes)
{
    const QByteArray image = field(4, QByteArray(bytes, '\x5a'));
    const QByteArray value = field(1, "samples/image") + field(4, image);
    const QByteArray event = varint(2 << 3) + varint(step) + field(5, field(1, value));
    return QByteArray::fromStdString(shard::tbio::frameRecord(event.toStdString()));
}

} // namespace

void TestRunImport::hugeFileInBoundedMemory()
{
    // A 100 MB event file: 48 images of 2 MB and 400,000 scalars (50,000 steps of 8 tags). The
    // importer streams it into the store a batch at a time: its peak memory (a record, a batch,
    // SQLite's dirty pages) stays far below what the points take in memory (some 300 bytes each
    // on their way through a reader, a merge and a list: 120 MB), let alone the file's size.
    QDir dir(m_tmp.filePath("huge/run"));
    QVERIFY(dir.mkpath("."));
    const int steps = 50000;
    {
        shard::tbio::EventFileWriter w(dir.absolutePath().toStdString());
        QFile f(QString::fromStdString(w.path()));
        for (int step = 1; step <= steps; ++step) {
            const float x = float(step);
            w.write(1.7e9 + step, step,
                {{"train/loss", 10.0f / (1.0f + x * 1e-3f)}, {"train/learning_rate", 3e-4f},
                    {"train/grad_norm", 1.0f + 1.0f / x}, {"train/tokens_per_sec", 12000.0f},
                    {"train/step_time", 0.5f}, {"train/num_input_tokens_seen", x * 4096},
                    {"memory/peak(GiB)", 20.4f}, {"custom/perplexity", 2.0f + 1.0f / x}});
            if (step % 1000 == 0 && step / 1000 <= 48) {
                QVERIFY(f.open(QIODevice::Append));
                const QByteArray big = imageEvent(step, 2 << 20);
                QCOMPARE(f.write(big), big.size());
                f.close();
            }
        }
        QVERIFY(f.size() > 100'000'000);
    }
    using shard::testing::anonMiB;
    if (anonMiB() < 0)
        QSKIP("/proc/self/status has no RssAnon (Linux 4.5+): memory cannot be measured");
    auto store = RunStore::open(m_tmp.filePath("huge.sqlite"));
    QVERIFY(store);
    const double base = anonMiB();
    Result<ImportReport> report = fail("not run");
    const double grew = shard::testing::peakAnonMiB([&] {
        report = importRuns(*store, dir.absolutePath());
    }) - base;
    QVERIFY2(report, qPrintable(report.error()));
    qInfo("imported %lld points of a 100 MB file; peak memory grew by %.1f MiB",
        static_cast<long long>(report->runs[0].points), grew);
    QCOMPARE(report->runs[0].points, qint64(8) * steps);
    QCOMPARE(report->runs[0].steps, steps);
    QCOMPARE(report->runs[0].tags, 8);
    QVERIFY2(report->runs[0].notes.contains("not scalars, skipped: images 48"),
        qPrintable(report->runs[0].notes.join('\n')));
    QVERIFY2(grew < 48, qPrintable(QString::number(grew))); // flat from 1 MB to 1 GB: BENCHMARKS.md
    auto m = store->metricSeries(report->runs[0].runId);
    QCOMPARE(m->size(), steps);
    QCOMPARE(m->loss.last(), double(10.0f / (1.0f + float(steps) * 1e-3f)));
    QCOMPARE(m->tokens.last(), double(steps) * 4096);
    QCOMPARE(m->wallTime.last(), double(steps - 1));
    QCOMPARE(store->scalarSeries(report->runs[0].runId, "custom/perplexity")->value.size(), steps);
}

void TestRunImport::laterImportsReadWhatWasAdded()
{
    // Two tags of one metric at a step: the first by name fills it (torchtitan's
    // loss_metrics/global_avg_loss before train/loss). A second import reads only the records
    // appended since, and the steps already stored keep their values and wall times; a file with
    // an earlier first point moves every step's wall time.
    QDir dir(m_tmp.filePath("later/run"));
    QVERIFY(dir.mkpath("."));
    const QString file = dir.filePath("events.out.tfevents.100.host.1.0");
    writeAll(file,
        versionRecord() + scalarEvent(100, 1, "train/loss", 5.0f)
            + scalarEvent(101, 2, "train/loss", 4.0f)
            + scalarEvent(102, 2, "loss_metrics/global_avg_loss", 3.9f));
    auto store = RunStore::open(m_tmp.filePath("later.sqlite"));
    QVERIFY(store);
    auto first = importRuns(*store, dir.absolutePath());
    QVERIFY2(first, qPrintable(first.error()));
    const qint64 id = first->runs[0].runId;
    QCOMPARE(first->runs[0].points, qint64(3));
    auto m = store->metricSeries(id);
    QCOMPARE(m->loss, QVector<double>({5.0, double(3.9f)}));
    QCOMPARE(m->wallTime, QVector<double>({0, 2}));
    QFile f(file);
    QVERIFY(f.open(QIODevice::Append));
    const QByteArray more = scalarEvent(110, 3, "train/loss", 3.0f);
    QCOMPARE(f.write(more), more.size());
    f.close();
    auto second = importRuns(*store, dir.absolutePath());
    QVERIFY2(second, qPrintable(second.error()));
    QCOMPARE(second->runs[0].points, qint64(1)); // the appended record only
    QCOMPARE(second->runs[0].steps, 3);
    m = store->metricSeries(id);
    QCOMPARE(m->loss, QVector<double>({5.0, double(3.9f), 3.0}));
    QCOMPARE(m->wallTime, QVector<double>({0, 2, 10}));
    QCOMPARE(store->run(id)->lastStep, 3);
    writeAll(dir.filePath("events.out.tfevents.050.host.1.0"),
        versionRecord() + scalarEvent(50, 0, "train/loss", 6.0f));
    auto third = importRuns(*store, dir.absolutePath());
    QVERIFY2(third, qPrintable(third.error()));
    QCOMPARE(third->runs[0].points, qint64(1));
    m = store->metricSeries(id);
    QCOMPARE(m->step, QVector<double>({0, 1, 2, 3}));
    QCOMPARE(m->wallTime, QVector<double>({0, 50, 52, 60}));
    QCOMPARE(m->loss, QVector<double>({6.0, 5.0, double(3.9f), 3.0}));
}

void TestRunImport::logs()
{
    auto store = RunStore::open(m_tmp.filePath("logs.sqlite"));
    QVERIFY(store);
    // Hugging Face Trainer's stdout: dicts after tqdm's bar (carriage returns), evaluation and
    // the final summary; no step in them.
    writeAll(m_tmp.filePath("hf.out"),
        "***** Running training *****\n"
        "  0%|          | 0/30 [00:00<?, ?it/s]\r 33%|###3      | 10/30 [00:05<00:10,  2.00it/s]"
        "{'loss': 2.5, 'grad_norm': 1.25, 'learning_rate': 4.5e-05, 'epoch': 0.33}\n"
        "{'loss': 2.0, 'grad_norm': 0.75, 'learning_rate': 3e-05, 'epoch': 0.67}\n"
        "{'eval_loss': 2.25, 'eval_runtime': 1.5, 'eval_samples_per_second': 100.0, 'epoch': "
        "0.67}\n"
        "{'loss': 1.5, 'grad_norm': 0.5, 'learning_rate': 1.5e-05, 'epoch': 1.0}\n"
        "{'train_runtime': 15.0, 'train_samples_per_second': 8.0, 'train_loss': 2.0, 'epoch': "
        "1.0}\n");
    auto hf = importRuns(*store, m_tmp.filePath("hf.out"));
    QVERIFY2(hf, qPrintable(hf.error()));
    QCOMPARE(hf->runs[0].tool, QString("Hugging Face Trainer"));
    QCOMPARE(hf->runs[0].format, QString("log"));
    auto m = store->metricSeries(hf->runs[0].runId);
    QVERIFY(m);
    QCOMPARE(m->step, QVector<double>({1, 2, 3}));
    QCOMPARE(m->loss, QVector<double>({2.5, 2.0, 1.5}));
    QCOMPARE(m->gradNorm, QVector<double>({1.25, 0.75, 0.5}));
    QCOMPARE(m->lr, QVector<double>({4.5e-05, 3e-05, 1.5e-05}));
    QCOMPARE(m->evalStep, QVector<double>({2}));
    QCOMPARE(m->evalLoss, QVector<double>({2.25}));
    QVERIFY(store->scalarTags(hf->runs[0].runId)->contains("train/train_runtime"));

    // torchtitan's step lines, with its colour codes and logger prefix.
    const QByteArray esc("\x1b");
    QByteArray titan = "[rank0]:[titan] 2026-01-05 10:00:00,000 - root - INFO - Training starts\n";
    for (int step = 1; step <= 3; ++step)
        titan += "[rank0]:[titan] 2026-01-05 10:00:0" + QByteArray::number(step)
            + ",000 - root - INFO - " + esc + "[31mstep: " + QByteArray::number(step) + "  " + esc
            + "[32mloss: " + QByteArray::number(8.0 - step, 'f', 4) + "  " + esc
            + "[33mgrad_norm:  1.2500  " + esc + "[34mmemory: 12.50GiB(15.75%)  " + esc
            + "[35mtps: 1,234  " + esc + "[36mtflops: 56.70  " + esc + "[35mmfu: 18.20%" + esc
            + "[39m\n";
    writeAll(m_tmp.filePath("titan.log"), titan);
    auto t = importRuns(*store, m_tmp.filePath("titan.log"));
    QVERIFY2(t, qPrintable(t.error()));
    QCOMPARE(t->runs[0].tool, QString("torchtitan"));
    m = store->metricSeries(t->runs[0].runId);
    QCOMPARE(m->step, QVector<double>({1, 2, 3}));
    QCOMPARE(m->loss, QVector<double>({7.0, 6.0, 5.0}));
    QCOMPARE(m->tokensPerSec, QVector<double>({1234, 1234, 1234}));
    auto mfu = store->scalarSeries(t->runs[0].runId, "mfu(%)");
    QVERIFY(mfu && mfu->value == QVector<double>({18.2, 18.2, 18.2}));
    auto mem = store->scalarSeries(t->runs[0].runId, "memory/max_reserved(GiB)");
    QVERIFY(mem && mem->value.first() == 12.5);

    // The log grows: the watcher imports the new lines.
    auto launcher = launcherOf(*store, *store->run(t->runs[0].runId));
    QVERIFY(launcher);
    auto watcher = launcher.value()->watch(*store->run(t->runs[0].runId), nullptr);
    QVERIFY(watcher);
    {
        QFile f(m_tmp.filePath("titan.log"));
        QVERIFY(f.open(QIODevice::Append));
        f.write("step: 4  loss:  3.5000  grad_norm:  1.0000\n");
    }
    QTRY_COMPARE_WITH_TIMEOUT(*store->metricCount(t->runs[0].runId), qint64(4), 20000);
}

void TestRunImport::configBesideTheRun()
{
    // A Trainer output folder: the model's config.json, a DeepSpeed config, checkpoint-N/ with
    // trainer_state.json and runs/<name>/ with the event files. Two such runs compare by what
    // differs in their set-up.
    auto store = RunStore::open(m_tmp.filePath("config.sqlite"));
    QVERIFY(store);
    QVector<qint64> ids;
    for (int stage : {2, 3}) {
        QDir out(m_tmp.filePath(QStringLiteral("outputs/stage%1").arg(stage)));
        QVERIFY(out.mkpath("runs/Dec04_10-00-00_host") && out.mkpath("checkpoint-20"));
        writeAll(out.filePath("config.json"),
            R"({"_name_or_path": "meta-llama/Llama-3.2-1B", "model_type": "llama",
                "hidden_size": 2048, "num_hidden_layers": 16})");
        writeAll(out.filePath("ds_config.json"),
            QStringLiteral(R"({"zero_optimization": {"stage": %1}, "bf16": {"enabled": true}})")
                .arg(stage)
                .toUtf8());
        writeAll(out.filePath("checkpoint-20/trainer_state.json"),
            R"({"max_steps": 100, "logging_steps": 10, "log_history": [{"step": 10, "loss": 2.0}]})");
        writeAll(out.filePath("runs/Dec04_10-00-00_host/events.out.tfevents.1.host.1.0"),
            versionRecord() + scalarEvent(1, 10, "train/loss", 2.0f));
        auto report = importRuns(*store, out.absolutePath());
        QVERIFY2(report, qPrintable(report.error()));
        QCOMPARE(report->runs.size(), 1); // the trainer_state.json is the same run's
        auto run = store->run(report->runs[0].runId);
        QVERIFY(run);
        QCOMPARE(run->model, QString("meta-llama/Llama-3.2-1B"));
        QCOMPARE(run->strategy, QStringLiteral("zero%1").arg(stage));
        QCOMPARE(run->totalSteps, 100);
        ids << run->id;
    }
    const QStringList keys = differingKeys(*store, ids);
    QVERIFY2(keys.contains("strategy") && keys.contains("deepspeed.zero_optimization.stage")
            && !keys.contains("model"),
        qPrintable(keys.join(", ")));
}

void TestRunImport::torchtitanConfigBesideTheRun()
{
    // torchtitan's own Llama 3 8B config (../shared/fixtures) beside its job's event files: the
    // config is the run's spec (model, steps, every table), two runs that differ in their
    // parallelism compare by it, and a broken TOML is said in the import's notes.
    const QString toml = kFixtures + "/pytorch__torchtitan/llama3_8b.toml";
    if (!QFile::exists(toml))
        QSKIP("../shared/fixtures/pytorch__torchtitan/llama3_8b.toml is absent");
    QFile in(toml);
    QVERIFY(in.open(QIODevice::ReadOnly));
    const QByteArray text = in.readAll();
    auto store = RunStore::open(m_tmp.filePath("titan.sqlite"));
    QVERIFY(store);
    QVector<qint64> ids;
    for (int tp : {1, 2}) {
        QDir job(m_tmp.filePath(QStringLiteral("titan/tp%1").arg(tp)));
        QVERIFY(job.mkpath("outputs/tb/20261205-1200"));
        QByteArray config = text;
        config.replace(
            "tensor_parallel_degree = 1", "tensor_parallel_degree = " + QByteArray::number(tp));
        writeAll(job.filePath("llama3_8b.toml"), config);
        writeAll(job.filePath("outputs/tb/20261205-1200/events.out.tfevents.1.node.1.0"),
            versionRecord() + scalarEvent(1, 10, "loss_metrics/global_avg_loss", 2.5f));
        auto report = importRuns(*store, job.absolutePath()); // the job's folder
        QVERIFY2(report, qPrintable(report.error()));
        QCOMPARE(report->runs.size(), 1);
        auto run = store->run(report->runs[0].runId);
        QVERIFY(run);
        QCOMPARE(run->model, QString("llama3 8B"));
        QCOMPARE(run->totalSteps, 1000);
        const QJsonObject spec = QJsonDocument::fromJson(run->specJson).object();
        const QJsonObject titan = spec.value("torchtitan").toObject();
        QCOMPARE(titan.value("training").toObject().value("seq_len").toInt(), 8192);
        QCOMPARE(titan.value("activation_checkpoint").toObject().value("mode").toString(),
            QString("selective"));
        ids << run->id;
    }
    const QStringList keys = differingKeys(*store, ids);
    QVERIFY2(
        keys.filter("torchtitan.") == QStringList {"torchtitan.parallelism.tensor_parallel_degree"},
        qPrintable(keys.join(", ")));
    // A broken TOML: the run is imported, the note says where the TOML breaks.
    QDir broken(m_tmp.filePath("titan/broken"));
    QVERIFY(broken.mkpath("tb"));
    writeAll(broken.filePath("train.toml"), "[training]\nsteps = = 3\n");
    // Another project's broken TOML beside it is none of the run's business: not said.
    writeAll(broken.filePath("pyproject.toml"), "[tool.black\nline-length = 100\n");
    writeAll(broken.filePath("tb/events.out.tfevents.2.node.1.0"),
        versionRecord() + scalarEvent(1, 1, "loss", 1.0f));
    auto report = importRuns(*store, broken.filePath("tb"));
    QVERIFY2(report, qPrintable(report.error()));
    QVERIFY2(!report->runs[0].notes.join('\n').contains("pyproject.toml"),
        qPrintable(report->runs[0].notes.join('\n')));
    QVERIFY2(report->runs[0].notes.join('\n').contains("train.toml: not valid TOML at line 2"),
        qPrintable(report->runs[0].notes.join('\n')));
}

void TestRunImport::overSsh()
{
    // HOST:PATH through a real sshd on loopback: the files are fetched, the run records the
    // host and its path there, importing again updates it with only the bytes each file gained.
    // CTest runs it as tst_run_import_ssh (label ssh, like the other tests that start an sshd).
    if (qEnvironmentVariableIsEmpty("SHARD_TEST_SSH"))
        QSKIP("run as tst_run_import_ssh");
    SshdFixture sshd;
    QString why;
    if (!sshd.start(1, &why))
        QSKIP(qPrintable("no sshd here: " + why));
    SshOptions ssh;
    ssh.configFile = sshd.configFile();
    ssh.controlDir = m_tmp.filePath("cm");
    ssh.connectTimeoutSec = 10;
    QDir dir(m_tmp.filePath("cluster/job-7/tb"));
    QVERIFY(dir.mkpath("."));
    const QString file = dir.filePath("events.out.tfevents.7.node.1.0");
    writeAll(file,
        versionRecord() + scalarEvent(10, 1, "train/loss", 3.0f)
            + scalarEvent(11, 2, "train/loss", 2.0f));
    auto store = RunStore::open(m_tmp.filePath("ssh-store/runs.sqlite"));
    QVERIFY(store);
    const QString remote = "node0:" + m_tmp.filePath("cluster");
    auto report = importRuns(*store, remote, ssh);
    QVERIFY2(report, qPrintable(report.error()));
    QCOMPARE(report->runs.size(), 1);
    const qint64 id = report->runs[0].runId;
    QCOMPARE(report->runs[0].folder, "node0:" + dir.absolutePath());
    auto run = store->run(id);
    QCOMPARE(run->host, QString("node0"));
    QCOMPARE(run->runDir, dir.absolutePath());
    QCOMPARE(*store->metricCount(id), qint64(2));
    // Again, after the job logged more: the same run, one point more.
    {
        QFile f(file);
        QVERIFY(f.open(QIODevice::Append));
        f.write(scalarEvent(12, 3, "train/loss", 1.5f));
    }
    auto again = importRuns(*store, remote, ssh);
    QVERIFY2(again, qPrintable(again.error()));
    QVERIFY(!again->runs[0].created);
    QCOMPARE(again->runs[0].runId, id);
    QCOMPARE(*store->metricCount(id), qint64(3));
    QCOMPARE(store->listRuns()->size(), 1);
    // Only what the file gained crosses the connection: bytes already fetched are not read
    // again (here the job's earlier records are overwritten on the remote side, which a whole
    // fetch would read as a broken file), and the new record arrives.
    const QString mirrored = QFileInfo(store->path()).absolutePath() + "/imported/node0"
        + dir.absolutePath() + "/events.out.tfevents.7.node.1.0";
    const QByteArray before = SshdFixture::read(mirrored);
    QCOMPARE(before, SshdFixture::read(file));
    {
        QFile f(file);
        QVERIFY(f.open(QIODevice::ReadWrite));
        const qint64 firstScalar = versionRecord().size();
        QVERIFY(f.seek(firstScalar));
        f.write(QByteArray(scalarEvent(10, 1, "train/loss", 3.0f).size(), '\0'));
        QVERIFY(f.seek(f.size()));
        f.write(scalarEvent(13, 4, "train/loss", 1.25f));
    }
    auto offset = importRuns(*store, remote, ssh);
    QVERIFY2(offset, qPrintable(offset.error()));
    QCOMPARE(*store->metricCount(id), qint64(4));
    QCOMPARE(SshdFixture::read(mirrored), before + scalarEvent(13, 4, "train/loss", 1.25f));
    // A file that shrank was written anew: fetched whole.
    writeAll(file, versionRecord() + scalarEvent(20, 1, "train/loss", 0.5f));
    auto rewritten = importRuns(*store, remote, ssh);
    QVERIFY2(rewritten, qPrintable(rewritten.error()));
    QCOMPARE(SshdFixture::read(mirrored), SshdFixture::read(file));
    auto missing = importRuns(*store, "node0:" + m_tmp.filePath("nothing-here"), ssh);
    QVERIFY(!missing);
    QVERIFY2(missing.error().contains("no such file or folder"), qPrintable(missing.error()));
    auto down = importRuns(*store, "down:/tmp", ssh);
    QVERIFY(!down);
    QVERIFY2(down.error().startsWith("down:/tmp: "), qPrintable(down.error()));
    SshClient(ssh).closeMaster(*SshHost::parse("node0"));
}

QTEST_GUILESS_MAIN(TestRunImport)
#include "tst_run_import.moc"
