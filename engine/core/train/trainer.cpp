// The training loop (one process per rank; rank 0 writes the records).
#include "trainer.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <thread>

#include <fcntl.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/autograd.h>

#include "core/memory/counting_allocator.h"
#include "core/memory/device_memory.h"
#include "core/model/hf_folder.h"
#include "core/model/lora.h"
#include "core/model/peft_folder.h"
#include "core/optim/adamw.h"
#include "core/optim/lr_schedule.h"
#include "core/train/data_loader_source.h"
#include "core/train/global_batch.h"
#include "core/train/host_sync.h"
#include "core/train/model_runner.h"
#include "core/train/preference.h"
#include "core/train/run_log.h"
#include "core/train/training_samples.h"
#include "dist/device_choice.h"
#include "launch/rank_heartbeat.h"
#include "plan/run_spec_bridge.h"
#include "protocol/jsonl_reader.h"
#include "protocol/peer_loss.h"
#include "protocol/records.h"
#include "protocol/run_dir.h"
#include "protocol/run_lock.h"
#include "protocol/run_pace.h"
#include "tbio/event_writer.h"

namespace shard::engine {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double cpuSeconds()
{
    timespec ts {};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double seconds(Clock::time_point a, Clock::time_point b)
{
    return std::chrono::duration<double>(b - a).count();
}

at::Tensor rowsTensor(const std::vector<TrainRow>& rows, int64_t begin, int64_t end, bool labels)
{
    const int64_t n = end - begin;
    const int64_t L = static_cast<int64_t>(rows.at(0).inputIds.size());
    at::Tensor t = at::empty({n, L}, at::kLong);
    int64_t* p = t.data_ptr<int64_t>();
    for (int64_t r = 0; r < n; ++r) {
        const auto& v = labels ? rows[begin + r].labels : rows[begin + r].inputIds;
        for (int64_t i = 0; i < L; ++i)
            p[r * L + i] = v[i];
    }
    return t;
}

// Replaces `path` atomically (readers never see a partial run.json).
void writeSpecFile(const std::string& path, const protocol::RunSpec& spec)
{
    const std::string tmp = path + ".tmp";
    {
        std::ofstream out(tmp);
        out << protocol::toJson(spec).dump(2) << "\n";
        out.flush();
        if (!out)
            throw std::runtime_error("cannot write " + tmp + " (is the disk full?)");
    }
    fs::rename(tmp, path);
}

// run.json of a new run, written whole or not at all: an empty or cut-off run.json is worse
// than none. A failure stops the run (RunDirWriteError).
void writeFirstSpecFile(const std::string& path, const protocol::RunSpec& spec)
{
    const std::string tmp = path + ".tmp";
    std::ofstream out(tmp, std::ios::trunc);
    out << protocol::toJson(spec).dump(2) << "\n";
    out.flush();
    const bool ok = static_cast<bool>(out);
    out.close();
    std::error_code ec;
    if (ok && out)
        fs::rename(tmp, path, ec);
    if (!ok || !out || ec) {
        fs::remove(tmp, ec);
        throw protocol::RunDirWriteError(
            path + ": cannot write the run spec (" + std::strerror(errno ? errno : EIO) + ")");
    }
}

// The run's mesh from its strategy and the ranks it was started with (docs/ARCHITECTURE.md,
// "Placement").
protocol::DeviceMesh meshOf(const protocol::RunSpec& spec, const dist::RankEnv& env)
{
    const int64_t world = std::max(1, env.worldSize);
    if (world == 1 && spec.tensorParallel <= 1 && spec.pipelineParallel <= 1) // single-process
        return {};
    const int64_t local = std::max(1, env.localWorldSize);
    const bool even = world % local == 0; // srun may start uneven nodes: then one "node"
    const protocol::ParallelDims dims {protocol::parseStrategyName(spec.strategy), spec.shardGroup,
        even ? world / local : 1, even ? local : world, spec.tensorParallel, spec.pipelineParallel};
    dims.validate("ranks");
    return protocol::DeviceMesh::of(dims);
}

// --steps, else the steps --epochs take at the spec's global batch.
int64_t stepsFor(const protocol::RunSpec& spec, int64_t records, int worldSize)
{
    if (spec.steps > 0)
        return spec.steps;
    const int64_t perStep = spec.microBatch * spec.gradAccum * worldSize;
    return std::max<int64_t>(1, (spec.epochs * records + perStep - 1) / perStep);
}

int64_t countTokens(const std::vector<TrainRow>& rows)
{
    int64_t n = 0;
    for (const auto& r : rows)
        for (size_t i = 1; i < r.labels.size(); ++i)
            n += r.labels[i] != -100;
    return n;
}

// The byte count after `label` in an allocator's message ("Tried to allocate 2.00 GiB"), or -1.
int64_t bytesAfter(const std::string& text, const std::string& label)
{
    const size_t at = text.find(label);
    if (at == std::string::npos)
        return -1;
    const char* p = text.c_str() + at + label.size();
    char* end = nullptr;
    const double v = std::strtod(p, &end);
    if (end == p)
        return -1;
    while (*end == ' ')
        ++end;
    const std::string unit(end, std::min<size_t>(3, std::strlen(end)));
    const double scale = unit == "GiB" ? 1073741824.0
        : unit == "MiB"                ? 1048576.0
        : unit == "KiB"                ? 1024.0
                                       : 1.0;
    return static_cast<int64_t>(v * scale);
}

std::string mib(int64_t bytes)
{
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / 1048576.0);
    return buf;
}

} // namespace

at::ScalarType computeDtypeFor(const std::string& precision)
{
    if (precision == "fp32")
        return at::kFloat;
    if (precision == "bf16-mixed")
        return at::kBFloat16;
    if (precision == "bf16" || precision == "fp16-mixed")
        throw std::runtime_error("precision '" + precision
            + "' is not supported by the engine yet; use fp32 or bf16-mixed");
    throw std::runtime_error("unknown precision '" + precision + "' (use fp32 or bf16-mixed)");
}

int usableCores()
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

void checkThreads(int requested)
{
    const int cores = usableCores();
    if (requested < 0 || requested > cores)
        throw std::runtime_error("--threads " + std::to_string(requested) + " is outside 0.."
            + std::to_string(cores) + " (this process may use " + std::to_string(cores)
            + " cores); use --threads " + std::to_string(cores)
            + " or less, or 0 for cores / ranks on the node");
}

int configureThreads(int requested, int localWorldSize)
{
    checkThreads(requested);
    int n = requested;
    if (n <= 0) {
        const int local = std::max(1, localWorldSize);
        n = std::max(1, usableCores() / local);
    }
    at::set_num_threads(n);
    return n;
}

// A record file of rank 0: one write(2) per line, checked. A line the disk could not take is
// cut off again, so the file always ends in a whole record.
struct RecordFile {
    std::string path;
    int fd = -1;

    ~RecordFile()
    {
        if (fd >= 0)
            ::close(fd);
    }
    void open(const std::string& p)
    {
        path = p;
        fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0)
            throw protocol::RunDirWriteError(p + ": cannot open (" + std::strerror(errno) + ")");
    }
    void append(const std::string& line)
    {
        if (fd < 0)
            return;
        const off_t before = ::lseek(fd, 0, SEEK_END);
        size_t done = 0;
        while (done < line.size()) {
            const ssize_t n = ::write(fd, line.data() + done, line.size() - done);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                const std::string why = n < 0 ? std::strerror(errno) : "short write";
                if (before >= 0) {
                    // Cut the partial line off; should that fail too, readers skip a partial
                    // last line.
                    [[maybe_unused]] const int rc = ::ftruncate(fd, before);
                }
                throw protocol::RunDirWriteError(path + ": write failed (" + why + ")");
            }
            done += static_cast<size_t>(n);
        }
    }
};

// Record files of rank 0, written per record; the rank's logs. Every write is checked: a
// failure stops the run (RunDirWriteError).
struct Trainer::Io {
    RecordFile metrics;
    RecordFile events;
    // <run>/events.out.tfevents.*: each metric record again, for TensorBoard and the tools that
    // read its files (rank 0; a failed write stops this file only, with a warning).
    std::unique_ptr<tbio::EventFileWriter> tensorboard;
    bool toStdout = false;
    bool stderrIsLog = false; // under the launcher this rank's stderr is its log file
    Clock::time_point start = Clock::now();
    std::unique_ptr<RunLog> log;
    // The run folder's lock (rank 0 outside the launcher); released before the files close.
    std::unique_ptr<protocol::RunLock> lock;
    nlohmann::json startData; // the "start" event's, written once a resume has set the clock

    void write(RecordFile& f, const nlohmann::json& j)
    {
        const std::string line = protocol::encodeLine(j) + "\n";
        // stdout first: the launcher learns an error's message even when the disk is full.
        if (toStdout) {
            std::fwrite(line.data(), 1, line.size(), stdout);
            std::fflush(stdout);
        }
        f.append(line);
    }
    // A metric record as a TensorBoard event, under Hugging Face Trainer's names where it has
    // one (tbio/known_tags.cpp), so the studio's importer and other tools map it back.
    void tensorboardRecord(const protocol::MetricRecord& rec)
    {
        if (!tensorboard)
            return;
        std::vector<std::pair<std::string, float>> scalars = {
            {"train/loss", static_cast<float>(rec.loss)},
            {"train/learning_rate", static_cast<float>(rec.lr.value_or(0.0))},
            {"train/grad_norm", static_cast<float>(rec.gradNorm.value_or(0.0))},
            {"train/tokens_per_sec", static_cast<float>(rec.tokensPerSec.value_or(0.0))},
            {"train/step_time", static_cast<float>(rec.stepTimeSec)},
            {"train/num_input_tokens_seen", static_cast<float>(rec.tokens)},
        };
        if (rec.evalLoss)
            scalars.emplace_back("eval/loss", static_cast<float>(*rec.evalLoss));
        int64_t peak = 0;
        for (const auto& m : rec.memory)
            peak = std::max<int64_t>(peak, m.peakBytes);
        if (peak > 0)
            scalars.emplace_back("memory/peak(GiB)", static_cast<float>(peak / 1073741824.0));
        // A preference run's rewards as TRL's trainers log them ("train/rewards/margins").
        for (const auto& [name, value] : rec.scalars)
            scalars.emplace_back(
                name.rfind("eval/", 0) == 0 ? name : "train/" + name, static_cast<float>(value));
        const double now
            = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
                  .count();
        try {
            tensorboard->write(now, rec.step, scalars);
        } catch (const std::exception& e) {
            log->warn(std::string(e.what())
                + "; no more TensorBoard events are written "
                  "(metrics.jsonl holds every record)");
            tensorboard.reset();
        }
    }
    // The logs took every line so far (checked once per step).
    void checkLogs()
    {
        if (log && !log->failure().empty())
            throw protocol::RunDirWriteError("rank log: " + log->failure());
        if (stderrIsLog && std::ferror(stderr))
            throw protocol::RunDirWriteError("rank log (stderr): write failed");
    }
    void event(const std::string& kind, int64_t step, const std::string& message,
        nlohmann::json data = nlohmann::json::object())
    {
        protocol::EventRecord e;
        e.kind = kind;
        e.step = step;
        e.message = message;
        e.data = std::move(data);
        e.wallTimeSec = seconds(start, Clock::now());
        write(events, protocol::toJson(e));
    }
};

