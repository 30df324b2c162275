// `shard plan`: memory per device by component for every strategy side by side, the fit verdict
// and the derived answers (largest micro-batch, fewest GPUs, FLOPs, traffic, step time).
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "command.h"
#include "plan/engine_configs.h"
#include "plan/layout_search.h"
#include "plan/planner.h"
#include "plan/run_spec_bridge.h"
#include "protocol/run_spec.h"

namespace shard::cli {
namespace {

using namespace shard::plan;

struct PlanOptions {
    std::string spec; // a run spec (run.json, launch-spec.json) instead of the flags below
    std::string model;
    std::string gpus = "1";
    std::string nodes = "1";
    std::string strategy = "zero3";
    std::string shardGroup;
    std::string tp = "1";
    std::string pp = "1";
    std::string virtualStages = "1";
    bool sequenceParallel = false;
    std::string precision = "bf16-mixed";
    std::string checkpointing = "none";
    std::string offload = "none";
    std::string reduceDtype = "fp32";
    std::string microBatch = "1";
    std::string seqLen;
    std::string gradAccum = "1";
    std::string gpuMemory = "80";
    std::string overhead;
    std::string mode = "engine";
    std::string calibration;
    std::string method = "full";
    std::string objective = "sft";
    std::string reference = "auto";
    std::string loraRank = "8";
    std::string loraAlpha = "16";
    std::string loraDropout = "0";
    std::string loraTargets = "q,k,v,o";
    bool noDoubleQuant = false;
    bool json = false;
    bool showCalibration = false;
    bool recommendLayout = false; // every tp x pp of the GPUs planned, the fastest that fits
    // Another engine's config (DeepSpeed JSON, accelerate YAML, torchtitan TOML) as the plan.
    std::string deepspeed;
    std::string accelerate;
    std::string torchtitan;
    // Write the plan as another engine's config or launch command.
    std::string exportKind;
    std::string script = "train.py";
    std::string configPath;
    std::string out;
    // Which flags were given (a config value contradicting one is an error).
    bool gpusGiven = false, microGiven = false, accumGiven = false, precisionGiven = false,
         checkpointingGiven = false, modelGiven = false;
};

int64_t parseCount(const std::string& flag, const std::string& text)
{
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno == ERANGE)
        throw std::runtime_error(flag + ": '" + text + "' is not an integer");
    if (v <= 0)
        throw std::runtime_error(flag + " must be a positive integer (got " + text + ")");
    return v;
}

double parseGiB(const std::string& flag, const std::string& text, bool allowZero)
{
    errno = 0;
    char* end = nullptr;
    double v = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v))
        throw std::runtime_error(flag + ": '" + text + "' is not a number of GiB");
    if (v < 0 || (!allowZero && v == 0))
        throw std::runtime_error(flag + " must be a positive number of GiB (got " + text + ")");
    return v;
}

double parseNumber(const std::string& flag, const std::string& text)
{
    errno = 0;
    char* end = nullptr;
    double v = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v))
        throw std::runtime_error(flag + ": '" + text + "' is not a number");
    return v;
}

DeviceSpec deviceFor(const PlanOptions& o)
{
    if (o.gpuMemory == "cpu" || o.gpuMemory == "CPU")
        return DeviceSpec::cpu(physicalMemoryBytes());
    return DeviceSpec::gpu(parseGiB("--gpu-memory", o.gpuMemory, false));
}

// The plan of a run spec file: its model, device, ranks, strategy, precision and batch shape.
PlanInput inputFromSpecFile(const PlanOptions& o)
{
    std::ifstream in(o.spec);
    if (!in)
        throw std::runtime_error(o.spec + ": cannot open the run spec");
    protocol::RunSpec spec;
    try {
        spec = protocol::runSpecFromJson(nlohmann::json::parse(in));
    } catch (const std::exception& e) {
        throw std::runtime_error(o.spec + ": " + e.what());
    }
    // auto: the device --gpu-memory describes (the node decides where it runs).
    const DeviceSpec device = spec.device != "auto" && deviceKindOf(spec.device) == DeviceKind::Cpu
        ? DeviceSpec::cpu(physicalMemoryBytes())
        : deviceFor(o);
    return planInputFromSpec(spec, device);
}

