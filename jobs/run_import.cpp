#include "jobs/run_import.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include <QDateTime>
#include <QDir>
#include <QDirIterator>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QRegularExpression>

#include "jobs/run_store.h"
#include "jobs/slurm_launcher.h"
#include "plan/engine_configs.h"
#include "tbio/event_reader.h"
#include "tbio/known_tags.h"
#include "tbio/log_lines.h"

namespace shard::jobs {

namespace {

constexpr const char* kTrainerState = "trainer_state.json";

struct Candidate {
    QString folder;         // the run's key in the store: its folder, or a log file's path
    QStringList eventFiles; // sorted: the names carry the start time, so older files come first
    QString trainerState;
    QString logFile; // a job's stdout
};

// An event file or a trainer_state.json: what a folder is searched for.
bool isImportableFile(const QFileInfo& f)
{
    return tbio::isEventFileName(f.fileName().toStdString()) || f.fileName() == kTrainerState;
}

// What one run's files say besides their points (those go to the store as they are read).
struct RunData {
    QStringList notes;
    QJsonObject extra;     // goes into the source
    QStringList filesRead; // the files the points came from
    QString tool;          // set by readers of one tool's format
};

// The points of one run on their way to the store, a batch at a time: an import's memory does
// not grow with the files it reads (a 1 GB event file holds some 30 million points). The run is
// recorded when its first batch is stored, so a folder with no point leaves no run behind.
class PointSink {
public:
    PointSink(RunStore& store, std::function<Result<qint64>()> record)
        : m_store(store)
        , m_record(std::move(record))
    {
        m_batch.reserve(kBatch);
    }

    void add(const QString& tag, qint64 step, double wallTime, double value)
    {
        if (!m_error.isEmpty())
            return;
        m_batch.push_back({tag, step, wallTime, value});
        ++m_points;
        m_minStep = m_minStep ? std::min(*m_minStep, step) : step;
        if (wallTime > 0)
            m_minWall = std::min(m_minWall, wallTime);
        if (m_batch.size() >= kBatch)
            flush();
    }

    // Stores what is held; the first store failure is kept (error()) and ends the import.
    void flush()
    {
        if (m_batch.empty() || !m_error.isEmpty())
            return;
        auto id = m_record();
        if (!id) {
            m_error = id.error();
            return;
        }
        if (auto s = m_store.storeScalars(*id, m_batch); !s)
            m_error = s.error();
        m_batch.clear();
    }