// The optimizer, the schedule and the counters of one run, shared by its steps.
struct Trainer::Loop {
    explicit Loop(Trainer& t)
        : runner(*t.m_model, *t.m_strategy,
            ForwardConfig {t.m_computeDtype, t.m_spec.checkpointing == "full", t.m_device,
                t.m_spec.sequenceParallel})
        , adamw(AdamWConfig {t.m_spec.beta1, t.m_spec.beta2, t.m_spec.eps, t.m_spec.weightDecay})
        , accum(static_cast<int>(t.m_spec.gradAccum))
        , globalRows(t.m_spec.microBatch * t.dataParallel())
        , device(t.m_device)
    {
        schedule.kind = t.m_spec.schedule;
        schedule.baseLr = t.m_spec.lr;
        schedule.warmupSteps = t.m_spec.warmup;
        schedule.totalSteps = t.m_spec.scheduleSteps > 0 ? t.m_spec.scheduleSteps : t.m_steps;
        schedule.startStep = t.m_spec.scheduleStart;
        schedule.minLrRatio = t.m_spec.minLrRatio;
        if (t.m_referenceModel)
            reference = std::make_unique<ModelRunner>(*t.m_referenceModel, *t.m_referenceStrategy,
                ForwardConfig {t.m_computeDtype, false, t.m_device, t.m_spec.sequenceParallel});
    }

    // Live and peak bytes where the tensors are: the GPU's caching allocator on CUDA, the
    // counting allocator on the CPU.
    int64_t liveBytes() const
    {
        return device.is_cuda() ? deviceMemoryStats(device).allocatedBytes : alloc.currentBytes();
    }
    int64_t peakBytes() const
    {
        return device.is_cuda() ? deviceMemoryStats(device).allocatedPeakBytes : alloc.peakBytes();
    }
    void resetPeaks()
    {
        alloc.resetPeak();
        resetDevicePeaks(device);
    }

    ModelRunner runner;
    // DPO's live reference under full fine-tuning: the frozen copy's forwards.
    std::unique_ptr<ModelRunner> reference;
    AdamW adamw;
    LrSchedule schedule;
    TrainResult result;
    int accum = 1;          // micro-batches per step (--grad-accum)
    int64_t globalRows = 0; // rows of one micro-batch over all ranks
    int64_t tokensSeen = 0;
    int64_t firstStep = 0; // steps done before this process (resume)
    // The steps after the first (warm-up), for the throughput.
    double timedSec = 0.0;
    double timedCpuSec = 0.0;
    int64_t timedTokens = 0;
    protocol::RunPace pace; // the logged steps of the whole run: the finish event's tokens/s
    int64_t runPeak = 0;
    // Steps whose loss and gradient norm are still on the device (readSteps).
    struct Unread {
        int64_t step = 0;
        at::Tensor loss;
        at::Tensor norm;
        at::Tensor stats; // preference objectives: the step's means (preferenceStatNames)
    };
    std::vector<Unread> unread;
    int64_t readsAtLastRecord = 0; // hostsync::count() when the previous record was written
    int64_t savedStep = 0;         // the step of the last checkpoint this process wrote
    bool preemptAgreed = false;    // some rank was asked to stop (agreed at the last record)
    c10::Device device;
    CountingAllocator& alloc = CountingAllocator::install();
};

// What one optimizer step measured. The loss and the norm stay on the device (one-element
// fp64 tensors) until the loop reads the steps not yet read, in one transfer, at a logged step
// (readSteps).
struct Trainer::Step {
    int64_t step = 0; // 1-based
    at::Tensor lossValue;
    at::Tensor normValue;
    double loss = 0.0;     // set by readSteps
    double gradNorm = 0.0; // before clipping; set by readSteps
    double lr = 0.0;
    double seconds = 0.0;
    int64_t tokens = 0;           // every rank's rows, masked labels included
    int64_t activationBytes = 0;  // the largest of its micro-batches'
    double pipelineWaitSec = 0.0; // pipeline parallel: waiting for a neighbour's tensors
    Clock::time_point end;
    // Preference objectives: [ORPO's NLL, then the per-pair statistics' means] (fp64, global).
    at::Tensor stats;
};

// A preference pair forward of this rank's pairs.
struct Trainer::PairForward {
    PreferenceLoss loss;
    at::Tensor chosenNll;     // ORPO: the chosen answers' summed -log p (differentiable)
    int64_t chosenTokens = 0; // their tokens
};

namespace {

// LoRA: the runner's forwards see the base alone while this lives (DPO's reference).
struct AdaptersOff {
    explicit AdaptersOff(ModelRunner& r)
        : runner(r)
    {
        runner.setAdaptersOff(true);
    }
    ~AdaptersOff() { runner.setAdaptersOff(false); }
    ModelRunner& runner;
};

// Labelled tokens of each row (the positions predicting a next token), fp64 on the host.
at::Tensor rowTokenCounts(const at::Tensor& labels)
{
    return labels.narrow(1, 1, labels.size(1) - 1).ne(-100).sum(1).to(at::kDouble);
}

} // namespace

Trainer::Trainer(protocol::RunSpec spec, TrainerOptions options)
    : m_spec(std::move(spec))
    , m_options(options)
{
    CountingAllocator::install();
    protocol::validate(m_spec);
    checkThreads(m_spec.threads);
    // One rank per GPU: LOCAL_RANK picks it. run.json records the device the run resolved
    // --device to (docs/ARCHITECTURE.md, "Devices").
    const std::string askedDevice = m_spec.device;
    // Rank identity is read once, here (RANK... from a launcher, SLURM_PROCID... from srun),
    // and handed to the strategy: the trainer and its process groups cannot disagree.
    m_rankEnv = dist::RankEnv::fromEnvironment();
    m_device = dist::resolveDevice(m_spec.device, m_rankEnv.localRank);
    if (m_spec.offload != "none" && m_device.is_cpu() && !protocol::offloadOnCpuForTests())
        throw std::runtime_error("--offload " + m_spec.offload
            + " moves state from GPU memory to host memory, and --device " + askedDevice
            + " trains on the CPU here (no GPU): use --offload none, or --device cuda on a GPU "
              "node");
    m_spec.device = m_device.is_cuda() ? "cuda" : "cpu";
    m_rank = m_rankEnv.rank;
    m_worldSize = std::max(1, m_rankEnv.worldSize);
    m_mesh = meshOf(m_spec, m_rankEnv);
    m_computeDtype = computeDtypeFor(m_spec.precision);
    if (m_spec.data.size() != 1)
        throw std::runtime_error("give exactly one data file (--data FILE.jsonl); "
            + std::to_string(m_spec.data.size()) + " given");
    if (m_options.writeRunDir && m_spec.outDir.empty())
        throw std::runtime_error("no run directory given (--out RUNDIR)");

    // The model folder: config.json, weights, shapes.
    HfModelFolder folder = openHfModelFolder(m_spec.model);
    m_modelDir = folder.dir;
    m_weights = std::move(folder.weights);
    const plan::ModelSpec& ms = folder.spec;
    if (ms.maxPositionEmbeddings > 0 && m_spec.seqLen > ms.maxPositionEmbeddings)
        throw std::runtime_error("sequence length " + std::to_string(m_spec.seqLen)
            + " exceeds the model's max_position_embeddings ("
            + std::to_string(ms.maxPositionEmbeddings) + "); use --seq-len "
            + std::to_string(ms.maxPositionEmbeddings) + " or less");
    m_model = std::make_unique<LlamaModel>(ms);
    // What tensor parallel splits (docs/ARCHITECTURE.md, "Tensor parallel"), before any weight
    // is placed.
    if (const std::string why = plan::tensorParallelRefusal(m_spec, ms); !why.empty())
        throw std::runtime_error(why);
    if (const std::string why = plan::pipelineParallelRefusal(m_spec, ms); !why.empty())
        throw std::runtime_error(why);
    if (m_spec.usesLora()) {
        const lora::LoraConfig lc = lora::configFromSpec(m_spec);
        lora::attach(*m_model, lc, m_spec.method == "qlora");
        m_adapters = std::make_unique<lora::AdapterSource>(lc, m_spec.loraInit, m_spec.seed);
    }

    LrSchedule probe;
    probe.kind = m_spec.schedule;
    probe.baseLr = m_spec.lr;
    probe.warmupSteps = m_spec.warmup;
    probe.minLrRatio = m_spec.minLrRatio;
    validate(probe);
    if (m_spec.weightDecay < 0)
        throw std::runtime_error("weight decay must be >= 0");

    // The data (validated line by line by shard_data).
    m_data = std::make_unique<DataLoaderSource>(m_spec, m_modelDir, ms.vocabSize);
    if (m_spec.usesPreferencePairs() != m_data->preference()) {
        if (m_data->preference())
            throw std::runtime_error(m_spec.data.front()
                + " holds preference pairs (prompt, chosen, rejected): train them with "
                  "--objective dpo or --objective orpo");
        throw std::runtime_error("--objective " + m_spec.objective
            + " trains on preference pairs, and " + m_spec.data.front()
            + " holds none: give JSON lines with \"prompt\", \"chosen\" and \"rejected\" "
              "(text, or message lists as Hugging Face TRL reads them)");
    }
    if (m_spec.usesPreferencePairs())
        m_preference = std::make_unique<PreferenceConfig>(PreferenceConfig::fromSpec(m_spec));
    if (m_spec.evalEvery > 0 && m_data->evalRows().empty())
        throw std::runtime_error("--eval-every needs held-out data (--eval-data FILE or "
                                 "--eval-fraction F)");

    const int localWorld = std::max(1, m_rankEnv.localWorldSize);
    checkMicroBatch(m_spec, ms, m_worldSize, localWorld, m_data->trainRecords());
    checkOffloadHostMemory(m_spec, ms, m_worldSize, localWorld, plan::physicalMemoryBytes());

    if (m_spec.sampleEvery > 0)
        m_samples = std::make_unique<TrainingSamples>(m_spec, m_modelDir);

    m_steps = stepsFor(m_spec, m_data->trainRecords(), dataParallel());

    StrategyOptions so;
    so.name = m_spec.strategy;
    so.shardGroup = m_spec.shardGroup;
    so.computeDtype = m_computeDtype;
    so.reduceDtype = m_spec.reduceDtype == "bf16" ? at::kBFloat16 : at::kFloat;
    so.checkpointing = m_spec.checkpointing == "full";
    so.device = m_device;
    so.spec = m_spec;
    so.rank = m_rankEnv;
    so.mesh = m_mesh;
    m_strategy = makeStrategy(so, m_worldSize);
    if (m_spec.resolvedReference() == "live" && !m_spec.usesLora()) {
        // DPO's reference under full fine-tuning: the model as it starts, frozen, in the compute
        // dtype, over the same ranks and groups (protocol::validate refused tensor and pipeline
        // parallel).
        m_referenceModel = std::make_unique<LlamaModel>(ms);
        for (Param* p : m_referenceModel->params())
            p->frozen = true;
        StrategyOptions ro = so;
        ro.checkpointing = false; // its forward keeps no graph
        ro.spec.offload = "none";
        ro.shareGroupsOf = m_strategy.get();
        m_referenceStrategy = makeStrategy(ro, m_worldSize);
    }
}

