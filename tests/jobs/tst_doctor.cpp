// jobs::doctor: the real checks of this machine through the real script (this build's worker,
// sh, ldconfig, dpkg), and the judgement of what the script prints on machines this one is not:
// a driver too old for the worker's CUDA, a half-installed cuDNN, a worker that cannot load
// cuDNN, GPUs too small for any preset, GPUs with a CPU-only worker, a driver whose kernel
// module and libraries differ. Each bad case names what is wrong and the command that fixes it.
#include <thread>

#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTest>

#include "jobs/doctor.h"
#include "protocol/cuda_driver.h"

using namespace shard::jobs;

namespace {

QString builtWorker()
{
    QString w = qEnvironmentVariable("SHARD_WORKER");
    if (w.isEmpty())
        w = QStringLiteral(SHARD_BINARY_DIR "/engine/worker/shard-worker");
    return QFileInfo(w).isExecutable() ? w : QString();
}

const DoctorCheck* find(const QList<DoctorCheck>& checks, const QString& name)
{
    for (const DoctorCheck& c : checks)
        if (c.name == name)
            return &c;
    return nullptr;
}

// What doctorScript prints on a machine: the sections given, the rest as on a GPU-less Debian 13
// with a CUDA build of the worker (`worker` is its --version output).
QByteArray scriptOutput(const QByteArray& worker, const QByteArray& smi = {},
    const QByteArray& libs = {}, const QByteArray& cudnnPackage = {}, const QByteArray& driver = {})
{
    QByteArray out = "@@os\nDebian GNU/Linux 13 (trixie)\n@@cores\n16\n@@mem-kib\n131072000\n"
                     "@@worker-path\n/usr/bin/shard-worker\n@@worker\n"
        + worker + "\n@@worker-exit\n" + (worker.contains("LibTorch") ? "0" : "127") + "\n";
    out += "@@driver\n" + driver + "\n";
    if (!smi.isEmpty())
        out += "@@smi\n" + smi + "\n@@smi-exit\n" + (smi.contains("MiB") ? "0" : "18") + "\n";
    out += "@@libs\n" + libs + "\n@@cudnn-package\n" + cudnnPackage
        + "\n@@ssh\nOpenSSH_10.0p2 Debian-7, OpenSSL 3.5.1 1 Jul 2025\n@@slurm\nslurm "
          "24.11.5\n@@end\n";
    return out;
}

const QByteArray kCudaWorker = "shard-worker 0.1.0 (abc1234)\nLibTorch 2.6.0, built with CUDA "
                               "12.4, NCCL backend on (NCCL 2.21.5)";
const QByteArray kCpuWorker
    = "shard-worker 0.1.0 (abc1234)\nLibTorch 2.6.0, built without CUDA, NCCL backend off";
const QByteArray kLibs = "\tlibnccl.so.2 (libc6,x86-64) => /lib/x86_64-linux-gnu/libnccl.so.2\n"
                         "\tlibcudnn.so.9 (libc6,x86-64) => /lib/x86_64-linux-gnu/libcudnn.so.9";

} // namespace

class TestDoctor : public QObject {
    Q_OBJECT

private Q_SLOTS:
    // This machine through the script: the facts are this machine's, and the build's worker is
    // found and named with its LibTorch.
    void thisMachine()
    {
        const QString worker = builtWorker();
        if (worker.isEmpty())
            QSKIP("no shard-worker in this build");
        QProcess sh;
        sh.start("sh", {"-c", doctorScript(worker)});
        QVERIFY(sh.waitForFinished(60000));
        const DoctorFacts f = parseDoctorFacts(sh.readAllStandardOutput(), worker);
        QVERIFY(f.complete);
        QCOMPARE(f.cores, int(std::thread::hardware_concurrency()));
        QVERIFY2(f.ramGiB > 0.5, qPrintable(QString::number(f.ramGiB)));
        QCOMPARE(f.workerExit, 0);
        QCOMPARE(QFileInfo(QString::fromStdString(f.workerPath)).canonicalFilePath(),
            QFileInfo(worker).canonicalFilePath());
        QVERIFY(f.workerVersion.find("LibTorch") != std::string::npos);

        const auto checks = doctorLocal(worker);
        QVERIFY(checks.ok());
        QVERIFY(!workerMissing(checks.value()));
        const DoctorCheck* w = find(checks.value(), "shard-worker");
        QVERIFY(w && w->status == "ok" && w->detail.contains("LibTorch"));
        const DoctorCheck* sys = find(checks.value(), "system");
        QVERIFY(sys && sys->detail.contains("GiB RAM"));
        QVERIFY(find(checks.value(), "gpu"));
        QVERIFY(!find(checks.value(), "doctor")); // the script ran to its end
        for (const DoctorCheck& c : checks.value())
            if (c.status == "missing")
                QVERIFY2(!c.fix.isEmpty(), qPrintable(c.name));
        // The text `shard doctor` prints: a line a check.
        QVERIFY(formatDoctor(checks.value()).contains(QRegularExpression("^ok +system ")));
    }