    const QString& error() const { return m_error; }
    qint64 points() const { return m_points; }
    std::optional<qint64> minStep() const { return m_minStep; }
    double minWall() const { return m_minWall; } // the earliest wall time (> 0) read; inf: none

private:
    static constexpr size_t kBatch = 50000;
    RunStore& m_store;
    std::function<Result<qint64>()> m_record;
    std::vector<TaggedPoint> m_batch;
    QString m_error;
    qint64 m_points = 0;
    std::optional<qint64> m_minStep;
    double m_minWall = std::numeric_limits<double>::infinity();
};

// A run's event files, each from where the last import of the run stopped reading it (a file
// shorter than that was written again: read from its start). A restarted job logs some steps
// again in a later file: the store keeps the later wall time (RunStore::storeScalars).
RunData readEventRun(const Candidate& c, qint64 runId, const RunStore& store, PointSink& sink,
    std::vector<std::pair<QString, qint64>>& offsets)
{
    RunData run;
    std::map<std::string, qint64> skipped;
    QString writer;
    for (const QString& file : c.eventFiles) {
        qint64 from = 0;
        if (runId > 0)
            if (auto at = store.ingestOffset(runId, file); at && *at <= QFileInfo(file).size())
                from = *at;
        tbio::EventFileScan scan;
        try {
            scan = tbio::readEventFile(file.toStdString(), from, [&](const tbio::ScalarPoint& p) {
                sink.add(QString::fromStdString(p.tag), p.step, p.wallTime, p.value);
            });
        } catch (const std::exception& e) {
            run.notes << QString::fromUtf8(e.what());
            continue;
        }
        if (!sink.error().isEmpty())
            break;
        run.filesRead << file;
        offsets.emplace_back(file, scan.endOffset);
        for (const auto& [kind, n] : scan.skipped)
            skipped[kind] += n;
        if (scan.crcFailures > 0)
            run.notes << QStringLiteral("%1: %2 record(s) failed their CRC and were skipped")
                             .arg(file)
                             .arg(scan.crcFailures);
        if (scan.truncatedTail)
            run.notes << QStringLiteral("%1: the last record is incomplete (still being written?)")
                             .arg(file);
        if (!scan.error.empty())
            run.notes << QString::fromStdString(scan.error);
        if (writer.isEmpty())
            writer = QString::fromStdString(scan.writer);
    }
    if (!skipped.empty()) {
        QStringList parts;
        for (const auto& [kind, n] : skipped)
            parts << QStringLiteral("%1 %2").arg(QString::fromStdString(kind)).arg(n);
        run.notes << QStringLiteral("not scalars, skipped: %1").arg(parts.join(", "));
    }
    if (!writer.isEmpty())
        run.extra["writer"] = writer;
    return run;
}

Result<RunData> readTrainerState(const QString& file, PointSink& sink)
{
    QFile f(file);
    if (!f.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("cannot read %1: %2").arg(file, f.errorString()));
    QJsonParseError err {};
    const QJsonDocument doc = QJsonDocument::fromJson(f.readAll(), &err);
    if (err.error != QJsonParseError::NoError)
        return fail(QStringLiteral("%1 is not valid JSON: %2 at byte %3")
                        .arg(file, err.errorString())
                        .arg(err.offset));
    const QJsonObject root = doc.object();
    if (!root.value("log_history").isArray())
        return fail(QStringLiteral("%1 has no log_history list: not a Hugging Face Trainer state")
                        .arg(file));
    RunData run;
    int bad = 0;
    for (const QJsonValue& v : root.value("log_history").toArray()) {
        const QJsonObject entry = v.toObject();
        if (!entry.value("step").isDouble()) {
            ++bad;
            continue;
        }
        const qint64 step = entry.value("step").toInteger();
        for (auto it = entry.begin(); it != entry.end(); ++it) {
            if (it.key() == "step" || !it.value().isDouble())
                continue;
            const std::string tag = tbio::huggingFaceTag(it.key().toStdString());
            sink.add(QString::fromStdString(tag), step, 0.0, it.value().toDouble());
        }
    }
    if (bad > 0)
        run.notes << QStringLiteral("%1: %2 log_history entr%3 without a step skipped")
                         .arg(file)
                         .arg(bad)
                         .arg(bad == 1 ? "y" : "ies");
    for (const char* key : {"best_model_checkpoint", "best_metric", "global_step", "max_steps",
             "num_train_epochs", "epoch"})
        if (root.contains(key) && !root.value(key).isNull())
            run.extra[key] = root.value(key);
    run.tool = QStringLiteral("Hugging Face Trainer");
    return run;
}

// A job's stdout: Hugging Face Trainer's dict lines (no step in them: each training line is
// the next logged step, an evaluation line belongs to the step before it) or torchtitan's step
// lines.
Result<RunData> readLogRun(const QString& file, PointSink& sink)
{
    QFile f(file);
    if (!f.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("cannot read %1: %2").arg(file, f.errorString()));
    RunData run;
    qint64 hfStep = 0;
    qint64 lines = 0;
    bool hf = false, titan = false;
    while (!f.atEnd() && sink.error().isEmpty()) {
        // A line longer than 1 MiB is read in pieces: no metric line is that long.
        const QByteArray line = f.readLine(1 << 20);
        auto parsed = tbio::parseLogLine(line.trimmed().toStdString());
        if (!parsed)
            continue;
        ++lines;
        qint64 step = 0;
        if (parsed->step) {
            step = *parsed->step;
            titan = true;
        } else {
            hf = true;
            if (parsed->kind == tbio::LogLine::Kind::HuggingFaceTrain)
                ++hfStep;
            step = std::max<qint64>(hfStep, 1);
        }
        for (const auto& [tag, value] : parsed->values)
            sink.add(QString::fromStdString(tag), step, 0.0, value);
    }
    if (lines == 0)
        return fail(QStringLiteral("%1 has no metric lines of Hugging Face Trainer "
                                   "({'loss': ...}) or torchtitan (step: N  loss: ...)")
                        .arg(file));
    if (hf)
        run.notes << QStringLiteral("Hugging Face Trainer prints no step: its logged lines are "
                                    "numbered 1, 2, 3, ... (multiply by logging_steps)");
    run.tool = hf && !titan ? QStringLiteral("Hugging Face Trainer") : QStringLiteral("torchtitan");
    run.extra["lines"] = lines;
    return run;
}

QString toolOf(const RunData& run, const QStringList& tags);
int checkpointNumber(const QString& trainerState);

QJsonObject jsonFile(const QString& path)
{
    QFile f(path);
    if (f.size() > (1 << 20) || !f.open(QIODevice::ReadOnly))
        return {};
    return QJsonDocument::fromJson(f.readAll()).object();
}

// Whether a TOML file has one of torchtitan's tables ([job], [model], [training], [parallelism]).
bool looksLikeTorchtitan(const QString& path)
{
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly))
        return false;
    static const QRegularExpression table(
        QStringLiteral("^\\s*\\[\\s*(job|model|training|parallelism)\\s*\\]"),
        QRegularExpression::MultilineOption);
    return table.match(QString::fromUtf8(f.read(1 << 20))).hasMatch();
}

