// run.json encoding and validation. Every field is listed once in forEachField so that the
// encoder, the decoder and the unknown-key check cannot drift apart.
#include "run_spec.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>
#include <stdexcept>

namespace shard::protocol {

namespace {

template<typename Spec, typename F> void forEachField(Spec& s, F&& f)
{
    f("name", s.name);
    f("model", s.model);
    f("tokenizer", s.tokenizer);
    f("data", s.data);
    f("data_format", s.dataFormat);
    f("eval_data", s.evalData);
    f("eval_fraction", s.evalFraction);
    f("eval_every", s.evalEvery);
    f("sample_every", s.sampleEvery);
    f("sample_prompts", s.samplePrompts);
    f("sample_max_tokens", s.sampleMaxTokens);
    f("packing", s.packing);
    f("shuffle", s.shuffle);
    f("skip_bad_lines", s.skipBadLines);
    f("train_on_prompt", s.trainOnPrompt);
    f("chat_template", s.chatTemplate);
    f("out", s.outDir);
    f("strategy", s.strategy);
    f("shard_group", s.shardGroup);
    f("tensor_parallel", s.tensorParallel);
    f("pipeline_parallel", s.pipelineParallel);
    f("virtual_stages", s.virtualStages);
    f("sequence_parallel", s.sequenceParallel);
    f("nodes", s.nodes);
    f("procs_per_node", s.procsPerNode);
    f("device", s.device);
    f("precision", s.precision);
    f("checkpointing", s.checkpointing);
    f("offload", s.offload);
    f("reduce_dtype", s.reduceDtype);
    f("method", s.method);
    f("lora_rank", s.loraRank);
    f("lora_alpha", s.loraAlpha);
    f("lora_dropout", s.loraDropout);
    f("lora_targets", s.loraTargets);
    f("lora_rslora", s.loraRslora);
    f("lora_init", s.loraInit);
    f("qlora_double_quant", s.qloraDoubleQuant);
    f("objective", s.objective);
    f("dpo_loss", s.dpoLoss);
    f("dpo_beta", s.dpoBeta);
    f("dpo_label_smoothing", s.dpoLabelSmoothing);
    f("orpo_lambda", s.orpoLambda);
    f("dpo_nll_weight", s.dpoNllWeight);
    f("reference", s.reference);
    f("steps", s.steps);
    f("epochs", s.epochs);
    f("micro_batch", s.microBatch);
    f("seq_len", s.seqLen);
    f("grad_accum", s.gradAccum);
    f("lr", s.lr);
    f("min_lr_ratio", s.minLrRatio);
    f("schedule", s.schedule);
    f("warmup", s.warmup);
    f("schedule_start", s.scheduleStart);
    f("schedule_steps", s.scheduleSteps);
    f("weight_decay", s.weightDecay);
    f("beta1", s.beta1);
    f("beta2", s.beta2);
    f("eps", s.eps);
    f("clip", s.clip);
    f("seed", s.seed);
    f("log_every", s.logEvery);
    f("tensorboard", s.tensorboard);
    f("checkpoint_every", s.checkpointEvery);
    f("keep_checkpoints", s.keepCheckpoints);
    f("resume", s.resume);
    f("allow_batch_change", s.allowBatchChange);
    f("threads", s.threads);
    f("hang_timeout_sec", s.hangTimeoutSec);
    f("max_restarts", s.maxRestarts);
}

void oneOf(const std::string& field, const std::string& value, std::set<std::string> allowed)
{
    if (allowed.count(value))
        return;
    std::string list;
    for (const auto& a : allowed)
        list += (list.empty() ? "" : ", ") + a;
    throw std::runtime_error("run spec: " + field + " '" + value + "' is not one of: " + list);
}

void positive(const std::string& field, double value)
{
    if (!(value > 0))
        throw std::runtime_error(
            "run spec: " + field + " must be greater than 0 (got " + std::to_string(value) + ")");
}

} // namespace

nlohmann::json toJson(const RunSpec& s)
{
    nlohmann::json j = nlohmann::json::object();
    forEachField(s, [&](const char* key, const auto& v) { j[key] = v; });
    j["v"] = 1;
    return j;
}

RunSpec runSpecFromJson(const nlohmann::json& j)
{
    if (!j.is_object())
        throw std::runtime_error("run spec: expected a JSON object");
    RunSpec s;
    std::set<std::string> known {"v"};
    forEachField(s, [&](const char* key, auto& v) {
        known.insert(key);
        auto it = j.find(key);
        if (it == j.end() || it->is_null())
            return;
        try {
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, std::vector<std::string>>) {
                if (it->is_string())
                    v = {it->get<std::string>()};
                else
                    v = it->get<T>();
            } else {
                v = it->get<T>();
            }
        } catch (const nlohmann::json::exception&) {
            throw std::runtime_error(std::string("run spec: field '") + key
                + "' has the wrong type (" + it->type_name() + ")");
        }
    });
    for (auto it = j.begin(); it != j.end(); ++it)
        if (!known.count(it.key()))
            throw std::runtime_error("run spec: unknown field '" + it.key()
                + "' (check the spelling; see `shard-worker train --help`)");
    return s;
}