PlanInput buildInput(const PlanOptions& o)
{
    if (!o.spec.empty()) {
        PlanInput in = inputFromSpecFile(o);
        in.mode = parseAccountingMode(o.mode);
        if (!o.overhead.empty())
            in.device.overheadBytes = static_cast<int64_t>(
                std::llround(parseGiB("--overhead", o.overhead, true) * 1024.0 * 1024 * 1024));
        if (!o.calibration.empty())
            in.calibration = Calibration::load(o.calibration);
        validate(in);
        return in;
    }
    PlanInput in;
    // A torchtitan config may name its own model ([model] name and flavor).
    const bool modelFromConfig = o.model.empty() && !o.torchtitan.empty();
    if (!modelFromConfig)
        in.model = resolveModel(o.model);
    in.strategy = parseStrategy(o.strategy);
    in.precision = parsePrecision(o.precision);
    in.checkpointing = parseCheckpointing(o.checkpointing);
    in.offload = parseOffload(o.offload);
    const auto& dtypes = protocol::reduceDtypes();
    if (std::find(dtypes.begin(), dtypes.end(), o.reduceDtype) == dtypes.end())
        throw std::runtime_error("--reduce-dtype: '" + o.reduceDtype + "' is not fp32 or bf16");
    in.bf16Reduce = o.reduceDtype == "bf16";
    in.mode = parseAccountingMode(o.mode);
    in.gpusPerNode = parseCount("--gpus", o.gpus);
    in.nodes = parseCount("--nodes", o.nodes);
    in.microBatch = parseCount("--micro-batch", o.microBatch);
    in.gradAccum = parseCount("--grad-accum", o.gradAccum);
    in.seqLen = o.seqLen.empty() ? std::min<int64_t>(2048, in.model.maxPositionEmbeddings)
                                 : parseCount("--seq-len", o.seqLen);
    if (!o.shardGroup.empty()) {
        if (in.strategy != Strategy::Hybrid)
            throw std::runtime_error("--shard-group applies only to --strategy hybrid");
        in.shardGroup = parseCount("--shard-group", o.shardGroup);
    }
    in.tp = parseCount("--tp", o.tp);
    in.pp = parseCount("--pp", o.pp);
    in.virtualStages = parseCount("--virtual-stages", o.virtualStages);
    in.sequenceParallel = o.sequenceParallel;
    in.device = deviceFor(o);
    if (o.method == "dpo" || o.method == "orpo")
        throw std::runtime_error("--method says which weights train (full, lora or qlora); "
            + o.method + " is a training objective: use --objective " + o.method);
    in.method = parseMethod(o.method);
    {
        // The run spec's rules for the objective and DPO's reference (protocol::validate).
        protocol::RunSpec probe;
        probe.objective = o.objective;
        probe.reference = o.reference;
        probe.method = o.method;
        const auto& names = protocol::objectiveNames();
        if (std::find(names.begin(), names.end(), o.objective) == names.end())
            throw std::runtime_error(
                "--objective '" + o.objective + "' is not one of sft, dpo, orpo");
        if (o.reference != "auto" && o.reference != "live" && o.reference != "precomputed")
            throw std::runtime_error(
                "--reference '" + o.reference + "' is not one of auto, live, precomputed");
        probe.tensorParallel = static_cast<int>(in.tp);
        probe.pipelineParallel = static_cast<int>(in.pp);
        if (const std::string why = protocol::liveReferenceRefusal(probe); !why.empty())
            throw std::runtime_error("--" + why);
        in.objective = o.objective;
        in.reference = probe.resolvedReference();
    }
    in.loraRank = parseCount("--lora-rank", o.loraRank);
    in.loraAlpha = parseNumber("--lora-alpha", o.loraAlpha);
    in.loraDropout = parseNumber("--lora-dropout", o.loraDropout);
    in.loraTargets = o.loraTargets;
    in.qloraDoubleQuant = !o.noDoubleQuant;
    if (!o.overhead.empty())
        in.device.overheadBytes = static_cast<int64_t>(
            std::llround(parseGiB("--overhead", o.overhead, true) * 1024.0 * 1024 * 1024));
    if (!o.calibration.empty())
        in.calibration = Calibration::load(o.calibration);
    if (!modelFromConfig)
        validate(in);
    return in;
}

std::string gib(int64_t bytes)
{
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
    return buf;
}

std::string si(double v, const char* unit)
{
    const char* prefixes[] = {"", "K", "M", "G", "T", "P", "E", "Z"};
    int i = 0;
    while (std::fabs(v) >= 1000.0 && i < 7) {
        v /= 1000.0;
        ++i;
    }
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.3g%s%s%s", v, *unit ? " " : "", prefixes[i], unit);
    return buf;
}

std::string seconds(double s)
{
    char buf[32];
    if (s >= 1.0)
        std::snprintf(buf, sizeof buf, "%.2f s", s);
    else if (s >= 0.1)
        std::snprintf(buf, sizeof buf, "%.0f ms", s * 1e3);
    else
        std::snprintf(buf, sizeof buf, "%.3g ms", s * 1e3);
    return buf;
}

std::string withCommas(int64_t v)
{
    std::string s = std::to_string(v);
    for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3)
        s.insert(static_cast<size_t>(i), ",");
    return s;
}

std::string columnName(const PlanResult& r)
{
    std::string n = toString(r.input.strategy);
    if (r.input.strategy == Strategy::Hybrid)
        n += "/" + std::to_string(r.input.shardGroup);
    return n;
}