// What is known of an imported run's set-up, as its spec (compared like the engine's run.json):
// the model's config.json, a DeepSpeed config, a torchtitan TOML, the Trainer's settings from
// trainer_state.json, found in the run's folder and up to three folders above it (a Trainer's
// output folder holds runs/<name>/ for its event files), never above `top`. A config that cannot
// be read is said in `notes`.
QJsonObject specOf(
    const QString& runPath, const QString& top, const QString& tool, QStringList* notes)
{
    QJsonObject spec;
    QJsonObject modelConfig, deepspeed, trainer, torchtitan;
    QDir dir(QFileInfo(runPath).isDir() ? runPath : QFileInfo(runPath).absolutePath());
    for (int up = 0; up < 4; ++up) {
        for (const QFileInfo& f : dir.entryInfoList({"*.toml"}, QDir::Files, QDir::Name)) {
            if (!torchtitan.isEmpty())
                break;
            try {
                if (const auto j = plan::torchtitanConfigJson(f.absoluteFilePath().toStdString()))
                    torchtitan
                        = QJsonDocument::fromJson(QByteArray::fromStdString(j->dump())).object();
            } catch (const std::exception& e) {
                // A broken TOML is said when it is torchtitan's; another project's
                // (pyproject.toml, a tool's settings) is not the run's business.
                if (looksLikeTorchtitan(f.absoluteFilePath()))
                    *notes << QString::fromUtf8(e.what());
            }
        }
        for (const QFileInfo& f : dir.entryInfoList({"*.json"}, QDir::Files, QDir::Name)) {
            const QString name = f.fileName();
            if (modelConfig.isEmpty() && name == "config.json") {
                const QJsonObject o = jsonFile(f.absoluteFilePath());
                if (o.contains("model_type"))
                    modelConfig = o;
            } else if (deepspeed.isEmpty()
                && (name.contains("ds") || name.contains("deepspeed") || name.contains("zero"))) {
                const QJsonObject o = jsonFile(f.absoluteFilePath());
                if (o.contains("zero_optimization"))
                    deepspeed = o;
            } else if (trainer.isEmpty() && name == kTrainerState) {
                trainer = jsonFile(f.absoluteFilePath());
            }
        }
        if (trainer.isEmpty()) {
            // A Trainer output folder's newest checkpoint-N/trainer_state.json.
            int newest = -1;
            for (const QFileInfo& c : dir.entryInfoList({"checkpoint-*"}, QDir::Dirs)) {
                const int n = checkpointNumber(c.absoluteFilePath() + "/" + kTrainerState);
                if (n != std::numeric_limits<int>::max() && n > newest
                    && QFile::exists(c.absoluteFilePath() + "/" + kTrainerState)) {
                    newest = n;
                    trainer = jsonFile(c.absoluteFilePath() + "/" + kTrainerState);
                }
            }
        }
        if (dir.absolutePath() == top || !dir.cdUp())
            break;
    }
    if (!modelConfig.isEmpty()) {
        spec["model_config"] = modelConfig;
        const QString name = modelConfig.value("_name_or_path").toString();
        spec["model"] = name.isEmpty() ? modelConfig.value("model_type").toString() : name;
    }
    if (!deepspeed.isEmpty()) {
        spec["deepspeed"] = deepspeed;
        const QJsonValue stage = deepspeed.value("zero_optimization").toObject().value("stage");
        if (stage.isDouble())
            spec["strategy"] = QStringLiteral("zero%1").arg(stage.toInt());
    }
    if (!torchtitan.isEmpty()) {
        spec["torchtitan"] = torchtitan;
        const QJsonObject model = torchtitan.value("model").toObject();
        if (!spec.contains("model") && model.contains("name"))
            spec["model"] = model.value("flavor").isString()
                ? model.value("name").toString() + " " + model.value("flavor").toString()
                : model.value("name").toString();
        const QJsonObject training = torchtitan.value("training").toObject();
        if (!spec.contains("steps") && training.value("steps").isDouble())
            spec["steps"] = training.value("steps").toInteger();
    }
    if (!trainer.isEmpty()) {
        QJsonObject t;
        for (const char* key : {"max_steps", "num_train_epochs", "logging_steps", "eval_steps",
                 "save_steps", "train_batch_size", "best_model_checkpoint", "best_metric"})
            if (trainer.contains(key) && !trainer.value(key).isNull())
                t[key] = trainer.value(key);
        spec["trainer"] = t;
        if (trainer.value("max_steps").isDouble())
            spec["steps"] = trainer.value("max_steps").toInteger();
    }
    spec["imported_from"] = tool;
    return spec;
}

// The folder a Trainer writes checkpoint-N/ into.
QString outputFolderOf(const QString& trainerState)
{
    const QDir dir = QFileInfo(trainerState).absoluteDir();
    if (dir.dirName().startsWith("checkpoint-"))
        return QFileInfo(dir.absolutePath()).absolutePath();
    return dir.absolutePath();
}