const std::vector<std::string>& trainableDevices()
{
    static const std::vector<std::string> devices {"auto", "cpu", "cuda"};
    return devices;
}

const std::vector<std::string>& trainablePrecisions()
{
    static const std::vector<std::string> precisions {"fp32", "bf16-mixed"};
    return precisions;
}

const std::vector<std::string>& trainableOffloads()
{
    static const std::vector<std::string> offloads {"none", "optimizer", "params+optimizer"};
    return offloads;
}

const std::vector<std::string>& reduceDtypes()
{
    static const std::vector<std::string> dtypes {"fp32", "bf16"};
    return dtypes;
}

bool hasReduceDtypeChoice(const std::string& precision)
{
    return precision == "bf16-mixed";
}

bool offloadOnCpuForTests()
{
    const char* v = std::getenv(kOffloadOnCpuEnv);
    return v != nullptr && std::string(v) == "1";
}

const std::vector<std::string>& objectiveNames()
{
    static const std::vector<std::string> names {"sft", "dpo", "orpo"};
    return names;
}

const std::vector<std::string>& dpoLossNames()
{
    static const std::vector<std::string> names {"sigmoid", "ipo"};
    return names;
}

const std::vector<std::string>& loraTargetNames()
{
    static const std::vector<std::string> names {"q", "k", "v", "o", "gate", "up", "down"};
    return names;
}