    // `shard-worker doctor` (a node with the worker alone) prints the same checks as `shard
    // doctor` for the same worker: one judgement (plan/doctor.h) behind both.
    void workerDoctor()
    {
        const QString worker = builtWorker();
        if (worker.isEmpty())
            QSKIP("no shard-worker in this build");
        QProcess p;
        p.start(worker, {"doctor", "--json"});
        QVERIFY(p.waitForFinished(90000));
        QCOMPARE(p.exitCode(), 0);
        const QJsonArray fromWorker
            = QJsonDocument::fromJson(p.readAllStandardOutput()).object().value("checks").toArray();
        const auto checks = doctorLocal(QFileInfo(worker).canonicalFilePath());
        QVERIFY(checks.ok());
        QCOMPARE(fromWorker.size(), checks.value().size());
        for (int i = 0; i < fromWorker.size(); ++i) {
            const QJsonObject c = fromWorker.at(i).toObject();
            QCOMPARE(c.value("name").toString(), checks.value().at(i).name);
            QCOMPARE(c.value("status").toString(), checks.value().at(i).status);
        }
        QVERIFY(find(checks.value(), "shard-worker")->detail.contains("LibTorch"));
        // Another worker that is not there: exit 1, the text names it and the fix.
        QProcess missing;
        missing.start(worker, {"doctor", "--worker", "/nonexistent/shard-worker"});
        QVERIFY(missing.waitForFinished(90000));
        QCOMPARE(missing.exitCode(), 1);
        const QString text = QString::fromUtf8(missing.readAllStandardOutput());
        QVERIFY2(
            text.contains(QRegularExpression("^MISSING +shard-worker +'/nonexistent/shard-worker' "
                                             "not found",
                QRegularExpression::MultilineOption)),
            qPrintable(text));
        QVERIFY2(text.contains("fix: build it"), qPrintable(text));
    }

    void missingWorker()
    {
        const auto checks = doctorLocal("/nonexistent/shard-worker");
        QVERIFY(checks.ok());
        QVERIFY(workerMissing(checks.value()));
        const DoctorCheck* w = find(checks.value(), "shard-worker");
        QCOMPARE(w->status, QString("missing"));
        QVERIFY(w->fix.contains("cmake --build"));
    }