int checkpointNumber(const QString& trainerState)
{
    const QString name = QFileInfo(trainerState).absoluteDir().dirName();
    static const QRegularExpression re("^checkpoint-(\\d+)$");
    const auto m = re.match(name);
    return m.hasMatch() ? m.captured(1).toInt() : std::numeric_limits<int>::max();
}

Result<std::vector<Candidate>> discover(const QString& path, QStringList& skipped)
{
    const QFileInfo fi(path);
    if (!fi.exists())
        return fail(QStringLiteral("%1 does not exist").arg(path));
    std::map<QString, Candidate> byFolder;
    std::map<QString, QString> trainerStates; // output folder -> newest trainer_state.json
    auto addEventFile = [&](const QFileInfo& f) {
        Candidate& c = byFolder[f.absolutePath()];
        c.folder = f.absolutePath();
        c.eventFiles << f.absoluteFilePath();
    };
    auto addTrainerState = [&](const QFileInfo& f) {
        const QString out = outputFolderOf(f.absoluteFilePath());
        auto it = trainerStates.find(out);
        if (it == trainerStates.end()
            || checkpointNumber(f.absoluteFilePath()) > checkpointNumber(it->second))
            trainerStates[out] = f.absoluteFilePath();
    };
    if (fi.isFile()) {
        if (tbio::isEventFileName(fi.fileName().toStdString())) {
            // A file names its run: the folder's event files together.
            const QDir dir = fi.absoluteDir();
            for (const QFileInfo& f : dir.entryInfoList(QDir::Files, QDir::Name))
                if (tbio::isEventFileName(f.fileName().toStdString()))
                    addEventFile(f);
        } else if (fi.fileName() == kTrainerState) {
            trainerStates[fi.absolutePath()] = fi.absoluteFilePath();
        } else {
            // Any other file is read as a job's stdout (train.log, slurm-1234.out).
            Candidate c;
            c.folder = fi.absoluteFilePath();
            c.logFile = c.folder;
            return std::vector<Candidate> {c};
        }
    } else {
        QDirIterator it(
            fi.absoluteFilePath(), QDir::Files | QDir::NoSymLinks, QDirIterator::Subdirectories);
        while (it.hasNext()) {
            const QFileInfo f(it.next());
            if (tbio::isEventFileName(f.fileName().toStdString()))
                addEventFile(f);
            else if (f.fileName() == kTrainerState)
                addTrainerState(f);
        }
    }
    std::vector<Candidate> out;
    for (auto& [folder, c] : byFolder) {
        std::sort(c.eventFiles.begin(), c.eventFiles.end());
        out.push_back(c);
    }
    for (const auto& [outFolder, file] : trainerStates) {
        bool covered = false;
        for (const auto& [folder, c] : byFolder)
            covered = covered || folder == outFolder || folder.startsWith(outFolder + '/');
        if (covered) {
            skipped
                << QStringLiteral("%1: the same run's event files are imported instead").arg(file);
            continue;
        }
        Candidate c;
        c.folder = QFileInfo(file).absolutePath();
        c.trainerState = file;
        out.push_back(c);
    }
    if (out.empty())
        return fail(QStringLiteral("%1 holds no TensorBoard event files (events.out.tfevents.*) "
                                   "and no trainer_state.json")
                        .arg(path));
    return out;
}

// The tool whose names the run's tags (all it has stored) use most; one common name alone
// ("train/loss" is also what many scripts log through a bare SummaryWriter) does not name a tool.
QString toolOf(const RunData& run, const QStringList& tags)
{
    if (!run.tool.isEmpty()) // trainer_state.json, a log: the tool its reader recognised
        return run.tool;
    if (run.extra.value("writer").toString() == "shard-studio")
        return QStringLiteral("Shard Studio");
    std::map<QString, int> byTool;
    for (const QString& tag : tags)
        if (const auto known = tbio::knownTag(tag.toStdString()))
            ++byTool[QString::fromUtf8(known->tool)];
    QString best;
    int most = 1;
    for (const auto& [tool, n] : byTool)
        if (n > most) {
            best = tool;
            most = n;
        }
    return best.isEmpty() ? QStringLiteral("TensorBoard") : best;
}

} // namespace

namespace {

// Where a mirrored remote folder came from: runs are keyed by host and remote path.
struct RemoteOrigin {
    QString host;
    QString remoteRoot; // the PATH of HOST:PATH, absolute on the host
    QString mirrorRoot; // its copy here
};

Result<ImportReport> importLocal(RunStore& store, const QString& path, const RemoteOrigin* origin);

} // namespace