namespace {

void validateObjective(const RunSpec& s)
{
    if (s.method == "dpo" || s.method == "orpo")
        throw std::runtime_error("run spec: method says which weights train (full, lora or "
                                 "qlora); "
            + s.method + " is a training objective: use --objective " + s.method
            + " (with --method full, lora or qlora)");
    oneOf("objective", s.objective, {objectiveNames().begin(), objectiveNames().end()});
    oneOf("dpo_loss", s.dpoLoss, {dpoLossNames().begin(), dpoLossNames().end()});
    oneOf("reference", s.reference, {"auto", "live", "precomputed"});
    for (const auto& [field, value] : {std::pair<const char*, double> {"dpo_beta", s.dpoBeta},
             {"dpo_label_smoothing", s.dpoLabelSmoothing}, {"orpo_lambda", s.orpoLambda},
             {"dpo_nll_weight", s.dpoNllWeight}})
        if (!std::isfinite(value))
            throw std::runtime_error(std::string("run spec: ") + field
                + " must be a finite number (got " + std::to_string(value) + ")");
    if (!s.usesPreferencePairs())
        return;
    if (s.packing)
        throw std::runtime_error("run spec: " + s.objective
            + " trains on preference pairs, one pair per two rows, which are not packed; drop "
              "--packing");
    if (s.dataFormat != "auto" && s.dataFormat != "preference")
        throw std::runtime_error("run spec: " + s.objective
            + " reads preference pairs (\"prompt\", \"chosen\", \"rejected\"); data_format "
            + s.dataFormat + " has none: use --data-format preference or auto");
    if (s.objective == "dpo") {
        positive("dpo_beta", s.dpoBeta);
        if (!(s.dpoLabelSmoothing >= 0 && s.dpoLabelSmoothing < 0.5))
            throw std::runtime_error(
                "run spec: dpo_label_smoothing must be in [0, 0.5) (cDPO's label noise; got "
                + std::to_string(s.dpoLabelSmoothing) + ")");
        if (s.dpoLabelSmoothing > 0 && s.dpoLoss != "sigmoid")
            throw std::runtime_error("run spec: dpo_label_smoothing applies to the sigmoid loss "
                                     "(cDPO); with dpo_loss "
                + s.dpoLoss + " use 0");
        if (!(s.dpoNllWeight >= 0))
            throw std::runtime_error("run spec: dpo_nll_weight must be >= 0 (got "
                + std::to_string(s.dpoNllWeight) + ")");
        if (const std::string why = liveReferenceRefusal(s); !why.empty())
            throw std::runtime_error("run spec: " + why);
    } else {
        if (!(s.orpoLambda >= 0))
            throw std::runtime_error(
                "run spec: orpo_lambda must be >= 0 (got " + std::to_string(s.orpoLambda) + ")");
        if (s.reference != "auto")
            throw std::runtime_error(
                "run spec: orpo has no reference model; drop --reference (it is DPO's)");
    }
}

void validateLora(const RunSpec& s)
{
    oneOf("method", s.method, {"full", "lora", "qlora"});
    if (!s.usesLora()) {
        if (!s.loraInit.empty())
            throw std::runtime_error(
                "run spec: lora_init needs method lora or qlora (--method lora)");
        return;
    }
    if (s.loraRank < 1)
        throw std::runtime_error("run spec: lora_rank must be at least 1 (got "
            + std::to_string(s.loraRank) + "); typical values are 8 to 64");
    positive("lora_alpha", s.loraAlpha);
    if (!(s.loraDropout >= 0 && s.loraDropout < 1))
        throw std::runtime_error(
            "run spec: lora_dropout must be in [0, 1) (got " + std::to_string(s.loraDropout) + ")");
    const auto& names = loraTargetNames();
    std::string item;
    size_t count = 0;
    for (size_t i = 0; i <= s.loraTargets.size(); ++i) {
        if (i < s.loraTargets.size() && s.loraTargets[i] != ',') {
            if (s.loraTargets[i] != ' ')
                item += s.loraTargets[i];
            continue;
        }
        const std::string full = item.size() > 5 && item.substr(item.size() - 5) == "_proj"
            ? item.substr(0, item.size() - 5)
            : item;
        if (std::find(names.begin(), names.end(), full) == names.end())
            throw std::runtime_error("run spec: lora_targets entry '" + item
                + "' is not one of q, k, v, o, gate, up, down (comma-separated)");
        ++count;
        item.clear();
    }
    if (count == 0)
        throw std::runtime_error("run spec: lora_targets is empty (e.g. q,k,v,o)");
}

} // namespace

std::string liveReferenceRefusal(const RunSpec& s)
{
    if (s.resolvedReference() != "live" || s.usesLora()
        || (s.tensorParallel <= 1 && s.pipelineParallel <= 1))
        return {};
    return "reference live with full fine-tuning keeps a frozen copy of the model beside it, "
           "which this engine places over data-parallel ranks only (not split by tensor or "
           "pipeline parallel, --tp / --pp); use --reference precomputed (the reference "
           "log-probabilities computed in one pass before training) or --method lora";
}