Trainer::~Trainer() = default;

std::string Trainer::outOfMemoryMessage(
    const std::exception& e, int64_t step, nlohmann::json& data) const
{
    const CountingAllocator& alloc = CountingAllocator::install();
    const int rank = m_strategy ? m_strategy->rank() : m_rank;
    const int localWorld = std::max(1, m_rankEnv.localWorldSize);
    // What was asked for and how much there is, from the error itself (a later refusal while
    // the error unwinds must not change them): the counting allocator's limit on the CPU, the
    // CUDA caching allocator's message on a GPU.
    int64_t asked = -1, capacity = -1, inUse = -1;
    const std::string what = e.what();
    if (m_device.is_cpu()) {
        asked = bytesAfter(what, "tried to allocate ");
        inUse = bytesAfter(what, " bytes with ");
        capacity = alloc.limitBytes();
    } else {
        asked = bytesAfter(what, "Tried to allocate ");
        capacity = bytesAfter(what, "total capacity of ");
    }
    std::string message = "rank " + std::to_string(rank) + " ran out of memory on " + m_device.str()
        + (step > 0 ? " at step " + std::to_string(step) : "");
    if (asked > 0)
        message += ": it asked for " + std::to_string(asked) + " bytes (" + mib(asked) + ")";
    if (m_device.is_cpu() && capacity > 0)
        message += (inUse >= 0 ? " with " + mib(inUse) + " in use" : std::string()) + " of its "
            + mib(capacity) + " limit (" + kMemoryLimitEnv + ")";
    else if (capacity > 0)
        message += " on a GPU of " + mib(capacity);
    // What to change: the planner's largest micro-batch for this memory, checkpointing,
    // offload where the engine has it.
    std::vector<std::string> fixes;
    int64_t largest = -1;
    if (capacity > 0 && m_data)
        largest = largestMicroBatchFor(m_spec, m_model->spec(), m_worldSize, localWorld,
            m_data->trainRecords(), m_device.is_cuda(), capacity);
    if (largest > 0 && largest < m_spec.microBatch)
        fixes.push_back(
            "--micro-batch " + std::to_string(largest) + " (the planner's largest that fits)");
    else if (m_spec.microBatch > 1)
        fixes.push_back("a smaller --micro-batch (with a larger --grad-accum for the same global "
                        "batch)");
    if (largest == 0)
        fixes.push_back("more memory per rank (the planner fits not even --micro-batch 1 in "
            + mib(capacity) + ")");
    if (m_spec.checkpointing == "none")
        fixes.push_back("--checkpointing full");
    const auto& offloads = protocol::trainableOffloads();
    if (m_device.is_cuda() && m_spec.offload == "none" && !m_spec.usesLora()
        && std::find(offloads.begin(), offloads.end(), "optimizer") != offloads.end())
        fixes.push_back("--offload optimizer");
    if (m_device.is_cpu() && localWorld > 1)
        fixes.push_back("fewer ranks per node");
    fixes.push_back("a shorter --seq-len");
    message += "; use ";
    for (size_t i = 0; i < fixes.size(); ++i)
        message += (i == 0 ? "" : i + 1 == fixes.size() ? " or " : ", ") + fixes[i];
    const size_t eol = what.find('\n');
    message += " (" + what.substr(0, eol) + ")";
    data["rank"] = rank;
    data["device"] = m_device.str();
    if (asked > 0)
        data["requested_bytes"] = asked;
    if (capacity > 0)
        data["capacity_bytes"] = capacity;
    if (largest >= 0)
        data["largest_micro_batch"] = largest;
    data["micro_batch"] = m_spec.microBatch;
    return message;
}

TrainResult Trainer::run()
{
    Io io;
    const bool resuming = setUpRun(io);
    const int threads = configureThreads(m_spec.threads, m_rankEnv.localWorldSize);
    int64_t currentStep = 0; // for the error event
    at::manual_seed(m_spec.seed);
    try {
        placeModel(io, resuming, threads);
        Loop loop(*this);
        if (m_spec.resolvedReference() == "precomputed")
            precomputeReference(io, loop);
        if (resuming)
            resume(io, loop);
        // The optimizer's state before the first step (docs/ARCHITECTURE.md, "Engine speed on
        // the CPU"), and before "start": a run that cannot hold it never says it started.
        loop.adamw.reserve(m_strategy->optimizerTargets());
        announceStart(io, loop, resuming);
        loop.resetPeaks();
        loop.readsAtLastRecord = hostsync::count();
        loop.runPeak = loop.peakBytes();
        currentStep = loop.firstStep;
        for (int64_t step = loop.firstStep; step < m_steps; ++step) {
            currentStep = step + 1;
            launch::RankHeartbeat::report(step + 1, launch::RankPhase::Step);
            // A preemption stops before this step, after `step` steps done (asked here, where
            // the next step's first collective would wait anyway).
            if (step > loop.firstStep && preemptAgreed(loop))
                return preempt(io, loop, step);
            io.checkLogs();
            Step done = trainStep(loop, step);
            loop.unread.push_back({done.step, done.lossValue, done.normValue, done.stats});
            const bool last = step + 1 == m_steps;
            const bool logged = (step + 1) % m_spec.logEvery == 0 || last;
            // The losses and norms reach the host once per logged step (and before a
            // checkpoint, which must not keep a run whose loss went non-finite).
            if (logged || (m_options.checkpoints && m_options.checkpoints->due(step + 1, last)))
                readSteps(loop);
            if (logged) {
                done.loss = loop.result.losses.back();
                done.gradNorm = loop.result.gradNorms.back();
            }
            protocol::MetricRecord rec = metricRecord(io, loop, done, step + 1);
            if (logged && m_preference && !loop.result.scalars.empty())
                rec.scalars = loop.result.scalars.back();
            // Pipeline parallel: the share of the step this rank (the first stage) waited for
            // its neighbours: the schedule's bubble and the transfers.
            if (m_mesh.pp > 1 && done.seconds > 0)
                rec.scalars["pipeline/idle_fraction"] = done.pipelineWaitSec / done.seconds;
            if (m_spec.evalEvery > 0 && ((step + 1) % m_spec.evalEvery == 0 || last)) {
                const double ev = evaluate(loop, rec.scalars);
                rec.evalLoss = ev;
                loop.result.evalLosses.push_back({step + 1, ev});
                io.log->info(
                    strprintf("step %lld eval loss %.6f", static_cast<long long>(step + 1), ev));
            }
            if (m_samples && m_samples->due(step + 1, last))
                writeSamples(io, step + 1);
            loop.runPeak = std::max(loop.runPeak, loop.peakBytes());
            if (logged) {
                writeMetrics(io, loop, rec, done.activationBytes);
                loop.pace.add(rec);
            }
            if (m_options.checkpoints)
                saveCheckpoint(io, loop, step + 1, last);
        }
        return finish(io, loop);
    } catch (const std::exception& e) {
        fail(io, e, currentStep);
    }
}

bool Trainer::setUpRun(Io& io)
{
    const bool leader = m_strategy->rank() == 0;
    const protocol::RunDir dir(m_spec.outDir);
    CheckpointHooks* checkpoints = m_options.checkpoints.get();
    const char* launched = std::getenv("SHARD_LAUNCHED");
    const bool underLauncher = launched && std::string(launched) == "1";
    // The run folder's lock, before anything in it is read or written (a resume of a live run
    // stops here); the launcher holds it for launched ranks.
    if (m_options.writeRunDir && leader && !underLauncher) {
        std::error_code ec;
        fs::create_directories(dir.root(), ec);
        io.lock = protocol::RunLock::acquire(dir.lockFile());
    }
    const bool resuming = checkpoints && checkpoints->resuming();

    // Logging: stderr plus <run>/logs/rank-<r>.log.
    std::string logFile;
    if (m_options.writeRunDir) {
        std::error_code ec;
        fs::create_directories(dir.logsDir(), ec);
        if (ec)
            throw std::runtime_error(
                "cannot create run directory '" + dir.root() + "': " + ec.message());
        if (leader && !resuming && fs::exists(dir.metricsFile())
            && fs::file_size(dir.metricsFile()) > 0)
            throw std::runtime_error("run directory '" + dir.root()
                + "' already holds a run (metrics.jsonl is not empty); choose a new --out");
        // Under `shard-worker launch` this rank's stderr already goes to the same log file.
        io.stderrIsLog = underLauncher;
        if (!underLauncher)
            logFile = dir.rankLog(m_strategy->rank());
    }
    io.log = std::make_unique<RunLog>(underLauncher, logFile);
    io.toStdout = leader && m_options.recordsToStdout;
    if (m_options.writeRunDir && leader) {
        if (!fs::exists(dir.specFile()))
            writeFirstSpecFile(dir.specFile(), m_spec);
        io.metrics.open(dir.metricsFile());
        io.events.open(dir.eventsFile());
        if (m_spec.tensorboard) {
            try {
                io.tensorboard = std::make_unique<tbio::EventFileWriter>(dir.root());
            } catch (const std::exception& e) {
                io.log->warn(std::string(e.what()) + "; the run goes on without it");
            }
        }
    }
    return resuming;
}