void printHuman(const PlanInput& in, const std::vector<PlanResult>& all, const PlanResult& chosen,
    int64_t largestBatch, int64_t fewest)
{
    const bool cpu = in.device.kind == DeviceKind::Cpu;
    const char* unit = cpu ? "rank" : "GPU";
    const int64_t W = in.worldSize();
    const ModelSpec& m = in.model;
    std::printf("Model   %s (%s, %s = %s parameters)\n", m.name.c_str(), m.modelType.c_str(),
        formatParamCount(chosen.params).c_str(), withCommas(chosen.params).c_str());
    std::string where = std::to_string(W) + (cpu ? " CPU rank" : " GPU") + (W == 1 ? "" : "s");
    if (in.nodes > 1)
        where
            += " (" + std::to_string(in.nodes) + " nodes x " + std::to_string(in.gpusPerNode) + ")";
    where += cpu ? ", " + gib(in.device.memoryBytes) + " GiB RAM per node"
                 : " x " + gib(in.device.memoryBytes) + " GiB";
    std::printf("Setup   %s, %s, checkpointing %s, offload %s\n", where.c_str(),
        toString(in.precision).c_str(), toString(in.checkpointing).c_str(),
        toString(in.offload).c_str());
    std::printf("Batch   micro-batch %lld x %lld tokens, grad-accum %lld; %s accounting\n",
        static_cast<long long>(in.microBatch), static_cast<long long>(in.seqLen),
        static_cast<long long>(in.gradAccum), toString(in.mode).c_str());
    if (in.threeD()) {
        const auto mesh = in.mesh();
        std::printf("Layout  %s (data parallel %lld, %s inside)\n", mesh.describe().c_str(),
            static_cast<long long>(mesh.dataParallel()), toString(in.strategy).c_str());
    }
    if (in.usesLora()) {
        const int64_t a = loraAdapterParameterCount(in.model, in.loraRank, in.loraTargets);
        std::printf("Method  %s, rank %lld, alpha %g, targets %s: %s = %s adapter parameters",
            toString(in.method).c_str(), static_cast<long long>(in.loraRank), in.loraAlpha,
            in.loraTargets.c_str(), formatParamCount(a).c_str(), withCommas(a).c_str());
        if (in.method == Method::Qlora)
            std::printf(", %s NF4%s", formatParamCount(quantizedParameterCount(in.model)).c_str(),
                in.qloraDoubleQuant ? " (8-bit block scales)" : " (fp32 block scales)");
        std::printf("\n");
    } else {
        std::printf("Method  full fine-tuning\n");
    }
    if (in.objective != "sft")
        std::printf("Objective %s: micro-batch counts pairs, %lld sequences each%s\n",
            in.objective.c_str(), static_cast<long long>(in.sequencesPerSample()),
            in.reference.empty() ? "" : (", reference " + in.reference).c_str());
    std::printf("\n");

    const int labelWidth = 24, colWidth = 12;
    std::string header = std::string("Memory per ") + unit + " (GiB)";
    std::printf("%-*s", labelWidth, header.c_str());
    for (const auto& r : all) {
        std::string name = columnName(r);
        if (r.input.strategy == chosen.input.strategy)
            name = "[" + name + "]";
        std::printf("%*s", colWidth, name.c_str());
    }
    std::printf("\n");
    for (const plan::PlanComponent& c : plan::planComponents()) {
        if (!plan::heldUnder(c, in))
            continue;
        std::printf("  %-*s", labelWidth - 2, c.label);
        for (const auto& r : all)
            std::printf("%*s", colWidth, gib(r.perDevice.*c.bytes).c_str());
        std::printf("\n");
    }
    std::printf("  %s\n", std::string(labelWidth - 2 + colWidth * all.size(), '-').c_str());
    std::printf("  %-*s", labelWidth - 2, "total");
    for (const auto& r : all)
        std::printf("%*s", colWidth, gib(r.perDevice.total()).c_str());
    std::printf("\n");
    char capText[32];
    std::snprintf(capText, sizeof capText, "%.4g",
        static_cast<double>(chosen.capacityBytes) / (1024.0 * 1024 * 1024));
    std::string fitsLabel = std::string("fits in ") + capText + " GiB?";
    std::printf("  %-*s", labelWidth - 2, fitsLabel.c_str());
    for (const auto& r : all)
        std::printf("%*s", colWidth, r.fits ? "yes" : "NO");
    std::printf("\n");
    if (in.offload != Offload::None) {
        std::printf("  %-*s", labelWidth - 2, "host RAM (offloaded)");
        for (const auto& r : all)
            std::printf("%*s", colWidth, gib(r.hostBytesPerDevice).c_str());
        std::printf("\n");
    }
    std::printf("  %-*s", labelWidth - 2, "sent per step (GiB)");
    for (const auto& r : all)
        std::printf("%*s", colWidth, gib(r.bytesSentPerDevicePerStep).c_str());
    std::printf("\n  [%s] = chosen strategy; all columns share the other settings\n\n",
        columnName(chosen).c_str());

    const int64_t total = chosen.perDevice.total();
    const int pct = static_cast<int>(std::lround(
        100.0 * static_cast<double>(total) / static_cast<double>(chosen.capacityBytes)));
    if (chosen.fits)
        std::printf("Verdict: %s FITS - %s of %s GiB per %s used (%d%%), %s GiB headroom\n",
            columnName(chosen).c_str(), gib(total).c_str(), gib(chosen.capacityBytes).c_str(), unit,
            pct, gib(chosen.headroomBytes).c_str());
    else
        std::printf("Verdict: %s DOES NOT FIT - needs %s of %s GiB per %s (%s GiB short)\n",
            columnName(chosen).c_str(), gib(total).c_str(), gib(chosen.capacityBytes).c_str(), unit,
            gib(-chosen.headroomBytes).c_str());
    auto row = [](const std::string& label, const std::string& value) {
        std::printf("  %-32s%s\n", label.c_str(), value.c_str());
    };
    row("largest micro-batch that fits",
        largestBatch > 0 ? std::to_string(largestBatch) : "none (not even 1)");
    std::string fewestText = fewest > 0 ? std::to_string(fewest) : std::string("none");
    if (fewest == 0 && in.strategy == Strategy::Ddp)
        fewestText += " (ddp replicates the model: more GPUs do not help)";
    row(std::string("fewest ") + unit + "s that fit", fewestText);
    row("FLOPs per token", si(chosen.flopsPerToken, "FLOP") + " (6P + 12*L*h*s)");
    row("FLOPs per step",
        si(chosen.flopsPerStep, "FLOP") + " (" + withCommas(chosen.tokensPerStep) + " tokens)");
    const DtypeBytes d = dtypeBytes(in);
    // The ZeRO paper counts every volume in 16-bit elements, whatever the precision.
    const bool paper = in.mode == AccountingMode::ZeroPaper;
    const std::string computeName = paper ? "16-bit"
        : in.precision == Precision::Fp32
        ? "fp32"
        : (in.precision == Precision::Fp16Mixed ? "fp16" : "bf16");
    const std::string reduceName = paper ? "16-bit" : d.reduce == 4 ? "fp32" : "bf16";
    if (in.threeD())
        row(std::string("sent per ") + unit + " per step",
            gib(chosen.bytesSentPerDevicePerStep) + " GiB: DP "
                + gib(chosen.gatherBytesPerDevicePerStep + chosen.reduceBytesPerDevicePerStep)
                + " + TP " + gib(chosen.tpBytesPerDevicePerStep) + " + PP "
                + gib(chosen.ppBytesPerDevicePerStep) + " (16-bit)");
    else
        row(std::string("sent per ") + unit + " per step",
            gib(chosen.bytesSentPerDevicePerStep) + " GiB: gathers "
                + gib(chosen.gatherBytesPerDevicePerStep) + " (" + computeName + ") + reduces "
                + gib(chosen.reduceBytesPerDevicePerStep) + " (" + reduceName + ")");
    const double peak
        = in.precision == Precision::Fp32 ? in.device.peakFlops32 : in.device.peakFlops16;
    row("roofline step time",
        seconds(chosen.stepSeconds) + ": compute " + seconds(chosen.computeSeconds) + " at "
            + si(peak, "FLOP/s") + ", comm " + seconds(chosen.commSeconds)
            + (in.threeD() ? " (DP overlapped)" : " (overlapped)"));
    row("roofline throughput", si(chosen.tokensPerSecond, "") + " tokens/s");
    if (chosen.checkpointBytes > 0)
        row("checkpoint (GiB)",
            gib(chosen.checkpointBytes) + " on disk, " + gib(chosen.checkpointBytesPerRank)
                + " per rank (fp32 weights + AdamW state)");
    if (!chosen.peakPhase.empty() && (in.mode == AccountingMode::Engine || in.threeD()))
        row("memory peak at", chosen.peakPhase);
    if (in.threeD()) {
        row(std::string("parameters per ") + unit,
            formatParamCount(chosen.stageParams) + " (stage " + std::to_string(chosen.peakStage)
                + "'s slice)");
        row("pipeline bubble",
            std::to_string(static_cast<int>(chosen.bubbleFraction * 100.0 + 0.5)) + "% of a step");
    }
    for (const auto& n : chosen.notes)
        std::printf("Note: %s\n", n.c_str());
}