    // The driver rules, shared with the worker's refusal of --device cuda.
    void versions()
    {
        using namespace shard::protocol;
        QCOMPARE(compareDottedVersions("470.82.01", "525.60.13"), -1);
        QCOMPARE(compareDottedVersions("550.54.15", "525.60.13"), 1);
        QCOMPARE(compareDottedVersions("525.60.13", "525.60.13"), 0);
        QCOMPARE(compareDottedVersions("8.6", "8.0"), 1);
        QCOMPARE(minimumDriverForCuda(12), std::string("525.60.13"));
        QCOMPARE(minimumDriverForCuda(13), std::string("580.65.06"));
        QVERIFY(minimumDriverForCuda(7).empty());
        const std::string proc
            = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  470.82.01  Fri Oct 22 2021";
        QCOMPARE(driverVersionFromProc(proc), std::string("470.82.01"));
        // What the worker adds when it sees no GPU: the old driver and the one it needs...
        const std::string old = noGpuDriverHint(proc, "12.4.131");
        QVERIFY2(
            old.find("470.82.01, older than 525.60.13, the least CUDA 12") != std::string::npos,
            old.c_str());
        // ...no driver at all, a new enough one that shows nothing, and nothing for a CPU build.
        QVERIFY(noGpuDriverHint("", "12.4.131").find("no NVIDIA driver") != std::string::npos);
        QVERIFY(noGpuDriverHint(
                    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue", "12.4.131")
                    .find("shows this process no GPU")
            != std::string::npos);
        QVERIFY(noGpuDriverHint(proc, "").empty());
    }

    // A driver older than the worker's CUDA: the GPUs are listed, the driver check says what
    // version is needed and how to get it; Pascal cards cannot train in bf16.
    void driverTooOld()
    {
        const auto f = parseDoctorFacts(
            scriptOutput(kCudaWorker, "NVIDIA GeForce GTX 1080 Ti, 11264 MiB, 6.1, 470.82.01",
                kLibs, "install ok installed 9.1.0.70~cuda12+1"),
            "shard-worker");
        QVERIFY(f.complete);
        const auto checks = diagnoseFacts(f);
        const DoctorCheck* d = find(checks, "driver");
        QVERIFY(d);
        QCOMPARE(d->status, QString("missing"));
        QVERIFY2(d->detail.contains("470.82.01") && d->detail.contains("525.60.13")
                && d->detail.contains("CUDA 12.4"),
            qPrintable(d->detail));
        QVERIFY(d->fix.contains("nvidia-driver"));
        const DoctorCheck* p = find(checks, "precision");
        QVERIFY(p && p->status == "warn" && p->detail.contains("6.1"));
        QVERIFY(find(checks, "gpu")->detail.contains("compute capability 6.1"));
        QCOMPARE(find(checks, "cudnn")->status, QString("ok"));
        QCOMPARE(find(checks, "nccl")->status, QString("ok"));
        // A new enough driver passes.
        const auto good = diagnoseFacts(
            parseDoctorFacts(scriptOutput(kCudaWorker, "NVIDIA H200, 143771 MiB, 9.0, 550.54.15",
                                 kLibs, "install ok installed 9.1.0.70~cuda12+1"),
                "shard-worker"));
        QCOMPARE(find(good, "driver")->status, QString("ok"));
        QVERIFY(!find(good, "precision"));
    }

    // cuDNN's package is half-configured (its download from NVIDIA failed), or installed with
    // no library: missing, with the dpkg / apt commands that finish it.
    void cudnnHalfInstalled()
    {
        const QByteArray nccl = kLibs.left(kLibs.indexOf('\n'));
        const auto half = diagnoseFacts(
            parseDoctorFacts(scriptOutput(kCudaWorker, "NVIDIA H200, 143771 MiB, 9.0, 550.54.15",
                                 nccl, "install ok half-configured 9.1.0.70~cuda12+1"),
                "shard-worker"));
        const DoctorCheck* c = find(half, "cudnn");
        QVERIFY(c);
        QCOMPARE(c->status, QString("missing"));
        QVERIFY2(c->detail.contains("half-configured"), qPrintable(c->detail));
        QVERIFY(
            c->fix.contains("dpkg --configure -a") && c->fix.contains("--reinstall nvidia-cudnn"));
        const auto noLib = diagnoseFacts(
            parseDoctorFacts(scriptOutput(kCudaWorker, "NVIDIA H200, 143771 MiB, 9.0, 550.54.15",
                                 nccl, "install ok installed 9.1.0.70~cuda12+1"),
                "shard-worker"));
        QCOMPARE(find(noLib, "cudnn")->status, QString("missing"));
        QVERIFY(find(noLib, "cudnn")->detail.contains("no libcudnn"));
        // No package and no library: a note (the engine's models do not call cuDNN).
        const auto none = diagnoseFacts(parseDoctorFacts(
            scriptOutput(kCudaWorker, "NVIDIA H200, 143771 MiB, 9.0, 550.54.15", nccl), "w"));
        QCOMPARE(find(none, "cudnn")->status, QString("warn"));
    }

    // The CUDA LibTorch cannot load without cuDNN: the worker fails, and the fix is cuDNN's.
    void workerCannotLoadCudnn()
    {
        const auto checks = diagnoseFacts(parseDoctorFacts(
            scriptOutput("shard-worker: error while loading shared libraries: libcudnn.so.9: "
                         "cannot open shared object file: No such file or directory",
                "NVIDIA H200, 143771 MiB, 9.0, 550.54.15", {},
                "install ok half-configured 9.1.0.70~cuda12+1"),
            "shard-worker"));
        QVERIFY(workerMissing(checks));
        const DoctorCheck* w = find(checks, "shard-worker");
        QVERIFY2(w->detail.contains("exit 127") && w->detail.contains("libcudnn.so.9"),
            qPrintable(w->detail));
        QVERIFY2(w->fix.contains("nvidia-cudnn"), qPrintable(w->fix));
        QCOMPARE(find(checks, "cudnn")->status, QString("missing"));
    }

    // GPUs with a CPU-only worker: the worker cannot use them; the fix is the GPU set-up.
    void gpusWithCpuWorker()
    {
        const auto checks = diagnoseFacts(
            parseDoctorFacts(scriptOutput(kCpuWorker,
                                 "NVIDIA A100-SXM4-80GB, 81920 MiB, 8.0, 550.54.15\n"
                                 "NVIDIA A100-SXM4-80GB, 81920 MiB, 8.0, 550.54.15"),
                "shard-worker"));
        const DoctorCheck* c = find(checks, "cuda-libtorch");
        QVERIFY(c && c->status == "missing");
        QVERIFY(c->fix.contains("SHARD_GPU=1 bash scripts/setup.sh"));
        QVERIFY(find(checks, "gpu")->detail.startsWith("2 GPUs, driver 550.54.15"));
        // Two cards without the NCCL backend cannot exchange gradients.
        QCOMPARE(find(checks, "nccl")->status, QString("missing"));
    }

    // What the planner fits: a 2 GiB card fits no preset (the smallest needs more even with
    // QLoRA); an H200 fits models of 8B parameters fully and LoRA / QLoRA further; 8 of them
    // under zero3 fit more.
    void gpuMemory()
    {
        const auto small = diagnoseFacts(parseDoctorFacts(
            scriptOutput(kCudaWorker, "NVIDIA GeForce GT 1030, 2048 MiB, 6.1, 550.54.15", kLibs),
            "w"));
        const DoctorCheck* m = find(small, "gpu-memory");
        QVERIFY(m);
        QCOMPARE(m->status, QString("warn"));
        QVERIFY2(m->detail.contains("too little for any preset"), qPrintable(m->detail));
        QVERIFY2(m->detail.contains("fp32"), qPrintable(m->detail)); // Pascal: no bf16
        QVERIFY(m->fix.contains("--device cpu"));

        QByteArray eight;
        for (int i = 0; i < 8; ++i)
            eight += "NVIDIA H200, 143771 MiB, 9.0, 550.54.15\n";
        const auto big
            = diagnoseFacts(parseDoctorFacts(scriptOutput(kCudaWorker, eight, kLibs), "w"));
        const DoctorCheck* b = find(big, "gpu-memory");
        QVERIFY(b);
        QCOMPARE(b->status, QString("ok"));
        qInfo("%s", qPrintable(b->detail));
        QVERIFY2(b->detail.contains("full fine-tuning up to")
                && b->detail.contains("all 8 under "
                                      "zero3"),
            qPrintable(b->detail));
        QVERIFY(b->detail.contains("QLoRA up to"));
    }

    // nvidia-smi fails because the kernel module and the libraries differ (after an upgrade).
    void driverMismatch()
    {
        const auto checks = diagnoseFacts(parseDoctorFacts(
            scriptOutput(kCudaWorker, "Failed to initialize NVML: Driver/library version mismatch",
                kLibs, {},
                "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 2024"),
            "w"));
        const DoctorCheck* g = find(checks, "gpu");
        QCOMPARE(g->status, QString("missing"));
        QVERIFY(g->detail.contains("version mismatch"));
        QVERIFY(g->fix.contains("reboot"));
        // The driver version still comes from the kernel module's line.
        QCOMPARE(find(checks, "driver")->status, QString("ok"));
    }

    // The script's output cut short (a hung tool, a dropped connection) says so.
    void partialOutput()
    {
        QByteArray out = scriptOutput(kCpuWorker);
        out.truncate(out.indexOf("@@libs"));
        const auto checks = diagnoseFacts(parseDoctorFacts(out, "w"));
        QVERIFY(find(checks, "doctor") && find(checks, "doctor")->status == "warn");
    }
};

QTEST_GUILESS_MAIN(TestDoctor)
#include "tst_doctor.moc"