void Trainer::placeModel(Io& io, bool resuming, int threads)
{
    // Placement: the strategy pulls each parameter's full value once, in order.
    // (When resuming, the checkpoint fills the parameters: the weights are not read.)
    const SafetensorsReader& weights = *m_weights;
    // DPO's precomputed reference is the model before training: a resume computes it again from
    // the weights, then the checkpoint replaces them.
    const bool referenceFromWeights = m_spec.resolvedReference() == "precomputed";
    auto readWeight = [&](const Param& p) { // the model folder's value, in fp32
        at::Tensor t = weights.tensor(p.info.name);
        return t.scalar_type() == at::kFloat ? t : t.to(at::kFloat);
    };
    m_strategy->setup(*m_model, [&](const Param& p) {
        if (resuming && !p.frozen && !referenceFromWeights) // a LoRA base is not in the checkpoint
            return at::zeros(p.info.shape, at::kFloat);
        if (m_adapters && lora::isAdapterName(p.info.name))
            return resuming ? at::zeros(p.info.shape, at::kFloat) : m_adapters->value(p);
        return readWeight(p);
    });
    if (m_referenceStrategy) {
        // The model folder's weights, on a resume too (the reference never trains).
        m_referenceStrategy->setup(*m_referenceModel, readWeight);
        io.log->info(strprintf("DPO reference: a frozen copy of the model, %s on this rank",
            mib(m_referenceStrategy->memory().frozenParams).c_str()));
    }
    m_weights.reset(); // unmap
    const auto& ms = m_model->spec();
    io.log->info(strprintf("model %s (%lld parameters, %lld trained, %d layers), strategy %s "
                           "rank %d/%d, device %s, %d threads, precision %s, checkpointing %s",
        ms.name.c_str(), static_cast<long long>(m_model->numParams()),
        static_cast<long long>(m_model->numTrainableParams()), static_cast<int>(ms.numLayers),
        std::string(m_strategy->name()).c_str(), static_cast<int>(m_strategy->rank()),
        static_cast<int>(m_strategy->worldSize()), m_device.str().c_str(), threads,
        m_spec.precision.c_str(), m_spec.checkpointing.c_str()));
    nlohmann::json started = {{"params", m_model->numParams()}, {"strategy", m_strategy->name()},
        {"world_size", m_strategy->worldSize()}, {"device", m_device.str()}, {"threads", threads},
        {"steps", m_steps}};
    if (m_mesh.tp > 1 || m_mesh.pp > 1) {
        started["tensor_parallel"] = m_mesh.tp;
        started["pipeline_parallel"] = m_mesh.pp;
        started["mesh"] = m_mesh.describe();
        if (m_mesh.tp > 1)
            started["sequence_parallel"] = m_spec.sequenceParallel;
        if (m_mesh.pp > 1) { // the cut of every (virtual) stage, [first, end) layers
            nlohmann::json cut = nlohmann::json::array();
            for (const auto& [first, end] : m_strategy->pipelineCut())
                cut.push_back({first, end});
            started["pipeline_layers"] = cut;
        }
        std::string where = "mesh " + m_mesh.describe() + ", this rank tp "
            + std::to_string(m_mesh.coord(protocol::MeshDim::Tp, m_rank))
            + " of data-parallel copy " + std::to_string(m_mesh.dataParallelIndex(m_rank));
        if (m_mesh.pp > 1) {
            where += ", pipeline stage " + std::to_string(m_strategy->pipelineStage()) + " of "
                + std::to_string(m_mesh.pp) + " (layers";
            for (int c = 0; c < m_strategy->pipelineChunks(); ++c) {
                const auto [first, end] = m_strategy->pipelineLayers(c);
                where += (c ? ", " : " ") + std::to_string(first) + "-" + std::to_string(end - 1);
            }
            where += ")";
        }
        io.log->info((m_mesh.pp > 1 ? "3D parallel: " : "tensor parallel: ") + where);
    }
    // The planner's peak per rank for this run, next to what the records measure (a reader
    // without the planner, such as bench/gpu, compares the two). Capacity does not change it.
    try {
        protocol::RunSpec spec = m_spec;
        spec.device = m_device.is_cuda() ? "cuda" : "cpu";
        const plan::DeviceSpec device = m_device.is_cuda()
            ? plan::DeviceSpec::gpu(1024.0)
            : plan::defaultDeviceFor(spec, int64_t(1) << 40);
        const plan::PlanResult planned = plan::plan(plan::planInputFromSpec(spec, device));
        started["planned_peak_bytes"] = planned.perDevice.total();
        if (planned.hostBytesPerDevice > 0) // offload: the state it puts in host memory
            started["planned_host_bytes"] = planned.hostBytesPerDevice;
    } catch (const std::exception& e) {
        io.log->info(std::string("no planner estimate for this run: ") + e.what());
    }
    io.startData = std::move(started);
}

// "start" after a resume has restored the step and the run's clock: a resumed run's start sits
// at its checkpoint's step and time, not at "0:00 | 0" after the finish it continues from.
void Trainer::announceStart(Io& io, Loop& loop, bool resuming)
{
    io.event("start", loop.firstStep,
        resuming ? "training resumed at step " + std::to_string(loop.firstStep)
                 : std::string("training started"),
        io.startData);
    if (const int64_t bad = m_data->badLines(); bad > 0) {
        const auto reports = m_data->badLineReports();
        std::vector<std::string> first(
            reports.begin(), reports.begin() + std::min<size_t>(reports.size(), 5));
        io.log->warn(strprintf("skipped %lld bad data lines (--skip-bad-lines), first: %s",
            static_cast<long long>(bad), first.empty() ? "" : first.front().c_str()));
        io.event("data", 0,
            "skipped " + std::to_string(bad) + " bad line" + (bad == 1 ? "" : "s")
                + " (--skip-bad-lines)" + (first.empty() ? "" : "; first: " + first.front()),
            {{"skipped_lines", bad}, {"first", first}});
    }
}

void Trainer::resume(Io& io, Loop& loop)
{
    const LoopState state = m_options.checkpoints->restore(*m_model, *m_strategy, loop.adamw);
    m_data->setPosition(state.dataPosition);
    loop.firstStep = state.step;
    loop.tokensSeen = state.tokensSeen;
    const double wallOffsetSec = state.wallTimeSec; // wall time of the run before this process
    io.start -= std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(wallOffsetSec));
    // The pace counts the steps before this process too (the finish event's tokens/s is the
    // whole run's, as the Runs page's).
    if (m_options.writeRunDir && m_strategy->rank() == 0) {
        protocol::readJsonlFile(protocol::RunDir(m_spec.outDir).metricsFile(), 0,
            [&](const nlohmann::json& j, int64_t) {
                try {
                    const protocol::MetricRecord r = protocol::metricFromJson(j);
                    if (r.step <= loop.firstStep)
                        loop.pace.add(r);
                } catch (const std::exception&) {
                    // not a metric record: it adds nothing to the pace
                }
            });
    }
    io.log->info(strprintf("resumed from %s at step %lld", state.checkpointDir.c_str(),
        static_cast<long long>(loop.firstStep)));
    io.event("checkpoint", loop.firstStep, "resumed from " + state.checkpointDir,
        {{"action", "resume"}, {"dir", state.checkpointDir}});
    // Keep the checkpoint's global batch at another rank count (or refuse, or record the change
    // the user asked for).
    const ResumeBatch batch
        = resumeBatch(m_spec, dataParallel(), state.microBatch, state.gradAccum, state.worldSize);
    if (!batch.message.empty()) {
        m_spec.microBatch = batch.microBatch;
        m_spec.gradAccum = batch.gradAccum;
        loop.accum = static_cast<int>(m_spec.gradAccum);
        loop.globalRows = m_spec.microBatch * dataParallel();
        m_steps = stepsFor(m_spec, m_data->trainRecords(), dataParallel());
        if (m_spec.scheduleSteps == 0) // a kept schedule ends where it did
            loop.schedule.totalSteps = m_steps;
        io.log->info(batch.message);
        io.event("batch", loop.firstStep, batch.message,
            {{"micro_batch", m_spec.microBatch}, {"grad_accum", m_spec.gradAccum},
                {"world_size", m_strategy->worldSize()},
                {"global_batch", loop.globalRows * loop.accum},
                {"checkpoint_global_batch", state.microBatch * state.gradAccum * state.worldSize},
                {"kept_global_batch", batch.changed}});
    }
    // run.json records what this run trains with now (rank count, batch split).
    if (m_options.writeRunDir && m_strategy->rank() == 0)
        writeSpecFile(protocol::RunDir(m_spec.outDir).specFile(), m_spec);
    if (loop.firstStep >= m_steps)
        io.log->warn(strprintf("the checkpoint is at step %lld of %lld: nothing left to train",
            static_cast<long long>(loop.firstStep), static_cast<long long>(m_steps)));
}

