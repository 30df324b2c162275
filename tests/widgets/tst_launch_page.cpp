// Launch page: the fields become a validated run spec and the exact command the local launcher
// runs; presets round-trip; bad input (no model, a bad learning rate, a worker that is not
// installed) shows a message instead of starting anything.
#include <QtTest>

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSettings>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QTcpServer>
#include <QTemporaryDir>

#include <QLabel>

#include "jobs/run_service.h"
#include "jobs/run_store.h"
#include "jobs/slurm_launcher.h"
#include "jobs/ssh_launcher.h"
#include "plan/model_spec.h"
#include "tokenizer/demo_tokenizer.h"
#include "widgets/launch_page.h"

#include "studio_test_util.h"

using namespace shard::widgets;

class TstLaunchPage : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase()
    {
        QCoreApplication::setOrganizationName("ShardStudioTest");
        QSettings::setDefaultFormat(QSettings::IniFormat);
        QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, m_settings.path());
    }

    void fieldsBecomeSpecAndCommand()
    {
        LaunchPage page;
        page.setModelFolder(m_tmp.filePath("model"));
        page.setDataFiles({m_tmp.filePath("a.jsonl"), m_tmp.filePath("b c.jsonl")});
        page.setRunsRoot(m_tmp.filePath("runs"));
        page.setRunName("tiny run");
        page.setSteps(5);
        page.findChild<QSpinBox*>("ranks")->setValue(2);
        page.findChild<QComboBox*>("strategy")
            ->setCurrentIndex(page.findChild<QComboBox*>("strategy")->findData("zero2"));
        page.findChild<QLineEdit*>("lr")->setText("1e-3");
        QSignalSpy preview(&page, &LaunchPage::previewChanged);
        QTRY_VERIFY(preview.count() > 0);
        auto spec = page.spec();
        QVERIFY2(spec, qPrintable(spec.error()));
        QCOMPARE(spec.value().steps, int64_t(5));
        QCOMPARE(spec.value().procsPerNode, 2);
        QCOMPARE(spec.value().strategy, std::string("zero2"));
        QCOMPARE(spec.value().lr, 1e-3);
        QCOMPARE(int(spec.value().data.size()), 2);
        const QString runDir = m_tmp.filePath("runs/tiny_run");
        QCOMPARE(QString::fromStdString(spec.value().outDir), runDir);
        const QString text = page.commandPreview();
        QVERIFY2(text.contains("launch --nproc-per-node 2"), qPrintable(text));
        QVERIFY(text.contains("--run-dir " + runDir));
        QVERIFY(text.contains("-- train --config " + runDir + "/launch-spec.json"));
        QVERIFY(text.contains("--master-port "));
        QVERIFY(text.contains("\"strategy\": \"zero2\""));
        QVERIFY(text.contains("b c.jsonl"));
        auto request = page.request();
        QVERIFY(request);
        QCOMPARE(request.value().spec.procsPerNode, 2);
        QVERIFY(text.contains(QString::number(request.value().masterPort)));
    }

    void badInputShowsWhy()
    {
        LaunchPage page;
        QVERIFY(!page.spec());
        QVERIFY(page.spec().error().contains("model folder"));
        QTRY_VERIFY(page.commandPreview().contains("Not ready"));
        page.setModelFolder(m_tmp.filePath("model"));
        page.setDataFiles({m_tmp.filePath("a.jsonl")});
        page.findChild<QLineEdit*>("lr")->setText("fast");
        QVERIFY(page.spec().error().contains("'fast' is not a number"));
        page.findChild<QLineEdit*>("lr")->setText("1e-3");
        page.setSteps(0);
        QVERIFY2(page.spec().error().contains("steps"), qPrintable(page.spec().error()));
        // Start with nothing valid: a message, no run.
        page.start();
        QVERIFY(!page.messageText().isEmpty());
    }

    // Sample prompts (Monitor ▸ Samples): the prompts file the engine reads; choosing one sets
    // "every" to a tenth of the run when it was never; a file that is not there is said before a
    // start; every N with no prompts is what the engine refuses, said too; a preset keeps both.
    void samplePrompts()
    {
        LaunchPage page;
        page.setModelFolder(m_tmp.filePath("model"));
        const QString data = m_tmp.filePath("samples-data.jsonl");
        {
            QFile d(data);
            QVERIFY(d.open(QIODevice::WriteOnly));
            d.write("{\"text\": \"hello\"}\n");
        }
        page.setDataFiles({data});
        page.setRunsRoot(m_tmp.filePath("runs"));
        page.setSteps(50);
        auto* prompts = page.findChild<QLineEdit*>("samplePrompts");
        auto* every = page.findChild<QSpinBox*>("sampleEvery");
        QVERIFY(prompts && every);
        QCOMPARE(every->value(), 0);
        const QString file = m_tmp.filePath("prompts.txt");
        prompts->setText(file);
        QCOMPARE(every->value(), 5);
        auto spec = page.spec();
        QVERIFY2(spec, qPrintable(spec.error()));
        QCOMPARE(QString::fromStdString(spec.value().samplePrompts), file);
        QCOMPARE(spec.value().sampleEvery, int64_t(5));
        QTRY_VERIFY2(page.commandPreview().contains("\"sample_every\": 5"),
            qPrintable(page.commandPreview()));
        auto* problem = page.findChild<QLabel*>("dataProblem");
        QTRY_VERIFY2(problem->text().contains("“Sample prompts” " + file + ": no such file"),
            qPrintable(problem->text()));
        QFile f(file);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("Once upon a time\n");
        f.close();
        every->setValue(20); // the user's choice stays
        QTRY_VERIFY(!problem->text().contains("Sample prompts"));
        page.savePreset("samples");
        LaunchPage other;
        QVERIFY(other.loadPreset("samples"));
        QCOMPARE(QString::fromStdString(other.spec().value().samplePrompts), file);
        QCOMPARE(other.findChild<QSpinBox*>("sampleEvery")->value(), 20);
        prompts->clear();
        QVERIFY(!page.spec());
        QVERIFY2(page.spec().error().contains("sample_prompts"), qPrintable(page.spec().error()));
        QTRY_VERIFY(page.commandPreview().contains("Not ready"));
    }

    void presetsRoundTrip()
    {
        LaunchPage page;
        page.setModelFolder("/models/tiny");
        page.setDataFiles({"/data/train.jsonl"});
        page.setRunName("preset-run");
        page.setSteps(77);
        page.savePreset("my preset");
        QVERIFY(page.presetNames().contains("my preset"));
        LaunchPage other;
        QVERIFY(other.loadPreset("my preset"));
        QCOMPARE(other.spec().value().steps, int64_t(77));
        QCOMPARE(other.spec().value().model, std::string("/models/tiny"));
        QVERIFY(!other.loadPreset("no such preset"));
        QVERIFY(other.messageText().contains("No preset"));
    }

    // "Run a command instead of the engine": the engine's fields are set aside, the preview says
    // what runs where, Start records and starts the command, and its metric lines become the
    // run's points.
    void commandMode()
    {
        qputenv("SHARD_CLI", SHARD_BINARY_DIR "/app/shard");
        LaunchPage page;
        page.show();
        shard::jobs::RunService store(m_tmp.filePath("command-store.sqlite"));
        page.setStore(&store);
        page.setRunsRoot(m_tmp.filePath("command-runs"));
        page.setRunName("hf-like");
        page.setCommandMode(true);
        QVERIFY(!page.findChild<QWidget*>("strategy")->isEnabled());
        QVERIFY(page.findChild<QLineEdit*>("command")->isEnabled());
        QTRY_VERIFY(page.commandPreview().contains("Not ready: enter the command"));
        page.setCommand("for i in 1 2 3; do echo \"{'loss': 2.$i, 'learning_rate': 0.1}\"; done",
            QString(), QString(), "A=1 B=2");
        QTRY_VERIFY(page.commandPreview().contains("env A=1 B=2"));
        QVERIFY(page.commandPreview().contains("for i in 1 2 3"));
        page.setCommand("true", QString(), QString(), "NOEQUALS");
        QTRY_VERIFY(page.commandPreview().contains("'NOEQUALS' is not KEY=VALUE"));
        page.setCommand("for i in 1 2 3; do echo \"{'loss': 2.$i, 'learning_rate': 0.1}\"; done");
        QSignalSpy launched(&page, &LaunchPage::launched);
        QTRY_VERIFY(!page.commandPreview().contains("Not ready"));
        page.start();
        QTRY_COMPARE_WITH_TIMEOUT(launched.count(), 1, 30000);
        const qint64 id = launched.first().at(0).toLongLong();
        auto db = shard::jobs::RunStore::open(m_tmp.filePath("command-store.sqlite"));
        QVERIFY(db);
        QTRY_VERIFY_WITH_TIMEOUT(
            db.value().run(id).value().status == shard::jobs::RunStatus::Finished, 30000);
        QTRY_COMPARE_WITH_TIMEOUT(db.value().metricSeries(id).value().size(), 3, 30000);
        QCOMPARE(db.value().metricSeries(id).value().loss.back(), 2.3);

        // A command runs on the other targets too: Target and Nodes stay open, and the preview
        // is what runs there (the batch script for Slurm, the host for SSH).
        page.setHosts({{"cluster", "slurm", QString(), 22, QString(), "debug", {}},
            {"box", "ssh", "gpu-box", 22, "me", {}, {}}});
        auto* target = page.findChild<QComboBox*>("target");
        QVERIFY(target->isEnabled());
        QVERIFY(page.findChild<QSpinBox*>("nodes")->isEnabled());
        target->setCurrentIndex(target->findText("Slurm: cluster"));
        page.findChild<QSpinBox*>("nodes")->setValue(2);
        QTRY_VERIFY2(
            page.commandPreview().contains("#SBATCH --nodes=2"), qPrintable(page.commandPreview()));
        QVERIFY(page.commandPreview().contains("#SBATCH --partition=debug"));
        QVERIFY(page.commandPreview().contains("supervise-command"));
        QVERIFY(page.commandPreview().contains("for i in 1 2 3"));
        // The batch script is editable: an added line is submitted as it is; one that drops the
        // supervisor's line is refused before Start.
        auto* edit = page.findChild<QPushButton*>("editSbatch");
        QVERIFY(edit && edit->isVisible());
        auto request = page.commandRequest();
        QVERIFY(request);
        QString script = shard::jobs::commandRunSbatch(request.value()).value();
        script.replace("set -eu\n", "set -eu\nmodule load cuda/12.4\n");
        page.setEditedSbatch(script);
        QTRY_VERIFY2(
            page.commandPreview().contains("as edited"), qPrintable(page.commandPreview()));
        QVERIFY(page.commandPreview().contains("module load cuda/12.4"));
        QCOMPARE(page.commandRequest().value().sbatchScript, script);
        page.setEditedSbatch("#!/bin/bash\nsrun hostname\n");
        QTRY_VERIFY2(page.commandPreview().contains("no longer runs `shard supervise-command"),
            qPrintable(page.commandPreview()));
        QVERIFY(!page.findChild<QPushButton*>("start")->isEnabled());
        page.setEditedSbatch(QString());
        QTRY_VERIFY(!page.commandPreview().contains("as edited"));
        target->setCurrentIndex(target->findText("box", Qt::MatchContains));
        QTRY_VERIFY2(page.commandPreview().contains("on me@gpu-box over SSH"),
            qPrintable(page.commandPreview()));
        target->setCurrentIndex(0);
        page.setCommandMode(false);
        QVERIFY(page.findChild<QWidget*>("strategy")->isEnabled());
    }

    void missingWorkerShowsMessage()
    {
        qunsetenv("SHARD_WORKER");
        LaunchPage page;
        page.show();
        shard::jobs::RunService store(m_tmp.filePath("store.sqlite"));
        page.setStore(&store);
        // Inputs that pass the checks before a start, so that the start reaches the worker.
        page.setModelFolder(validModelFolder());
        page.setDataFiles({validDataFile()});
        page.setRunsRoot(m_tmp.filePath("runs"));
        page.setWorkerProgram("shard-worker-that-is-not-installed");
        page.setSteps(3);
        QTRY_VERIFY(page.findChild<QPushButton*>(QString())); // constructed
        QSignalSpy errors(&store, &shard::jobs::RunService::errorOccurred);
        page.start();
        QTRY_COMPARE_WITH_TIMEOUT(errors.count(), 1, 30000);
        QTRY_VERIFY(page.messageText().contains("not found"));
        QVERIFY2(page.messageText().contains("SHARD_WORKER"), qPrintable(page.messageText()));
    }

    // Model folder, tokenizer, data format, an existing run folder and the planner's fit are
    // checked before Start, each reason next to its field; a long warm-up only warns.
    void inputsAreCheckedBeforeStart()
    {
        LaunchPage page;
        page.show();
        shard::jobs::RunService store(m_tmp.filePath("store-checks.sqlite"));
        page.setStore(&store);
        page.setRunsRoot(m_tmp.filePath("runs"));
        page.setRunName("checked");
        page.setSteps(10);
        auto* start = page.findChild<QPushButton*>(QString(), Qt::FindDirectChildrenOnly);
        Q_UNUSED(start);
        auto label = [&](const char* name) { return page.findChild<QLabel*>(name); };
        auto startButton = [&]() -> QPushButton* {
            for (auto* b : page.findChildren<QPushButton*>())
                if (b->text().contains("Start"))
                    return b;
            return nullptr;
        };
        QVERIFY(startButton());

        // A folder without config.json.
        const QString noConfig = m_tmp.filePath("not-a-model");
        QVERIFY(QDir().mkpath(noConfig));
        page.setModelFolder(noConfig);
        page.setDataFiles({validDataFile()});
        QTRY_VERIFY(label("modelProblem")->text().contains("config.json"));
        QVERIFY(!label("modelProblem")->isHidden());
        QVERIFY(!startButton()->isEnabled());
        QVERIFY(page.checkInputs().blocking());

        // A CSV given as data.
        page.setModelFolder(validModelFolder());
        const QString csv = m_tmp.filePath("train.csv");
        QFile f(csv);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("text,label\nhello,1\n");
        f.close();
        page.setDataFiles({csv});
        QTRY_VERIFY(label("dataProblem")->text().contains("not JSON lines"));
        QVERIFY(label("modelProblem")->isHidden());
        QVERIFY(!startButton()->isEnabled());

        // A micro-batch this machine does not hold (the data has records for it): the planner's
        // largest is named.
        const QString many = m_tmp.filePath("many.jsonl");
        {
            QFile m(many);
            QVERIFY(m.open(QIODevice::WriteOnly));
            for (int i = 0; i < 20000; ++i)
                m.write("{\"text\": \"hi\"}\n");
        }
        page.setDataFiles({many});
        page.findChild<QSpinBox*>("microBatch")->setValue(20000);
        page.findChild<QSpinBox*>("seqLen")->setValue(1024); // tiny-1m's maximum
        QTRY_VERIFY2(label("fitProblem")->text().contains("does not fit")
                && label("fitProblem")->text().contains("(the largest that fits)"),
            qPrintable(label("fitProblem")->text()));
        page.setDataFiles({validDataFile()});
        page.findChild<QSpinBox*>("microBatch")->setValue(1);
        page.findChild<QSpinBox*>("seqLen")->setValue(64);
        QTRY_VERIFY(label("fitProblem")->isHidden());
        QTRY_VERIFY(startButton()->isEnabled());

        // Warm-up longer than the run: a warning, Start stays enabled.
        page.findChild<QSpinBox*>("warmup")->setValue(50);
        QTRY_VERIFY(label("scheduleNote")->text().contains("Warm-up"));
        QVERIFY(startButton()->isEnabled());
        page.findChild<QSpinBox*>("warmup")->setValue(0);

        // A run folder that already holds a run: the studio's words, no CLI flags.
        const QString existing = m_tmp.filePath("runs/checked");
        QVERIFY(QDir().mkpath(existing));
        QFile events(existing + "/events.jsonl");
        QVERIFY(events.open(QIODevice::WriteOnly));
        events.close();
        page.setRunName("checked ");
        page.setRunName("checked");
        QTRY_VERIFY(label("nameProblem")->text().contains("already exists"));
        QVERIFY(!label("nameProblem")->text().contains("--"));
        QVERIFY(!startButton()->isEnabled());
        page.start();
        QVERIFY2(page.messageText().contains("Not started"), qPrintable(page.messageText()));
        // Default names are unique.
        LaunchPage other;
        QVERIFY2(other.findChild<QLineEdit*>("name")->text().startsWith("run-"),
            qPrintable(other.findChild<QLineEdit*>("name")->text()));
    }

    // The preflight (jobs/preflight.h) reads the data through before a start: malformed lines
    // and a micro-batch larger than the data stop it there, not as a failed run, and the fix
    // names the page's checkbox and field (not the CLI's flags). The check runs off the UI
    // thread, and its findings sit above Start: the fields never move when one comes or goes.
    void preflightNamesThePagesSettings()
    {
        LaunchPage page;
        page.resize(1024, 700);
        page.show();
        shard::jobs::RunService store(m_tmp.filePath("store-preflight.sqlite"));
        page.setStore(&store);
        page.setRunsRoot(m_tmp.filePath("runs"));
        page.setRunName("preflight");
        page.setSteps(10);
        page.findChild<QSpinBox*>("seqLen")->setValue(64);
        page.setModelFolder(validModelFolder());
        auto label = [&](const char* name) { return page.findChild<QLabel*>(name); };
        auto* start = page.findChild<QPushButton*>("start");
        auto* scroll = page.findChild<QWidget*>("fieldsScroll");
        auto* nameField = page.findChild<QLineEdit*>("name");
        QVERIFY(start && scroll && nameField);
        for (const char* name : {"dataProblem", "fitProblem", "dataNote", "checking"})
            QVERIFY2(!scroll->isAncestorOf(label(name)), name); // beside Start, not in the form
        const QPoint fieldAt = nameField->mapTo(&page, QPoint());

        // 300 good lines and two malformed ones (a cut-off object, a bare word).
        const QString data = m_tmp.filePath("two-bad.jsonl");
        {
            QFile f(data);
            QVERIFY(f.open(QIODevice::WriteOnly));
            for (int i = 0; i < 302; ++i)
                f.write(i == 40 ? "{\"text\": \"cut off\n"
                        : i == 200
                        ? "hello\n"
                        : QByteArray("{\"text\": \"line ") + QByteArray::number(i) + "\"}\n");
        }
        // The result is not made on the UI thread: when the preview is written, the check of
        // those fields is still under way.
        bool checkingAtPreview = false;
        connect(&page, &LaunchPage::previewChanged, &page,
            [&] { checkingAtPreview = checkingAtPreview || page.checking(); });
        page.setDataFiles({data});
        QTRY_VERIFY2(label("dataProblem")->text().contains("2 malformed lines"),
            qPrintable(label("dataProblem")->text()));
        QVERIFY(checkingAtPreview);
        QVERIFY2(label("dataProblem")->text().contains("two-bad.jsonl:41"),
            qPrintable(label("dataProblem")->text()));
        QVERIFY2(label("dataProblem")->text().contains("tick “Skip malformed lines”"),
            qPrintable(label("dataProblem")->text()));
        QVERIFY(!label("dataProblem")->text().contains("--"));
        QVERIFY(!start->isEnabled());
        QCOMPARE(nameField->mapTo(&page, QPoint()), fieldAt);
        page.start();
        QTRY_VERIFY2(page.messageText().contains("Not started"), qPrintable(page.messageText()));

        // Skipped: a warning that counts them, and Start.
        page.findChild<QCheckBox*>("skipBadLines")->setChecked(true);
        QTRY_VERIFY(label("dataProblem")->isHidden());
        QVERIFY2(label("dataNote")->text().contains("2 malformed lines will be skipped"),
            qPrintable(label("dataNote")->text()));
        QTRY_VERIFY(start->isEnabled());

        // 300 records, 2 ranks: a micro-batch of 200 takes 400 a micro-step.
        page.findChild<QSpinBox*>("ranks")->setValue(2);
        page.findChild<QSpinBox*>("microBatch")->setValue(200);
        QTRY_VERIFY2(label("fitProblem")->text().contains("training data has 300"),
            qPrintable(label("fitProblem")->text()));
        QVERIFY2(label("fitProblem")->text().contains("set “Micro-batch” to 150 or less"),
            qPrintable(label("fitProblem")->text()));
        QVERIFY(!label("fitProblem")->text().contains("--"));
        QVERIFY(!start->isEnabled());
        QCOMPARE(nameField->mapTo(&page, QPoint()), fieldAt);
        page.findChild<QSpinBox*>("microBatch")->setValue(150);
        QTRY_VERIFY(label("fitProblem")->isHidden());
        QTRY_VERIFY(start->isEnabled());

        // Evaluation every N steps with no held-out data: what the engine refuses at its start.
        page.findChild<QSpinBox*>("evalEvery")->setValue(5);
        QTRY_VERIFY2(label("dataProblem")->text().contains("needs held-out data"),
            qPrintable(label("dataProblem")->text()));
        QVERIFY(label("dataProblem")->text().contains("“Eval data”"));
        page.findChild<QSpinBox*>("evalEvery")->setValue(0);
        QTRY_VERIFY(start->isEnabled());

        // The same spec through the CLI's words.
        shard::jobs::PreflightInput in;
        in.spec = page.spec().value();
        in.spec.skipBadLines = false;
        in.spec.microBatch = 200;
        const shard::jobs::Preflight cli = shard::jobs::preflight(in);
        QVERIFY2(cli.data.contains("pass --skip-bad-lines"), qPrintable(cli.data));
        in.spec.skipBadLines = true;
        QVERIFY2(shard::jobs::preflight(in).fit.contains("set --micro-batch to 150 or less"),
            qPrintable(shard::jobs::preflight(in).fit));
    }

    // Pipeline parallel (run spec pipeline_parallel, virtual_stages): carried into the spec and
    // the command; what the worker refuses (more stages than layers, interleaving over
    // micro-batches that are not a multiple of the stages) is said before a start.
    void pipelineParallel()
    {
        LaunchPage page;
        page.show();
        shard::jobs::RunService store(m_tmp.filePath("store-pp.sqlite"));
        page.setStore(&store);
        page.setRunsRoot(m_tmp.filePath("runs"));
        page.setRunName("pp");
        page.setSteps(10);
        page.findChild<QSpinBox*>("seqLen")->setValue(64);
        page.setModelFolder(validModelFolder());
        page.setDataFiles({validDataFile()});
        auto* problem = page.findChild<QLabel*>("fitProblem");
        auto* start = page.findChild<QPushButton*>("start");
        auto* pp = page.findChild<QSpinBox*>("pipelineParallel");
        auto* chunks = page.findChild<QSpinBox*>("virtualStages");
        auto* ranks = page.findChild<QSpinBox*>("ranks");
        auto* accum = page.findChild<QSpinBox*>("gradAccum");
        QVERIFY(problem && start && pp && chunks && ranks && accum);
        // Chunks per stage are offered with two stages or more; one stage's spec has 1.
        QVERIFY(!chunks->isEnabled());
        chunks->setValue(2);
        QCOMPARE(page.fieldsSpec().virtualStages, 1);
        chunks->setValue(1);
        ranks->setValue(2);
        pp->setValue(2);
        QVERIFY(chunks->isEnabled());
        accum->setValue(2);
        QTRY_VERIFY2(problem->isHidden(), qPrintable(problem->text()));
        QTRY_VERIFY(start->isEnabled());
        auto spec = page.spec();
        QVERIFY2(spec, qPrintable(spec.error()));
        QCOMPARE(spec.value().pipelineParallel, 2);
        QTRY_VERIFY2(page.commandPreview().contains("\"pipeline_parallel\": 2"),
            qPrintable(page.commandPreview()));
        // Interleaved: two chunks a stage over 2 micro-batches runs; over 3 it does not.
        chunks->setValue(2);
        QTRY_VERIFY2(problem->isHidden(), qPrintable(problem->text()));
        spec = page.spec();
        QVERIFY2(spec, qPrintable(spec.error()));
        QCOMPARE(spec.value().virtualStages, 2);
        accum->setValue(3);
        QTRY_VERIFY2(problem->text().contains("is not a multiple of 2")
                && problem->text().contains("“Chunks per stage”"),
            qPrintable(problem->text()));
        QVERIFY(!start->isEnabled());
        // tiny-1m has 4 layers: 8 virtual stages do not fit.
        accum->setValue(2);
        chunks->setValue(4);
        QTRY_VERIFY2(problem->text().contains("8 virtual stages need a layer each"),
            qPrintable(problem->text()));
        QVERIFY(!start->isEnabled());
    }

    // Tensor parallel (run spec tensor_parallel): carried into the spec and the command; a
    // TP copy of the model takes one micro-batch for its ranks; what the worker refuses (a size
    // that does not divide the heads or the ranks, QLoRA at a size that cuts NF4 blocks) is said
    // before a start, in the page's words.
    void tensorParallel()
    {
        LaunchPage page;
        page.show();
        shard::jobs::RunService store(m_tmp.filePath("store-tp.sqlite"));
        page.setStore(&store);
        page.setRunsRoot(m_tmp.filePath("runs"));
        page.setRunName("tp");
        page.setSteps(10);
        page.findChild<QSpinBox*>("seqLen")->setValue(64);
        page.setModelFolder(validModelFolder());
        page.setDataFiles({validDataFile()});
        auto label = [&](const char* name) { return page.findChild<QLabel*>(name); };
        auto* start = page.findChild<QPushButton*>("start");
        auto* tp = page.findChild<QSpinBox*>("tensorParallel");
        auto* ranks = page.findChild<QSpinBox*>("ranks");
        QVERIFY(start && tp && ranks);
        // One record: two data-parallel copies need two a micro-step, one TP2 copy needs one.
        ranks->setValue(2);
        QTRY_VERIFY2(label("fitProblem")->text().contains("training data has 1"),
            qPrintable(label("fitProblem")->text()));
        tp->setValue(2);
        QTRY_VERIFY2(label("fitProblem")->isHidden(), qPrintable(label("fitProblem")->text()));
        QTRY_VERIFY(start->isEnabled());
        const auto spec = page.spec();
        QVERIFY2(spec, qPrintable(spec.error()));
        QCOMPARE(spec.value().tensorParallel, 2);
        QTRY_VERIFY2(page.commandPreview().contains("\"tensor_parallel\": 2"),
            qPrintable(page.commandPreview()));
        // Sequence parallel: offered with tensor parallel; a --seq-len it does not divide is
        // said in the page's words.
        auto* sp = page.findChild<QCheckBox*>("sequenceParallel");
        QVERIFY(sp && sp->isEnabled());
        sp->setChecked(true);
        QTRY_VERIFY2(label("fitProblem")->isHidden(), qPrintable(label("fitProblem")->text()));
        QVERIFY(page.spec().value().sequenceParallel);
        QTRY_VERIFY2(page.commandPreview().contains("\"sequence_parallel\": true"),
            qPrintable(page.commandPreview()));
        page.findChild<QSpinBox*>("seqLen")->setValue(63);
        QTRY_VERIFY2(label("fitProblem")->text().contains("“Sequence parallel”")
                && label("fitProblem")->text().contains("use --seq-len 62 or 64")
                && label("fitProblem")->text().contains("--seq-len is “Sequence length”"),
            qPrintable(label("fitProblem")->text()));
        QVERIFY(!start->isEnabled());
        page.findChild<QSpinBox*>("seqLen")->setValue(64);
        sp->setChecked(false);
        tp->setValue(1);
        QVERIFY(!sp->isEnabled());
        QVERIFY(!page.spec().value().sequenceParallel); // not without tensor parallel
        tp->setValue(2);
        // 3 does not divide tiny-1m's 4 heads.
        ranks->setValue(3);
        tp->setValue(3);
        QTRY_VERIFY2(
            label("fitProblem")->text().contains("does not divide the model's 4 attention heads"),
            qPrintable(label("fitProblem")->text()));
        QVERIFY(!start->isEnabled());
        // ...nor the 2 ranks.
        ranks->setValue(2);
        QVERIFY2(page.spec().error().contains("tensor parallel size 3 does not divide the 2 ranks"),
            qPrintable(page.spec().error()));
        // LoRA splits its adapters with their base, and QLoRA its NF4 base where each rank's part
        // of o and down holds whole blocks of 64 inputs: at TP2 (64 of o's 128), not at TP4.
        tp->setValue(2);
        auto* method = page.findChild<QComboBox*>("method");
        method->setCurrentIndex(method->findData("lora"));
        QTRY_VERIFY2(label("fitProblem")->isHidden(), qPrintable(label("fitProblem")->text()));
        method->setCurrentIndex(method->findData("qlora"));
        QTRY_VERIFY2(label("fitProblem")->isHidden(), qPrintable(label("fitProblem")->text()));
        ranks->setValue(4);
        tp->setValue(4);
        QTRY_VERIFY2(label("fitProblem")->text().contains("NF4 quantises whole blocks of 64")
                && label("fitProblem")->text().contains("“Tensor parallel”")
                && label("fitProblem")->text().contains("“Method”"),
            qPrintable(label("fitProblem")->text()));
        QVERIFY(!start->isEnabled());
    }

    void remoteTargetsPreviewAndRefusal()
    {
        QTcpServer probe; // a loopback port nobody listens on
        QVERIFY(probe.listen(QHostAddress::LocalHost));
        const int port = probe.serverPort();
        probe.close();
        LaunchPage page;
        page.show();
        page.setModelFolder("/models/tiny");
        page.setDataFiles({"/data/train.jsonl"});
        page.setRunsRoot("/scratch/runs");
        page.setHosts({{"closed", "ssh", "127.0.0.1", port, "nobody", {}},
            {"cluster", "slurm", "", 22, {}, "debug"}});
        page.setTarget(2);
        QTRY_VERIFY(page.commandPreview().contains("#SBATCH"));
        QVERIFY2(page.commandPreview().contains("srun"), qPrintable(page.commandPreview()));
        QVERIFY(page.commandPreview().contains("debug"));
        QVERIFY(page.target().kind == shard::jobs::TargetKind::Slurm);
        {
            // The preview is the script the Slurm launcher writes, and its launch spec.
            const auto req = page.request().value();
            shard::jobs::SlurmOptions options;
            options.partition = "debug";
            const QString script
                = shard::jobs::SlurmLauncher::sbatchScript(req, options, req.runDir).value();
            // (the rendezvous port is random per script on one node: compare all but that)
            QVERIFY(script.contains("train --config " + req.runDir + "/launch-spec.json"));
            for (const QString& line : script.split('\n'))
                if (!line.contains("--master-port"))
                    QVERIFY2(page.commandPreview().contains(line), qPrintable(line));
            QVERIFY(page.commandPreview().contains(
                QString::fromUtf8(shard::jobs::launchSpecJson(req.spec, req.runDir))));
            // The host's defaults: no time limit of its own, the checkpoint signal 120 s before.
            QVERIFY(!page.commandPreview().contains("#SBATCH --time"));
            QVERIFY(page.commandPreview().contains("#SBATCH --signal=USR1@120\n"));
        }
        {
            // A cluster entry's time limit and checkpoint lead reach the job.
            HostEntry timed {"timed", "slurm", "", 22, {}, "debug"};
            timed.timeLimit = "1-12:00:00";
            timed.preemptSignalSec = 600;
            page.setHosts({{"closed", "ssh", "127.0.0.1", port, "nobody", {}}, timed});
            page.setTarget(2);
            QTRY_VERIFY2(page.commandPreview().contains("#SBATCH --time=1-12:00:00\n"),
                qPrintable(page.commandPreview()));
            QVERIFY(page.commandPreview().contains("#SBATCH --signal=USR1@600\n"));
            timed.preemptSignalSec = 0; // off: no signal, the job still requeues after a failure
            page.setHosts({{"closed", "ssh", "127.0.0.1", port, "nobody", {}}, timed});
            page.setTarget(2);
            QTRY_VERIFY(!page.commandPreview().contains("--signal=USR1"));
            page.setHosts({{"closed", "ssh", "127.0.0.1", port, "nobody", {}},
                {"cluster", "slurm", "", 22, {}, "debug"}});
            page.setTarget(2);
        }
        // A GPU run on the cluster: the job asks for the spec's nodes and a GPU per rank.
        shard::test::field<QSpinBox>(page, "ranks")->setValue(4);
        shard::test::field<QSpinBox>(page, "nodes")->setValue(2);
        shard::test::selectData(shard::test::field<QComboBox>(page, "device"), "cuda");
        QTRY_VERIFY2(page.commandPreview().contains("#SBATCH --gpus-per-node=4\n"),
            qPrintable(page.commandPreview()));
        QVERIFY(page.commandPreview().contains("#SBATCH --nodes=2\n"));
        shard::test::field<QSpinBox>(page, "ranks")->setValue(1);
        shard::test::field<QSpinBox>(page, "nodes")->setValue(1);
        shard::test::selectData(shard::test::field<QComboBox>(page, "device"), "cpu");
        page.setTarget(1);
        QTRY_VERIFY(page.commandPreview().contains("over SSH"));
        QCOMPARE(page.target().sshHost(), QString("nobody@127.0.0.1:%1").arg(port));
        {
            // The preview is the script SshLauncher::start runs on the host.
            const auto req = page.request().value();
            const QString script
                = shard::jobs::SshLauncher::nodeScript(req, req.runDir, 1, 0, {}, req.masterPort);
            QVERIFY2(page.commandPreview().contains(script), qPrintable(page.commandPreview()));
            QVERIFY(script.contains("setsid nohup"));
        }
        // Where model and data come from is the user's choice, said in the preview.
        auto* inputs = page.findChild<QComboBox*>("inputs");
        QVERIFY(inputs && !inputs->isHidden());
        QVERIFY2(page.commandPreview().contains("must be on"), qPrintable(page.commandPreview()));
        QVERIFY(page.checkInputs().model.isEmpty()); // on the host: not checked here
        inputs->setCurrentIndex(inputs->findData("copy"));
        QTRY_VERIFY(page.commandPreview().contains("copied to"));
        QVERIFY(page.request().value().copyInputs);
        QVERIFY2(page.checkInputs().model.contains("No such folder"),
            qPrintable(page.checkInputs().model)); // copied from here: checked here
        inputs->setCurrentIndex(inputs->findData("host"));
        QTRY_VERIFY(page.commandPreview().contains("must be on"));
        if (QStandardPaths::findExecutable("ssh").isEmpty())
            QSKIP("the OpenSSH client is not installed");
        shard::jobs::RunService store(m_tmp.filePath("remote-store.sqlite"));
        page.setStore(&store);
        QSignalSpy errors(&store, &shard::jobs::RunService::errorOccurred);
        page.start();
        QTRY_VERIFY_WITH_TIMEOUT(errors.count() >= 1, 30000);
        QTRY_VERIFY(!page.messageText().isEmpty());
        QVERIFY2(page.messageText().contains("127.0.0.1"), qPrintable(page.messageText()));
    }

    // Preference tuning: the objective's fields become the spec, packing and a live reference
    // with full fine-tuning are not offered, the data kind is checked against the objective,
    // and the first pairs are shown through the chat template.
    void preferenceObjective()
    {
        LaunchPage page;
        page.show();
        page.setRunsRoot(m_tmp.filePath("runs"));
        page.setRunName("dpo");
        page.setSteps(10);
        const QString model = validModelFolder() + "-tok";
        QDir().mkpath(model);
        for (const char* name : {"config.json", "model.safetensors"})
            QFile::copy(validModelFolder() + "/" + name, model + "/" + name);
        shard::tokenizer::writeDemoTokenizer(model.toStdString(), 512);
        page.setModelFolder(model);
        const QString pairs = m_tmp.filePath("pairs.jsonl");
        QFile f(pairs);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(R"({"prompt":[{"role":"user","content":"What is 2 + 2?"}],)"
                R"("chosen":[{"role":"assistant","content":"4"}],)"
                R"("rejected":[{"role":"assistant","content":"5"}]})"
                "\n"
                R"({"prompt":"Name a colour.","chosen":"blue","rejected":"blue"})"
                "\n");
        f.close();
        page.setDataFiles({pairs});
        auto label = [&](const char* name) { return page.findChild<QLabel*>(name); };
        // Pairs with the supervised objective: say which objective reads them.
        QTRY_VERIFY2(label("dataProblem")->text().contains("DPO or ORPO"),
            qPrintable(label("dataProblem")->text()));
        auto* objective = page.findChild<QComboBox*>("objective");
        // The pairs are read with the tokenizer by the preflight, off the UI thread: when the
        // form has been taken in, the preview still waits for them.
        QStringList previewAtUpdate;
        connect(&page, &LaunchPage::previewChanged, this,
            [&] { previewAtUpdate << page.pairPreview(); });
        objective->setCurrentIndex(objective->findData("dpo"));
        // Pairs for DPO; the second has nothing to prefer, as the engine would refuse it.
        QTRY_VERIFY2(label("dataProblem")->text().contains("are the same answer"),
            qPrintable(label("dataProblem")->text()));
        page.findChild<QCheckBox*>("skipBadLines")->setChecked(true);
        QTRY_VERIFY(label("dataProblem")->isHidden());
        auto* packing = page.findChild<QCheckBox*>("packing");
        QVERIFY(!packing->isEnabled());
        auto* preview = page.findChild<QPlainTextEdit*>("pairPreview");
        QTRY_VERIFY(preview->isVisible());
        QTRY_VERIFY2(page.pairPreview().contains("chosen:"), qPrintable(page.pairPreview()));
        QVERIFY2(previewAtUpdate.contains(QString("(reading the first pairs…)")),
            qPrintable(previewAtUpdate.join(" | ")));
        // The first pair through the Llama 3 template; the second is refused with its reason.
        QVERIFY2(page.pairPreview().contains("What is 2 + 2?")
                && page.pairPreview().contains("<|start_header_id|>assistant"),
            qPrintable(page.pairPreview()));
        QVERIFY2(page.pairPreview().contains("line 2: \"chosen\" and \"rejected\" are the same"),
            qPrintable(page.pairPreview()));
        page.findChild<QDoubleSpinBox*>("dpoBeta")->setValue(0.25);
        auto spec = page.spec();
        QVERIFY2(spec, qPrintable(spec.error()));
        QCOMPARE(spec.value().objective, std::string("dpo"));
        QCOMPARE(spec.value().dpoBeta, 0.25);
        QCOMPARE(spec.value().resolvedReference(), std::string("precomputed"));
        QVERIFY(!spec.value().packing);
        QVERIFY(page.commandPreview().contains("\"objective\": \"dpo\""));
        // A live reference: with LoRA the base, with full fine-tuning a frozen copy of the
        // model, which the engine places over data-parallel ranks only (not under pipeline or
        // tensor parallel, where LoRA's is still offered).
        auto* reference = page.findChild<QComboBox*>("reference");
        auto* items = qobject_cast<QStandardItemModel*>(reference->model());
        QVERIFY(items && items->item(reference->findData("live"))->isEnabled());
        reference->setCurrentIndex(reference->findData("live"));
        QCOMPARE(page.spec().value().resolvedReference(), std::string("live"));
        QCOMPARE(page.spec().value().method, std::string("full"));
        auto* method = page.findChild<QComboBox*>("method");
        auto* ranks = page.findChild<QSpinBox*>("ranks");
        auto* pp = page.findChild<QSpinBox*>("pipelineParallel");
        ranks->setValue(2);
        pp->setValue(2);
        QTRY_VERIFY(!items->item(reference->findData("live"))->isEnabled());
        QCOMPARE(reference->currentData().toString(), QString("auto"));
        method->setCurrentIndex(method->findData("lora"));
        QVERIFY(items->item(reference->findData("live"))->isEnabled());
        reference->setCurrentIndex(reference->findData("live"));
        QCOMPARE(page.spec().value().resolvedReference(), std::string("live"));
        method->setCurrentIndex(method->findData("full"));
        QCOMPARE(reference->currentData().toString(), QString("auto"));
        pp->setValue(1);
        QTRY_VERIFY(items->item(reference->findData("live"))->isEnabled());
        // Label smoothing goes with the sigmoid loss only.
        auto* loss = page.findChild<QComboBox*>("dpoLoss");
        loss->setCurrentIndex(loss->findData("ipo"));
        QVERIFY(!page.findChild<QDoubleSpinBox*>("dpoLabelSmoothing")->isEnabled());
        QVERIFY(page.spec());
        // Pipeline stages train DPO too (the pair loss on the last stage): nothing to refuse.
        ranks->setValue(2);
        pp->setValue(2);
        QTRY_VERIFY(page.spec() && page.spec().value().pipelineParallel == 2);
        QTRY_VERIFY2(label("fitProblem")->isHidden(), qPrintable(label("fitProblem")->text()));
        QCOMPARE(page.spec().value().objective, std::string("dpo"));
        pp->setValue(1);
        ranks->setValue(1);
        // Supervised data with a preference objective.
        page.setDataFiles({validDataFile()});
        QTRY_VERIFY2(label("dataProblem")->text().contains("holds no preference pairs"),
            qPrintable(label("dataProblem")->text()));
        objective->setCurrentIndex(objective->findData("sft"));
        QTRY_VERIFY(label("dataProblem")->isHidden());
        QVERIFY(packing->isEnabled());
        QVERIFY(page.pairPreview().isEmpty());
    }

private:
    // A folder that passes the Launch page's checks: config.json of tiny-1m, a weights file (its
    // contents are the worker's business) and a real tokenizer (the preflight reads the data
    // with it).
    QString validModelFolder()
    {
        const QString dir = m_tmp.filePath("model-ok");
        QDir().mkpath(dir);
        QFile config(dir + "/config.json");
        if (config.open(QIODevice::WriteOnly))
            config.write(QByteArray::fromStdString(
                shard::plan::toHfConfig(*shard::plan::findPreset("tiny-1m")).dump()));
        QFile weights(dir + "/model.safetensors");
        if (weights.open(QIODevice::WriteOnly))
            weights.write("{}");
        shard::tokenizer::writeDemoTokenizer(dir.toStdString(), 512);
        return dir;
    }
    QString validDataFile()
    {
        const QString path = m_tmp.filePath("ok.jsonl");
        QFile f(path);
        if (f.open(QIODevice::WriteOnly))
            f.write("{\"text\": \"hello\"}\n");
        return path;
    }

    QTemporaryDir m_tmp;
    QTemporaryDir m_settings;
};

QTEST_MAIN(TstLaunchPage)
#include "tst_launch_page.moc"