namespace {

// HOST:PATH ([user@]host[:port]:path) for a path that names no file here; nullopt otherwise.
std::optional<RemotePath> matchRemote(const QString& path)
{
    return QFileInfo::exists(path) ? std::nullopt : splitRemotePath(path);
}

} // namespace

bool isRemoteImportPath(const QString& path)
{
    return matchRemote(path).has_value();
}

Result<ImportReport> importRuns(RunStore& store, const QString& path, const SshOptions& ssh)
{
    const std::optional<RemotePath> m = matchRemote(path);
    if (!m)
        return importLocal(store, path, nullptr);
    // HOST:PATH: the files an import reads, mirrored here by byte offset: a first import fetches
    // them whole, a later one (a followed run) only what each file gained since (a file that
    // shrank was rewritten: fetched whole again).
    auto host = SshHost::parse(m->host);
    if (!host)
        return fail(host.error());
    const QString remote = m->path;
    SshClient client(ssh);
    // The folder (or the file's folder), then "<size> <path>\0" for each file an import reads.
    const QString list = QStringLiteral(
        "p=%1; case $p in \\~/*) p=$HOME/${p#\\~/};; esac; "
        "if [ -d \"$p\" ]; then cd \"$p\" && echo \"D $(pwd)\" && find . -type f -size -268435456c "
        "\\( -name 'events.out.tfevents.*' -o -name trainer_state.json -o -name config.json "
        "-o -name '*ds*.json' -o -name '*deepspeed*.json' -o -name '*zero*.json' "
        "-o -name '*.toml' \\) "
        "-printf '%s %p\\0'; "
        "elif [ -f \"$p\" ]; then cd \"$(dirname \"$p\")\" && echo \"F $(pwd)\" && "
        "find \"./$(basename \"$p\")\" -maxdepth 0 -printf '%s %p\\0'; "
        "else echo \"$p: no such file or folder\" >&2; exit 3; fi")
                             .arg(SshClient::shellQuote(remote));
    auto listed = client.run(*host, list, {}, 60 * 1000);
    if (!listed)
        return fail(QStringLiteral("%1: %2").arg(path, listed.error()));
    if (listed->exitCode != 0)
        return fail(QStringLiteral("%1: %2").arg(
            path, QString::fromLocal8Bit(listed->err).trimmed().section('\n', -1)));
    const int newline = listed->out.indexOf('\n');
    const QString head = QString::fromUtf8(listed->out.left(newline)).trimmed();
    const bool isFile = head.startsWith("F ");
    const QString remoteDir = head.mid(2);
    const QString mirror = QFileInfo(store.path()).absolutePath() + "/imported/"
        + host->toString().replace(':', '_') + remoteDir;
    QDir().mkpath(mirror);
    struct Wanted {
        QString file; // relative to remoteDir ("./a/b")
        qint64 from = 0;
    };
    std::vector<Wanted> wanted;
    QString fetch;
    for (const QByteArray& entry : listed->out.mid(newline + 1).split('\0')) {
        const int space = entry.indexOf(' ');
        if (space <= 0)
            continue;
        const qint64 size = entry.left(space).toLongLong();
        const QString file = QString::fromUtf8(entry.mid(space + 1));
        const QFileInfo mirrored(mirror + "/" + file);
        const qint64 have = mirrored.exists() ? mirrored.size() : -1;
        if (size == have)
            continue;
        const qint64 from = size > have && have > 0 ? have : 0;
        wanted.push_back({file, from});
        // Exactly the bytes listed: the rest of a record still being written comes next time.
        fetch += QStringLiteral("tail -c +%1 %2 | head -c %3 | base64 -w0; echo; ")
                     .arg(from + 1)
                     .arg(SshClient::shellQuote(file))
                     .arg(size - from);
    }
    if (!wanted.empty()) {
        auto fetched = client.run(*host,
            QStringLiteral("cd %1 && { %2}").arg(SshClient::shellQuote(remoteDir), fetch), {},
            10 * 60 * 1000);
        if (!fetched)
            return fail(QStringLiteral("%1: %2").arg(path, fetched.error()));
        const QList<QByteArray> parts = fetched->out.split('\n');
        if (fetched->exitCode != 0 || parts.size() < static_cast<qsizetype>(wanted.size()))
            return fail(QStringLiteral("%1: fetching the files failed: %2")
                            .arg(path, QString::fromLocal8Bit(fetched->err).trimmed()));
        for (size_t i = 0; i < wanted.size(); ++i) {
            const Wanted& w = wanted[i];
            const QByteArray bytes = QByteArray::fromBase64(parts[static_cast<qsizetype>(i)]);
            const QString local = mirror + "/" + w.file;
            QDir().mkpath(QFileInfo(local).absolutePath());
            QFile out(local);
            const bool opened = w.from == 0 ? out.open(QIODevice::WriteOnly | QIODevice::Truncate)
                                            : out.open(QIODevice::ReadWrite);
            if (!opened || !out.seek(w.from) || out.write(bytes) != bytes.size())
                return fail(QStringLiteral("%1: cannot write the fetched bytes into %2: %3")
                                .arg(path, local, out.errorString()));
        }
    }
    const QString remoteFile = QFileInfo(remote).fileName();
    RemoteOrigin origin {host->toString(), remoteDir, mirror};
    return importLocal(store, isFile ? mirror + "/" + remoteFile : mirror, &origin);
}