Trainer::Step Trainer::trainStep(Loop& loop, int64_t step)
{
    const int K = loop.accum;
    const int64_t globalRows = loop.globalRows;
    Step done;
    const auto t0 = Clock::now();
    const double cpu0 = cpuSeconds();
    std::vector<std::vector<TrainRow>> micro;
    int64_t stepTokens = 0;
    // A preference micro-batch of globalRows pairs is twice as many rows.
    const int64_t rowsPerMicro = m_preference ? 2 * globalRows : globalRows;
    for (int k = 0; k < K; ++k) {
        micro.push_back(m_data->nextGlobalBatch(rowsPerMicro));
        stepTokens += countTokens(micro.back());
    }
    if (m_preference) {
        preferenceMicroSteps(loop, micro, done);
    } else if (m_mesh.pp > 1) {
        pipelineMicroSteps(loop, micro, stepTokens, done);
    } else {
        supervisedMicroSteps(loop, micro, stepTokens, done);
    }
    done.step = step + 1;

    // Clipping on the device: scale = clip / (norm + 1e-6) where norm > clip, else 1 (fp64, as
    // torch.nn.utils.clip_grad_norm_ computes it), handed to AdamW as a tensor.
    auto targets = m_strategy->optimizerTargets();
    done.normValue = m_strategy->gradSquaredNorm(targets).sqrt();
    at::Tensor scale;
    if (m_spec.clip > 0) {
        const at::Tensor clip = at::full({1}, m_spec.clip, done.normValue.options());
        scale = at::where(done.normValue > clip, clip.div(done.normValue.add(1e-6)),
            at::ones_like(done.normValue));
    }
    done.lr = loop.schedule.at(step);
    loop.adamw.step(targets, done.lr, scale);
    targets.clear();
    m_strategy->afterOptimizerStep();
    m_strategy->zeroGrad();
    done.end = Clock::now();
    done.seconds = seconds(t0, done.end);
    done.tokens = rowsPerMicro * K * m_spec.seqLen;
    loop.tokensSeen += done.tokens;
    if (step > loop.firstStep || m_steps == loop.firstStep + 1) {
        loop.timedSec += done.seconds;
        loop.timedCpuSec += cpuSeconds() - cpu0;
        loop.timedTokens += done.tokens;
    }
    return done;
}

void Trainer::supervisedMicroSteps(
    Loop& loop, const std::vector<std::vector<TrainRow>>& micro, int64_t stepTokens, Step& done)
{
    const int K = loop.accum;
    const int64_t globalRows = loop.globalRows;
    const double norm = static_cast<double>(std::max<int64_t>(1, stepTokens));
    // The loss sum in fp64 on the device, micro-step by micro-step (nothing read back here).
    at::Tensor lossSum = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(m_device));
    for (int k = 0; k < K; ++k) {
        m_strategy->beginMicroStep(k, K);
        auto [lo, hi] = m_mesh.dataRows(m_rank, globalRows);
        if (hi > lo) {
            const at::Tensor ids = rowsTensor(micro[k], lo, hi, false);
            const at::Tensor labels = rowsTensor(micro[k], lo, hi, true);
            const int64_t before = loop.liveBytes();
            LossSum ls = loop.runner.lossSum(ids, labels, 1.0 / norm);
            done.activationBytes = std::max(done.activationBytes, loop.liveBytes() - before);
            at::Tensor loss = ls.sum / norm;
            loss.backward();
            lossSum.add_(ls.sum.detach().to(at::kDouble));
        }
        if (m_strategy->wantsUnitHooks())
            m_strategy->postBackward(0);
        m_strategy->endMicroStep(k, K);
    }
    m_strategy->allReduceSumInPlace(lossSum);
    done.lossValue = lossSum / norm;
}

namespace {

// One op of a rank's pipeline schedule: the forward or backward of one micro-batch through one
// of its model chunks.
struct PipeOp {
    bool forward = true;
    int chunk = 0;
    int micro = 0;
};

// Stage s of P's ops over K micro-batches with v model chunks: 1F1B (v = 1: PipeDream-flush, as
// Megatron-LM and torchtitan run it) or Megatron-LM's interleaved 1F1B (K a multiple of P):
// forward step i runs chunk (i / P) mod v on micro-batch (i / (P v)) P + i mod P, backward step
// i the same micro-batch on chunk v - 1 - (i / P) mod v; a warm-up of forwards, then one
// forward and one backward in turn, then the remaining backwards.
std::vector<PipeOp> pipelineOps(int P, int s, int v, int K)
{
    const int n = K * v;
    const auto forwardAt = [&](int i) {
        return PipeOp {true, (i / P) % v, (i / (P * v)) * P + i % P};
    };
    const auto backwardAt = [&](int i) {
        PipeOp op = forwardAt(i);
        op.forward = false;
        op.chunk = v - 1 - op.chunk;
        return op;
    };
    const int warmup = v == 1 ? std::min(P - 1 - s, K) : std::min(n, (P - s - 1) * 2 + (v - 1) * P);
    std::vector<PipeOp> ops;
    int f = 0, b = 0;
    while (f < warmup)
        ops.push_back(forwardAt(f++));
    while (f < n) {
        ops.push_back(forwardAt(f++));
        ops.push_back(backwardAt(b++));
    }
    while (b < n)
        ops.push_back(backwardAt(b++));
    return ops;
}

} // namespace

StagePart Trainer::stagePart(int chunk) const
{
    const int P = m_strategy->pipelineStages();
    const int v = m_strategy->pipelineChunks();
    const int virtualStage = chunk * P + m_strategy->pipelineStage();
    return {m_strategy->pipelineLayers(chunk), virtualStage == 0, virtualStage == P * v - 1};
}

void Trainer::pipelineMicroSteps(
    Loop& loop, const std::vector<std::vector<TrainRow>>& micro, int64_t stepTokens, Step& done)
{
    const double norm = static_cast<double>(std::max<int64_t>(1, stepTokens));
    at::Tensor lossSum = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(m_device));
    const auto [lo, hi] = m_mesh.dataRows(m_rank, loop.globalRows);
    std::vector<CopyRows> inputs;
    for (const auto& rows : micro)
        inputs.push_back(copyRows(rows, lo, hi));
    pipelineSchedule(
        loop, inputs, false, 1.0 / norm,
        [&](int /*k*/, const StageOut& out) {
            lossSum.add_(out.loss.sum.detach().to(at::kDouble));
            return out.loss.sum / norm;
        },
        done);
    m_strategy->allReduceSumInPlace(lossSum);
    done.lossValue = lossSum / norm;
}

void Trainer::pipelineSchedule(Loop& loop, const std::vector<CopyRows>& inputs, bool logProbs,
    double gradScale, const std::function<at::Tensor(int, const StageOut&)>& lastLoss, Step& done)
{
    // The rank's ops in schedule order (pipelineOps). A forward receives its input from the
    // previous (virtual) stage and sends its output on; a backward receives its output's
    // gradient and sends its input's back. Sends return at once (a thread per channel), each
    // channel carries its tensors in the order both sides issue them, and a stage waits only to
    // receive, so the schedule cannot deadlock (docs/ARCHITECTURE.md, "Pipeline parallel").
    const int K = static_cast<int>(inputs.size());
    const int P = m_strategy->pipelineStages();
    const int v = m_strategy->pipelineChunks();
    const at::TensorOptions act = at::TensorOptions().dtype(m_computeDtype).device(m_device);
    struct InFlight {
        at::Tensor input;  // a later stage: the received activation (its gradient goes back)
        at::Tensor output; // the stage's output, or the last stage's scaled loss
    };
    std::vector<std::deque<InFlight>> inFlight(static_cast<size_t>(v));
    const int64_t base = loop.liveBytes();
    using Pipe = Strategy::PipeTensor;
    // The schedule's idle time on this stage: receives and the final flush.
    const auto receive = [&](at::Tensor& t, Pipe kind) {
        const auto t0 = Clock::now();
        m_strategy->pipelineRecv(t, kind);
        done.pipelineWaitSec += seconds(t0, Clock::now());
    };
    for (const PipeOp& op : pipelineOps(P, m_strategy->pipelineStage(), v, K)) {
        StagePart part = stagePart(op.chunk);
        part.logProbs = logProbs;
        auto& queue = inFlight[static_cast<size_t>(op.chunk)];
        if (op.forward) {
            const CopyRows& in = inputs[static_cast<size_t>(op.micro)];
            InFlight f;
            if (!part.first) {
                f.input = activationBuffer(loop.runner, in.ids);
                receive(f.input, Pipe::Activation);
                f.input.requires_grad_(true);
            }
            StageOut out = loop.runner.stage(part, in.ids, f.input, in.labels, gradScale);
            if (part.last) {
                f.output = lastLoss(op.micro, out);
            } else {
                f.output = out.hidden;
                m_strategy->pipelineSend(out.hidden.detach().contiguous(), Pipe::Activation);
            }
            queue.push_back(std::move(f));
            done.activationBytes = std::max(done.activationBytes, loop.liveBytes() - base);
            continue;
        }
        // Reductions run in the backward of each unit's last micro-batch.
        m_strategy->beginMicroStep(op.micro, K);
        InFlight f = std::move(queue.front());
        queue.pop_front();
        if (part.last) {
            f.output.backward();
        } else {
            at::Tensor grad = at::empty(f.output.sizes(), act);
            receive(grad, Pipe::Gradient);
            torch::autograd::backward({f.output}, {grad});
        }
        if (!part.first) {
            at::Tensor g = f.input.grad();
            m_strategy->pipelineSend(
                g.defined() ? g.contiguous() : at::zeros_like(f.input), Pipe::Gradient);
        }
        m_strategy->endMicroStep(op.micro, K);
    }
    const auto flushed = Clock::now();
    m_strategy->pipelineFlush();
    done.pipelineWaitSec += seconds(flushed, Clock::now());
    if (m_strategy->wantsUnitHooks())
        m_strategy->postBackward(0);
}

