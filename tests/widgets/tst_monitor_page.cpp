// Monitor page against a run directory that a separate, real process appends to, opened as a
// folder (attached to a real run store by the run service, then followed by its id): points
// arrive while it writes (including a line written in two halves), memory bars per rank,
// progress, events and the log tail; Resume only for a complete checkpoint with steps left, and a
// resumed run (the shell workload) is live until its launcher goes; a folder without run.json
// shows a message.
#include <cmath>

#include <QtTest>

#include <QDir>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QPlainTextEdit>
#include <QProcess>
#include <QProgressBar>
#include <QPushButton>
#include <QTemporaryDir>
#include <QTreeWidget>

#include <csignal>

#include "jobs/preflight.h"
#include "jobs/run_service.h"
#include "jobs/run_store.h"
#include "protocol/checkpoint_discovery.h"
#include "protocol/run_dir.h"
#include "tbio/event_writer.h"
#include "tbio/tfrecord.h"
#include "widgets/live_plot.h"
#include "widgets/memory_bar_chart.h"
#include "widgets/monitor_page.h"
#include "widgets/plan_page.h"

#include "../jobs/jobs_test_util.h"
#include "studio_test_util.h"

using namespace shard::widgets;

namespace {

void writeFile(const QString& path, const QByteArray& text)
{
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(text);
}

// A run folder as rank 0 starts one: logs/, run.json and the start event, then `moreEvents`.
QString startedRun(const QTemporaryDir& tmp, const QString& name, const QByteArray& runJson,
    const QByteArray& moreEvents = {}, const QByteArray& startData = "{}")
{
    const QString run = tmp.filePath(name);
    QDir().mkpath(run + "/logs");
    writeFile(run + "/run.json", runJson);
    writeFile(run + "/events.jsonl",
        R"({"v":1,"type":"event","kind":"start","wall_time":0,"step":0,"message":"started",)"
        R"("data":)"
            + startData + "}\n" + moreEvents);
    return run;
}

// A shell loop that appends one metric line per ~40 ms; line 5 is written in two halves
// 300 ms apart, the way a writer that is preempted mid-line leaves it. After lines 10 and 25 it
// waits until the test creates the file hold-10 (hold-25) in the run folder: the test decides
// when the writer goes on, so a loaded machine cannot make it finish before the page looks.
QString writerScript(int records)
{
    return QString(R"SH(cd "$1"
i=1
while [ $i -le @N@ ]; do
  loss="$((400 / i / 100)).$(printf %02d $((400 / i % 100)))"
  wall="$((i * 4 / 100)).$(printf %02d $((i * 4 % 100)))"
  line=$(printf '{"v":1,"type":"metric","step":%d,"tokens":%d,"loss":%s,"lr":0.001,"grad_norm":1.5,"tokens_per_sec":1000,"step_time":0.04,"wall_time":%s,"memory":[{"rank":0,"sharded_params":1000,"grads":500,"optimizer":2000,"activations":300,"other":10,"current":4000,"peak":5000},{"rank":1,"sharded_params":1000,"grads":500,"optimizer":2000,"activations":310,"other":10,"current":4000,"peak":5100}]}' $i $((i * 256)) "$loss" "$wall")
  if [ $i -eq 5 ]; then
    head=${line%?????????????}
    printf '%s' "$head" >> metrics.jsonl; sleep 0.3
    printf '%s\n' "${line#"$head"}" >> metrics.jsonl
  else
    printf '%s\n' "$line" >> metrics.jsonl
  fi
  echo "[info] step $i" >> logs/rank-0.log
  if [ $i -eq 10 ] || [ $i -eq 25 ]; then
    while [ ! -e hold-$i ]; do sleep 0.05; done
  fi
  i=$((i + 1)); sleep 0.04
done
printf '{"v":1,"type":"event","kind":"finish","wall_time":9,"step":@N@,"message":"done","data":{"reason":"completed"}}\n' >> events.jsonl
)SH")
        .replace("@N@", QString::number(records));
}

// A run store in a folder of its own and the service over it, as the studio has.
struct Service {
    QTemporaryDir dir;
    shard::jobs::RunService service {dir.filePath("runs.db")};
};

} // namespace