nlohmann::json configJson(const ImportedConfig& c)
{
    nlohmann::json j;
    j["kind"] = toString(c.kind);
    j["path"] = c.path;
    nlohmann::json resolved = nlohmann::json::object();
    for (const auto& [k, v] : c.resolved)
        resolved[k] = v;
    j["resolved"] = resolved;
    j["not_modelled"] = c.notModelled;
    j["warnings"] = c.warnings;
    j["strategy"] = toString(c.input.strategy);
    j["offload"] = toString(c.input.offload);
    j["precision"] = toString(c.input.precision);
    j["micro_batch"] = c.input.microBatch;
    j["grad_accum"] = c.input.gradAccum;
    j["gpus"] = c.input.worldSize();
    if (c.usesDeepSpeed) {
        const DeepSpeedSettings& d = c.deepspeed;
        j["deepspeed"] = {{"stage", d.stage}, {"offload_optimizer", d.offloadOptimizer},
            {"offload_param", d.offloadParams}, {"overlap_comm", d.overlapComm},
            {"reduce_bucket_size", d.reduceBucketSize},
            {"allgather_bucket_size", d.allgatherBucketSize},
            {"stage3_prefetch_bucket_size", d.prefetchBucketSize},
            {"stage3_max_live_parameters", d.maxLiveParameters},
            {"stage3_param_persistence_threshold", d.paramPersistenceThreshold},
            {"sub_group_size", d.subGroupSize}, {"mics_shard_size", d.micsShardSize}};
    }
    return j;
}

// What a config left to the planner: "auto" values resolved, keys not counted, warnings.
void printConfigNotes(const ImportedConfig& c)
{
    if (!c.resolved.empty()) {
        std::printf("Resolved (\"auto\" and derived values):\n");
        for (const auto& [k, v] : c.resolved)
            std::printf("  %s = %s\n", k.c_str(), v.c_str());
    }
    if (!c.notModelled.empty()) {
        std::printf("Not modelled (read, not counted):\n");
        for (const auto& n : c.notModelled)
            std::printf("  %s\n", n.c_str());
    }
    for (const auto& w : c.warnings)
        std::printf("Warning: %s\n", w.c_str());
}

void printConfigHeader(const ImportedConfig& c)
{
    const PlanInput& in = c.input;
    std::printf("Config  %s (%s): %s, offload %s, %s, micro-batch %lld x accumulation %lld x %lld "
                "GPUs\n",
        c.path.c_str(), toString(c.kind).c_str(), toString(in.strategy).c_str(),
        toString(in.offload).c_str(), toString(in.precision).c_str(),
        static_cast<long long>(in.microBatch), static_cast<long long>(in.gradAccum),
        static_cast<long long>(in.worldSize()));
    printConfigNotes(c);
    std::printf("\n");
}