std::vector<at::Tensor> Trainer::pipelineForwardSums(
    Loop& loop, const std::vector<CopyRows>& batches, bool logProbs)
{
    at::NoGradGuard noGrad;
    const size_t P = static_cast<size_t>(m_strategy->pipelineStages());
    std::vector<at::Tensor> sums(batches.size());
    // Windows of P batches, each window through one model chunk after the other: the stages
    // work on different batches at once, and a window's sends are received (pipelineFlush)
    // before the next window starts, so no stage runs more than P batches ahead.
    for (size_t w = 0; w < batches.size(); w += P) {
        const size_t end = std::min(batches.size(), w + P);
        for (int c = 0; c < m_strategy->pipelineChunks(); ++c) {
            StagePart part = stagePart(c);
            part.logProbs = logProbs;
            for (size_t b = w; b < end; ++b) {
                at::Tensor input;
                if (!part.first) {
                    input = activationBuffer(loop.runner, batches[b].ids);
                    m_strategy->pipelineRecv(input, Strategy::PipeTensor::Activation);
                }
                StageOut out = loop.runner.stage(part, batches[b].ids, input, batches[b].labels);
                if (part.last)
                    sums[b] = logProbs ? out.tokenLogProbs.sum(1).to(at::kDouble)
                                       : out.loss.sum.detach().to(at::kDouble).reshape({1});
                else
                    m_strategy->pipelineSend(
                        out.hidden.contiguous(), Strategy::PipeTensor::Activation);
            }
        }
        m_strategy->pipelineFlush();
    }
    return sums;
}

std::vector<at::Tensor> Trainer::pipelineReference(Loop& loop,
    const std::vector<std::vector<TrainRow>>& batches, const std::vector<CopyRows>& inputs,
    const std::vector<std::pair<int64_t, int64_t>>& pairRanges)
{
    std::vector<at::Tensor> reference(batches.size());
    if (m_preference->objective != "dpo")
        return reference;
    if (!m_reference.defined()) {
        // The base with its adapters off, through the stages without gradients (collective).
        AdaptersOff off(loop.runner);
        return pipelineForwardSums(loop, inputs, true);
    }
    if (m_strategy->pipelineStage() == m_strategy->pipelineStages() - 1)
        for (size_t k = 0; k < batches.size(); ++k)
            if (pairRanges[k].second > pairRanges[k].first)
                reference[k]
                    = precomputedReference(batches[k], pairRanges[k].first, pairRanges[k].second);
    return reference;
}

Trainer::CopyRows Trainer::copyRows(const std::vector<TrainRow>& rows, int64_t lo, int64_t hi) const
{
    if (hi <= lo) {
        CopyRows none;
        none.ids = rowsTensor(rows, 0, 1, false);
        none.labels = at::full_like(none.ids, -100);
        return none;
    }
    return {rowsTensor(rows, lo, hi, false), rowsTensor(rows, lo, hi, true)};
}

at::Tensor Trainer::activationBuffer(const ModelRunner& runner, const at::Tensor& ids) const
{
    // Under sequence parallel (the runner's rule) a stage sends and receives its
    // tensor-parallel rank's positions.
    const int64_t positions = runner.sequenceParallel() ? ids.size(1) / m_mesh.tp : ids.size(1);
    return at::empty({ids.size(0), positions, m_model->spec().hiddenSize},
        at::TensorOptions().dtype(m_computeDtype).device(m_device));
}

Trainer::PairForward Trainer::pairForward(
    Loop& loop, const std::vector<TrainRow>& rows, int64_t lo, int64_t hi)
{
    const at::Tensor ids = rowsTensor(rows, 2 * lo, 2 * hi, false);
    const at::Tensor labels = rowsTensor(rows, 2 * lo, 2 * hi, true);
    at::Tensor reference;
    if (m_preference->objective == "dpo") {
        if (m_reference.defined()) {
            reference = precomputedReference(rows, lo, hi);
        } else if (loop.reference) {
            // Full fine-tuning: the frozen copy, a forward without gradients before the
            // policy's; under zero3 its root is released after it as its blocks were.
            at::NoGradGuard noGrad;
            reference = loop.reference->tokenLogProbs(ids, labels).sum(1).to(at::kDouble);
            m_referenceStrategy->reshard();
        } else {
            // The reference is the base with its adapters off: a forward without gradients
            // before the policy's (under zero3 it gathers each unit once more).
            at::NoGradGuard noGrad;
            AdaptersOff off(loop.runner);
            reference = loop.runner.tokenLogProbs(ids, labels).sum(1).to(at::kDouble);
        }
    }
    return pairLoss(
        labels, loop.runner.tokenLogProbs(ids, labels).sum(1).to(at::kDouble), reference);
}

at::Tensor Trainer::precomputedReference(
    const std::vector<TrainRow>& rows, int64_t lo, int64_t hi) const
{
    std::vector<int64_t> index;
    for (int64_t r = 2 * lo; r < 2 * hi; ++r) {
        if (rows[static_cast<size_t>(r)].record < 0)
            throw std::logic_error("a preference row without its record number");
        index.push_back(2 * rows[static_cast<size_t>(r)].record + (r % 2));
    }
    return m_reference.index_select(0, at::tensor(index, at::kLong).to(m_device));
}

Trainer::PairForward Trainer::pairLoss(
    const at::Tensor& labels, const at::Tensor& policySums, const at::Tensor& referenceSums) const
{
    const int64_t n = labels.size(0) / 2;
    const at::Tensor hostCounts = rowTokenCounts(labels).view({n, 2});
    const at::Tensor counts = hostCounts.to(m_device);
    const auto pairs = [&](const at::Tensor& sums) {
        const at::Tensor two = sums.view({n, 2});
        return PairLogProbs {
            two.select(1, 0), two.select(1, 1), counts.select(1, 0), counts.select(1, 1)};
    };
    const PairLogProbs policy = pairs(policySums);
    PairLogProbs reference;
    if (referenceSums.defined())
        reference = pairs(referenceSums);
    PairForward out;
    out.loss
        = preferenceLoss(*m_preference, policy, referenceSums.defined() ? &reference : nullptr);
    if (m_preference->nllWeight > 0) {
        out.chosenNll = -policy.chosen;
        out.chosenTokens = static_cast<int64_t>(hostCounts.select(1, 0).sum().item<double>());
    }
    return out;
}

void Trainer::preferenceMicroSteps(
    Loop& loop, const std::vector<std::vector<TrainRow>>& micro, Step& done)
{
    const int K = loop.accum;
    const int64_t pairs = loop.globalRows; // pairs of one micro-batch over all ranks
    const double stepPairs = static_cast<double>(pairs * K);
    // ORPO's NLL is the mean over the step's chosen tokens, every rank's (counted on the host:
    // every rank holds the global batch).
    int64_t chosenTokens = 0;
    for (const auto& rows : micro)
        for (size_t r = 0; r < rows.size(); r += 2)
            for (size_t i = 1; i < rows[r].labels.size(); ++i)
                chosenTokens += rows[r].labels[i] != -100;
    const double nllNorm = static_cast<double>(std::max<int64_t>(1, chosenTokens));
    // [loss, NLL, per-pair statistics] summed in fp64 on the device.
    at::Tensor sums = at::zeros(
        {2 + kPreferenceStatCount}, at::TensorOptions().dtype(at::kDouble).device(m_device));
    // The micro-batch's loss to run backward from, its terms added to the sums.
    const auto stepLoss = [&](const PairForward& f) {
        at::Tensor loss = f.loss.losses.sum() / stepPairs;
        if (f.chosenNll.defined()) {
            const at::Tensor nll = f.chosenNll.sum() * (m_preference->nllWeight / nllNorm);
            loss = loss + nll;
            sums.narrow(0, 1, 1).add_(nll.detach().reshape({1}));
        }
        sums.narrow(0, 0, 1).add_(loss.detach().reshape({1}));
        sums.narrow(0, 2, kPreferenceStatCount).add_(f.loss.stats.sum(0));
        return loss;
    };
    const auto [lo, hi] = m_mesh.dataRows(m_rank, pairs);
    if (m_mesh.pp > 1) {
        // Pipeline parallel: the policy's sequences go through the stages in the 1F1B order, and
        // the last stage turns their log-probabilities into the pair loss. A live DPO reference
        // is a pass without gradients through the stages before it (pipelineForwardSums).
        std::vector<CopyRows> inputs;
        for (const auto& rows : micro)
            inputs.push_back(copyRows(rows, 2 * lo, 2 * hi));
        const std::vector<at::Tensor> reference = pipelineReference(
            loop, micro, inputs, std::vector<std::pair<int64_t, int64_t>>(micro.size(), {lo, hi}));
        pipelineSchedule(
            loop, inputs, true, 1.0,
            [&](int k, const StageOut& out) {
                const at::Tensor seq = out.tokenLogProbs.sum(1).to(at::kDouble);
                if (hi <= lo) // a copy without pairs: its masked row adds nothing
                    return seq.sum() * 0.0;
                return stepLoss(
                    pairLoss(inputs[static_cast<size_t>(k)].labels, seq, reference[size_t(k)]));
            },
            done);
    } else {
        for (int k = 0; k < K; ++k) {
            m_strategy->beginMicroStep(k, K);
            if (hi > lo) {
                const int64_t before = loop.liveBytes();
                PairForward f = pairForward(loop, micro[k], lo, hi);
                done.activationBytes = std::max(done.activationBytes, loop.liveBytes() - before);
                stepLoss(f).backward();
            }
            if (m_strategy->wantsUnitHooks())
                m_strategy->postBackward(0);
            m_strategy->endMicroStep(k, K);
        }
    }
    m_strategy->allReduceSumInPlace(sums);
    done.lossValue = sums.narrow(0, 0, 1);
    at::Tensor stats = sums.narrow(0, 1, 1 + kPreferenceStatCount).clone();
    stats.narrow(0, 1, kPreferenceStatCount).div_(stepPairs);
    done.stats = stats;
}