namespace {

Result<ImportReport> importLocal(RunStore& store, const QString& path, const RemoteOrigin* origin)
{
    ImportReport report;
    auto found = discover(path, report.skipped);
    if (!found)
        return fail(found.error());
    const QFileInfo root(path);
    const QDir base = root.isFile() ? root.absoluteDir() : QDir(root.absoluteFilePath());
    const QString baseParent = QFileInfo(base.absolutePath()).absolutePath();
    for (const Candidate& c : *found) {
        ImportedRun r;
        r.format = !c.logFile.isEmpty() ? "log"
            : c.trainerState.isEmpty()  ? "tensorboard"
                                        : "trainer_state";
        r.name = QDir(baseParent).relativeFilePath(c.folder);
        // A mirrored remote folder's runs are keyed by their host and path there.
        const QString hostOf = origin ? origin->host : QString();
        const QString key = origin && c.folder.startsWith(origin->mirrorRoot)
            ? origin->remoteRoot + c.folder.mid(origin->mirrorRoot.size())
            : c.folder;
        r.folder = hostOf.isEmpty() ? key : hostOf + ":" + key;
        auto existing = store.findRunByDir(hostOf, key);
        if (!existing)
            return fail(existing.error());
        QJsonObject before; // the last import's source
        if (*existing > 0) {
            auto rec = store.run(*existing);
            if (!rec)
                return fail(rec.error());
            if (rec->target != TargetKind::Import) {
                report.skipped << QStringLiteral("%1 is the folder of run %2, which Shard Studio "
                                                 "ran; its own records are kept")
                                      .arg(key)
                                      .arg(*existing);
                continue;
            }
            r.runId = *existing;
            before = QJsonDocument::fromJson(rec->source).object();
        }
        PointSink sink(store, [&]() -> Result<qint64> {
            if (r.runId > 0)
                return r.runId;
            NewRun n;
            n.name = r.name;
            n.target = TargetKind::Import;
            n.specJson = "{}"; // known once its files are read
            n.host = hostOf;
            n.runDir = key;
            n.status = RunStatus::Finished;
            auto id = store.createRun(n);
            if (!id)
                return fail(id.error());
            r.runId = *id;
            r.created = true;
            return r.runId;
        });
        RunData data;
        std::vector<std::pair<QString, qint64>> offsets;
        if (!c.logFile.isEmpty()) {
            auto read = readLogRun(c.logFile, sink);
            if (!read)
                return fail(read.error());
            data = std::move(*read);
        } else if (!c.trainerState.isEmpty()) {
            auto read = readTrainerState(c.trainerState, sink);
            if (!read) {
                report.skipped << read.error();
                continue;
            }
            data = std::move(*read);
        } else {
            data = readEventRun(c, r.runId, store, sink, offsets);
        }
        sink.flush();
        if (!sink.error().isEmpty())
            return fail(sink.error());
        if (r.runId == 0) {
            report.skipped << QStringLiteral("%1: no scalars%2")
                                  .arg(c.folder,
                                      data.notes.isEmpty() ? QString()
                                                           : " (" + data.notes.join("; ") + ")");
            continue;
        }
        auto tags = store.scalarTags(r.runId);
        if (!tags)
            return fail(tags.error());
        if (data.extra.value("writer").toString().isEmpty() && before.contains("writer"))
            data.extra["writer"] = before.value("writer"); // read from the file's start only
        r.tool = toolOf(data, *tags);
        r.notes = data.notes;
        const QByteArray spec = QJsonDocument(specOf(c.folder, baseParent, r.tool, &r.notes))
                                    .toJson(QJsonDocument::Compact);
        if (auto st = store.setSpec(r.runId, spec); !st)
            return fail(st.error());
        // Wall times count from the run's first point; when a point earlier than that arrives,
        // every step's is counted again.
        const double beforeT0 = before.value("t0").toDouble(0.0);
        const double t0 = std::isfinite(sink.minWall())
            ? (before.contains("t0") ? std::min(beforeT0, sink.minWall()) : sink.minWall())
            : beforeT0;
        std::optional<qint64> fromStep = sink.minStep();
        if (fromStep && (t0 != beforeT0 || !before.contains("t0")))
            fromStep = std::numeric_limits<qint64>::min();
        std::vector<ImportedColumn> columns;
        for (const QString& tag : *tags) // in tag order: the first tag of a metric wins
            if (const auto known = tbio::knownTag(tag.toStdString()))
                columns.push_back({tag, known->metric});
        QJsonObject source = data.extra;
        source["tool"] = r.tool;
        source["format"] = r.format;
        source["path"] = key;
        source["host"] = hostOf;
        source["t0"] = t0;
        if (origin)
            source["mirror"] = c.folder;
        source["files"] = QJsonArray::fromStringList(!c.logFile.isEmpty() ? QStringList {c.logFile}
                : c.trainerState.isEmpty()                                ? data.filesRead
                                           : QStringList {c.trainerState});
        if (auto s
            = store.finishImport(r.runId, QJsonDocument(source).toJson(QJsonDocument::Compact),
                columns, fromStep, t0, offsets);
            !s)
            return fail(s.error());
        // A run tied to a Slurm job keeps the job's state (followSlurmJob, ImportWatcher).
        const auto recorded = store.run(r.runId);
        if (!recorded || recorded->jobId.isEmpty())
            if (auto s = store.setStatus(r.runId, RunStatus::Finished,
                    QStringLiteral("imported from %1 (%2)")
                        .arg(r.tool, hostOf.isEmpty() ? key : hostOf + ":" + key));
                !s)
                return fail(s.error());
        auto steps = store.metricCount(r.runId);
        if (!steps)
            return fail(steps.error());
        r.tags = static_cast<int>(tags->size());
        r.points = sink.points();
        r.steps = static_cast<int>(*steps);
        report.runs.push_back(r);
    }
    if (report.runs.isEmpty())
        return fail(
            QStringLiteral("nothing to import from %1: %2").arg(path, report.skipped.join("; ")));
    return report;
}

} // namespace