// DeepSpeed's accounting beside Shard Studio's engine for the same layout, and DeepSpeed's
// own estimator of model states.
void printDeepSpeed(const PlanOptions& o, const ImportedConfig& c)
{
    const PlanInput& in = c.input;
    const DeepSpeedSettings& ds = c.deepspeed;
    const PlanResult r = planDeepSpeed(in, ds);
    const DeepSpeedEstimate est = deepSpeedEstimator(in, ds);
    std::optional<PlanResult> engine;
    std::string engineWhy;
    try {
        PlanInput e = in;
        e.mode = AccountingMode::Engine;
        engine = shard::plan::plan(e);
    } catch (const std::exception& e) {
        engineWhy = e.what();
    }
    if (o.json) {
        nlohmann::json j;
        j["config"] = configJson(c);
        j["deepspeed"] = toJson(r);
        if (engine)
            j["engine"] = toJson(*engine);
        else
            j["engine_error"] = engineWhy;
        j["deepspeed_estimator"]
            = {{"gpu_bytes", est.gpuBytes}, {"cpu_bytes_per_node", est.cpuBytesPerNode},
                {"largest_layer_params", est.largestLayerParams}};
        std::printf("%s\n", j.dump(2).c_str());
        return;
    }
    const ModelSpec& m = in.model;
    std::printf("Model   %s (%s parameters) on %lld GPU%s (%lld node%s x %lld) x %s GiB\n",
        m.name.c_str(), formatParamCount(r.params).c_str(), static_cast<long long>(in.worldSize()),
        in.worldSize() == 1 ? "" : "s", static_cast<long long>(in.nodes), in.nodes == 1 ? "" : "s",
        static_cast<long long>(in.gpusPerNode), gib(in.device.memoryBytes).c_str());
    std::string offload = ds.offloadOptimizer ? "optimizer to cpu" : "none";
    if (ds.offloadParams)
        offload = ds.offloadOptimizer ? "optimizer and params to cpu" : "params to cpu";
    std::printf("Config  %s (DeepSpeed): ZeRO stage %d%s, offload %s%s, %s, micro-batch %lld x "
                "accumulation %lld x %lld GPUs = train_batch_size %lld\n",
        c.path.c_str(), ds.stage,
        ds.micsShardSize > 0
            ? (" (MiCS groups of " + std::to_string(ds.micsShardSize) + ")").c_str()
            : "",
        offload.c_str(), ds.pinMemory ? " (pinned)" : "", toString(in.precision).c_str(),
        static_cast<long long>(in.microBatch), static_cast<long long>(in.gradAccum),
        static_cast<long long>(in.worldSize()),
        static_cast<long long>(in.microBatch * in.gradAccum * in.worldSize()));
    std::printf("        seq-len %lld, activation checkpointing %s (the script's "
                "--gradient_checkpointing)\n",
        static_cast<long long>(in.seqLen), toString(in.checkpointing).c_str());
    printConfigNotes(c);
    std::printf("\n%-28s%14s%22s\n", "Memory per GPU (GiB)", "DeepSpeed",
        ("Shard Studio " + toString(in.strategy)).c_str());
    // The full fine-tuning rows (DeepSpeed's figures have no LoRA split); its "sharded params"
    // are the 16-bit parameters and the fp32 master.
    for (const plan::PlanComponent& c : plan::planComponents())
        if (c.held == plan::PlanComponent::Held::Always
            || c.held == plan::PlanComponent::Held::Full)
            std::printf("  %-26s%14s%22s\n",
                c.bytes == &MemoryBreakdown::shardedParams ? "params (16-bit + master)" : c.label,
                gib(r.perDevice.*c.bytes).c_str(),
                engine ? gib(engine->perDevice.*c.bytes).c_str() : "-");
    std::printf("  %s\n", std::string(62, '-').c_str());
    std::printf("  %-26s%14s%22s\n", "total", gib(r.perDevice.total()).c_str(),
        engine ? gib(engine->perDevice.total()).c_str() : "-");
    std::printf("  %-26s%14s%22s\n", "fits?", r.fits ? "yes" : "NO",
        engine ? (engine->fits ? "yes" : "NO") : "-");
    if (r.hostBytesPerDevice > 0 || (engine && engine->hostBytesPerDevice > 0))
        std::printf("  %-26s%14s%22s\n", "host RAM per GPU", gib(r.hostBytesPerDevice).c_str(),
            engine ? gib(engine->hostBytesPerDevice).c_str() : "-");
    if (!engine)
        std::printf("  (Shard Studio's engine: %s)\n", engineWhy.c_str());
    std::printf("\nDeepSpeed's own estimator (estimate_zero%d_model_states_mem_needs, model states "
                "only): %s GiB per GPU, %s GiB host per node (largest layer %s parameters)\n",
        ds.stage == 3 ? 3 : 2, gib(est.gpuBytes).c_str(), gib(est.cpuBytesPerNode).c_str(),
        formatParamCount(est.largestLayerParams).c_str());
    const int64_t total = r.perDevice.total();
    if (r.fits)
        std::printf("Verdict: FITS - %s of %s GiB per GPU, %s GiB headroom\n", gib(total).c_str(),
            gib(r.capacityBytes).c_str(), gib(r.headroomBytes).c_str());
    else
        std::printf("Verdict: DOES NOT FIT - needs %s of %s GiB per GPU\n", gib(total).c_str(),
            gib(r.capacityBytes).c_str());
    std::printf("Where DeepSpeed differs from Shard Studio's engine:\n");
    if (in.precision != Precision::Fp32)
        std::printf("  - DeepSpeed keeps a 16-bit copy of the parameters beside the fp32 master "
                    "(%s), and the master's fp32 gradient%s; the engine casts each unit when "
                    "it gathers it\n",
            ds.stage == 3 ? "a 1/N partition" : "whole on every GPU",
            ds.stage == 3 ? " one sub group at a time" : "");
    if (ds.stage >= 1 && ds.stage < 3)
        std::printf("  - its reduce and all-gather buckets (%s + %s elements, x4.5 under "
                    "overlap_comm) against the engine's one flat buffer per unit\n",
            si(ds.reduceBucketSize, "").c_str(), si(ds.allgatherBucketSize, "").c_str());
    if (ds.stage == 3)
        std::printf("  - ZeRO-3 gathers a block plus stage3_prefetch_bucket_size (%s), capped by "
                    "stage3_max_live_parameters (%s), and keeps parameters under "
                    "stage3_param_persistence_threshold (%s) whole\n",
            si(ds.prefetchBucketSize, "").c_str(), si(ds.maxLiveParameters, "").c_str(),
            si(ds.paramPersistenceThreshold, "").c_str());
    std::printf("  - activations and logits are the model's in eager PyTorch (the ZeRO-paper "
                "accounting's Llama terms, attention scores included; SDPA / flash attention "
                "keep less), not the engine's fused kernels\n");
}

