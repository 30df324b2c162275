// Hosts page: a host that refuses the connection (a real ssh client against a closed loopback
// port) gives a readable message without blocking the UI; OpenSSH failures are explained; a
// host that answers (a real sshd on loopback, this build's worker on its PATH) reports its GPUs
// as nvidia-smi lists them, "Plan for these GPUs" carries them to the Plan page, and its Doctor
// panel shows `shard doctor`'s checks run there (and here).
#include <QtTest>

#include <QLineEdit>
#include <QPushButton>
#include <QSettings>
#include <QSpinBox>
#include <QTcpServer>
#include <QTemporaryDir>
#include <QTextBrowser>

#include "widgets/hosts_page.h"
#include "widgets/main_window.h"
#include "widgets/plan_page.h"

#include "../jobs/sshd_fixture.h"
#include "studio_test_util.h"

using namespace shard::widgets;

class TstHostsPage : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase()
    {
        QCoreApplication::setOrganizationName("ShardStudioTest");
        QSettings::setDefaultFormat(QSettings::IniFormat);
        QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, m_settingsDir.path());
    }

    void refusingHostShowsMessage()
    {
        if (QStandardPaths::findExecutable("ssh").isEmpty())
            QSKIP("the OpenSSH client is not installed");
        // A port that was free a moment ago: nothing listens there.
        QTcpServer probe;
        QVERIFY(probe.listen(QHostAddress::LocalHost));
        const int port = probe.serverPort();
        probe.close();

        HostsPage page;
        page.show();
        page.addHost({"closed", "ssh", "127.0.0.1", port, "nobody", {}});
        QSignalSpy finished(&page, &HostsPage::testFinished);
        page.testSelected();
        // testSelected returned before ssh answered: the UI thread did not wait on it.
        QCOMPARE(finished.count(), 0);
        QVERIFY(page.testing());
        QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, 15000);
        QCOMPARE(finished.first().at(0).toBool(), false);
        const QString message = finished.first().at(1).toString();
        QVERIFY2(message.contains("refused the connection"), qPrintable(message));
        QVERIFY(message.contains(QString::number(port)));
        QCOMPARE(page.messageText(), message);
    }

    void testedHostReportsItsGpusForThePlan()
    {
        if (QStandardPaths::findExecutable("ssh").isEmpty())
            QSKIP("the OpenSSH client is not installed");
        const QString worker = shard::test::findWorker();
        if (worker.isEmpty())
            QSKIP("no shard-worker in this build");
        // The "host": a loopback sshd whose sessions find this build's worker and an nvidia-smi
        // on their PATH. This machine has no NVIDIA GPU, so the nvidia-smi is a script that
        // answers the query the way the driver's tool does on a 2 x H200 node.
        QTemporaryDir bin;
        QVERIFY(QFile::link(worker, bin.filePath("shard-worker")));
        {
            QFile smi(bin.filePath("nvidia-smi"));
            QVERIFY(smi.open(QIODevice::WriteOnly));
            // The Test's query, and the Doctor's (with compute capability and driver).
            smi.write("#!/bin/sh\n"
                      "case \"$1\" in\n"
                      "--query-gpu=name,memory.total) g='NVIDIA H200, 143771 MiB' ;;\n"
                      "--query-gpu=name,memory.total,compute_cap,driver_version)\n"
                      "  g='NVIDIA H200, 143771 MiB, 9.0, 550.54.15' ;;\n"
                      "*) exit 2 ;;\n"
                      "esac\n"
                      "echo \"$g\"; echo \"$g\"\n");
            smi.close();
            smi.setPermissions(smi.permissions() | QFile::ExeOwner);
        }
        SshdFixture sshd;
        sshd.extraServerConfig = "SetEnv PATH=" + bin.path() + ":/usr/local/bin:/usr/bin:/bin\n";
        QString why;
        if (!sshd.start(1, &why))
            QSKIP(qPrintable(why));
        qputenv("SHARD_SSH_CONFIG", sshd.configFile().toUtf8());

        MainWindow window(m_settingsDir.filePath("store.sqlite"));
        window.show();
        HostsPage* page = window.hostsPage();
        page->setHosts({});
        page->addHost({"box", "ssh", "node0", 22, {}, {}});
        page->selectHost(0);
        auto* plan = page->findChild<QPushButton*>("planForHost");
        QVERIFY(plan);
        QVERIFY(!plan->isEnabled()); // not tested yet: no GPUs known
        QSignalSpy finished(page, &HostsPage::testFinished);
        page->testSelected();
        QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, 30000);
        const QString message = finished.first().at(1).toString();
        QVERIFY2(finished.first().at(0).toBool(), qPrintable(message));
        QVERIFY2(message.contains("shard-worker"), qPrintable(message));
        QVERIFY2(message.contains("2 GPUs: NVIDIA H200, 140.4 GiB each"), qPrintable(message));
        QCOMPARE(page->hosts()[0].gpuCount, 2);
        QCOMPARE(page->hosts()[0].gpuName, QString("NVIDIA H200"));
        QVERIFY(plan->isEnabled());

        // Plan for them: the Plan page plans 2 x the catalogue's H200.
        QTest::mouseClick(plan, Qt::LeftButton);
        QCOMPARE(window.currentPage(), Page::Plan);
        PlanPage* planPage = window.planPage();
        QCOMPARE(shard::test::field<QComboBox>(*planPage, "device")->currentData().toString(),
            QString("h200"));
        QCOMPARE(shard::test::field<QSpinBox>(*planPage, "gpus")->value(), 2);
        // The plan itself (computed after the page's debounce) is for 2 cards of 141 GiB.
        QTRY_COMPARE_WITH_TIMEOUT(
            planPage->input() ? planPage->input()->gpusPerNode : int64_t(0), int64_t(2), 30000);
        QCOMPARE(planPage->input()->device.memoryBytes, int64_t(141) << 30);

        // What the test found is kept with the host (and saved again from the form).
        page->saveSettings();
        HostsPage again;
        again.loadSettings();
        QCOMPARE(again.hosts()[0].gpuCount, 2);
        QCOMPARE(again.hosts()[0].gpuMemoryMiB, 143771.0);

        // The Doctor panel for that host: `shard doctor`'s checks run there over SSH. Its worker
        // is this build's CPU LibTorch, so the GPUs it lists cannot be used: missing, with the
        // set-up command that fixes it.
        window.showPage(Page::Hosts);
        page->selectHost(0);
        QSignalSpy doctored(page, &HostsPage::doctorFinished);
        QTest::mouseClick(shard::test::field<QPushButton>(*page, "doctorHost"), Qt::LeftButton);
        QTRY_COMPARE_WITH_TIMEOUT(doctored.count(), 1, 60000);
        QVERIFY2(doctored.first().at(0).toBool(), qPrintable(page->messageText()));
        QCOMPARE(page->doctorSubject(), QString("box"));
        const auto check = [&](const QString& name) {
            for (const auto& c : page->doctorChecks())
                if (c.name == name)
                    return c;
            return shard::jobs::DoctorCheck {};
        };
        QCOMPARE(check("shard-worker").status, QString("ok"));
        QVERIFY2(check("gpu").detail.startsWith("2 GPUs, driver 550.54.15"),
            qPrintable(check("gpu").detail));
        QVERIFY(check("gpu").detail.contains("compute capability 9.0"));
        QCOMPARE(check("gpu-memory").status, QString("ok"));
        auto* report = shard::test::field<QTextBrowser>(*page, "doctorReport");
        QVERIFY(report->toPlainText().contains("What box can train with"));
        if (check("shard-worker").detail.contains("built with CUDA")) {
            // A CUDA build (CI's CUDA root): the driver is checked against its CUDA instead.
            QCOMPARE(check("driver").status, QString("ok"));
            QCOMPARE(check("cuda-libtorch").status, QString());
        } else {
            // The CPU build: its worker cannot use the host's GPUs.
            QCOMPARE(check("cuda-libtorch").status, QString("missing"));
            QVERIFY(report->toPlainText().contains(
                "Fix: on Debian 13: SHARD_GPU=1 bash scripts/setup.sh"));
        }
        int missing = 0;
        for (const auto& c : page->doctorChecks())
            missing += c.status == "missing";
        QVERIFY2(page->messageText().contains(missing == 0 ? QString("box has what it needs")
                         : missing == 1 ? QString("one thing box needs is missing")
                                        : QString("%1 things box needs are missing").arg(missing)),
            qPrintable(page->messageText()));
        if (!qEnvironmentVariableIsEmpty("SHARD_SCREENSHOT_DIR"))
            window.grab().save(qEnvironmentVariable("SHARD_SCREENSHOT_DIR") + "/hosts-doctor.png");

        // This machine: the same checks, here.
        QTest::mouseClick(shard::test::field<QPushButton>(*page, "doctorLocal"), Qt::LeftButton);
        QTRY_COMPARE_WITH_TIMEOUT(doctored.count(), 2, 60000);
        QCOMPARE(page->doctorSubject(), QString("this machine"));
        QCOMPARE(check("shard-worker").status, QString("ok"));
        QVERIFY(check("system").detail.contains("GiB RAM"));
        qunsetenv("SHARD_SSH_CONFIG");
    }

    void hostsPersist()
    {
        {
            HostsPage page;
            page.addHost({"gpu-box", "ssh", "gpu-box.lan", 2222, "me", {}});
            page.addHost({"cluster", "slurm", "", 22, {}, "debug"});
            page.saveSettings();
        }
        HostsPage again;
        again.loadSettings();
        QCOMPARE(again.hosts().size(), 2);
        QCOMPARE(again.hosts()[0].port, 2222);
        QCOMPARE(again.hosts()[1].partition, QString("debug"));
        QCOMPARE(again.hosts()[1].preemptSignalSec, 120); // the default lead
    }

    // A Slurm cluster's time limit and checkpoint lead: entered in the form (only for Slurm),
    // saved with the host, kept across a restart; a time sbatch cannot read is not accepted.
    void slurmTimeLimitAndCheckpointLead()
    {
        HostsPage page;
        page.show();
        auto* time = page.findChild<QLineEdit*>("timeLimit");
        auto* lead = page.findChild<QSpinBox*>("preemptSignal");
        QVERIFY(time && lead);
        page.addHost({"box", "ssh", "box.lan", 22, {}, {}});
        QVERIFY(!time->isEnabled() && !lead->isEnabled()); // SSH hosts have neither
        HostEntry cluster {"cluster", "slurm", "", 22, {}, "gpu"};
        cluster.timeLimit = "04:00:00";
        cluster.preemptSignalSec = 300;
        page.addHost(cluster);
        page.selectHost(1);
        QVERIFY(time->isEnabled() && lead->isEnabled());
        QCOMPARE(time->text(), QString("04:00:00"));
        QCOMPARE(lead->value(), 300);
        // The validator takes sbatch's forms only.
        int pos = 0;
        for (QString ok : {"90", "30:00", "02:00:00", "1-12", "1-12:30:00"})
            QVERIFY2(
                time->validator()->validate(ok, pos) == QValidator::Acceptable, qPrintable(ok));
        for (QString bad : {"2h", "1 day", "1:2:3:4"})
            QVERIFY2(
                time->validator()->validate(bad, pos) != QValidator::Acceptable, qPrintable(bad));
        page.saveSettings();
        HostsPage again;
        again.loadSettings();
        QCOMPARE(again.hosts().size(), 2);
        QCOMPARE(again.hosts()[1].timeLimit, QString("04:00:00"));
        QCOMPARE(again.hosts()[1].preemptSignalSec, 300);
    }

    void testCommandUsesBatchModeAndChecksKeys()
    {
        const QStringList cmd = HostsPage::testCommand({"h", "ssh", "example", 2200, "u", {}});
        QCOMPARE(cmd.front(), QString("ssh"));
        QVERIFY(cmd.contains("BatchMode=yes"));
        QVERIFY(cmd.contains("StrictHostKeyChecking=yes"));
        QVERIFY(cmd.contains("u@example"));
        QCOMPARE(cmd.at(cmd.indexOf("-p") + 1), QString("2200"));
        QCOMPARE(HostsPage::testCommand({"c", "slurm", "", 22, {}, {}}).front(), QString("sinfo"));
    }

    void failuresAreExplained_data()
    {
        QTest::addColumn<QString>("stderrText");
        QTest::addColumn<QString>("expected");
        QTest::newRow("auth") << "u@h: Permission denied (publickey)."
                              << "refused authentication";
        QTest::newRow("unknown") << "ssh: Could not resolve hostname nope: Name or service"
                                 << "unknown host name";
        QTest::newRow("timeout") << "ssh: connect to host 10.0.0.1 port 22: Connection timed out"
                                 << "unreachable";
        QTest::newRow("hostkey") << "Host key verification failed."
                                 << "host key";
        QTest::newRow("worker") << "shard-worker: not found on PATH"
                                << "not installed";
    }
    void failuresAreExplained()
    {
        QFETCH(QString, stderrText);
        QFETCH(QString, expected);
        const QString m = HostsPage::explainFailure({"h", "ssh", "h", 22, {}, {}}, 255, stderrText);
        QVERIFY2(m.contains(expected), qPrintable(m));
    }

private:
    QTemporaryDir m_settingsDir;
};

QTEST_MAIN(TstHostsPage)
#include "tst_hosts_page.moc"