void validate(const RunSpec& s)
{
    validateObjective(s);
    validateLora(s);
    oneOf("strategy", s.strategy, {strategyNames().begin(), strategyNames().end()});
    oneOf("precision", s.precision, {"fp32", "bf16-mixed", "bf16", "fp16-mixed"});
    oneOf("checkpointing", s.checkpointing, {"none", "full"});
    oneOf("offload", s.offload, {"none", "optimizer", "params+optimizer"});
    oneOf("reduce_dtype", s.reduceDtype, {reduceDtypes().begin(), reduceDtypes().end()});
    if (s.reduceDtype != "fp32" && !hasReduceDtypeChoice(s.precision))
        throw std::runtime_error("run spec: reduce_dtype bf16 goes with precision bf16-mixed ("
            + s.precision + " reduces in its own dtype); use --reduce-dtype fp32");
    oneOf("schedule", s.schedule, {"constant", "linear", "cosine"});
    oneOf("device", s.device, {"auto", "cpu", "cuda"});
    oneOf(
        "data_format", s.dataFormat, {"auto", "text", "alpaca", "chat", "tokenized", "preference"});
    positive("micro_batch", static_cast<double>(s.microBatch));
    if (!(s.hangTimeoutSec >= 0))
        throw std::runtime_error("run spec: hang_timeout_sec must be 0 (off) or positive seconds");
    if (s.maxRestarts < 0)
        throw std::runtime_error("run spec: max_restarts must be 0 (off) or a positive count (got "
            + std::to_string(s.maxRestarts) + ")");
    positive("seq_len", static_cast<double>(s.seqLen));
    positive("grad_accum", static_cast<double>(s.gradAccum));
    positive("nodes", s.nodes);
    positive("procs_per_node", s.procsPerNode);
    positive("lr", s.lr);
    positive("log_every", static_cast<double>(s.logEvery));
    if (s.threads < 0)
        throw std::runtime_error("run spec: threads must be >= 0 (0 = cores / ranks on the node)");
    if (s.steps <= 0 && s.epochs <= 0)
        throw std::runtime_error("run spec: give steps (--steps N) or epochs (--epochs N)");
    if (s.warmup < 0)
        throw std::runtime_error("run spec: warmup must be >= 0");
    // Written as !(x >= 0) so NaN is refused too: JSON has no NaN, so a run.json would record
    // it as null and a rerun from that spec would train with the default instead.
    if (!(s.clip >= 0) || std::isinf(s.clip))
        throw std::runtime_error("run spec: clip must be a finite number >= 0 (0 disables "
                                 "clipping; got "
            + std::to_string(s.clip) + ")");
    if (s.checkpointEvery < 0)
        throw std::runtime_error("run spec: checkpoint_every must be >= 0 (0 = no checkpoints; got "
            + std::to_string(s.checkpointEvery) + ")");
    if (s.keepCheckpoints < 0)
        throw std::runtime_error("run spec: keep_checkpoints must be >= 0 (0 keeps all; got "
            + std::to_string(s.keepCheckpoints) + ")");
    const std::pair<const char*, double> reals[] = {{"lr", s.lr}, {"min_lr_ratio", s.minLrRatio},
        {"weight_decay", s.weightDecay}, {"eps", s.eps}, {"lora_alpha", s.loraAlpha}};
    for (const auto& [field, value] : reals)
        if (!std::isfinite(value))
            throw std::runtime_error(std::string("run spec: ") + field
                + " must be a finite number (got " + std::to_string(value) + ")");
    if (s.scheduleStart < 0 || s.scheduleSteps < 0)
        throw std::runtime_error("run spec: schedule_start and schedule_steps must be >= 0");
    if (s.scheduleSteps > 0 && s.scheduleSteps <= s.scheduleStart)
        throw std::runtime_error("run spec: schedule_steps (" + std::to_string(s.scheduleSteps)
            + ") must be past schedule_start (" + std::to_string(s.scheduleStart) + ")");
    if (s.sampleEvery < 0)
        throw std::runtime_error("run spec: sample_every must be >= 0 (0 = no samples)");
    if (s.sampleEvery > 0 && s.samplePrompts.empty())
        throw std::runtime_error("run spec: sample_every needs sample_prompts (--sample-prompts "
                                 "FILE, one prompt a line)");
    positive("sample_max_tokens", static_cast<double>(s.sampleMaxTokens));
    if (!(s.evalFraction >= 0 && s.evalFraction < 1))
        throw std::runtime_error("run spec: eval_fraction must be in [0, 1)");
    if (!(s.beta1 >= 0 && s.beta1 < 1 && s.beta2 >= 0 && s.beta2 < 1))
        throw std::runtime_error("run spec: beta1 and beta2 must be in [0, 1)");
    try {
        s.parallelDims().validate("ranks");
    } catch (const std::exception& e) {
        throw std::runtime_error(std::string("run spec: ") + e.what());
    }
    if (s.offload != "none" && s.device == "cpu" && !offloadOnCpuForTests())
        throw std::runtime_error("run spec: offload '" + s.offload
            + "' means nothing on CPU (the state is already in "
              "host memory); use --offload none");
    if (s.offload != "none" && s.usesLora())
        throw std::runtime_error("run spec: offload '" + s.offload + "' with method " + s.method
            + ": the adapters' optimizer state is small and the frozen base has none; use "
              "--offload none");
    if (s.model.empty())
        throw std::runtime_error("run spec: no model given (--model DIR)");
    if (s.data.empty())
        throw std::runtime_error("run spec: no data given (--data FILE.jsonl)");
}

std::optional<std::string> flagValue(const std::vector<std::string>& args, const std::string& flag)
{
    std::optional<std::string> value;
    for (size_t i = 0; i < args.size(); ++i) {
        if (args[i] == flag && i + 1 < args.size())
            value = args[++i];
        else if (args[i].rfind(flag + "=", 0) == 0)
            value = args[i].substr(flag.size() + 1);
    }
    return value;
}

} // namespace shard::protocol