void writeOut(const PlanOptions& o, const std::string& text)
{
    if (o.out.empty() || o.out == "-") {
        std::fwrite(text.data(), 1, text.size(), stdout);
        return;
    }
    const std::string tmp = o.out + ".tmp";
    {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        if (!f)
            throw std::runtime_error(o.out + ": cannot write (check the folder exists)");
        f << text;
        if (!f.flush())
            throw std::runtime_error(o.out + ": could not write all of it (disk full?)");
    }
    if (std::rename(tmp.c_str(), o.out.c_str()) != 0)
        throw std::runtime_error(o.out + ": cannot replace it");
}

void exportPlan(const PlanOptions& o, const PlanInput& in)
{
    const std::string& k = o.exportKind;
    const ExportedConfig e = exportFor(in, k, o.script, o.configPath);
    writeOut(o, e.text);
    for (const auto& n : e.notExpressed)
        std::fprintf(stderr, "shard plan: not in the %s output: %s\n", k.c_str(), n.c_str());
}

// `--recommend-layout`: every tensor / pipeline layout of the GPUs, Megatron-LM's formula beside
// each, and the pick with its reason.
void printLayouts(const PlanOptions& o, const PlanInput& in)
{
    const LayoutRecommendation rec = recommendLayout(in);
    // Megatron's distributed optimizer shards what ZeRO-1 shards; ddp keeps it whole.
    const bool distributed = in.strategy != Strategy::Ddp;
    auto megatron = [&](const LayoutCandidate& c) {
        PlanInput x = in;
        x.tp = c.tp;
        x.pp = c.pp;
        x.gradAccum = c.gradAccum;
        return megatronTheoreticalMemory(x, distributed);
    };
    const double gibBytes = 1024.0 * 1024.0 * 1024.0;
    if (o.json) {
        nlohmann::json layouts = nlohmann::json::array();
        for (const auto& c : rec.candidates) {
            nlohmann::json l = {{"tp", c.tp}, {"pp", c.pp}, {"dp", c.dp},
                {"grad_accum", c.gradAccum}, {"fits", c.fits()}};
            if (!c.refused.empty())
                l["refused"] = c.refused;
            if (c.plan) {
                l["per_device"] = toJson(c.plan->perDevice);
                l["sequence_parallel"] = c.plan->input.sequenceParallel;
                l["bubble_fraction"] = c.plan->bubbleFraction;
                l["step_s"] = c.plan->stepSeconds;
                l["tokens_per_s"] = c.plan->tokensPerSecond;
                const MegatronMemory m = megatron(c);
                l["megatron"] = {{"weight_and_optimizer", m.weightAndOptimizerBytes},
                    {"activations", m.activationBytes}, {"total", m.totalBytes()},
                    {"most_loaded_shard_params", m.mostLoadedShard}};
            }
            layouts.push_back(std::move(l));
        }
        nlohmann::json j = {{"model", in.model.name}, {"gpus", rec.gpus},
            {"global_batch", rec.globalBatch}, {"reason", rec.reason}, {"layouts", layouts}};
        if (rec.best >= 0) {
            const LayoutCandidate& b = rec.candidates[size_t(rec.best)];
            j["best"] = {{"tp", b.tp}, {"pp", b.pp}, {"dp", b.dp}, {"grad_accum", b.gradAccum},
                {"sequence_parallel", b.plan && b.plan->input.sequenceParallel}};
        } else {
            j["best"] = nullptr;
        }
        std::printf("%s\n", j.dump(2).c_str());
        return;
    }
    std::printf("Layouts of %lld GPUs for %s (%s, global batch %lld sequences of %lld tokens)\n"
                "Zero-paper accounting, 1F1B. Megatron GiB: Megatron-LM's formula with\n"
                "%s, sequence parallelism and selective recomputation.\n\n",
        static_cast<long long>(rec.gpus), in.model.name.c_str(), toString(in.strategy).c_str(),
        static_cast<long long>(rec.globalBatch), static_cast<long long>(in.seqLen),
        distributed ? "the distributed optimizer" : "no distributed optimizer");
    std::printf("  %-22s %6s %10s %5s %7s %11s %14s\n", "layout", "accum", "GiB/GPU", "fits",
        "bubble", "tokens/s", "Megatron GiB");
    for (int i = 0; i < static_cast<int>(rec.candidates.size()); ++i) {
        const LayoutCandidate& c = rec.candidates[size_t(i)];
        const std::string mark = i == rec.best ? "* " : "  ";
        if (!c.plan) {
            std::printf("%s%-22s  %s\n", mark.c_str(), c.name().c_str(), c.refused.c_str());
            continue;
        }
        const MegatronMemory m = megatron(c);
        std::printf("%s%-22s %6lld %10.1f %5s %6.0f%% %11.0f %14.1f\n", mark.c_str(),
            c.name().c_str(), static_cast<long long>(c.gradAccum),
            double(c.plan->perDevice.total()) / gibBytes, c.fits() ? "yes" : "no",
            100.0 * c.plan->bubbleFraction, c.plan->tokensPerSecond, m.totalBytes() / gibBytes);
    }
    std::printf(
        "\n%s %s\n", rec.best >= 0 ? "Recommended:" : "No layout fits:", rec.reason.c_str());
}