void Trainer::precomputeReference(Io& io, Loop& loop)
{
    at::NoGradGuard noGrad;
    AdaptersOff off(loop.runner); // LoRA: the reference is the base alone
    const auto t0 = Clock::now();
    const int64_t total = m_data->totalRecords();
    m_reference = at::zeros({2 * total}, at::TensorOptions().dtype(at::kDouble).device(m_device));
    const int64_t chunk = m_spec.microBatch * dataParallel();
    // Pipeline parallel: as many chunks as stages go through the stages at once
    // (pipelineForwardSums); otherwise one chunk at a time.
    const int64_t window = chunk * m_mesh.pp;
    for (int64_t w = 0; w < total; w += window) {
        launch::RankHeartbeat::report(0, launch::RankPhase::Setup);
        std::vector<CopyRows> batches;
        std::vector<std::pair<int64_t, int64_t>> into; // (first element, count) of m_reference
        for (int64_t b = w; b < std::min(total, w + window); b += chunk) {
            const int64_t e = std::min(total, b + chunk);
            auto [lo, hi] = m_mesh.dataRows(m_rank, e - b);
            if (hi > lo) {
                std::vector<TrainRow> rows;
                for (int64_t rec = b + lo; rec < b + hi; ++rec)
                    for (TrainRow& r : m_data->recordRows(rec))
                        rows.push_back(std::move(r));
                const int64_t n = static_cast<int64_t>(rows.size());
                batches.push_back({rowsTensor(rows, 0, n, false), rowsTensor(rows, 0, n, true)});
                into.emplace_back(2 * (b + lo), n);
            } else {
                // Fewer pairs than ranks in the last chunk: this rank still takes part in the
                // forward (sharded strategies gather inside it), on one row that counts nothing.
                const std::vector<TrainRow> rows = m_data->recordRows(b);
                const at::Tensor ids = rowsTensor(rows, 0, 1, false);
                batches.push_back({ids, at::full_like(ids, -100)});
                into.emplace_back(0, 0);
            }
        }
        std::vector<at::Tensor> sums;
        if (m_mesh.pp > 1) {
            sums = pipelineForwardSums(loop, batches, true); // defined on the last stage
        } else {
            for (const CopyRows& in : batches)
                sums.push_back(loop.runner.tokenLogProbs(in.ids, in.labels).sum(1).to(at::kDouble));
        }
        for (size_t i = 0; i < sums.size(); ++i)
            if (sums[i].defined() && into[i].second > 0)
                m_reference.narrow(0, into[i].first, into[i].second).copy_(sums[i]);
    }
    m_strategy->allReduceSumInPlace(m_reference);
    const double sec = seconds(t0, Clock::now());
    io.log->info(strprintf("DPO reference: log-probabilities of %lld pairs precomputed in %.1f s",
        static_cast<long long>(total), sec));
    io.startData["reference_pairs"] = total;
    io.startData["reference_sec"] = sec;
}

void Trainer::readSteps(Loop& loop)
{
    if (loop.unread.empty())
        return;
    std::vector<at::Tensor> values;
    for (const Loop::Unread& u : loop.unread) {
        values.push_back(u.loss.reshape({1}));
        values.push_back(u.norm.reshape({1}));
        if (u.stats.defined())
            values.push_back(u.stats.reshape({-1}).to(u.loss.scalar_type()));
    }
    const std::vector<double> read = hostsync::readValues(at::cat(values));
    const std::vector<Loop::Unread> steps = std::move(loop.unread);
    loop.unread.clear();
    size_t pos = 0;
    for (const Loop::Unread& u : steps) {
        const double loss = read[pos++];
        if (!std::isfinite(loss))
            throw std::runtime_error(nonFiniteLossMessage(loss, u.step));
        loop.result.losses.push_back(loss);
        loop.result.gradNorms.push_back(read[pos++]);
        if (!u.stats.defined())
            continue;
        // [ORPO's NLL, then the per-pair statistics] (preferenceMicroSteps).
        std::map<std::string, double> scalars;
        const double nll = read[pos++];
        if (m_preference->nllWeight > 0)
            scalars["nll_loss"] = nll / m_preference->nllWeight;
        const auto& names = preferenceStatNames(m_preference->objective);
        for (size_t k = 0; k < static_cast<size_t>(kPreferenceStatCount); ++k, ++pos)
            if (k < names.size())
                scalars[names[k]] = read[pos];
        loop.result.scalars.push_back(std::move(scalars));
    }
}

std::string Trainer::nonFiniteLossMessage(double loss, int64_t step) const
{
    // Damaged weights (a NaN or Inf in the model folder) look like a diverged run: say which.
    const std::string bad = findNonFiniteTensor(SafetensorsReader(m_modelDir));
    if (!bad.empty())
        return "loss is " + std::to_string(loss) + " at step " + std::to_string(step)
            + ": the model's weights are damaged: " + bad + " in " + m_modelDir
            + " (export or download the model again)";
    return "loss is " + std::to_string(loss) + " at step " + std::to_string(step)
        + "; lower the learning rate or check the data";
}

protocol::MetricRecord Trainer::metricRecord(
    const Io& io, const Loop& loop, const Step& done, int64_t step)
{
    protocol::MetricRecord rec;
    rec.step = step;
    rec.tokens = loop.tokensSeen;
    rec.loss = done.loss;
    rec.lr = done.lr;
    rec.gradNorm = done.gradNorm;
    rec.stepTimeSec = done.seconds;
    rec.tokensPerSec = done.seconds > 0 ? done.tokens / done.seconds : 0.0;
    rec.wallTimeSec = seconds(io.start, done.end);
    rec.commBytes = m_strategy->takeCommBytes();
    return rec;
}

double Trainer::evaluate(Loop& loop, std::map<std::string, double>& scalars)
{
    at::NoGradGuard noGrad;
    const auto rows = m_data->evalRows();
    if (m_preference) {
        // The mean pair loss (ORPO: plus the NLL per chosen token) and the reward accuracy.
        const int64_t pairs = static_cast<int64_t>(rows.size()) / 2;
        const int64_t chunk = m_spec.microBatch * dataParallel();
        at::Tensor acc = at::zeros({4}, at::TensorOptions().dtype(at::kDouble).device(m_device));
        const auto add = [&](const PairForward& f) {
            acc.narrow(0, 0, 1).add_(f.loss.losses.sum().reshape({1}));
            acc.narrow(0, 1, 1).add_(f.loss.stats.select(1, kRewardAccuracy).sum().reshape({1}));
            if (f.chosenNll.defined()) {
                acc.narrow(0, 2, 1).add_(f.chosenNll.sum().reshape({1}) * m_preference->nllWeight);
                acc.narrow(0, 3, 1).add_(static_cast<double>(f.chosenTokens));
            }
        };
        if (m_mesh.pp > 1) {
            // The policy's (and a live reference's) sequences through the stages, every chunk
            // of pairs in one pass each; the last stage makes the pair losses.
            std::vector<std::vector<TrainRow>> batches;
            std::vector<CopyRows> inputs;
            std::vector<std::pair<int64_t, int64_t>> copyPairs;
            for (int64_t b = 0; b < pairs; b += chunk) {
                const int64_t e = std::min(pairs, b + chunk);
                batches.emplace_back(rows.begin() + 2 * b, rows.begin() + 2 * e);
                copyPairs.push_back(m_mesh.dataRows(m_rank, e - b));
                inputs.push_back(copyRows(
                    batches.back(), 2 * copyPairs.back().first, 2 * copyPairs.back().second));
            }
            const std::vector<at::Tensor> reference
                = pipelineReference(loop, batches, inputs, copyPairs);
            const std::vector<at::Tensor> policy = pipelineForwardSums(loop, inputs, true);
            for (size_t i = 0; i < batches.size(); ++i) {
                const auto [lo, hi] = copyPairs[i];
                if (policy[i].defined() && hi > lo)
                    add(pairLoss(inputs[i].labels, policy[i], reference[i]));
            }
        }
        for (int64_t b = 0; m_mesh.pp <= 1 && b < pairs; b += chunk) {
            const int64_t e = std::min(pairs, b + chunk);
            const std::vector<TrainRow> batch(rows.begin() + 2 * b, rows.begin() + 2 * e);
            auto [lo, hi] = m_mesh.dataRows(m_rank, e - b);
            if (hi > lo) {
                add(pairForward(loop, batch, lo, hi));
            } else {
                pairForward(loop, batch, 0, 1); // every rank takes part in a sharded forward
            }
        }
        m_strategy->allReduceSumInPlace(acc);
        const std::vector<double> v = hostsync::readValues(acc);
        const double n = static_cast<double>(std::max<int64_t>(1, pairs));
        scalars["eval/rewards/accuracies"] = v[1] / n;
        return v[0] / n + (v[3] > 0 ? v[2] / v[3] : 0.0);
    }
    double tokens = 0.0;
    at::Tensor sum = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(m_device));
    const int64_t chunk = m_spec.microBatch * dataParallel();
    std::vector<CopyRows> staged; // pipeline parallel: every chunk in one pass through the stages
    for (int64_t b = 0; b < static_cast<int64_t>(rows.size()); b += chunk) {
        const int64_t e = std::min<int64_t>(rows.size(), b + chunk);
        std::vector<TrainRow> batch(rows.begin() + b, rows.begin() + e);
        // The last chunk may have fewer rows than copies: a copy without rows still runs the
        // forward (sharded strategies gather inside it), on a masked row (copyRows).
        const auto [lo, hi] = m_mesh.dataRows(m_rank, e - b);
        const CopyRows in = copyRows(batch, lo, hi);
        if (m_mesh.pp > 1)
            staged.push_back(in);
        else
            sum.add_(loop.runner.lossSum(in.ids, in.labels).sum.detach().to(at::kDouble));
        tokens += static_cast<double>(countTokens(batch));
    }
    if (!staged.empty())
        for (const at::Tensor& s : pipelineForwardSums(loop, staged, false))
            if (s.defined()) // the last stage's
                sum.add_(s);
    m_strategy->allReduceSumInPlace(sum);
    return tokens > 0 ? hostsync::readValue(sum) / tokens : 0.0;
}

void Trainer::writeSamples(Io& io, int64_t step)
{
    for (const auto& sample : m_samples->run(*m_model, *m_strategy, m_computeDtype, m_device, step))
        io.write(io.events,
            protocol::toJson(protocol::toEvent(sample, seconds(io.start, Clock::now()))));
}

namespace {

// Whether a preemption can stop this run: a flag to read and a checkpoint to write at the stop.
bool preemptible(const TrainerOptions& options)
{
    return options.preemptRequest && options.checkpoints;
}

} // namespace