bool hasImportableFiles(const QString& folder)
{
    QDirIterator it(folder, QDir::Files | QDir::NoSymLinks, QDirIterator::Subdirectories);
    while (it.hasNext()) {
        const QFileInfo f(it.next());
        if (isImportableFile(f))
            return true;
    }
    return false;
}

namespace {

// The state of the job that writes an imported run, asked where its files are (a login node
// over ssh, or this machine).
Result<SlurmJobState> importedJobState(const RunRecord& run, const QString& jobId,
    const SshOptions& ssh = SshOptions::fromEnvironment())
{
    SlurmOptions o;
    o.via = run.host;
    return SlurmLauncher(nullptr, o, SshClient(ssh)).jobState(jobId, o);
}

QString jobMessage(const QString& jobId, const QString& state)
{
    return QObject::tr("Slurm job %1: %2").arg(jobId, state);
}

} // namespace

Status followSlurmJob(RunStore& store, qint64 runId, const QString& jobId, const SshOptions& ssh)
{
    auto run = store.run(runId);
    if (!run)
        return fail(run.error());
    if (run->target != TargetKind::Import)
        return fail(QObject::tr("run %1 was started by Shard Studio, which follows its job "
                                "itself; --slurm-job ties an imported run to its job")
                        .arg(runId));
    static const QRegularExpression id(QStringLiteral("^[0-9]+(_[0-9]+)?$"));
    if (!id.match(jobId).hasMatch())
        return fail(QObject::tr("'%1' is not a Slurm job id (a number, or ARRAY_TASK as squeue "
                                "prints it)")
                        .arg(jobId));
    auto state = importedJobState(*run, jobId, ssh);
    if (!state)
        return fail(state.error());
    if (state->state.isEmpty())
        return fail(QObject::tr("Slurm knows no job %1 on %2 (squeue, scontrol and sacct "
                                "there); give the id of the job that writes %3")
                        .arg(jobId, run->host.isEmpty() ? QObject::tr("this machine") : run->host,
                            run->runDir));
    if (auto s = store.setJobId(runId, jobId); !s)
        return s;
    return store.setStatus(runId, state->runStatus(), jobMessage(jobId, state->state));
}

ImportWatcher::ImportWatcher(RunStore& store, qint64 runId, QString folder, QObject* parent)
    : RunWatcher(parent)
    , m_store(store)
    , m_runId(runId)
    , m_folder(std::move(folder))
{
    connect(&m_timer, &QTimer::timeout, this, [this] { poll(); });
}

void ImportWatcher::start(int pollMs)
{
    if (isRemoteImportPath(m_folder))
        pollMs = std::max(pollMs, 10000); // each poll lists the folder over ssh, then fetches
                                          // what each file gained
    // The first poll imports what the files gained since the run was recorded (from each file's
    // stored offset: cheap when nothing did).
    m_signature.clear();
    if (auto run = m_store.run(m_runId))
        m_jobId = run->jobId;
    m_timer.start(pollMs);
}