void runPlan(const PlanOptions& o)
{
    if (o.showCalibration) {
        Calibration c = o.calibration.empty() ? Calibration {} : Calibration::load(o.calibration);
        std::printf("%s\n", c.toJson().dump(2).c_str());
        return;
    }
    if (o.model.empty() && o.spec.empty() && o.torchtitan.empty())
        throw std::runtime_error("--model is required: a preset (see `shard models`) or a "
                                 "Hugging Face folder with config.json (or --spec RUN.json)");
    PlanInput in = buildInput(o);
    std::optional<ImportedConfig> config;
    if (!o.deepspeed.empty() || !o.accelerate.empty() || !o.torchtitan.empty()) {
        ConfigContext ctx;
        ctx.base = in;
        ctx.gpusGiven = o.gpusGiven;
        ctx.microBatchGiven = o.microGiven;
        ctx.gradAccumGiven = o.accumGiven;
        ctx.precisionGiven = o.precisionGiven;
        ctx.checkpointingGiven = o.checkpointingGiven;
        ctx.modelGiven = !o.model.empty();
        config = !o.deepspeed.empty() ? readDeepSpeedConfig(o.deepspeed, ctx)
            : !o.accelerate.empty()   ? readAccelerateConfig(o.accelerate, ctx)
                                      : readTorchtitanConfig(o.torchtitan, ctx);
        in = config->input;
    }
    if (!o.exportKind.empty()) {
        exportPlan(o, in);
        return;
    }
    if (o.recommendLayout) {
        printLayouts(o, in);
        return;
    }
    if (config && config->usesDeepSpeed) {
        printDeepSpeed(o, *config);
        return;
    }
    if (config && !o.json)
        printConfigHeader(*config);
    const std::vector<PlanResult> all = planAllStrategies(in);
    const PlanResult* chosen = nullptr;
    for (const auto& r : all)
        if (r.input.strategy == in.strategy)
            chosen = &r;
    if (!chosen)
        throw std::runtime_error("internal error: the chosen strategy was not planned");
    const int64_t largestBatch = largestMicroBatch(in);
    const int64_t fewest = fewestGpus(in);
    if (o.json) {
        nlohmann::json j = toJson(*chosen);
        nlohmann::json strategies = nlohmann::json::object();
        for (const auto& r : all) {
            nlohmann::json s;
            s["per_device"] = toJson(r.perDevice);
            s["fits"] = r.fits;
            s["headroom"] = r.headroomBytes;
            s["host_per_device"] = r.hostBytesPerDevice;
            s["shard_degree"] = r.shardDegree;
            s["bytes_sent_per_device_per_step"] = r.bytesSentPerDevicePerStep;
            s["step_s"] = r.stepSeconds;
            if (r.input.strategy == Strategy::Hybrid)
                s["shard_group"] = r.input.shardGroup;
            s["notes"] = r.notes;
            strategies[toString(r.input.strategy)] = s;
        }
        j["strategies"] = strategies;
        j["largest_micro_batch"] = largestBatch;
        j["fewest_gpus"] = fewest;
        if (config)
            j["config"] = configJson(*config);
        std::printf("%s\n", j.dump(2).c_str());
        return;
    }
    printHuman(in, all, *chosen, largestBatch, fewest);
}

