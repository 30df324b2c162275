// The preflight: the Launch page's former checks and the engine's data-dependent refusals
// (malformed lines, a micro-batch larger than the data, evaluation without held-out data) in
// one place, worded for the front end that asks.
#include "jobs/preflight.h"

#include <memory>
#include <mutex>

#include <QCoreApplication>
#include <QDateTime>
#include <QDir>
#include <QFileInfo>
#include <QHash>

#include "data/data_loader.h"
#include "data/sample_builder.h"
#include "plan/planner.h"
#include "plan/run_spec_bridge.h"
#include "tokenizer/tokenizer.h"

namespace shard::jobs {

namespace {

QString tr(const char* text)
{
    return QCoreApplication::translate("shard::jobs::Preflight", text);
}

QString q(const std::string& s)
{
    return QString::fromStdString(s);
}

// What one read of the data found (training and held-out files together).
struct DataScan {
    QString error; // the data cannot be trained on at all
    int64_t trainRecords = 0;
    int64_t evalRecords = 0;
    int64_t badLines = 0;
    QStringList badReports; // the first few "file:line: reason"
    bool preference = false;
    QString pairPreview; // the objective takes pairs: its first three, as Preflight says
};

// The tokenizer folder a spec reads ("" when the data is pre-tokenized).
QString tokenizerDir(const protocol::RunSpec& spec)
{
    return q(spec.tokenizer.empty() ? spec.model : spec.tokenizer);
}

// A key that changes when a file the scan read, or a setting it depends on, changes.
QString scanKey(const protocol::RunSpec& spec)
{
    QStringList parts;
    auto file = [&](const QString& path) {
        const QFileInfo fi(path);
        parts << fi.absoluteFilePath() << QString::number(fi.size())
              << QString::number(fi.lastModified().toMSecsSinceEpoch());
    };
    for (const std::string& f : spec.data)
        file(q(f));
    if (!spec.evalData.empty())
        file(q(spec.evalData));
    file(tokenizerDir(spec) + "/tokenizer.json");
    parts << q(spec.dataFormat) << QString::number(spec.seqLen) << QString::number(spec.packing)
          << QString::number(spec.seed) << QString::number(spec.evalFraction, 'g', 17)
          << QString::number(spec.trainOnPrompt) << q(spec.chatTemplate)
          << QString::number(spec.usesPreferencePairs());
    return parts.join(QLatin1Char('\n'));
}

QString pairPreviewText(const protocol::RunSpec& spec, const tokenizer::Tokenizer& tok)
{
    QString text;
    for (const data::PairPreview& p :
        data::previewPairs(spec.data.front(), tok, spec.chatTemplate, spec.seqLen, 3)) {
        text += tr("line %1").arg(p.line);
        if (!p.problem.empty()) {
            text += tr(": %1\n").arg(q(p.problem));
            continue;
        }
        text += (p.truncated ? tr(" (cut to %1 tokens)").arg(spec.seqLen) : QString()) + "\n";
        text += tr("  prompt:   %1\n  chosen:   %2\n  rejected: %3\n")
                    .arg(q(p.prompt).trimmed(), q(p.chosen).trimmed(), q(p.rejected).trimmed());
    }
    return text.isEmpty() ? tr("(no pairs in %1)").arg(q(spec.data.front())) : text;
}

DataScan scanData(const protocol::RunSpec& spec)
{
    DataScan scan;
    std::shared_ptr<const tokenizer::Tokenizer> tok;
    try {
        data::DataConfig dc = data::dataConfigFor(spec);
        dc.skipBadLines = true; // counted here; whether they stop the run is the spec's choice
        const QString tokFile = tokenizerDir(spec) + "/tokenizer.json";
        if (QFileInfo(tokFile).isFile())
            tok = std::make_shared<const tokenizer::Tokenizer>(
                tokenizer::Tokenizer::fromFolder(tokenizerDir(spec).toStdString()));
        const data::DataLoader loader(dc, tok);
        scan.trainRecords = loader.trainRecords();
        scan.evalRecords = loader.evalRecords();
        scan.badLines = loader.badLines();
        for (const std::string& r : loader.badLineReports())
            scan.badReports << q(r);
        scan.preference = loader.preference();
    } catch (const std::exception& e) {
        scan.error = QString::fromUtf8(e.what());
    }
    // Shown even when the data cannot be trained on: its first lines say why.
    if (spec.usesPreferencePairs() && tok && !spec.data.empty()) {
        try {
            scan.pairPreview = pairPreviewText(spec, *tok);
        } catch (const std::exception& e) {
            scan.pairPreview = QString::fromUtf8(e.what());
        }
    }
    return scan;
}

// A scan of unchanged files is not read again (the Launch page asks at every edit).
DataScan cachedScan(const protocol::RunSpec& spec)
{
    static std::mutex mutex;
    static QHash<QString, DataScan> cache;
    const QString key = scanKey(spec);
    {
        std::lock_guard<std::mutex> lock(mutex);
        if (auto it = cache.constFind(key); it != cache.constEnd())
            return *it;
    }
    DataScan scan = scanData(spec);
    std::lock_guard<std::mutex> lock(mutex);
    if (cache.size() >= 32)
        cache.clear();
    cache.insert(key, scan);
    return scan;
}

QString checkModel(const protocol::RunSpec& spec, Wording w)
{
    if (spec.model.empty())
        return w == Wording::Studio ? tr("No model folder: choose one.")
                                    : tr("no model folder: give one with --model DIR.");
    const QDir model(q(spec.model));
    if (!model.exists())
        return tr("No such folder: %1.").arg(q(spec.model));
    if (!model.exists("config.json"))
        return tr("No config.json in %1: choose a Hugging Face model folder (config.json, "
                  "*.safetensors, tokenizer.json).")
            .arg(q(spec.model));
    if (model.entryList({"*.safetensors"}, QDir::Files).isEmpty())
        return tr("No *.safetensors weights in %1.").arg(q(spec.model));
    if (spec.dataFormat != "tokenized" && !QDir(tokenizerDir(spec)).exists("tokenizer.json"))
        return tr("No tokenizer.json in %1: add one, or use pre-tokenized data (format: "
                  "tokenized).")
            .arg(tokenizerDir(spec));
    return {};
}

// The files themselves: present and named as JSON lines (their lines are read by the scan).
QString checkDataFiles(const protocol::RunSpec& spec)
{
    std::vector<std::string> files = spec.data;
    if (!spec.evalData.empty())
        files.push_back(spec.evalData);
    for (const std::string& file : files) {
        const QString f = q(file);
        const QString suffix = QFileInfo(f).suffix().toLower();
        if (!QFileInfo(f).isFile())
            return tr("%1: no such file.").arg(f);
        if (suffix != "jsonl" && suffix != "json")
            return tr("%1 is not JSON lines (.%2): convert it to .jsonl, one JSON object per "
                      "line.")
                .arg(QFileInfo(f).fileName(), suffix);
    }
    return {};
}

QString checkDataContent(const PreflightInput& in, Preflight& p)
{
    const protocol::RunSpec& spec = in.spec;
    const Wording w = in.wording;
    const DataScan scan = cachedScan(spec);
    p.pairPreview = scan.pairPreview;
    if (!scan.error.isEmpty())
        return scan.error;
    p.trainRecords = scan.trainRecords;
    p.badLines = scan.badLines;
    const QString firstFile = QFileInfo(q(spec.data.front())).fileName();
    if (spec.usesPreferencePairs() && !scan.preference)
        return tr("%1 holds no preference pairs: %2 needs lines with \"prompt\", \"chosen\" and "
                  "\"rejected\" (text, or message lists); or set %3 to supervised.")
            .arg(firstFile, q(spec.objective).toUpper(), settingName(Setting::Objective, w));
    if (!spec.usesPreferencePairs() && scan.preference)
        return tr("%1 holds preference pairs: set %2 to DPO or ORPO.")
            .arg(firstFile, settingName(Setting::Objective, w));
    if (scan.badLines > 0) {
        const QString first = scan.badReports.value(0);
        if (!spec.skipBadLines)
            return (scan.badLines == 1
                           ? tr("A malformed line: %1.").arg(first)
                           : tr("%1 malformed lines; the first: %2.").arg(scan.badLines).arg(first))
                + ' '
                + (w == Wording::Studio
                        ? tr("Mend the data, or tick %1 to train without them (they are counted).")
                        : tr("Mend the data, or pass %1 to train without them (they are "
                             "counted)."))
                      .arg(settingName(Setting::SkipBadLines, w));
        p.dataNote = tr("%1 malformed %2 will be skipped (the first: %3).")
                         .arg(scan.badLines)
                         .arg(scan.badLines == 1 ? tr("line") : tr("lines"), first);
    }
    if (spec.evalEvery > 0 && scan.evalRecords == 0)
        return tr("%1 %2 needs held-out data: give %3, or set %1 to 0.")
            .arg(settingName(Setting::EvalEvery, w))
            .arg(spec.evalEvery)
            .arg(w == Wording::Studio ? settingName(Setting::EvalData, w)
                                      : tr("--eval-data FILE or --eval-fraction F"));
    return {};
}

// Records per micro-step against the data, then memory against this machine (CPU runs).
QString checkBatch(const PreflightInput& in, const Preflight& p)
{
    const protocol::RunSpec& spec = in.spec;
    const Wording w = in.wording;
    // What tensor and pipeline parallel split: the worker refuses the rest with the same words.
    if (spec.tensorParallel > 1 || spec.pipelineParallel > 1 || spec.virtualStages != 1
        || spec.sequenceParallel) {
        try {
            const plan::ModelSpec model = plan::loadHfConfig(spec.model);
            std::string why = plan::tensorParallelRefusal(spec, model);
            if (why.empty())
                why = plan::pipelineParallelRefusal(spec, model);
            if (!why.empty())
                return w == Wording::Studio ? inStudioWords(QString::fromStdString(why))
                                            : QString::fromStdString(why);
        } catch (const std::exception& e) {
            return QString::fromUtf8(e.what());
        }
    }
    // Each data-parallel copy (tensor_parallel x pipeline_parallel ranks) takes its own
    // micro-batch.
    const int64_t world = std::max<int64_t>(1, spec.parallelDims().dataParallel());
    const int64_t dataLimit
        = p.trainRecords >= 0 ? std::max<int64_t>(1, p.trainRecords / world) : 65536;
    if (p.trainRecords >= 0 && spec.microBatch * world > p.trainRecords)
        return tr("%1 %2 x %3 %4 takes %5 records a micro-step, and the training data has %6: "
                  "set %1 to %7 or less.")
            .arg(settingName(Setting::MicroBatch, w))
            .arg(spec.microBatch)
            .arg(world)
            .arg(world == 1 ? tr("rank") : tr("ranks"))
            .arg(spec.microBatch * world)
            .arg(p.trainRecords)
            .arg(dataLimit);
    if (!in.checkFit || spec.device != "cpu")
        return {};
    try {
        const plan::PlanInput pin
            = plan::planInputFromSpec(spec, plan::DeviceSpec::cpu(plan::physicalMemoryBytes()));
        const plan::PlanResult r = plan::plan(pin);
        if (r.fits)
            return {};
        const int64_t largest = plan::largestMicroBatch(pin, dataLimit);
        return tr("The planner expects %1 per rank and %2 ranks share this machine's %3: it does "
                  "not fit. %4")
            .arg(q(plan::formatGiB(r.perDevice.total())))
            .arg(pin.gpusPerNode)
            .arg(q(plan::formatGiB(pin.device.memoryBytes)))
            .arg(largest > 0 ? tr("Set %1 to %2 or less (the largest that fits).")
                                   .arg(settingName(Setting::MicroBatch, w))
                                   .arg(largest)
                             : tr("Lower %1, set %2 to full or shorten %3.")
                                   .arg(settingName(Setting::Ranks, w),
                                       settingName(Setting::Checkpointing, w),
                                       settingName(Setting::SeqLen, w)));
    } catch (const std::exception& e) {
        return QString::fromUtf8(e.what());
    }
}

} // namespace

QString settingName(Setting setting, Wording wording)
{
    const bool cli = wording == Wording::Cli;
    switch (setting) {
    case Setting::RunName:
        return cli ? QStringLiteral("--run-dir") : tr("“Run name”");
    case Setting::Model:
        return cli ? QStringLiteral("--model") : tr("“Model”");
    case Setting::DataFiles:
        return cli ? QStringLiteral("--data") : tr("“Data files”");
    case Setting::SkipBadLines:
        return cli ? QStringLiteral("--skip-bad-lines") : tr("“Skip malformed lines”");
    case Setting::Objective:
        return cli ? QStringLiteral("--objective") : tr("“Objective”");
    case Setting::EvalData:
        return cli ? QStringLiteral("--eval-data") : tr("“Eval data”");
    case Setting::EvalEvery:
        return cli ? QStringLiteral("--eval-every") : tr("“Eval every”");
    case Setting::MicroBatch:
        return cli ? QStringLiteral("--micro-batch") : tr("“Micro-batch”");
    case Setting::Ranks:
        return cli ? QStringLiteral("--nproc-per-node") : tr("“Ranks per node”");
    case Setting::SeqLen:
        return cli ? QStringLiteral("--seq-len") : tr("“Sequence length”");
    case Setting::Checkpointing:
        return cli ? QStringLiteral("--checkpointing") : tr("“Activation checkpointing”");
    case Setting::SamplePrompts:
        return cli ? QStringLiteral("--sample-prompts") : tr("“Sample prompts”");
    case Setting::Packing:
        return cli ? QStringLiteral("--packing") : tr("“Pack short samples into full sequences”");
    case Setting::GradAccum:
        return cli ? QStringLiteral("--grad-accum") : tr("“Gradient accumulation”");
    case Setting::Strategy:
        return cli ? QStringLiteral("--strategy") : tr("“Strategy”");
    case Setting::Offload:
        return cli ? QStringLiteral("--offload") : tr("“Offload”");
    case Setting::Precision:
        return cli ? QStringLiteral("--precision") : tr("“Precision”");
    case Setting::LearningRate:
        return cli ? QStringLiteral("--lr") : tr("“Learning rate”");
    case Setting::Steps:
        return cli ? QStringLiteral("--steps") : tr("“Steps”");
    case Setting::Warmup:
        return cli ? QStringLiteral("--warmup") : tr("“Warm-up steps”");
    case Setting::TensorParallel:
        return cli ? QStringLiteral("--tensor-parallel") : tr("“Tensor parallel”");
    case Setting::PipelineParallel:
        return cli ? QStringLiteral("--pipeline-parallel") : tr("“Pipeline stages”");
    case Setting::VirtualStages:
        return cli ? QStringLiteral("--virtual-stages") : tr("“Chunks per stage”");
    case Setting::SequenceParallel:
        return cli ? QStringLiteral("--sequence-parallel") : tr("“Sequence parallel”");
    case Setting::Method:
        return cli ? QStringLiteral("--method") : tr("“Method”");
    case Setting::SampleEvery:
        return cli ? QStringLiteral("--sample-every") : tr("“Samples every”");
    case Setting::Count:
        break;
    }
    return {};
}

QString inStudioWords(const QString& engineMessage)
{
    QStringList said;
    for (int i = 0; i < int(Setting::Count); ++i) {
        const auto setting = Setting(i);
        const QString flag = settingName(setting, Wording::Cli);
        // The flag itself, not a longer one it begins ("--eval-data", not "--eval-data-x").
        for (qsizetype at = engineMessage.indexOf(flag); at >= 0;
             at = engineMessage.indexOf(flag, at + 1)) {
            const qsizetype end = at + flag.size();
            const QChar next = end < engineMessage.size() ? engineMessage[end] : QChar(' ');
            if (!next.isLetterOrNumber() && next != QLatin1Char('-')) {
                said << tr("%1 is %2").arg(flag, settingName(setting, Wording::Studio));
                break;
            }
        }
    }
    if (said.isEmpty())
        return engineMessage;
    return engineMessage + tr(" On the Launch page: %1.").arg(said.join(QStringLiteral(", ")));
}

bool Preflight::blocking() const
{
    return !all().isEmpty();
}

QString Preflight::first() const
{
    return all().value(0);
}

QStringList Preflight::all() const
{
    QStringList out;
    for (const QString* s : {&name, &model, &data, &fit})
        if (!s->isEmpty())
            out << *s;
    return out;
}

Preflight preflight(const PreflightInput& in)
{
    Preflight p;
    const protocol::RunSpec& spec = in.spec;
    const Wording w = in.wording;
    // Warnings that do not stop a start.
    if (spec.steps > 0 && spec.warmup >= spec.steps)
        p.schedule = tr("Warm-up (%1 steps) is as long as the run (%2 steps): the learning rate "
                        "never reaches its peak.")
                         .arg(spec.warmup)
                         .arg(spec.steps);
    else if (spec.steps > 0 && spec.checkpointEvery > spec.steps)
        p.schedule = tr("The checkpoint interval (%1) is longer than the run (%2 steps): only the "
                        "final model is saved, and a crash loses everything.")
                         .arg(spec.checkpointEvery)
                         .arg(spec.steps);
    if (in.checkRunFolder && !spec.outDir.empty()
        && (QFileInfo::exists(q(spec.outDir) + "/events.jsonl")
            || QFileInfo::exists(q(spec.outDir) + "/metrics.jsonl")))
        p.name = w == Wording::Studio
            ? tr("A run named '%1' already exists in %2. Give this run another name, or open "
                 "that one on the Monitor page to follow or resume it.")
                  .arg(in.runName, q(spec.outDir))
            : tr("%1 already holds a run: give another --run-dir, or continue that run with "
                 "`shard run --run-dir %1 -- --resume auto`.")
                  .arg(q(spec.outDir));
    if (!in.checkFiles)
        return p;
    p.model = checkModel(spec, w);
    p.data = checkDataFiles(spec);
    if (const QString prompts = q(spec.samplePrompts);
        p.data.isEmpty() && !prompts.isEmpty() && !QFileInfo(prompts).isFile())
        p.data = tr("%1 %2: no such file (a text file, one prompt per line).")
                     .arg(settingName(Setting::SamplePrompts, w), prompts);
    // The content is read with the model's tokenizer: only once the folder is right.
    if (p.data.isEmpty() && p.model.isEmpty())
        p.data = checkDataContent(in, p);
    if (p.model.isEmpty() && p.data.isEmpty())
        p.fit = checkBatch(in, p);
    return p;
}

} // namespace shard::jobs