void ImportWatcher::pollJob()
{
    auto run = m_store.run(m_runId);
    if (!run)
        return;
    auto state = importedJobState(*run, m_jobId);
    if (!state) {
        Q_EMIT errorOccurred(m_runId, state.error());
        return;
    }
    // A job Slurm no longer knows (forgotten after MinJobAge, no accounting) has ended.
    const bool ended = state->ended() || (state->state.isEmpty() && !m_jobState.isEmpty());
    if (state->state == m_jobState && !ended)
        return;
    m_jobState = state->state;
    if (!ended) {
        const RunStatus status = state->runStatus();
        if (status != run->status) {
            (void)m_store.setStatus(m_runId, status, jobMessage(m_jobId, state->state));
            Q_EMIT statusChanged(m_runId, status, jobMessage(m_jobId, state->state));
        }
        return;
    }
    // What the job wrote last, then its final state.
    m_signature.clear();
    if (auto report = importRuns(m_store, m_folder); !report)
        Q_EMIT errorOccurred(m_runId, report.error());
    const RunStatus status = state->state.isEmpty() ? RunStatus::Finished : state->runStatus();
    const QString message = state->state.isEmpty()
        ? QObject::tr("Slurm job %1 has ended (Slurm no longer knows its final state)").arg(m_jobId)
        : jobMessage(m_jobId, state->state);
    (void)m_store.setStatus(m_runId, status, message);
    m_timer.stop();
    m_ended = true;
    auto after = m_store.run(m_runId);
    Q_EMIT pointsAdded(m_runId, after ? after->lastStep : 0);
    Q_EMIT statusChanged(m_runId, status, message);
    Q_EMIT finished(m_runId, status);
}

QString ImportWatcher::signature() const
{
    if (isRemoteImportPath(m_folder)) // nothing here tells what changed there: fetch again
        return QString::number(QDateTime::currentMSecsSinceEpoch());
    const QFileInfo self(m_folder);
    if (self.isFile()) // a log file's run
        return QStringLiteral("%1:%2")
            .arg(self.size())
            .arg(self.lastModified().toMSecsSinceEpoch());
    QStringList parts;
    QDirIterator it(m_folder, QDir::Files | QDir::NoSymLinks);
    while (it.hasNext()) {
        const QFileInfo f(it.next());
        if (isImportableFile(f))
            parts << QStringLiteral("%1:%2:%3")
                         .arg(f.fileName())
                         .arg(f.size())
                         .arg(f.lastModified().toMSecsSinceEpoch());
    }
    parts.sort();
    return parts.join('|');
}

bool ImportWatcher::poll()
{
    if (m_ended)
        return false;
    if (!m_jobId.isEmpty() && (!m_jobAsked.isValid() || m_jobAsked.elapsed() >= kJobPollMs)) {
        m_jobAsked.start();
        pollJob();
        if (m_ended)
            return true;
    }
    const QString now = signature();
    if (now == m_signature)
        return false;
    m_signature = now;
    auto report = importRuns(m_store, m_folder);
    if (!report) {
        Q_EMIT errorOccurred(m_runId, report.error());
        return false;
    }
    auto run = m_store.run(m_runId);
    Q_EMIT pointsAdded(m_runId, run ? run->lastStep : 0);
    return true;
}

namespace {

QString notStudios()
{
    return QObject::tr("an imported run was trained by another tool; start, stop or resume it "
                       "where it runs");
}

} // namespace

Result<qint64> ImportTarget::start(const LaunchRequest&)
{
    return fail(notStudios());
}

Status ImportTarget::stop(qint64, int)
{
    return fail(notStudios());
}

Result<QString> ImportTarget::describe(const LaunchRequest&) const
{
    return fail(notStudios());
}

Result<HostCheck> ImportTarget::checkHost(const QString&) const
{
    return fail(notStudios());
}

Result<qint64> ImportTarget::attach(const QString& runDir)
{
    if (!m_store)
        return fail(QObject::tr("importing needs the run store"));
    auto report = importRuns(*m_store, runDir);
    if (!report)
        return fail(report.error());
    const QString folder = QFileInfo(runDir).absoluteFilePath();
    for (const auto& r : report->runs)
        if (r.folder == folder)
            return r.runId;
    return report->runs.first().runId;
}

std::optional<SshHost> ImportTarget::fileHost(const RunRecord& run) const
{
    if (run.host.isEmpty())
        return std::nullopt;
    auto host = SshHost::parse(run.host);
    return host ? std::optional<SshHost>(*host) : std::nullopt;
}

Result<std::unique_ptr<RunWatcher>> ImportTarget::watch(const RunRecord& run, QObject* parent)
{
    if (!m_store)
        return fail(QObject::tr("following an imported run needs the run store"));
    auto w = std::make_unique<ImportWatcher>(
        *m_store, run.id, run.host.isEmpty() ? run.runDir : run.host + ":" + run.runDir, parent);
    w->start();
    return std::unique_ptr<RunWatcher>(std::move(w));
}

} // namespace shard::jobs