const CommandRegistration kPlan([](CLI::App& app) {
    auto o = std::make_shared<PlanOptions>();
    auto* sub = app.add_subcommand(
        "plan", "Predict memory per device, FLOPs and traffic for a model and a sharding setup");
    auto* spec = sub->add_option("--spec", o->spec,
                        "Plan a run spec (run.json or launch-spec.json): its model, device, "
                        "ranks, strategy, precision and batch shape")
                     ->type_name("FILE");
    CLI::Option* fromSpec[] = {
        sub->add_option("--model", o->model, "Preset name (see `shard models`) or HF folder")
            ->type_name("NAME|DIR"),
        sub->add_option("--gpus", o->gpus, "GPUs (ranks) per node (default 1)")->type_name("N"),
        sub->add_option("--nodes", o->nodes, "Nodes (default 1); total GPUs = gpus x nodes")
            ->type_name("M"),
        sub->add_option("--strategy", o->strategy, "ddp, zero1, zero2, zero3 (default), hybrid")
            ->type_name("S"),
        sub->add_option("--shard-group", o->shardGroup, "hybrid: ranks per shard group")
            ->type_name("G"),
        sub->add_option("--tp", o->tp,
               "Tensor parallel degree (default 1): a Megatron-LM / torchtitan layout, planned as "
               "this engine trains it (shard-worker train --tensor-parallel), or with --mode "
               "zero-paper in the ZeRO paper's and Korthikanti's accounting")
            ->type_name("T"),
        sub->add_option("--pp", o->pp,
               "Pipeline parallel stages (default 1; 1F1B), as --tp; the data-parallel GPUs "
               "are the GPUs / (tp x pp)")
            ->type_name("P"),
        sub->add_option("--virtual-stages", o->virtualStages,
               "Model chunks per pipeline stage (default 1): more plans interleaved 1F1B, "
               "whose bubble is (pp - 1) / (chunks x micro-batches + pp - 1)")
            ->type_name("V"),
        sub->add_flag("--sequence-parallel", o->sequenceParallel,
            "With --tp: split the norms' and the residual stream's activations along the "
            "sequence too (Megatron-LM's --sequence-parallel; shard-worker train trains it)"),
        sub->add_option("--precision", o->precision, "fp32, bf16-mixed (default), bf16, fp16-mixed")
            ->type_name("P"),
        sub->add_option("--checkpointing", o->checkpointing, "none (default), full")
            ->type_name("C"),
        sub->add_option("--offload", o->offload, "none (default), optimizer, params+optimizer")
            ->type_name("O"),
        sub->add_option("--reduce-dtype", o->reduceDtype,
               "Gradient reduce dtype under bf16-mixed: fp32 (default) or bf16")
            ->type_name("D"),
        sub->add_option("--micro-batch", o->microBatch, "Sequences per rank per micro-step")
            ->type_name("B"),
        sub->add_option("--seq-len", o->seqLen, "Tokens per sequence (default min(2048, max))")
            ->type_name("L"),
        sub->add_option("--grad-accum", o->gradAccum, "Micro-steps per optimizer step")
            ->type_name("K"),
        sub->add_option("--method", o->method, "full (default), lora or qlora (NF4 base)")
            ->type_name("M"),
        sub->add_option("--objective", o->objective,
               "sft (default), dpo or orpo: preference pairs, two sequences per micro-batch "
               "element")
            ->type_name("O"),
        sub->add_option("--reference", o->reference,
               "DPO's reference: auto (default), live (LoRA/QLoRA: the base with its adapters "
               "off; full: a frozen copy of the model) or precomputed")
            ->type_name("R"),
        sub->add_option("--lora-rank", o->loraRank, "LoRA rank r (default 8)")->type_name("R"),
        sub->add_option("--lora-alpha", o->loraAlpha, "LoRA alpha (default 16)")->type_name("A"),
        sub->add_option("--lora-dropout", o->loraDropout, "LoRA dropout (default 0)")
            ->type_name("P"),
        sub->add_option("--lora-targets", o->loraTargets,
               "Adapted projections: any of q,k,v,o,gate,up,down (default q,k,v,o)")
            ->type_name("LIST"),
        sub->add_flag("--no-double-quant", o->noDoubleQuant,
            "QLoRA: fp32 block scales (default: double-quantised to 8 bits)"),
    };
    for (CLI::Option* opt : fromSpec)
        spec->excludes(opt);
    sub->add_option("--gpu-memory", o->gpuMemory, "GiB per GPU (default 80), or `cpu`")
        ->type_name("GiB|cpu");
    sub->add_option("--overhead", o->overhead, "Fixed overhead per device in GiB")
        ->type_name("GiB");
    sub->add_option("--mode", o->mode, "engine (default) or zero-paper accounting")
        ->type_name("MODE");
    sub->add_option("--calibration", o->calibration, "JSON file of planner coefficients")
        ->type_name("FILE");
    sub->add_flag("--show-calibration", o->showCalibration, "Print the coefficients and exit");
    sub->add_flag("--json", o->json, "One JSON object instead of the table");
    sub->add_flag("--recommend-layout", o->recommendLayout,
        "Plan every tensor x pipeline layout of the GPUs (zero-paper accounting, the global "
        "batch kept), with Megatron-LM's memory formula beside each, and recommend the fastest "
        "that fits");
    CLI::Option* configs[] = {
        sub->add_option("--deepspeed", o->deepspeed,
               "Plan a DeepSpeed JSON config (ZeRO stage, offload, precision, batch; \"auto\" "
               "filled from --micro-batch, --grad-accum, --precision) with DeepSpeed's "
               "accounting beside the engine's")
            ->type_name("FILE"),
        sub->add_option("--accelerate", o->accelerate,
               "Plan an accelerate config (FSDP, DeepSpeed or DDP; YAML as `accelerate config` "
               "writes it)")
            ->type_name("FILE"),
        sub->add_option("--torchtitan", o->torchtitan,
               "Plan a torchtitan TOML ([parallelism], [training], [activation_checkpoint]); "
               "--model may be left out for the presets torchtitan names")
            ->type_name("FILE"),
    };
    for (CLI::Option* c : configs) {
        spec->excludes(c);
        for (const char* flag : {"--strategy", "--shard-group", "--offload", "--reduce-dtype"})
            c->excludes(sub->get_option(flag));
        for (CLI::Option* other : configs)
            if (other != c)
                c->excludes(other);
    }
    sub->add_option("--export", o->exportKind,
           "Write the plan for another engine instead of the table: deepspeed (JSON), "
           "accelerate (YAML), torchtitan (TOML), torchrun, deepspeed-launch, "
           "accelerate-launch (command lines), sbatch, sbatch-deepspeed (Slurm scripts)")
        ->type_name("KIND");
    sub->add_option("--script", o->script, "The training script the command runs (train.py)")
        ->type_name("PATH");
    sub->add_option("--config-path", o->configPath,
           "The config file the exported command names (ds_config.json, accelerate.yaml)")
        ->type_name("PATH");
    sub->add_option("--out", o->out, "Write the export to FILE instead of stdout")
        ->type_name("FILE");
    sub->callback([o, sub] {
        o->gpusGiven = sub->get_option("--gpus")->count() + sub->get_option("--nodes")->count() > 0;
        o->microGiven = sub->get_option("--micro-batch")->count() > 0;
        o->accumGiven = sub->get_option("--grad-accum")->count() > 0;
        o->precisionGiven = sub->get_option("--precision")->count() > 0;
        o->checkpointingGiven = sub->get_option("--checkpointing")->count() > 0;
        runPlan(*o);
    });
});

} // namespace
} // namespace shard::cli