void Trainer::writeMetrics(Io& io, Loop& loop, protocol::MetricRecord& rec, int64_t activationBytes)
{
    // The ranks meet before the memory gather; with a preemption flag that meeting is a scalar
    // all-reduce of it (the same synchronization as the barrier it replaces), and every rank
    // learns whether any was asked to stop.
    if (preemptible(m_options) && m_strategy->worldSize() > 1)
        loop.preemptAgreed
            = m_strategy->allReduceSum(m_options.preemptRequest->load() ? 1.0 : 0.0) > 0.0;
    else
        m_strategy->barrier();
    MemoryBreakdown mb = m_strategy->memory();
    protocol::RankMemory mine;
    mine.rank = m_strategy->rank();
    mine.shardedParamBytes = mb.shardedParams;
    mine.gatheredParamBytes = mb.gatheredParams;
    mine.frozenParamBytes = mb.frozenParams;
    if (m_referenceStrategy) { // DPO's live reference under full fine-tuning
        const MemoryBreakdown ref = m_referenceStrategy->memory();
        mine.frozenParamBytes += ref.frozenParams;
        mine.gatheredParamBytes += ref.gatheredParams;
    }
    mine.gradBytes = mb.grads;
    // Offloaded AdamW state lives in host memory with the masters it updates.
    const bool offloaded = m_spec.offload != "none";
    mine.optimizerBytes = (offloaded ? 0 : loop.adamw.stateBytes()) + mb.optimizer;
    mine.offloadedBytes = mb.offloaded + (offloaded ? loop.adamw.stateBytes() : 0);
    mine.activationBytes = activationBytes + mb.activations;
    mine.currentBytes = loop.liveBytes();
    mine.peakBytes = loop.peakBytes();
    if (const DeviceMemoryStats ds = deviceMemoryStats(m_device); ds.available) {
        mine.cuda = true;
        mine.cudaAllocatedBytes = ds.allocatedBytes;
        mine.cudaAllocatedPeakBytes = ds.allocatedPeakBytes;
        mine.cudaReservedBytes = ds.reservedBytes;
        mine.cudaReservedPeakBytes = ds.reservedPeakBytes;
        mine.cudaAllocRetries = ds.allocRetries;
        mine.cudaOoms = ds.ooms;
    }
    // On CPU ranks (offload in tests) the host state is in the counting allocator's bytes.
    mine.otherBytes = std::max<int64_t>(0,
        mine.currentBytes - mine.shardedParamBytes - mine.gatheredParamBytes - mine.frozenParamBytes
            - mine.gradBytes - mine.optimizerBytes - (m_device.is_cpu() ? mine.offloadedBytes : 0));
    rec.memory = m_strategy->gatherMemory(mine);
    // Host reads of tensor values since the previous record (this record's own gather
    // included): once per logged step is the loop's budget (docs/ARCHITECTURE.md).
    const int64_t reads = hostsync::count();
    rec.hostReads = reads - loop.readsAtLastRecord;
    loop.readsAtLastRecord = reads;
    rec.cpuTimeSec = cpuSeconds();
    loop.resetPeaks();
    if (m_strategy->rank() == 0) {
        io.write(io.metrics, protocol::toJson(rec));
        io.tensorboardRecord(rec);
    }
    io.log->info(strprintf("step %lld/%lld loss %.6f lr %.3g grad_norm %.4f %.0f tok/s "
                           "mem %.1f MiB peak %.1f MiB",
        static_cast<long long>(rec.step), static_cast<long long>(m_steps), double(rec.loss),
        rec.lr.value_or(0.0), rec.gradNorm.value_or(0.0), rec.tokensPerSec.value_or(0.0),
        mine.currentBytes / 1048576.0, mine.peakBytes / 1048576.0));
}

void Trainer::saveCheckpoint(Io& io, Loop& loop, int64_t step, bool last, bool force)
{
    LoopState state;
    state.step = step;
    state.tokensSeen = loop.tokensSeen;
    state.wallTimeSec = seconds(io.start, Clock::now());
    state.dataPosition = m_data->position();
    state.microBatch = m_spec.microBatch;
    state.gradAccum = m_spec.gradAccum;
    state.worldSize = dataParallel(); // the global batch's split, not the rank count
    const CheckpointSaved saved = force
        ? m_options.checkpoints->save(*m_model, *m_strategy, loop.adamw, state)
        : m_options.checkpoints->afterStep(*m_model, *m_strategy, loop.adamw, state, last);
    if (!saved.saved)
        return;
    loop.savedStep = step;
    // The checkpoint's size: every rank's shard file (one small collective).
    const auto bytes
        = static_cast<int64_t>(m_strategy->allReduceSum(static_cast<double>(saved.bytes)));
    io.log->info(
        strprintf("checkpoint %s written in %.2f s", saved.dir.c_str(), double(saved.seconds)));
    io.event("checkpoint", step, "checkpoint written",
        {{"action", "save"}, {"dir", saved.dir}, {"seconds", saved.seconds}, {"bytes", bytes}});
}

bool Trainer::preemptAgreed(const Loop& loop) const
{
    if (!preemptible(m_options))
        return false;
    // More than one rank: what the last record's barrier agreed on (writeMetrics), so every
    // rank stops at the same step.
    return m_strategy->worldSize() == 1 ? m_options.preemptRequest->load() : loop.preemptAgreed;
}

TrainResult Trainer::preempt(Io& io, Loop& loop, int64_t step)
{
    if (loop.savedStep != step) {
        readSteps(loop); // no checkpoint of a run whose loss went non-finite
        saveCheckpoint(io, loop, step, false, true);
    }
    io.log->warn(strprintf("preempted (SIGUSR1) after step %lld: checkpoint written; the run "
                           "continues from it with --resume auto",
        static_cast<long long>(step)));
    io.event("preempted", step,
        "preempted after step " + std::to_string(step)
            + " (SIGUSR1): checkpoint written, the run "
              "continues from it with --resume auto (a Slurm job requeues itself)",
        {{"signal", "SIGUSR1"}, {"checkpoint_step", step},
            {"checkpoint", protocol::RunDir(m_spec.outDir).checkpointDir(step)},
            {"steps_done", step}, {"steps", m_steps}});
    loop.result.preemptedAt = step;
    loop.result.peakBytes = loop.runPeak;
    return std::move(loop.result);
}

TrainResult Trainer::finish(Io& io, Loop& loop)
{
    TrainResult& result = loop.result;
    const int64_t ranSteps = m_steps - loop.firstStep;
    result.meanStepSec
        = ranSteps > 1 ? loop.timedSec / std::max<int64_t>(1, ranSteps - 1) : loop.timedSec;
    result.tokensPerSec = loop.timedSec > 0 ? loop.timedTokens / loop.timedSec : 0.0;
    result.cpuTokensPerSec = loop.timedCpuSec > 0 ? loop.timedTokens / loop.timedCpuSec : 0.0;
    result.peakBytes = loop.runPeak;

    io.checkLogs();
    if (m_options.writeRunDir && m_options.saveModel)
        writeFinalModel(io, result);
    io.event("finish", m_steps, "training finished",
        {{"reason", "completed"},
            {"final_loss", result.losses.empty() ? 0.0 : result.losses.back()},
            {"tokens_per_sec", loop.pace.tokensPerSec()}, {"active_sec", loop.pace.activeSec()},
            {"peak_bytes", result.peakBytes}, {"skipped_lines", m_data->badLines()}});
    return std::move(result);
}

void Trainer::writeFinalModel(Io& io, TrainResult& result)
{
    const bool leader = m_strategy->rank() == 0;
    const protocol::RunDir dir(m_spec.outDir);
    launch::RankHeartbeat::report(m_steps, launch::RankPhase::Final);
    NamedTensors tensors;
    m_strategy->exportParams(*m_model, [&](const std::string& name, const at::Tensor& t) {
        // To the host one tensor at a time (a no-op move on the CPU).
        tensors.push_back({name, t.detach().to(at::kFloat).to(at::kCPU).contiguous().clone()});
    });
    // LoRA: the PEFT adapter folder next to the merged model.
    const NamedTensors adapters = m_model->adapters()
        ? lora::mergeInto(tensors, m_model->adapters()->config())
        : NamedTensors {};
    if (leader && !adapters.empty())
        lora::writePeftFolder(dir.adapterOutDir(), m_model->adapters()->config(),
            fs::absolute(m_modelDir).lexically_normal().string(), adapters);
    if (!leader)
        return;
    plan::ModelSpec out = m_model->spec();
    out.torchDtype = "float32";
    const std::string tmp = dir.modelOutDir() + ".tmp";
    fs::remove_all(tmp);
    try {
        writeHfConfigAndTokenizer(tmp, out, m_modelDir);
        writeSafetensorsFolder(tmp, tensors);
    } catch (const std::exception& e) {
        std::error_code ec;
        fs::remove_all(tmp, ec); // no half-written model left behind
        throw protocol::RunDirWriteError(std::string("writing the final model: ") + e.what());
    }
    fs::remove_all(dir.modelOutDir());
    fs::rename(tmp, dir.modelOutDir());
    result.modelDir = dir.modelOutDir();
    io.log->info("model written to " + result.modelDir);
}

void Trainer::fail(Io& io, const std::exception& e, int64_t step) const
{
    // Out of memory (the GPU's caching allocator, or the counting allocator's limit on the
    // CPU): said as what to change, on this rank and, through the launcher, for the run.
    const bool oom = dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr;
    nlohmann::json data = {{"reason",
        oom                                                       ? "out_of_memory"
            : dynamic_cast<const protocol::RunDirWriteError*>(&e) ? "write_failed"
                                                                  : "error"}};
    const std::string message = oom ? outOfMemoryMessage(e, step, data) : e.what();
    io.log->error(message);
    // Under the launcher, a collective that failed because a peer went away is that peer's
    // failure: the launcher names the rank that died. An unnamed "Connection reset by peer"
    // error and a finish written here first would read as the run's verdict.
    const char* launched = std::getenv("SHARD_LAUNCHED");
    if (launched && std::string(launched) == "1" && m_worldSize > 1 && !oom
        && protocol::lostPeerError(message)) {
        io.log->error("a peer rank is gone; the launcher records the run's error");
        throw;
    }
    // Best effort on a full disk: the error still reaches stdout (the launcher) and stderr.
    try {
        io.event("error", step, message, data);
        io.event("finish", step, "training failed", {{"reason", "error"}});
    } catch (const protocol::RunDirWriteError& also) {
        std::fprintf(
            stderr, "shard-worker: the error event could not be recorded: %s\n", also.what());
    }
    if (oom)
        throw OutOfMemory(message);
    throw; // the error being handled (fail is called from run's handler)
}

} // namespace shard::engine