class TstMonitorPage : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void pointsArriveFromAProcessAppending()
    {
        QTemporaryDir tmp;
        QVERIFY(tmp.isValid());
        const QString run
            = startedRun(tmp, "run-a", R"({"name":"tiny","steps":40,"strategy":"zero3"})",
                R"({"v":1,"type":"event","kind":"sample","wall_time":1,"step":20,"message":"s",)"
                R"("data":{"prompt":"Once upon","completion":" a time"}})"
                "\n");

        Service store;
        MonitorPage page;
        page.setStore(&store.service);
        page.resize(1200, 800);
        page.show();
        QVERIFY(QTest::qWaitForWindowExposed(&page));
        QSignalSpy arrived(&page, &MonitorPage::pointsArrived);
        QSignalSpy finished(&page, &MonitorPage::runFinished);
        // No run yet: no "step 0 of 1"; the loss chart says where to start, the memory chart
        // lists no category.
        QCOMPARE(page.findChild<QProgressBar*>()->text(), QString());
        page.lossPlot()->flushNow();
        QVERIFY2(page.lossPlot()->absentTextShown().startsWith("No run open."),
            qPrintable(page.lossPlot()->absentTextShown()));
        page.memoryChart()->flushNow();
        QCOMPARE(page.memoryChart()->legendEntries(), QStringList());
        page.openRunDirectory(run);
        page.lossPlot()->flushNow();
        QCOMPARE(page.lossPlot()->absentTextShown(), QString("Waiting for the run's first step…"));

        QProcess writer;
        writer.start("sh", {"-c", writerScript(40), "writer", run});
        QVERIFY(writer.waitForStarted());
        // Points show up while the writer is still going (it holds after line 10 until told).
        QTRY_COMPARE_WITH_TIMEOUT(page.pointCount(), 10, 30000);
        QVERIFY(writer.state() == QProcess::Running);
        QVERIFY(!page.finished());
        page.lossPlot()->flushNow();
        QCOMPARE(page.lossPlot()->absentTextShown(), QString()); // the curve, nothing said over it
        const int batchesBy10 = int(arrived.count());
        QVERIFY(batchesBy10 >= 1);
        writeFile(run + "/hold-10", {});
        QTRY_COMPARE_WITH_TIMEOUT(page.pointCount(), 25, 30000);
        QVERIFY(arrived.count() > batchesBy10);
        writeFile(run + "/hold-25", {});
        QVERIFY(writer.waitForFinished(30000));
        QCOMPARE(writer.exitCode(), 0);
        QTRY_COMPARE_WITH_TIMEOUT(page.pointCount(), 40, 30000);
        QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, 30000);
        QCOMPARE(finished.first().first().toString(), QString("completed"));
        // More than one batch arrived: the page followed the file, not read it once at the end.
        QVERIFY(arrived.count() >= 3);

        // Steps in order, each exactly once, the split line included.
        const auto& steps = page.run().step;
        for (int i = 0; i < steps.size(); ++i)
            QCOMPARE(steps[i], double(i + 1));
        QCOMPARE(page.run().loss[3], 1.0);
        page.flushCharts();
        QCOMPARE(page.lossPlot()->drawnPointCount(0), 40);
        QCOMPARE(page.lrPlot()->drawnPointCount(0), 40);
        QCOMPARE(page.throughputPlot()->drawnPointCount(0), 40);
        const auto& bars = page.memoryChart()->bars();
        QCOMPARE(int(bars.size()), 2);
        QCOMPARE(bars[1].label, QString("rank 1"));
        const auto activations = page.memoryChart()->categories().indexOf("activations");
        QCOMPARE(bars[1].bytes.at(size_t(activations)), 310.0);
        auto* progress = page.findChild<QProgressBar*>();
        QVERIFY(progress);
        QCOMPARE(progress->maximum(), 40);
        QCOMPARE(progress->value(), 40);
        QCOMPARE(progress->text(), QString("step 40 of 40"));
        // The log's last lines come in an update of their own, after the one that ended the run.
        auto* log = page.findChild<QPlainTextEdit*>();
        QTRY_VERIFY_WITH_TIMEOUT(log->toPlainText().contains("[info] step 40"), 30000);
        QVERIFY(page.messageText().isEmpty());
        // The sample event is listed with its step, prompt and completion.
        QCOMPARE(page.samplesView()->topLevelItemCount(), 1);
        QCOMPARE(page.samplesView()->topLevelItem(0)->text(0), QString("20"));
        QCOMPARE(page.samplesView()->topLevelItem(0)->text(2), QString(" a time"));
        QVERIFY(page.deviceMemoryText().isEmpty()); // a CPU run: no GPU allocator line
    }

    void resumeOfferedOnlyForACompleteCheckpointWithStepsLeft()
    {
        QTemporaryDir tmp;
        QVERIFY(tmp.isValid());
        const QString run
            = startedRun(tmp, "run-r", R"({"name":"tiny","steps":4,"strategy":"zero3"})");
        // The real layout: <run>/checkpoints/step-<n>/ with its manifest, complete only with its
        // DONE marker.
        const QString step2
            = QString::fromStdString(shard::protocol::RunDir(run.toStdString()).checkpointDir(2));
        QVERIFY(QDir().mkpath(step2));
        writeFile(step2 + "/" + shard::protocol::kCheckpointManifestFile, R"({"version":1})");
        writeFile(step2 + "/" + shard::protocol::kCheckpointDoneFile, "");
        QVERIFY(shard::protocol::isCompleteCheckpoint(step2.toStdString()));

        Service store;
        MonitorPage page;
        page.setStore(&store.service);
        page.show();
        auto* button = page.findChild<QPushButton*>("resumeButton");
        QVERIFY(button);
        QSignalSpy checked(&page, &MonitorPage::resumeCheckDone);
        QSignalSpy done(&page, &MonitorPage::resumeDone);

        // Still running (no finish event): no resume, whatever the checkpoints.
        page.openRunDirectory(run);
        // The name comes in the same update as the run's state: that state is on the page now.
        QTRY_COMPARE_WITH_TIMEOUT(page.run().name, QString("tiny"), 30000);
        QVERIFY(!button->isEnabled());
        QVERIFY(!page.canResume());

        // Finished with an incomplete checkpoint only: no resume.
        QVERIFY(QFile::remove(step2 + "/DONE"));
        QVERIFY(!shard::protocol::isCompleteCheckpoint(step2.toStdString()));
        QFile events(run + "/events.jsonl");
        QVERIFY(events.open(QIODevice::Append));
        events.write(R"({"v":1,"type":"event","kind":"finish","wall_time":9,"step":4,)"
                     R"("message":"done","data":{"reason":"completed"}})"
                     "\n");
        events.close();
        QTRY_COMPARE_WITH_TIMEOUT(checked.count(), 1, 30000);
        QCOMPARE(checked.takeFirst().first().toBool(), false);
        QVERIFY(!button->isEnabled());

        // The same finished run with a complete checkpoint before its last step: Resume is
        // offered when the folder is opened again (the same record, attached again).
        writeFile(step2 + "/DONE", "");
        const qint64 id = page.storeRunId();
        page.openRunDirectory(run);
        QTRY_COMPARE_WITH_TIMEOUT(checked.count(), 1, 30000);
        QCOMPARE(page.storeRunId(), id);
        QCOMPARE(checked.takeFirst().first().toBool(), true);
        QVERIFY(button->isEnabled());

        // A checkpoint at the last step has nothing left to train.
        writeFile(run + "/run.json", R"({"name":"tiny","steps":2,"strategy":"zero3"})");
        page.openRunDirectory(run);
        QTRY_COMPARE_WITH_TIMEOUT(checked.count(), 1, 30000);
        QCOMPARE(checked.takeFirst().first().toBool(), false);
        QVERIFY(!page.canResume());

        // Its steps raised again: Resume is offered, and a click hands the run to the service
        // (which starts it again in the same record) and takes the offer back at once.
        writeFile(run + "/run.json", R"({"name":"tiny","steps":4,"strategy":"zero3"})");
        page.openRunDirectory(run);
        QTRY_COMPARE_WITH_TIMEOUT(checked.count(), 1, 30000);
        QCOMPARE(checked.takeFirst().first().toBool(), true);
        QTest::mouseClick(button, Qt::LeftButton);
        QVERIFY(!button->isEnabled());
        QTRY_COMPARE_WITH_TIMEOUT(done.count(), 1, 30000);
        QCOMPARE(page.storeRunId(), id);
        QVERIFY(!page.canResume() || page.finished());
    }

    void reopenedWhileResumingIsNotInterruptedAgain()
    {
        // A killed run (start event, no finish, its launcher gone) is resumed; the studio opens
        // the folder again when the launch reports back. Until the resumed start event is
        // written the old pid file names a dead launcher: that must not show "ended early"
        // again. The resumed process is the shell workload speaking `shard-worker launch`.
        QTemporaryDir tmp;
        QVERIFY(tmp.isValid());
        const QString run = startedRun(tmp, "run-k",
            R"({"name":"tiny","steps":9,"strategy":"zero3","model":"m","data":["d.jsonl"]})");
        writeFile(run + "/launcher.pid", "99999999\n"); // above pid_max: never alive
        const QString step3
            = QString::fromStdString(shard::protocol::RunDir(run.toStdString()).checkpointDir(3));
        QVERIFY(QDir().mkpath(step3));
        writeFile(step3 + "/" + shard::protocol::kCheckpointManifestFile, R"({"version":1})");
        writeFile(step3 + "/" + shard::protocol::kCheckpointDoneFile, "");

        qputenv("SHARD_WORKER", shard::test::kFakeWorker.toUtf8());
        qputenv("FAKE_STEPS", "100000");
        qputenv("FAKE_STEP_SEC", "0.2");
        Service store;
        MonitorPage page;
        page.setStore(&store.service);
        page.show();
        auto* button = page.findChild<QPushButton*>("resumeButton");
        QSignalSpy done(&page, &MonitorPage::resumeDone);
        page.openRunDirectory(run);
        QTRY_VERIFY_WITH_TIMEOUT(page.messageText().contains("ended early"), 30000);
        QTRY_VERIFY_WITH_TIMEOUT(button->isEnabled(), 30000);
        QVERIFY(page.finished());

        QTest::mouseClick(button, Qt::LeftButton);
        QTRY_COMPARE_WITH_TIMEOUT(done.count(), 1, 30000);
        QCOMPARE(done.first().first().toString(), QString());
        QSignalSpy ended(&page, &MonitorPage::runFinished);
        page.openRunDirectory(run); // the launch reporting back
        // Until the resumed process writes, the run's watcher asks about the launcher: at no
        // point in that time is the run shown as ended.
        QTRY_VERIFY_WITH_TIMEOUT(page.pointCount() > 0, 30000); // the resumed process writes
        QCOMPARE(ended.count(), 0);
        QVERIFY2(!page.messageText().contains("ended early"), qPrintable(page.messageText()));
        QVERIFY(!page.finished());

        // Its launcher goes too (SIGKILL: no finish event): interrupted again.
        QFile pidFile(run + "/launcher.pid");
        QVERIFY(pidFile.open(QIODevice::ReadOnly));
        const qint64 pid = pidFile.readAll().trimmed().toLongLong();
        QVERIFY(pid > 1 && pid != 99999999);
        QCOMPARE(::kill(pid_t(pid), SIGKILL), 0);
        QTRY_VERIFY_WITH_TIMEOUT(page.messageText().contains("ended early"), 30000);
        QVERIFY(page.finished());
        qunsetenv("SHARD_WORKER");
        qunsetenv("FAKE_STEPS");
        qunsetenv("FAKE_STEP_SEC");
    }

    // A tensor-parallel run (run.json tensor_parallel 2): each rank's memory bar says which
    // data-parallel copy and which TP rank it is.
    void tensorParallelRanksAreLabelled()
    {
        // Each bar names the rank and, under it, its mesh coordinates (torchtitan's names) along
        // the dimensions the run splits: short enough for four bars side by side.
        labels(R"("tensor_parallel":2)", "rank 0\ndp0 tp0", "rank 3\ndp1 tp1");
        labels(R"("tensor_parallel":2,"pipeline_parallel":2)", "rank 0\npp0 dp0 tp0",
            "rank 3\npp1 dp0 tp1");
        labels(R"("pipeline_parallel":2)", "rank 1\npp0 dp1", "rank 2\npp1 dp0", 1, 2);
    }

    void labels(
        const char* layout, const QString& first, const QString& second, int a = 0, int b = 3)
    {
        QTemporaryDir tmp;
        QVERIFY(tmp.isValid());
        const QString run = startedRun(tmp, "run-tp",
            QString(R"({"name":"tp","steps":1,%1,"procs_per_node":4})").arg(layout).toUtf8(),
            R"({"v":1,"type":"event","kind":"finish","wall_time":2,"step":1,"message":"done",)"
            R"("data":{"reason":"completed"}})"
            "\n");
        QByteArray memory;
        for (int r = 0; r < 4; ++r)
            memory += (r ? "," : "")
                + QString(R"({"rank":%1,"sharded_params":1000,"current":4000,"peak":5000})")
                      .arg(r)
                      .toUtf8();
        writeFile(run + "/metrics.jsonl",
            R"({"v":1,"type":"metric","step":1,"tokens":256,"loss":2.5,"lr":0.001,)"
            R"("grad_norm":1,"tokens_per_sec":100,"step_time":1,"wall_time":1,"memory":[)"
                + memory + "]}\n");
        Service store;
        MonitorPage page;
        page.setStore(&store.service);
        page.show();
        page.openRunDirectory(run);
        QTRY_COMPARE_WITH_TIMEOUT(page.pointCount(), 1, 30000);
        QTRY_COMPARE_WITH_TIMEOUT(int(page.memoryChart()->bars().size()), 4, 30000);
        const auto& bars = page.memoryChart()->bars();
        QCOMPARE(bars[static_cast<size_t>(a)].label, first);
        QCOMPARE(bars[static_cast<size_t>(b)].label, second);
    }

    // A GPU run's records carry the CUDA caching allocator's figures: through the store to the
    // page, under the memory chart (the largest reserved peak over the ranks, retries, OOMs)
    // and in each rank's tooltip. A CPU run shows none (pointsArriveFromAProcessAppending).
    void gpuRunShowsItsCachingAllocator()
    {
        QTemporaryDir tmp;
        QVERIFY(tmp.isValid());
        const QString run
            = startedRun(tmp, "run-gpu", R"({"name":"gpu","steps":1,"device":"cuda"})",
                R"({"v":1,"type":"event","kind":"finish","wall_time":2,"step":1,"message":"done",)"
                R"("data":{"reason":"completed"}})"
                "\n",
                R"({"planned_peak_bytes":6000})");
        const QByteArray rank
            = R"({"rank":%1,"sharded_params":1000,"current":4000,"peak":5000,"cuda":{)"
              R"("allocated":4000,"allocated_peak":5000,"reserved":%2,"reserved_peak":%3,)"
              R"("alloc_retries":%4,"ooms":0}})";
        writeFile(run + "/metrics.jsonl",
            R"({"v":1,"type":"metric","step":1,"tokens":256,"loss":2.5,"lr":0.001,)"
            R"("grad_norm":1,"tokens_per_sec":100,"step_time":1,"wall_time":1,"memory":[)"
                + QString(rank).arg(0).arg(2147483648LL).arg(3221225472LL).arg(0).toUtf8() + ","
                + QString(rank).arg(1).arg(2147483648LL).arg(4294967296LL).arg(2).toUtf8()
                + "]}\n");

        Service store;
        MonitorPage page;
        page.setStore(&store.service);
        page.show();
        page.openRunDirectory(run);
        QTRY_COMPARE_WITH_TIMEOUT(page.pointCount(), 1, 30000);
        QTRY_VERIFY_WITH_TIMEOUT(!page.deviceMemoryText().isEmpty(), 30000);
        const QString text = page.deviceMemoryText();
        QVERIFY2(text.contains("max reserved 4.00 GiB (rank 1)"), qPrintable(text));
        QVERIFY2(text.contains("alloc retries 2"), qPrintable(text));
        QVERIFY2(text.contains("OOMs 0"), qPrintable(text));
        QVERIFY2(text.contains("fragmented"), qPrintable(text)); // retries explained
        const QString tip = page.memoryChart()->describeBar(0);
        QVERIFY2(tip.contains("GPU reserved: 2.00 GiB (peak 3.00 GiB)"), qPrintable(tip));
        // The worker's planner estimate (its start event) is the prediction each bar draws.
        QTRY_VERIFY_WITH_TIMEOUT(page.memoryChart()->bars().at(0).predictedBytes == 6000.0, 30000);

        // Another folder opened in the page: the GPU line goes with the run.
        page.openRunDirectory(tmp.filePath("run-gpu-missing"));
        QTRY_VERIFY_WITH_TIMEOUT(page.deviceMemoryText().isEmpty(), 30000);
    }

    // One memory vocabulary (protocol/memory_categories.h): a LoRA run's frozen base is a
    // category of its own on the chart (it was in no bar), and each category's measured bytes
    // are said beside the plan's for it, with when each was taken.
    void memoryCategoriesPlannedAgainstMeasured()
    {
        QTemporaryDir tmp;
        QVERIFY(tmp.isValid());
        const QString run = startedRun(tmp, "run-lora",
            R"({"name":"lora","model":"tiny-1m","steps":1,"method":"lora","strategy":"zero3",)"
            R"("device":"cpu","micro_batch":2,"seq_len":64})");
        writeFile(run + "/metrics.jsonl",
            R"({"v":1,"type":"metric","step":1,"tokens":128,"loss":2.5,"lr":0.001,)"
            R"("grad_norm":1,"tokens_per_sec":100,"step_time":1,"wall_time":1,"memory":[)"
            R"({"rank":0,"sharded_params":4000,"frozen_params":2500000,"grads":0,)"
            R"("optimizer":8000,"activations":90000,"other":100,"current":2700000,)"
            R"("peak":2900000}]})"
            "\n");
        Service store;
        MonitorPage page;
        page.setPredictor(&shard::widgets::planOfRunSpec);
        page.setStore(&store.service);
        page.show();
        page.openRunDirectory(run);
        QTRY_COMPARE_WITH_TIMEOUT(page.pointCount(), 1, 30000);
        MemoryBarChart* chart = page.memoryChart();
        const int frozen = int(chart->categories().indexOf("frozen base"));
        QVERIFY2(frozen >= 0, qPrintable(chart->categories().join(", ")));
        QTRY_VERIFY_WITH_TIMEOUT(
            !chart->bars().empty() && !chart->bars().at(0).plannedBytes.empty(), 30000);
        const MemoryBar& bar = chart->bars().at(0);
        QCOMPARE(bar.bytes.at(size_t(frozen)), 2500000.0);
        QCOMPARE(bar.plannedBytes.size(), bar.bytes.size());
        QVERIFY(bar.plannedBytes.at(size_t(frozen)) > 0); // the plan's frozen base of tiny-1m
        QVERIFY(chart->legendEntries().contains("frozen base"));
        const QString tip = chart->describeBar(0);
        QVERIFY2(tip.contains("frozen base: 2.4 MiB · planned "), qPrintable(tip));
        QVERIFY2(tip.contains("measured: at the step's end, where gathered params, grads"),
            qPrintable(tip));
    }

    // A run that failed after its start (its files on another host, where no preflight read
    // them) says what the engine said, with each flag it names as the Launch page names it.
    void engineErrorsNameTheLaunchPagesFields()
    {
        QTemporaryDir tmp;
        QVERIFY(tmp.isValid());
        const QString run = startedRun(tmp, "run-bad-data", R"({"name":"bad","steps":4})",
            R"({"v":1,"type":"event","kind":"error","wall_time":1,"step":0,)"
            R"x("message":"d.jsonl:3: malformed JSON (pass --skip-bad-lines to skip such lines)",)x"
            R"("data":{}})"
            "\n"
            R"({"v":1,"type":"event","kind":"finish","wall_time":1,"step":0,)"
            R"("message":"training failed","data":{"reason":"error"}})"
            "\n");
        Service store;
        MonitorPage page;
        page.setStore(&store.service);
        page.openRunDirectory(run);
        QTRY_VERIFY_WITH_TIMEOUT(page.messageText().contains("malformed JSON"), 30000);
        QVERIFY2(page.messageText().contains(
                     "On the Launch page: --skip-bad-lines is “Skip malformed lines”."),
            qPrintable(page.messageText()));
        // Only whole flags, and a message naming none is left as it is.
        QCOMPARE(shard::jobs::inStudioWords("--steps-per-epoch 3"), QString("--steps-per-epoch 3"));
        QVERIFY(shard::jobs::inStudioWords("(--micro-batch 250)").endsWith("“Micro-batch”."));
    }

    void skippedDataLinesAreShown()
    {
        QTemporaryDir tmp;
        QVERIFY(tmp.isValid());
        const QString run
            = startedRun(tmp, "run-skip", R"({"name":"tiny","steps":4,"strategy":"zero3"})",
                R"({"v":1,"type":"event","kind":"data","wall_time":0,"step":0,)"
                R"("message":"skipped 24 bad lines (--skip-bad-lines); first: line 7: not JSON",)"
                R"("data":{"skipped_lines":24,"first":["line 7: not JSON"]}})"
                "\n");
        Service store;
        MonitorPage page;
        page.setStore(&store.service);
        page.openRunDirectory(run);
        QTRY_VERIFY_WITH_TIMEOUT(page.messageText().contains("skipped 24 bad lines"), 30000);
        QVERIFY2(page.messageText().contains("line 7"), qPrintable(page.messageText()));
    }

    // A run whose records carry no gradient norm or throughput (a command run whose engine logs
    // only its loss and learning rate) says so on those charts instead of drawing 0 (issue 31).
    void metricsARunDoesNotLogAreSaidAbsent()
    {
        QTemporaryDir tmp;
        QVERIFY(tmp.isValid());
        const QString run
            = startedRun(tmp, "run-absent", R"({"name":"cmd","steps":3,"strategy":"zero3"})");
        QByteArray lines;
        for (int step = 1; step <= 3; ++step)
            lines += QStringLiteral(R"({"v":1,"type":"metric","step":%1,"loss":%2,"lr":0.01,)"
                                    R"("wall_time":%1})"
                                    "\n")
                         .arg(step)
                         .arg(3.0 / step)
                         .toUtf8();
        writeFile(run + "/metrics.jsonl", lines);
        Service store;
        MonitorPage page;
        page.resize(1200, 800);
        page.show();
        page.setStore(&store.service);
        page.openRunDirectory(run);
        QTRY_COMPARE_WITH_TIMEOUT(page.run().step.size(), 3, 30000);
        const double tps = page.run().tokensPerSec.back();
        QVERIFY2(std::isnan(page.run().gradNorm.back()) && std::isnan(tps), "absent, not 0");
        QTRY_COMPARE_WITH_TIMEOUT(
            page.gradNormPlot()->absentTextShown(), QString("Not logged by this run"), 10000);
        QTRY_COMPARE_WITH_TIMEOUT(
            page.throughputPlot()->absentTextShown(), QString("Not logged by this run"), 10000);
        QCOMPARE(page.lrPlot()->absentTextShown(), QString()); // the learning rate is logged
        QCOMPARE(page.lossPlot()->absentTextShown(), QString());
    }

    // A DPO run trained by this build's worker: its reward margin and accuracy (train, and the
    // held-out pairs' accuracy) are charted beside the loss, as its metrics.jsonl has them; a
    // supervised run shows no such charts.
    void preferenceRunChartsMarginAndAccuracy()
    {
        const QString worker = shard::test::findWorker();
        if (worker.isEmpty())
            QSKIP("no shard-worker in this build");
        QTemporaryDir tmp;
        QVERIFY(tmp.isValid());
        const auto run = [&](const QStringList& args) {
            QProcess p;
            p.start(worker, args);
            QVERIFY2(p.waitForFinished(120000) && p.exitCode() == 0,
                qPrintable(args.join(' ') + ": " + p.readAllStandardError()));
        };
        run({"init-model", "--preset", "tiny-1m", "--out", tmp.filePath("model"), "--seed", "1"});
        run({"make-data", "--task", "arithmetic", "--format", "preference", "--count", "40",
            "--seed", "2", "--out", tmp.filePath("pairs.jsonl")});
        run({"train", "--model", tmp.filePath("model"), "--data", tmp.filePath("pairs.jsonl"),
            "--out", tmp.filePath("dpo"), "--objective", "dpo", "--dpo-beta", "0.1", "--steps", "6",
            "--micro-batch", "4", "--seq-len", "48", "--threads", "1", "--lr", "1e-3",
            "--eval-fraction", "0.2", "--eval-every", "3", "--log-every", "1"});

        Service store;
        MonitorPage page;
        page.resize(1200, 900);
        page.show();
        page.setStore(&store.service);
        QVERIFY(!page.marginPlot()->isVisible());
        page.openRunDirectory(tmp.filePath("dpo"));
        QTRY_COMPARE_WITH_TIMEOUT(page.marginPlot()->series(0).size(), 6, 30000);
        QVERIFY(page.marginPlot()->isVisible() && page.accuracyPlot()->isVisible());
        QCOMPARE(page.accuracyPlot()->series(0).size(), 6);
        QTRY_VERIFY_WITH_TIMEOUT(page.accuracyPlot()->series(1).size() >= 2, 10000); // eval
        // The points are the run's own: its metrics.jsonl's last margin.
        QFile metrics(tmp.filePath("dpo/metrics.jsonl"));
        QVERIFY(metrics.open(QIODevice::ReadOnly));
        double lastMargin = std::nan("");
        for (const QByteArray& line : metrics.readAll().split('\n')) {
            const QJsonObject r = QJsonDocument::fromJson(line).object();
            if (r["scalars"].toObject().contains("rewards/margins"))
                lastMargin = r["scalars"]["rewards/margins"].toDouble();
        }
        QVERIFY(!std::isnan(lastMargin));
        QCOMPARE(page.marginPlot()->series(0).values().back(), lastMargin);
        for (double a : page.accuracyPlot()->series(0).values())
            QVERIFY(a >= 0.0 && a <= 1.0);
        if (!qEnvironmentVariableIsEmpty("SHARD_SCREENSHOT_DIR")) {
            page.flushCharts();
            page.grab().save(qEnvironmentVariable("SHARD_SCREENSHOT_DIR") + "/monitor-dpo.png");
        }
        // Another run, supervised: the charts go.
        const QString sft
            = startedRun(tmp, "sft", R"({"name":"sft","steps":3,"strategy":"zero3"})");
        page.openRunDirectory(sft);
        QTRY_VERIFY_WITH_TIMEOUT(!page.marginPlot()->isVisible(), 10000);
        QCOMPARE(page.marginPlot()->series(0).size(), 0);
    }

    // A restart in place (launch --max-restarts) is said in the message bar and marked on the
    // loss chart at the step that failed (issue 32).
    void restartIsShownAndMarked()
    {
        QTemporaryDir tmp;
        QVERIFY(tmp.isValid());
        const QString run
            = startedRun(tmp, "run-restart", R"({"name":"tiny","steps":10,"strategy":"zero3"})",
                R"X({"v":1,"type":"event","kind":"restart","wall_time":3,"step":6,)X"
                R"X("message":"rank 1 (pid 7) was killed by signal 9 (SIGKILL); restarting )X"
                R"X(every rank from the checkpoint at step 4 (restart 1 of 2)",)X"
                R"X("data":{"cause":"rank_failed","rank":1,"checkpoint_step":4,"restart":1}})X"
                "\n");
        Service store;
        MonitorPage page;
        page.setStore(&store.service);
        page.openRunDirectory(run);
        QTRY_VERIFY_WITH_TIMEOUT(
            page.messageText().contains("restarted from its checkpoint"), 5000);
        QVERIFY2(page.messageText().contains("at step 4"), qPrintable(page.messageText()));
        QCOMPARE(page.lossPlot()->markerCount(), 1);
        QCOMPARE(page.lrPlot()->markerCount(), 0);
    }

    // A Slurm preemption (checkpoint on SIGUSR1) and the requeued job that continues: both
    // marked on the loss chart, the latest said in the message bar (issue 32).
    void preemptionAndRequeueAreMarked()
    {
        QTemporaryDir tmp;
        QVERIFY(tmp.isValid());
        const QString run
            = startedRun(tmp, "run-preempt", R"({"name":"tiny","steps":10,"strategy":"zero3"})",
                R"X({"v":1,"type":"event","kind":"preempted","wall_time":3,"step":5,)X"
                R"X("message":"preempted after step 5 (SIGUSR1)","data":{"checkpoint_step":5}})X"
                "\n"
                R"X({"v":1,"type":"event","kind":"requeued","wall_time":0,"step":5,)X"
                R"X("message":"Slurm restarted job 12 (restart 1); the run continues from the )X"
                R"X(checkpoint at step 5","data":{"checkpoint_step":5,"restart_count":1}})X"
                "\n");
        Service store;
        MonitorPage page;
        page.setStore(&store.service);
        page.openRunDirectory(run);
        QTRY_VERIFY_WITH_TIMEOUT(page.messageText().contains("Slurm restarted job 12"), 5000);
        QCOMPARE(page.lossPlot()->markerCount(), 2);
    }

    // What a checkpoint costs (issue 32): its size in all and per rank, its write time, and the
    // training at risk between two (step time x interval), from the run's own records.
    void checkpointCostIsShown()
    {
        QTemporaryDir tmp;
        QVERIFY(tmp.isValid());
        const QString run = startedRun(tmp, "run-ckpt",
            R"({"name":"tiny","steps":100,"strategy":"zero3","nodes":1,"procs_per_node":2,)"
            R"("checkpoint_every":50})",
            R"X({"v":1,"type":"event","kind":"checkpoint","wall_time":8,"step":4,)X"
            R"X("message":"checkpoint written","data":{"action":"save","dir":"c/step-4",)X"
            R"X("seconds":0.25,"bytes":25165824}})X"
            "\n");
        QByteArray metrics;
        for (int step = 1; step <= 4; ++step) // 2 s per step
            metrics += QString(R"({"v":1,"type":"metric","step":%1,"tokens":%2,"loss":2.0,)"
                               R"("lr":0.001,"grad_norm":1.0,"tokens_per_sec":100,)"
                               R"("step_time":2.0,"wall_time":%3})"
                               "\n")
                           .arg(step)
                           .arg(step * 256)
                           .arg(step * 2)
                           .toUtf8();
        writeFile(run + "/metrics.jsonl", metrics);
        Service store;
        MonitorPage page;
        page.setStore(&store.service);
        page.openRunDirectory(run);
        QTRY_VERIFY_WITH_TIMEOUT(page.checkpointText().contains("at risk"), 5000);
        const QString text = page.checkpointText();
        QVERIFY2(text.contains("checkpoint 24.0 MiB (12.0 MiB/rank) in 0.25 s"), qPrintable(text));
        // 50 steps x 2 s.
        QVERIFY2(text.contains("1:40 at risk per 50 steps"), qPrintable(text));
    }

    void anotherToolsLogFolderIsImportedAndShown()
    {
        // A folder of TensorBoard event files (another tool's run): opened, it is imported and
        // drawn like the engine's own runs, and followed while it is shown.
        QTemporaryDir tmp;
        const QString run = tmp.filePath("tb/run-1");
        QVERIFY(QDir().mkpath(run));
        std::string bytes = shard::tbio::frameRecord(std::string("\x1a\x0d", 2) + "brain.Event:2");
        for (int step = 1; step <= 5; ++step)
            bytes += shard::tbio::frameRecord(shard::tbio::scalarEventBytes(1000.0 + step, step,
                {{"train/loss", 5.0f - step * 0.5f}, {"train/learning_rate", 1e-4f}}));
        writeFile(run + "/events.out.tfevents.1000.host.1.0", QByteArray::fromStdString(bytes));
        Service store;
        MonitorPage page;
        page.setStore(&store.service);
        page.show();
        page.openRunDirectory(run);
        QTRY_COMPARE_WITH_TIMEOUT(page.pointCount(), 5, 30000);
        auto runs = shard::jobs::RunStore::open(
            store.dir.filePath("runs.db"), shard::jobs::OpenMode::ReadOnly);
        QVERIFY(runs);
        const auto listed = runs->listRuns();
        QVERIFY(listed && listed->size() == 1);
        QCOMPARE(toString(listed->first().target), QString("import"));
        QCOMPARE(listed->first().runDir, QDir(run).absolutePath());
        // Every scalar under its tag, in the Scalars tab.
        page.showScalar("train/learning_rate");
        QTRY_COMPARE_WITH_TIMEOUT(
            page.scalarTags(), QStringList({"train/learning_rate", "train/loss"}), 30000);
        QTRY_COMPARE_WITH_TIMEOUT(page.scalarPointCount(), 5, 30000);
        // Its job writes on: the steps it logs while the run is shown are read and drawn.
        std::string more;
        for (int step = 6; step <= 7; ++step)
            more += shard::tbio::frameRecord(shard::tbio::scalarEventBytes(1000.0 + step, step,
                {{"train/loss", 5.0f - step * 0.5f}, {"train/learning_rate", 1e-4f}}));
        QFile file(run + "/events.out.tfevents.1000.host.1.0");
        QVERIFY(file.open(QIODevice::Append));
        QCOMPARE(file.write(QByteArray::fromStdString(more)), qint64(more.size()));
        file.close();
        QTRY_COMPARE_WITH_TIMEOUT(page.pointCount(), 7, 30000);
    }

    void folderWithoutRunJsonShowsMessage()
    {
        QTemporaryDir tmp;
        Service store;
        MonitorPage page;
        page.setStore(&store.service);
        page.show();
        page.openRunDirectory(tmp.path());
        QTRY_VERIFY2_WITH_TIMEOUT(
            page.messageText().contains("no run.json"), qPrintable(page.messageText()), 30000);
        QCOMPARE(page.pointCount(), 0);

        page.openRunDirectory(tmp.filePath("does-not-exist"));
        QTRY_VERIFY_WITH_TIMEOUT(page.messageText().contains("no such folder"), 30000);
    }
};

QTEST_MAIN(TstMonitorPage)
#include "tst_monitor_page.moc"
