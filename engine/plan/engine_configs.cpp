// Other engines' configs in and out of the planner (engine_configs.h).
#include "plan/engine_configs.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>
#include <yaml-cpp/yaml.h>

#include "plan/run_spec_bridge.h"

namespace shard::plan {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& path, const std::string& what)
{
    throw std::runtime_error(path + ": " + what);
}

std::string readText(const std::string& path, const char* what)
{
    std::ifstream f(path, std::ios::binary);
    if (!f)
        throw std::runtime_error(path + ": cannot open the " + what);
    std::ostringstream s;
    s << f.rdbuf();
    return s.str();
}

// A number as a config writes it: 5e8 as "500000000", 0.9 as "0.9".
std::string num(double v)
{
    if (std::fabs(v) < 9e15 && v == std::floor(v))
        return std::to_string(static_cast<long long>(v));
    std::ostringstream s;
    s << v;
    return s.str();
}

std::string joined(const std::vector<std::string>& v, const char* sep = ", ")
{
    std::string s;
    for (const auto& x : v)
        s += (s.empty() ? "" : sep) + x;
    return s;
}

std::string joined(const std::set<std::string>& v)
{
    return joined(std::vector<std::string>(v.begin(), v.end()));
}

// --- The model's shapes DeepSpeed's knobs are compared with ---------------------------------

struct Shapes {
    int64_t params = 0;
    int64_t largestTensor = 0; // DeepSpeed's "largest layer": a module's own parameters
    int64_t largestBlock = 0;  // one transformer block's parameters
    std::vector<int64_t> tensorSizes;
};

Shapes shapesOf(const ModelSpec& m)
{
    Shapes s;
    std::map<int64_t, int64_t> perLayer;
    for (const ParamInfo& p : parameterTable(m)) {
        const int64_t n = p.numel();
        s.params += n;
        s.largestTensor = std::max(s.largestTensor, n);
        if (p.layer >= 0)
            perLayer[p.layer] += n;
        s.tensorSizes.push_back(n);
    }
    for (const auto& [layer, n] : perLayer)
        s.largestBlock = std::max(s.largestBlock, n);
    return s;
}

int64_t toBytes(double v)
{
    return static_cast<int64_t>(std::llround(std::max(0.0, v)));
}

// --- DeepSpeed JSON --------------------------------------------------------------------------

// A value that may be a number, "auto" or absent.
struct Value {
    bool present = false;
    bool isAuto = false;
    double v = 0;
};

Value numberAt(
    const json& obj, const std::string& key, const std::string& path, const std::string& where)
{
    Value r;
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null())
        return r;
    r.present = true;
    if (it->is_string() && it->get<std::string>() == "auto") {
        r.isAuto = true;
        return r;
    }
    if (it->is_number()) {
        r.v = it->get<double>();
        if (r.v < 0)
            fail(path, where + key + " is " + it->dump() + "; it must not be negative");
        return r;
    }
    fail(path, where + key + " is " + it->dump() + "; it must be a number or \"auto\"");
}

// true / false / "auto" (-1 absent, 0 false, 1 true, 2 auto).
int boolAt(
    const json& obj, const std::string& key, const std::string& path, const std::string& where)
{
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null())
        return -1;
    if (it->is_boolean())
        return it->get<bool>() ? 1 : 0;
    if (it->is_string() && it->get<std::string>() == "auto")
        return 2;
    if (it->is_string() && (it->get<std::string>() == "true" || it->get<std::string>() == "false"))
        return it->get<std::string>() == "true" ? 1 : 0;
    fail(path, where + key + " is " + it->dump() + "; it must be true, false or \"auto\"");
}

json parseJsonStrict(const std::string& text, const std::string& path)
{
    // DeepSpeed refuses a key given twice in one object (its JSON loader raises); so do we.
    std::vector<std::set<std::string>> keys;
    std::string duplicate;
    json::parser_callback_t cb = [&](int, json::parse_event_t event, json& parsed) {
        if (event == json::parse_event_t::object_start)
            keys.emplace_back();
        else if (event == json::parse_event_t::object_end && !keys.empty())
            keys.pop_back();
        else if (event == json::parse_event_t::key && !keys.empty()) {
            const std::string k = parsed.get<std::string>();
            if (!keys.back().insert(k).second && duplicate.empty())
                duplicate = k;
        }
        return true;
    };
    json j;
    try {
        j = json::parse(text, cb);
    } catch (const json::parse_error& e) {
        fail(path, std::string("not valid JSON: ") + e.what());
    }
    if (!duplicate.empty())
        fail(path,
            "the key \"" + duplicate
                + "\" appears twice in one object; DeepSpeed refuses duplicate keys: keep one");
    if (!j.is_object())
        fail(
            path, "a DeepSpeed config is a JSON object ({...}), not " + std::string(j.type_name()));
    return j;
}

const std::set<std::string>& deepSpeedTopKeys()
{
    static const std::set<std::string> k = {"train_batch_size", "train_micro_batch_size_per_gpu",
        "gradient_accumulation_steps", "gradient_clipping", "steps_per_print",
        "wall_clock_breakdown", "optimizer", "scheduler", "fp16", "bf16", "bfloat16", "amp",
        "zero_optimization", "activation_checkpointing", "zero_allow_untested_optimizer",
        "zero_force_ds_cpu_optimizer", "prescale_gradients", "gradient_predivide_factor",
        "communication_data_type", "seq_parallel_communication_data_type", "data_types",
        "sparse_gradients", "flops_profiler", "tensorboard", "wandb", "csv_monitor", "comet",
        "comms_logger", "monitor_config", "memory_breakdown", "dump_state", "dataloader_drop_last",
        "elasticity", "pipeline", "aio", "checkpoint", "data_efficiency", "curriculum_learning",
        "compression_training", "sparse_attention", "autotuning", "nebula", "eigenvalue",
        "progressive_layer_drop", "quantize_training", "hybrid_engine", "weight_quantization",
        "compile", "timers", "graph_harvesting", "use_data_before_expert_parallel_",
        "use_node_local_storage", "load_universal_checkpoint", "fp8", "torch_autocast",
        "disable_allgather", "zero_quantized_gradients", "train_micro_batch_size"};
    return k;
}

// Top-level keys that do not change the memory of a training step.
const std::set<std::string>& deepSpeedQuietKeys()
{
    static const std::set<std::string> k = {"steps_per_print", "wall_clock_breakdown",
        "flops_profiler", "tensorboard", "wandb", "csv_monitor", "comet", "comms_logger",
        "monitor_config", "memory_breakdown", "dump_state", "dataloader_drop_last",
        "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "prescale_gradients",
        "gradient_predivide_factor", "checkpoint", "timers", "use_node_local_storage",
        "load_universal_checkpoint", "scheduler", "optimizer", "fp16", "bf16", "bfloat16",
        "zero_optimization", "train_batch_size", "train_micro_batch_size_per_gpu",
        "gradient_accumulation_steps", "gradient_clipping", "communication_data_type"};
    return k;
}

// DeepSpeedZeroConfig's fields and their aliases (DeepSpeed refuses other keys here).
const std::set<std::string>& zeroKeys()
{
    static const std::set<std::string> k = {"stage", "contiguous_gradients", "reduce_scatter",
        "reduce_bucket_size", "use_multi_rank_bucket_allreduce", "allgather_partitions",
        "allgather_bucket_size", "overlap_comm", "load_from_fp32_weights", "elastic_checkpoint",
        "offload_param", "offload_optimizer", "sub_group_size", "cpu_offload", "cpu_offload_param",
        "cpu_offload_params", "cpu_offload_use_pin_memory", "prefetch_bucket_size",
        "stage3_prefetch_bucket_size", "param_persistence_threshold",
        "stage3_param_persistence_threshold", "model_persistence_threshold",
        "stage3_model_persistence_threshold", "max_live_parameters", "stage3_max_live_parameters",
        "max_reuse_distance", "stage3_max_reuse_distance", "gather_16bit_weights_on_model_save",
        "stage3_gather_16bit_weights_on_model_save", "stage3_gather_fp16_weights_on_model_save",
        "module_granularity_threshold", "stage3_module_granularity_threshold",
        "use_all_reduce_for_fetch_params", "stage3_use_all_reduce_for_fetch_params",
        "ignore_unused_parameters", "legacy_stage1", "round_robin_gradients",
        "zero_hpz_partition_size", "zero_quantized_weights", "zero_quantized_nontrainable_weights",
        "zero_quantized_gradients", "zeropp_loco_param", "mics_shard_size",
        "mics_hierarchical_params_gather", "memory_efficient_linear", "pipeline_loading_checkpoint",
        "override_module_apply", "log_trace_cache_warnings", "allgather_sequential"};
    return k;
}

// An offload section: {"device": "none"|"cpu"|"nvme", "pin_memory": bool, ...}. Returns cpu.
bool readOffload(const json& zero, const std::string& key, const std::string& path, bool* pin)
{
    auto it = zero.find(key);
    if (it == zero.end() || it->is_null())
        return false;
    const std::string where = "zero_optimization." + key;
    if (!it->is_object())
        fail(
            path, where + " must be an object such as {\"device\": \"cpu\", \"pin_memory\": true}");
    static const std::set<std::string> known = {"device", "nvme_path", "buffer_count",
        "buffer_size", "max_in_cpu", "pin_memory", "pipeline", "pipeline_read", "pipeline_write",
        "fast_init", "ratio", "super_offload", "cpuadam_cores_perc"};
    for (const auto& [k, v] : it->items())
        if (!known.count(k))
            fail(path,
                where + "." + k
                    + " is not a DeepSpeed offload key (DeepSpeed refuses it "
                      "too); known: "
                    + joined(known));
    std::string device = "none";
    if (it->contains("device")) {
        if (!(*it)["device"].is_string())
            fail(path, where + ".device must be \"none\", \"cpu\" or \"nvme\"");
        device = (*it)["device"].get<std::string>();
    }
    if (device == "nvme")
        fail(path,
            where
                + ".device is \"nvme\" (ZeRO-Infinity): the planner does not model "
                  "NVMe swap buffers or their bandwidth; plan with \"cpu\" for the host-memory "
                  "side, or \"none\"");
    if (device != "none" && device != "cpu")
        fail(path,
            where + ".device is \"" + device + "\"; it must be \"none\", \"cpu\" or \"nvme\"");
    if (device == "cpu" && pin)
        *pin = *pin || it->value("pin_memory", false);
    return device == "cpu";
}

Strategy strategyOfStage(int stage)
{
    switch (stage) {
    case 0:
        return Strategy::Ddp;
    case 1:
        return Strategy::Zero1;
    case 2:
        return Strategy::Zero2;
    default:
        return Strategy::Zero3;
    }
}

int stageOf(Strategy s)
{
    switch (s) {
    case Strategy::Ddp:
        return 0;
    case Strategy::Zero1:
        return 1;
    case Strategy::Zero2:
        return 2;
    default:
        return 3;
    }
}

} // namespace

std::string toString(EngineConfigKind k)
{
    switch (k) {
    case EngineConfigKind::DeepSpeed:
        return "deepspeed";
    case EngineConfigKind::Accelerate:
        return "accelerate";
    case EngineConfigKind::Torchtitan:
        return "torchtitan";
    }
    return "?";
}

std::string toString(Launcher l)
{
    switch (l) {
    case Launcher::Torchrun:
        return "torchrun";
    case Launcher::DeepSpeed:
        return "deepspeed";
    case Launcher::Accelerate:
        return "accelerate";
    }
    return "?";
}

Launcher parseLauncher(const std::string& s)
{
    if (s == "torchrun")
        return Launcher::Torchrun;
    if (s == "deepspeed")
        return Launcher::DeepSpeed;
    if (s == "accelerate")
        return Launcher::Accelerate;
    throw std::runtime_error("launcher '" + s + "' is not one of torchrun, deepspeed, accelerate");
}

DeepSpeedSettings deepSpeedSettingsFor(const PlanInput& in)
{
    DeepSpeedSettings ds;
    ds.stage = stageOf(in.strategy);
    if (in.strategy == Strategy::Hybrid)
        ds.micsShardSize = in.shardGroup > 0 ? in.shardGroup : in.gpusPerNode;
    // DeepSpeed offloads from stage 1 on, parameters under stage 3 only.
    ds.offloadOptimizer = in.offload != Offload::None && ds.stage >= 1;
    ds.offloadParams = in.offload == Offload::ParamsAndOptimizer && ds.stage == 3;
    ds.pinMemory = ds.offloadOptimizer;
    ds.overlapComm = true;
    ds.contiguousGradients = true;
    // The Hugging Face Trainer's "auto" values (transformers' integrations/deepspeed.py).
    const double h = static_cast<double>(in.model.hiddenSize);
    ds.reduceBucketSize = h * h;
    ds.prefetchBucketSize = std::floor(0.9 * h * h);
    ds.paramPersistenceThreshold = 10 * h;
    ds.gradientClipping = 1.0;
    return ds;
}

DeepSpeedSettings deepSpeedSettingsFor(const PlanInput& in, const DeepSpeedSettings& knobs)
{
    DeepSpeedSettings ds = knobs;
    const DeepSpeedSettings layout = deepSpeedSettingsFor(in);
    ds.stage = layout.stage;
    ds.micsShardSize = layout.micsShardSize;
    ds.offloadOptimizer = layout.offloadOptimizer;
    ds.offloadParams = layout.offloadParams;
    ds.pinMemory = knobs.pinMemory || layout.offloadOptimizer;
    return ds;
}

int64_t largestMicroBatchDeepSpeed(const PlanInput& in, const DeepSpeedSettings& ds, int64_t limit)
{
    auto fits = [&](int64_t b) {
        PlanInput i = in;
        i.microBatch = b;
        return planDeepSpeed(i, ds).fits;
    };
    if (!fits(1))
        return 0;
    int64_t lo = 1, hi = 2;
    while (hi <= limit && fits(hi)) {
        lo = hi;
        hi *= 2;
    }
    hi = std::min(hi, limit + 1);
    while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        (fits(mid) ? lo : hi) = mid;
    }
    return lo;
}

ImportedConfig parseDeepSpeedConfig(
    const std::string& text, const std::string& path, const ConfigContext& ctx)
{
    const json j = parseJsonStrict(text, path);
    ImportedConfig out;
    out.kind = EngineConfigKind::DeepSpeed;
    out.path = path;
    out.usesDeepSpeed = true;
    PlanInput in = ctx.base;
    const int64_t W = in.worldSize();
    const ModelSpec& model = in.model;
    const double hidden = static_cast<double>(model.hiddenSize);

    for (const auto& [k, v] : j.items()) {
        if (!deepSpeedTopKeys().count(k))
            out.warnings.push_back(k
                + ": not a DeepSpeed key this planner knows; DeepSpeed "
                  "ignores top-level keys it does not know: check the "
                  "spelling");
        else if (!deepSpeedQuietKeys().count(k) && k != "activation_checkpointing")
            out.notModelled.push_back(k + ": not modelled (the plan does not count it)");
    }

    // Precision.
    auto enabledOf = [&](const char* section) {
        auto it = j.find(section);
        if (it == j.end() || it->is_null())
            return -1;
        if (!it->is_object())
            fail(path, std::string(section) + " must be an object such as {\"enabled\": true}");
        return boolAt(*it, "enabled", path, std::string(section) + ".");
    };
    int fp16 = enabledOf("fp16");
    int bf16 = enabledOf("bf16");
    if (bf16 < 0)
        bf16 = enabledOf("bfloat16");
    const Precision wanted = ctx.base.precision;
    if (fp16 == 2 || bf16 == 2) {
        const std::string from = std::string("from ")
            + (ctx.precisionGiven ? "--precision " : "the default precision ") + toString(wanted)
            + " (the Trainer's --bf16 / --fp16)";
        if (fp16 == 2) {
            fp16 = wanted == Precision::Fp16Mixed ? 1 : 0;
            out.resolved.push_back(
                {"fp16.enabled", std::string(fp16 ? "true" : "false") + " (" + from + ")"});
        }
        if (bf16 == 2) {
            bf16 = (wanted == Precision::Bf16Mixed || wanted == Precision::Bf16) && fp16 != 1 ? 1
                                                                                              : 0;
            out.resolved.push_back(
                {"bf16.enabled", std::string(bf16 ? "true" : "false") + " (" + from + ")"});
        }
    }
    if (fp16 == 1 && bf16 == 1)
        fail(path,
            "fp16.enabled and bf16.enabled are both true; DeepSpeed refuses that: enable "
            "one of them");
    in.precision = fp16 == 1 ? Precision::Fp16Mixed
        : bf16 == 1          ? Precision::Bf16Mixed
                             : Precision::Fp32;
    if (ctx.precisionGiven && wanted != in.precision
        && !(wanted == Precision::Bf16 && in.precision == Precision::Bf16Mixed))
        fail(path,
            "--precision " + toString(wanted) + " contradicts the config, which trains in "
                + toString(in.precision) + "; drop --precision or change fp16/bf16 in the config");
    if (wanted == Precision::Bf16 && in.precision == Precision::Bf16Mixed)
        out.notModelled.push_back("--precision bf16 (pure bf16): DeepSpeed keeps fp32 master "
                                  "weights under bf16; planned as bf16-mixed");
    in.bf16Reduce = false;
    if (in.precision == Precision::Bf16Mixed) {
        // DeepSpeed reduces gradients in the model's dtype unless told otherwise.
        std::string comm = "bf16";
        if (j.contains("communication_data_type") && j["communication_data_type"].is_string())
            comm = j["communication_data_type"].get<std::string>();
        in.bf16Reduce = comm != "fp32";
    }
    if (j.contains("data_types"))
        out.notModelled.push_back("data_types: not modelled (gradients accumulate in the "
                                  "planner's dtype for the precision)");

    // Batch: DeepSpeed's rule train_batch_size = micro x accumulation x world size.
    const Value tb = numberAt(j, "train_batch_size", path, "");
    Value micro = numberAt(j, "train_micro_batch_size_per_gpu", path, "");
    Value accum = numberAt(j, "gradient_accumulation_steps", path, "");
    auto integer = [&](const Value& v, const char* key) {
        if (v.v != std::floor(v.v) || v.v < 1)
            fail(path, std::string(key) + " is " + num(v.v) + "; it must be a positive integer");
        return static_cast<int64_t>(v.v);
    };
    int64_t m = 0, a = 0, t = 0;
    if (micro.present && micro.isAuto) {
        m = ctx.base.microBatch;
        out.resolved.push_back({"train_micro_batch_size_per_gpu",
            std::to_string(m)
                + (ctx.microBatchGiven ? " (from --micro-batch" : " (the default micro-batch")
                + ", the Trainer's --per_device_train_batch_size)"});
    } else if (micro.present) {
        m = integer(micro, "train_micro_batch_size_per_gpu");
    }
    if (accum.present && accum.isAuto) {
        a = ctx.base.gradAccum;
        out.resolved.push_back({"gradient_accumulation_steps",
            std::to_string(a)
                + (ctx.gradAccumGiven ? " (from --grad-accum" : " (the default accumulation")
                + ", the Trainer's --gradient_accumulation_steps)"});
    } else if (accum.present) {
        a = integer(accum, "gradient_accumulation_steps");
    }
    if (tb.present && !tb.isAuto)
        t = integer(tb, "train_batch_size");
    const std::string world = std::to_string(W) + " GPU" + (W == 1 ? "" : "s");
    if (t > 0 && m > 0 && a > 0) {
        if (t != m * a * W)
            fail(path,
                "train_batch_size " + std::to_string(t) + " is not train_micro_batch_size_per_gpu "
                    + std::to_string(m) + " x gradient_accumulation_steps " + std::to_string(a)
                    + " x " + world + " = " + std::to_string(m * a * W)
                    + "; DeepSpeed refuses that: fix one of them (or --gpus / --nodes)");
    } else if (t > 0 && m > 0) {
        if (t % (m * W) != 0)
            fail(path,
                "train_batch_size " + std::to_string(t)
                    + " is not a multiple of "
                      "train_micro_batch_size_per_gpu "
                    + std::to_string(m) + " x " + world);
        a = t / (m * W);
        out.resolved.push_back({"gradient_accumulation_steps",
            std::to_string(a) + " (train_batch_size / (micro-batch x " + world + "))"});
    } else if (t > 0 && a > 0) {
        if (t % (a * W) != 0)
            fail(path,
                "train_batch_size " + std::to_string(t)
                    + " is not a multiple of "
                      "gradient_accumulation_steps "
                    + std::to_string(a) + " x " + world);
        m = t / (a * W);
        out.resolved.push_back({"train_micro_batch_size_per_gpu",
            std::to_string(m) + " (train_batch_size / (accumulation x " + world + "))"});
    } else if (t > 0) {
        if (t % W != 0)
            fail(path,
                "train_batch_size " + std::to_string(t) + " does not split over " + world
                    + "; DeepSpeed refuses that: change it or --gpus / --nodes");
        a = 1;
        m = t / W;
        out.resolved.push_back({"train_micro_batch_size_per_gpu",
            std::to_string(m) + " (train_batch_size / " + world + ", accumulation 1)"});
    } else if (m > 0) {
        if (a == 0)
            a = 1;
    } else {
        // The Hugging Face Trainer and accelerate set the batch keys when a config has none.
        m = ctx.base.microBatch;
        if (a == 0)
            a = ctx.base.gradAccum;
        out.warnings.push_back("train_batch_size and train_micro_batch_size_per_gpu are absent: "
                               "DeepSpeed alone refuses that, the Hugging Face Trainer and "
                               "accelerate fill them in; planned with micro-batch "
            + std::to_string(m) + " and accumulation " + std::to_string(a)
            + " (--micro-batch, --grad-accum)");
    }
    if (tb.present && tb.isAuto)
        out.resolved.push_back({"train_batch_size",
            std::to_string(m * a * W) + " (micro-batch x accumulation x " + world + ")"});
    if (ctx.microBatchGiven && m != ctx.base.microBatch)
        fail(path,
            "--micro-batch " + std::to_string(ctx.base.microBatch)
                + " contradicts the config's micro-batch " + std::to_string(m)
                + "; drop --micro-batch or set train_micro_batch_size_per_gpu to \"auto\"");
    if (ctx.gradAccumGiven && a != ctx.base.gradAccum)
        fail(path,
            "--grad-accum " + std::to_string(ctx.base.gradAccum)
                + " contradicts the config's gradient_accumulation_steps " + std::to_string(a)
                + "; drop --grad-accum or set it to \"auto\"");
    in.microBatch = m;
    in.gradAccum = a;

    DeepSpeedSettings ds;
    const Value clip = numberAt(j, "gradient_clipping", path, "");
    if (clip.isAuto) {
        ds.gradientClipping = 1.0;
        out.resolved.push_back(
            {"gradient_clipping", "1.0 (the Trainer's --max_grad_norm default)"});
    } else if (clip.present) {
        ds.gradientClipping = clip.v;
    }

    // ZeRO.
    json zero = json::object();
    if (j.contains("zero_optimization")) {
        if (!j["zero_optimization"].is_object())
            fail(path, "zero_optimization must be an object such as {\"stage\": 3}");
        zero = j["zero_optimization"];
    }
    for (const auto& [k, v] : zero.items())
        if (!zeroKeys().count(k))
            fail(path,
                "zero_optimization." + k
                    + " is not a DeepSpeed ZeRO key (DeepSpeed "
                      "refuses it too); check the spelling against "
                    + joined(zeroKeys()));
    if (zero.contains("stage")) {
        const json& s = zero["stage"];
        if (!s.is_number_integer() || s.get<int>() < 0 || s.get<int>() > 3)
            fail(path, "zero_optimization.stage is " + s.dump() + "; it must be 0, 1, 2 or 3");
        ds.stage = s.get<int>();
    }
    const std::string z = "zero_optimization.";
    ds.offloadOptimizer = readOffload(zero, "offload_optimizer", path, &ds.pinMemory);
    ds.offloadParams = readOffload(zero, "offload_param", path, &ds.pinMemory);
    if (boolAt(zero, "cpu_offload", path, z) == 1)
        ds.offloadOptimizer = true;
    if (boolAt(zero, "cpu_offload_param", path, z) == 1
        || boolAt(zero, "cpu_offload_params", path, z) == 1)
        ds.offloadParams = true;
    if (ds.offloadParams && ds.stage != 3)
        fail(path,
            "zero_optimization.offload_param needs ZeRO stage 3 (the config has stage "
                + std::to_string(ds.stage)
                + "); DeepSpeed refuses it: use stage 3 or drop "
                  "offload_param");
    if (ds.offloadOptimizer && ds.stage == 0)
        fail(path,
            "zero_optimization.offload_optimizer needs ZeRO stage 1, 2 or 3 (the config "
            "has stage 0): raise the stage or drop offload_optimizer");
    ds.overlapComm = ds.stage == 3;
    if (int v = boolAt(zero, "overlap_comm", path, z); v >= 0)
        ds.overlapComm = v == 1;
    if (int v = boolAt(zero, "contiguous_gradients", path, z); v >= 0)
        ds.contiguousGradients = v == 1;
    auto knob = [&](std::initializer_list<const char*> keys, double* target, double autoValue,
                    const std::string& autoWhy) {
        for (const char* key : keys) {
            const Value v = numberAt(zero, key, path, z);
            if (!v.present)
                continue;
            if (v.isAuto) {
                *target = autoValue;
                out.resolved.push_back({z + key, num(autoValue) + " (" + autoWhy + ")"});
            } else {
                *target = v.v;
            }
            return;
        }
    };
    const std::string h = std::to_string(model.hiddenSize);
    knob({"reduce_bucket_size"}, &ds.reduceBucketSize, hidden * hidden,
        "hidden_size^2 = " + h + "^2, the Trainer's rule");
    knob({"allgather_bucket_size"}, &ds.allgatherBucketSize, 5e8, "DeepSpeed's default");
    knob({"stage3_prefetch_bucket_size", "prefetch_bucket_size"}, &ds.prefetchBucketSize,
        std::floor(0.9 * hidden * hidden), "0.9 x hidden_size^2, the Trainer's rule");
    knob({"stage3_param_persistence_threshold", "param_persistence_threshold"},
        &ds.paramPersistenceThreshold, 10 * hidden, "10 x hidden_size, the Trainer's rule");
    knob({"stage3_max_live_parameters", "max_live_parameters"}, &ds.maxLiveParameters, 1e9,
        "DeepSpeed's default");
    knob({"sub_group_size"}, &ds.subGroupSize, 1e9, "DeepSpeed's default");
    if (const Value v = numberAt(zero, "mics_shard_size", path, z);
        v.present && !v.isAuto && v.v > 0) {
        if (ds.stage != 3)
            fail(path,
                "zero_optimization.mics_shard_size needs stage 3 (MiCS shards within "
                "groups of ranks under ZeRO-3)");
        ds.micsShardSize = static_cast<int64_t>(v.v);
        if (W % ds.micsShardSize != 0)
            fail(path,
                "zero_optimization.mics_shard_size " + std::to_string(ds.micsShardSize)
                    + " does not divide " + world + ": pick a divisor");
    }
    // Keys read and not counted where they would change the peak, said rather than dropped.
    auto notModelled = [&](const char* key, const std::string& why) {
        if (zero.contains(key))
            out.notModelled.push_back(z + key + " = " + zero[key].dump() + ": " + why);
    };
    if (ds.stage < 3) {
        for (const char* k :
            {"stage3_prefetch_bucket_size", "prefetch_bucket_size", "stage3_max_live_parameters",
                "max_live_parameters", "sub_group_size", "stage3_param_persistence_threshold",
                "param_persistence_threshold", "stage3_max_reuse_distance", "max_reuse_distance"})
            notModelled(k, "a stage-3 knob; the config has stage " + std::to_string(ds.stage));
    } else {
        notModelled("stage3_max_reuse_distance",
            "changes how often parameters are re-gathered, "
            "not the peak (bounded by max_live_parameters)");
        notModelled("max_reuse_distance",
            "changes how often parameters are re-gathered, not "
            "the peak (bounded by max_live_parameters)");
        notModelled("stage3_model_persistence_threshold", "not modelled");
        notModelled("model_persistence_threshold", "not modelled");
        notModelled("allgather_bucket_size", "stages 1 and 2 only");
    }
    notModelled(
        "zero_hpz_partition_size", "ZeRO++ secondary parameter partitions are not modelled");
    notModelled(
        "zero_quantized_weights", "ZeRO++ quantised all-gathers change traffic, not the peak");
    notModelled("zero_quantized_gradients",
        "ZeRO++ quantised reduce-scatter changes traffic, not the peak");
    notModelled("round_robin_gradients", "changes the order of reductions, not the peak");
    notModelled("reduce_scatter", "all-reduce instead of reduce-scatter is not modelled");
    notModelled("memory_efficient_linear", "not modelled");
    if (zero.contains("offload_optimizer") && zero["offload_optimizer"].is_object()
        && zero["offload_optimizer"].contains("ratio"))
        out.notModelled.push_back(z
            + "offload_optimizer.ratio: partial offload is not "
              "modelled; planned as a full offload");
    if (j.contains("activation_checkpointing"))
        out.notModelled.push_back("activation_checkpointing: DeepSpeed's checkpointing of "
                                  "Megatron-style models; the Trainer's --gradient_checkpointing "
                                  "is --checkpointing here ("
            + toString(ctx.base.checkpointing) + ")");
    if (j.contains("optimizer") && j["optimizer"].is_object()) {
        const json& o = j["optimizer"];
        const std::string type = o.value("type", std::string("AdamW"));
        std::string lower = type;
        std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
        if (lower.rfind("adam", 0) != 0 && lower.rfind("fusedadam", 0) != 0
            && lower.rfind("cpuadam", 0) != 0)
            out.notModelled.push_back("optimizer.type " + type
                + ": planned as AdamW (8 bytes "
                  "of state a parameter)");
        if (o.contains("params") && o["params"].is_object())
            for (const auto& [k, v] : o["params"].items())
                if (v.is_string() && v.get<std::string>() == "auto")
                    out.resolved.push_back({"optimizer.params." + k,
                        "the Trainer's --" + (k == "lr" ? std::string("learning_rate") : k)
                            + " (does not change memory)"});
    }

    in.strategy = strategyOfStage(ds.stage);
    in.shardGroup = 0;
    if (ds.micsShardSize > 0 && ds.micsShardSize < W) {
        in.strategy = Strategy::Hybrid;
        in.shardGroup = ds.micsShardSize;
    }
    in.offload = ds.offloadParams && ds.offloadOptimizer ? Offload::ParamsAndOptimizer
        : ds.offloadOptimizer                            ? Offload::Optimizer
                                                         : Offload::None;
    if (ds.offloadParams && !ds.offloadOptimizer)
        out.warnings.push_back("offload_param without offload_optimizer: DeepSpeed's accounting "
                               "counts it; Shard Studio's engine has no such mode");
    if (in.usesLora())
        fail(path,
            "--method " + toString(in.method)
                + ": DeepSpeed's accounting here plans full "
                  "fine-tuning; plan LoRA with Shard Studio's engine (without --deepspeed)");
    out.deepspeed = ds;
    out.input = in;
    return out;
}

ImportedConfig readDeepSpeedConfig(const std::string& path, const ConfigContext& ctx)
{
    return parseDeepSpeedConfig(readText(path, "DeepSpeed config"), path, ctx);
}

// --- DeepSpeed's accounting ------------------------------------------------------------------

PlanResult planDeepSpeed(const PlanInput& in, const DeepSpeedSettings& ds)
{
    if (in.usesLora())
        throw std::runtime_error("DeepSpeed's accounting plans full fine-tuning; plan LoRA with "
                                 "Shard Studio's engine");
    PlanInput base = in;
    base.mode = AccountingMode::ZeroPaper; // the model's activations and logits
    base.offload = Offload::None;
    base.method = Method::Full;
    PlanResult r = plan(base);
    r.input = in;

    const Shapes s = shapesOf(in.model);
    const double P = static_cast<double>(s.params);
    const int64_t W = in.worldSize();
    const int64_t N
        = ds.stage == 0 ? 1 : (ds.stage == 3 && ds.micsShardSize > 0 ? ds.micsShardSize : W);
    const bool mixed = in.precision != Precision::Fp32;
    const double h = mixed ? 2.0 : 4.0; // the 16-bit (or fp32) training copy
    const double part = P / static_cast<double>(N);

    MemoryBreakdown m;
    double host = 0;
    // Optimizer side: fp32 master (mixed only), AdamW m and v, the master's fp32 gradient
    // (stage 3 builds it one sub group at a time).
    const double master = mixed ? 4.0 * part : 0.0;
    const double adam = 8.0 * part;
    // A sub group holds at least one parameter's partition (sub_group_size 0: one each).
    const double subGroup
        = std::max(ds.subGroupSize, static_cast<double>(s.largestTensor) / static_cast<double>(N));
    const double fp32Grads = mixed ? 4.0 * (ds.stage == 3 ? std::min(part, subGroup) : part) : 0.0;
    if (ds.offloadOptimizer) {
        host += master + adam + (mixed ? 4.0 * part : 0.0);
    } else {
        m.shardedParams += toBytes(master);
        m.optimizer = toBytes(adam);
        m.grads += toBytes(fp32Grads);
    }
    // Training copy and its gradients.
    const double bucketCap = P;
    if (ds.stage < 3) {
        m.shardedParams += toBytes(h * P);
        if (ds.stage <= 1 && !ds.offloadOptimizer)
            m.grads += toBytes(h * P);
        else if (!ds.offloadOptimizer)
            m.grads += toBytes(h * part);
        if (ds.stage >= 1) // one parameter's gradient before it is copied into the bucket
            m.grads += toBytes(h * static_cast<double>(s.largestTensor));
        const double buckets = h
            * (std::min(ds.reduceBucketSize, bucketCap)
                + (ds.stage >= 1 ? std::min(ds.allgatherBucketSize, bucketCap) : 0.0));
        // "overlap_comm uses 4.5x the allgather_bucket_size and reduce_bucket_size values".
        m.commBuffers = toBytes(buckets * (ds.overlapComm && ds.stage >= 1 ? 4.5 : 1.0));
    } else {
        if (ds.offloadParams)
            host += h * part;
        else
            m.shardedParams += toBytes(h * part);
        if (!ds.offloadOptimizer)
            m.grads += toBytes(h * part);
        m.grads += toBytes(h * static_cast<double>(s.largestTensor));
        double persistent = 0;
        for (int64_t n : s.tensorSizes)
            if (static_cast<double>(n) <= ds.paramPersistenceThreshold)
                persistent += static_cast<double>(n);
        const double live = std::min(
            ds.maxLiveParameters, static_cast<double>(s.largestBlock) + ds.prefetchBucketSize);
        m.gatheredParams
            = toBytes(h * (std::max(static_cast<double>(s.largestTensor), live) + persistent));
        m.commBuffers
            = toBytes(h * std::min(ds.reduceBucketSize, bucketCap) * (ds.overlapComm ? 2.0 : 1.0));
    }
    m.activations = r.perDevice.activations;
    m.logits = r.perDevice.logits;
    const bool gpu = in.device.kind == DeviceKind::Gpu;
    const Calibration& k = in.calibration;
    const double fixed = in.device.overheadBytes >= 0
        ? static_cast<double>(in.device.overheadBytes)
        : (gpu ? k.gpuOverheadBytes : k.cpuOverheadBytes);
    const double frag = gpu ? k.gpuFragmentation : k.cpuFragmentation;
    m.overhead = toBytes(fixed + frag * static_cast<double>(m.total()));
    r.perDevice = m;
    r.peakPhase = "backward (DeepSpeed's accounting)";
    r.shardDegree = N;
    r.replicas = W / N;
    r.hostBytesPerDevice = toBytes(host);
    r.capacityBytes = gpu ? in.device.memoryBytes : in.device.memoryBytes / in.gpusPerNode;
    r.headroomBytes = r.capacityBytes - m.total();
    r.fits = r.headroomBytes >= 0;
    r.notes.clear();
    if (in.device.hostMemoryBytes > 0
        && r.hostBytesPerDevice * in.gpusPerNode > in.device.hostMemoryBytes) {
        r.fits = false;
        r.notes.push_back("offloaded state (" + formatGiB(r.hostBytesPerDevice * in.gpusPerNode)
            + " per node) exceeds the host memory (" + formatGiB(in.device.hostMemoryBytes) + ")");
    }
    return r;
}

DeepSpeedEstimate deepSpeedEstimator(const PlanInput& in, const DeepSpeedSettings& ds)
{
    const Shapes s = shapesOf(in.model);
    const double P = static_cast<double>(s.params);
    const double gpus = static_cast<double>(in.worldSize());
    const double perNode = static_cast<double>(in.gpusPerNode);
    const double nodes = static_cast<double>(in.nodes);
    const double buffer = 1.5; // additional_buffer_factor
    DeepSpeedEstimate e;
    e.largestLayerParams = s.largestTensor;
    const double largest = static_cast<double>(s.largestTensor);
    double gpu = 0, cpu = 0;
    if (ds.stage == 0) {
        gpu = 16.0 * P;
    } else if (ds.stage < 3) {
        if (ds.offloadOptimizer) {
            gpu = 2.0 * P;
            cpu = P * std::max(4.0 * gpus, 16.0) * buffer;
        } else {
            gpu = 4.0 * P + std::floor(16.0 * P / gpus);
            cpu = P * 4.0 * perNode * buffer;
        }
    } else {
        // zero_init = 1 (the Trainer builds ZeRO-3 models under deepspeed.zero.Init).
        const double gpusFactor = 1.0 / nodes;
        const double largestMemory = 4.0 * largest;
        if (ds.offloadOptimizer && ds.offloadParams) {
            gpu = largestMemory;
            cpu = P * 18.0 * gpusFactor * buffer;
        } else if (ds.offloadOptimizer) {
            gpu = largestMemory + std::floor(2.0 * P / gpus);
            cpu = P * 16.0 * gpusFactor * buffer;
        } else {
            gpu = largestMemory + std::floor(18.0 * P / gpus);
            cpu = largest * 4.0 * perNode * buffer;
        }
    }
    e.gpuBytes = toBytes(gpu);
    e.cpuBytesPerNode = toBytes(cpu);
    return e;
}

// --- accelerate ------------------------------------------------------------------------------

namespace {

std::string scalar(const YAML::Node& n)
{
    if (!n || n.IsNull())
        return {};
    if (!n.IsScalar())
        return "<not a scalar>";
    return n.as<std::string>();
}

bool yamlBool(const YAML::Node& n, const std::string& key, const std::string& path, bool dflt)
{
    const YAML::Node v = n[key];
    if (!v || v.IsNull())
        return dflt;
    std::string t = scalar(v);
    std::transform(t.begin(), t.end(), t.begin(), ::tolower);
    if (t == "true" || t == "yes")
        return true;
    if (t == "false" || t == "no")
        return false;
    fail(path, key + " is '" + scalar(v) + "'; it must be true or false");
}

int64_t yamlCount(const YAML::Node& n, const std::string& key, const std::string& path)
{
    const std::string t = scalar(n[key]);
    char* end = nullptr;
    const long long v = std::strtoll(t.c_str(), &end, 10);
    if (t.empty() || *end != '\0' || v < 1)
        fail(path, key + " is '" + t + "'; it must be a positive integer");
    return v;
}

const std::set<std::string>& accelerateTopKeys()
{
    static const std::set<std::string> k = {"compute_environment", "debug", "distributed_type",
        "downcast_bf16", "enable_cpu_affinity", "fsdp_config", "deepspeed_config",
        "megatron_lm_config", "machine_rank", "main_training_function", "mixed_precision",
        "num_machines", "num_processes", "rdzv_backend", "same_network", "tpu_env",
        "tpu_use_cluster", "tpu_use_sudo", "use_cpu", "main_process_ip", "main_process_port",
        "gpu_ids", "dynamo_config", "ipex_config", "mpirun_config", "commands", "command_file",
        "tpu_name", "tpu_zone", "fp8_config", "parallelism_config", "dynamo_backend", "tpu_vm",
        "mixed_precision_type", "zero3_init_flag"};
    return k;
}

} // namespace

ImportedConfig readAccelerateConfig(const std::string& path, const ConfigContext& ctx)
{
    YAML::Node root;
    try {
        root = YAML::LoadFile(path);
    } catch (const YAML::BadFile&) {
        throw std::runtime_error(path + ": cannot open the accelerate config");
    } catch (const YAML::Exception& e) {
        fail(path, "not valid YAML at line " + std::to_string(e.mark.line + 1) + ": " + e.msg);
    }
    if (!root.IsMap())
        fail(path,
            "an accelerate config is a YAML mapping (key: value lines), as `accelerate "
            "config` writes it");
    ImportedConfig out;
    out.kind = EngineConfigKind::Accelerate;
    out.path = path;
    PlanInput in = ctx.base;
    for (const auto& kv : root) {
        const std::string k = kv.first.as<std::string>();
        if (!accelerateTopKeys().count(k))
            out.warnings.push_back(k
                + ": not an accelerate config key this planner knows "
                  "(accelerate refuses keys it does not know: check the "
                  "spelling)");
    }
    std::string type = scalar(root["distributed_type"]);
    if (type.empty())
        type = "NO";
    const bool useCpu = yamlBool(root, "use_cpu", path, false);
    if (useCpu)
        in.device = DeviceSpec::cpu(physicalMemoryBytes());

    // Processes: num_processes in all, over num_machines.
    int64_t procs = root["num_processes"] ? yamlCount(root, "num_processes", path) : 1;
    const int64_t machines = root["num_machines"] ? yamlCount(root, "num_machines", path) : 1;
    if (type == "NO")
        procs = 1;
    if (procs % machines != 0)
        fail(path,
            "num_processes " + std::to_string(procs) + " does not split over num_machines "
                + std::to_string(machines) + ": make it a multiple");
    if (ctx.gpusGiven && ctx.base.worldSize() != procs)
        fail(path,
            "--gpus / --nodes give " + std::to_string(ctx.base.worldSize())
                + " processes but num_processes is " + std::to_string(procs)
                + "; drop --gpus / --nodes or change num_processes");
    in.nodes = machines;
    in.gpusPerNode = procs / machines;

    // Mixed precision.
    std::string mp = scalar(root["mixed_precision"]);
    if (mp.empty())
        mp = "no";
    if (mp == "no")
        in.precision = Precision::Fp32;
    else if (mp == "bf16")
        in.precision = Precision::Bf16Mixed;
    else if (mp == "fp16")
        in.precision = Precision::Fp16Mixed;
    else
        fail(path,
            "mixed_precision '" + mp
                + "' is not planned (the planner knows no, bf16 and "
                  "fp16): plan with bf16");
    if (ctx.precisionGiven && ctx.base.precision != in.precision)
        fail(path,
            "--precision " + toString(ctx.base.precision) + " contradicts mixed_precision '" + mp
                + "'; drop --precision or change the config");
    in.checkpointing = ctx.base.checkpointing;

    if (type == "NO" || type == "MULTI_GPU" || type == "MULTI_CPU") {
        in.strategy = Strategy::Ddp;
        in.offload = Offload::None;
        if (type == "MULTI_CPU" && !useCpu)
            in.device = DeviceSpec::cpu(physicalMemoryBytes());
        if (type == "NO")
            out.resolved.push_back({"distributed_type", "NO: one process"});
    } else if (type == "FSDP") {
        const YAML::Node f = root["fsdp_config"];
        if (f && !f.IsMap())
            fail(path, "fsdp_config must be a mapping of fsdp_* keys");
        const std::string version = f ? scalar(f["fsdp_version"]) : std::string();
        std::string strategy = f ? scalar(f["fsdp_sharding_strategy"]) : std::string();
        if (version == "2") {
            // FSDP2: resharding after forward is ZeRO-3, without it ZeRO-2.
            const bool reshard = f ? yamlBool(f, "fsdp_reshard_after_forward", path, true) : true;
            strategy = reshard ? "FULL_SHARD" : "SHARD_GRAD_OP";
        }
        if (strategy.empty())
            strategy = "FULL_SHARD";
        // accelerate also takes the enum's numbers (1 FULL_SHARD ... 5 HYBRID_SHARD_ZERO2).
        static const std::map<std::string, std::string> numbers
            = {{"1", "FULL_SHARD"}, {"2", "SHARD_GRAD_OP"}, {"3", "NO_SHARD"},
                {"4", "HYBRID_SHARD"}, {"5", "HYBRID_SHARD_ZERO2"}};
        if (numbers.count(strategy))
            strategy = numbers.at(strategy);
        if (strategy == "FULL_SHARD")
            in.strategy = Strategy::Zero3;
        else if (strategy == "SHARD_GRAD_OP")
            in.strategy = Strategy::Zero2;
        else if (strategy == "NO_SHARD")
            in.strategy = Strategy::Ddp;
        else if (strategy == "HYBRID_SHARD" || strategy == "HYBRID_SHARD_ZERO2") {
            in.strategy = in.nodes > 1 ? Strategy::Hybrid : Strategy::Zero3;
            in.shardGroup = in.nodes > 1 ? in.gpusPerNode : 0;
            if (strategy == "HYBRID_SHARD_ZERO2")
                out.notModelled.push_back("fsdp_sharding_strategy HYBRID_SHARD_ZERO2: planned "
                                          "as HYBRID_SHARD (ZeRO-3 inside a node), which holds "
                                          "fewer gathered parameters");
            if (in.nodes == 1)
                out.resolved.push_back({"fsdp_sharding_strategy",
                    strategy + " on one machine: shards over its " + std::to_string(procs)
                        + " processes, as FULL_SHARD"});
        } else {
            fail(path,
                "fsdp_sharding_strategy '" + strategy
                    + "' is not one of FULL_SHARD, "
                      "SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2");
        }
        const bool offload = f ? yamlBool(f, "fsdp_offload_params", path, false) : false;
        in.offload = offload ? Offload::ParamsAndOptimizer : Offload::None;
        if (f && f["fsdp_activation_checkpointing"]) {
            const bool ac = yamlBool(f, "fsdp_activation_checkpointing", path, false);
            const Checkpointing c = ac ? Checkpointing::Full : Checkpointing::None;
            if (ctx.checkpointingGiven && c != ctx.base.checkpointing)
                fail(path,
                    "--checkpointing " + toString(ctx.base.checkpointing)
                        + " contradicts fsdp_activation_checkpointing: drop one");
            in.checkpointing = c;
        }
        // FSDP1 reduces in the parameter dtype under accelerate's mixed precision.
        in.bf16Reduce = in.precision == Precision::Bf16Mixed;
        if (in.bf16Reduce)
            out.resolved.push_back({"reduce dtype",
                "bf16 (accelerate's FSDP mixed precision "
                "reduces in the parameter dtype)"});
        if (f) {
            const std::string wrap = scalar(f["fsdp_auto_wrap_policy"]);
            if (wrap == "NO_WRAP" || wrap == "SIZE_BASED_WRAP")
                out.notModelled.push_back("fsdp_auto_wrap_policy " + wrap
                    + ": planned with one "
                      "FSDP unit per transformer block (TRANSFORMER_BASED_WRAP)");
            if (scalar(f["fsdp_backward_prefetch"]) == "BACKWARD_PRE")
                out.notModelled.push_back("fsdp_backward_prefetch BACKWARD_PRE: the next "
                                          "unit's all-gather during backward is counted as this "
                                          "engine's prefetch");
            for (const char* key : {"fsdp_forward_prefetch", "fsdp_state_dict_type",
                     "fsdp_use_orig_params", "fsdp_cpu_ram_efficient_loading",
                     "fsdp_sync_module_states", "fsdp_transformer_layer_cls_to_wrap"})
                if (f[key])
                    out.notModelled.push_back(std::string(key) + " = " + scalar(f[key])
                        + ": does not change the memory of a training step");
        }
    } else if (type == "DEEPSPEED") {
        const YAML::Node d = root["deepspeed_config"];
        if (!d || !d.IsMap())
            fail(path, "distributed_type DEEPSPEED needs a deepspeed_config mapping");
        const std::string file = scalar(d["deepspeed_config_file"]);
        if (!file.empty() && file != "none") {
            std::string full = file;
            if (full[0] != '/') {
                const auto slash = path.find_last_of('/');
                full = (slash == std::string::npos ? std::string() : path.substr(0, slash + 1))
                    + file;
            }
            ConfigContext inner = ctx;
            inner.base = in;
            inner.gpusGiven = true;
            ImportedConfig ds = readDeepSpeedConfig(full, inner);
            ds.kind = EngineConfigKind::Accelerate;
            ds.path = path;
            ds.warnings.insert(ds.warnings.begin(), out.warnings.begin(), out.warnings.end());
            ds.resolved.insert(ds.resolved.begin(), {"deepspeed_config_file", full});
            return ds;
        }
        // accelerate's inline DeepSpeed settings.
        json cfg;
        const std::string stage = d["zero_stage"] ? scalar(d["zero_stage"]) : "2";
        if (stage.size() != 1 || stage[0] < '0' || stage[0] > '3')
            fail(path, "deepspeed_config.zero_stage is '" + stage + "'; it must be 0, 1, 2 or 3");
        cfg["zero_optimization"]["stage"] = stage[0] - '0';
        for (const char* key : {"offload_optimizer_device", "offload_param_device"}) {
            const std::string dev = scalar(d[key]);
            if (!dev.empty() && dev != "none")
                cfg["zero_optimization"]
                   [std::string(key) == "offload_optimizer_device" ? "offload_optimizer"
                                                                   : "offload_param"]["device"]
                    = dev;
        }
        cfg["train_micro_batch_size_per_gpu"] = "auto";
        cfg["gradient_accumulation_steps"] = d["gradient_accumulation_steps"]
            ? json(yamlCount(d, "gradient_accumulation_steps", path))
            : json("auto");
        cfg["train_batch_size"] = "auto";
        if (mp == "bf16")
            cfg["bf16"]["enabled"] = true;
        else if (mp == "fp16")
            cfg["fp16"]["enabled"] = true;
        ConfigContext inner = ctx;
        inner.base = in;
        inner.gpusGiven = true;
        inner.precisionGiven = false;
        ImportedConfig ds = parseDeepSpeedConfig(cfg.dump(), path, inner);
        ds.kind = EngineConfigKind::Accelerate;
        ds.warnings.insert(ds.warnings.begin(), out.warnings.begin(), out.warnings.end());
        return ds;
    } else {
        fail(path,
            "distributed_type " + type
                + " is not planned (the planner plans NO, "
                  "MULTI_GPU, MULTI_CPU, FSDP and DEEPSPEED)");
    }
    if (in.usesLora() && in.strategy == Strategy::Ddp && in.worldSize() == 1)
        out.notModelled.push_back("LoRA under accelerate: planned as Shard Studio's LoRA");
    validate(in);
    out.input = in;
    return out;
}

// --- torchtitan ------------------------------------------------------------------------------

namespace {

// torchtitan's (name, flavor) of the presets the planner has.
// torchtitan's (name, flavor) of the presets the planner has, one table read both ways.
const std::vector<std::pair<std::pair<std::string, std::string>, std::string>>& torchtitanPresets()
{
    static const std::vector<std::pair<std::pair<std::string, std::string>, std::string>> known
        = {{{"llama3", "8B"}, "llama-3.1-8b"}, {{"llama3", "70B"}, "llama-3.1-70b"},
            {{"llama3", "405B"}, "llama-3.1-405b"}, {{"llama2", "7B"}, "llama-2-7b"},
            {{"llama2", "13B"}, "llama-2-13b"}, {{"llama2", "70B"}, "llama-2-70b"}};
    return known;
}

std::string presetOfTorchtitan(const std::string& name, const std::string& flavor)
{
    for (const auto& [titan, preset] : torchtitanPresets())
        if (titan == std::make_pair(name, flavor))
            return preset;
    return {};
}

std::pair<std::string, std::string> torchtitanOfPreset(const std::string& preset)
{
    for (const auto& [titan, known] : torchtitanPresets())
        if (known == preset)
            return titan;
    return {};
}

} // namespace

namespace {

// A torchtitan TOML's tables; throws "PATH: cannot open ..." or "PATH: not valid TOML at line L,
// column C: ...".
toml::table parseTorchtitanToml(const std::string& path)
{
    try {
        return toml::parse_file(path);
    } catch (const toml::parse_error& e) {
        const auto& where = e.source().begin;
        if (std::string(e.description()).find("File could not be opened") != std::string::npos)
            throw std::runtime_error(path + ": cannot open the torchtitan config");
        fail(path,
            "not valid TOML at line " + std::to_string(where.line) + ", column "
                + std::to_string(where.column) + ": " + std::string(e.description()));
    }
}

} // namespace

std::optional<nlohmann::json> torchtitanConfigJson(const std::string& path)
{
    const toml::table t = parseTorchtitanToml(path);
    if (!t.contains("job") && !t.contains("model") && !t.contains("training")
        && !t.contains("parallelism"))
        return std::nullopt;
    std::ostringstream text;
    text << toml::json_formatter {t};
    return nlohmann::json::parse(text.str());
}

ImportedConfig readTorchtitanConfig(const std::string& path, const ConfigContext& ctx)
{
    const toml::table t = parseTorchtitanToml(path);
    ImportedConfig out;
    out.kind = EngineConfigKind::Torchtitan;
    out.path = path;
    PlanInput in = ctx.base;

    auto integer = [&](const char* section, const char* key, int64_t dflt) -> int64_t {
        const toml::node* n = t[section][key].node();
        if (!n)
            return dflt;
        if (auto v = n->value<int64_t>())
            return *v;
        fail(path, std::string("[") + section + "] " + key + " must be an integer");
    };
    auto text = [&](const char* section, const char* key, const std::string& dflt) {
        const toml::node* n = t[section][key].node();
        if (!n)
            return dflt;
        if (auto v = n->value<std::string>())
            return *v;
        fail(path, std::string("[") + section + "] " + key + " must be a string");
    };
    auto flag = [&](const char* section, const char* key, bool dflt) {
        const toml::node* n = t[section][key].node();
        if (!n)
            return dflt;
        if (auto v = n->value<bool>())
            return *v;
        fail(path, std::string("[") + section + "] " + key + " must be true or false");
    };

    // Model.
    const std::string name = text("model", "name", "");
    const std::string flavor = text("model", "flavor", "");
    if (!ctx.modelGiven) {
        const std::string preset = presetOfTorchtitan(name, flavor);
        if (preset.empty())
            fail(path,
                "[model] name \"" + name + "\" flavor \"" + flavor
                    + "\" is not a preset "
                      "the planner has: pass --model (a preset or a folder with config.json)");
        in.model = resolveModel(preset);
        out.resolved.push_back({"[model]", name + " " + flavor + " = preset " + preset});
    }

    // Parallelism.
    const int64_t rep = integer("parallelism", "data_parallel_replicate_degree", 1);
    int64_t shard = integer("parallelism", "data_parallel_shard_degree", -1);
    const int64_t tp = integer("parallelism", "tensor_parallel_degree", 1);
    const int64_t pp = integer("parallelism", "pipeline_parallel_degree", 1);
    const int64_t cp = integer("parallelism", "context_parallel_degree", 1);
    const int64_t ep = integer("parallelism", "expert_parallel_degree", 1);
    if (cp != 1)
        fail(path,
            "[parallelism] context_parallel_degree is " + std::to_string(cp)
                + ": the planner does not model context parallelism; plan the layout with it "
                  "set to 1");
    if (tp < 1 || pp < 1)
        fail(
            path, "[parallelism] tensor_parallel_degree and pipeline_parallel_degree must be >= 1");
    if (in.worldSize() % (tp * pp) != 0)
        fail(path,
            "tensor_parallel_degree " + std::to_string(tp) + " x pipeline_parallel_degree "
                + std::to_string(pp) + " does not divide the " + std::to_string(in.worldSize())
                + " GPUs of --gpus / --nodes: change them or the degrees");
    in.tp = tp;
    in.pp = pp;
    if (tp * pp > 1) {
        // Tensor and pipeline layouts are planned in the paper's accounting (Megatron-LM,
        // torchtitan), whatever --mode said.
        if (in.mode != AccountingMode::ZeroPaper)
            out.resolved.push_back({"accounting",
                "zero-paper (tensor parallel " + std::to_string(tp) + ", pipeline "
                    + std::to_string(pp) + " stages: planned as Megatron-LM / torchtitan run "
                    + "them)"});
        in.mode = AccountingMode::ZeroPaper;
        const std::string schedule = text("parallelism", "pipeline_parallel_schedule", "1F1B");
        if (pp > 1 && schedule != "1F1B")
            out.notModelled.push_back("[parallelism] pipeline_parallel_schedule \"" + schedule
                + "\": planned as 1F1B (its bubble and in-flight micro-batches)");
    }
    // The data-parallel GPUs: the rest once tensor and pipeline parallelism take theirs.
    const int64_t W = in.worldSize() / (tp * pp);
    if (rep < 1 || (shard < 1 && shard != -1))
        fail(path,
            "[parallelism] data_parallel_replicate_degree must be >= 1 and "
            "data_parallel_shard_degree >= 1 or -1 (the rest of the GPUs)");
    if (shard == -1) {
        if (W % rep != 0)
            fail(path,
                "data_parallel_replicate_degree " + std::to_string(rep) + " does not divide "
                    + std::to_string(W) + " GPUs: change it or --gpus / --nodes");
        shard = W / rep;
        out.resolved.push_back({"[parallelism] data_parallel_shard_degree",
            std::to_string(shard) + " (-1: the " + std::to_string(W) + " GPUs / replicate degree "
                + std::to_string(rep) + ")"});
    } else if (rep * shard != W) {
        fail(path,
            "data_parallel_replicate_degree " + std::to_string(rep)
                + " x "
                  "data_parallel_shard_degree "
                + std::to_string(shard) + " = " + std::to_string(rep * shard) + " is not the "
                + std::to_string(W) + " GPUs of --gpus / --nodes: make them agree");
    }
    if (ep > 1)
        out.notModelled.push_back("[parallelism] expert_parallel_degree " + std::to_string(ep)
            + ": experts are split over the data-parallel shard ranks, so model states per GPU "
              "are planned as FSDP over them; all-to-all token buffers are not modelled");
    std::string reshard = text("parallelism", "fsdp_reshard_after_forward", "default");
    if (shard == 1)
        in.strategy = Strategy::Ddp;
    else if (reshard == "never")
        in.strategy = rep > 1 ? Strategy::Hybrid : Strategy::Zero2;
    else
        in.strategy = rep > 1 ? Strategy::Hybrid : Strategy::Zero3;
    if (in.strategy == Strategy::Hybrid) {
        in.shardGroup = shard;
        if (reshard == "never")
            out.notModelled.push_back("fsdp_reshard_after_forward = \"never\" with replicas: "
                                      "planned as hybrid ZeRO-3 inside each shard group");
    }
    if (reshard != "default" && reshard != "always" && reshard != "never")
        fail(path,
            "[parallelism] fsdp_reshard_after_forward \"" + reshard
                + "\" is not default, always or never");

    // Training.
    const int64_t local = t["training"]["local_batch_size"]
        ? integer("training", "local_batch_size", 8)
        : integer("training", "batch_size", 8);
    if (ctx.microBatchGiven && local != ctx.base.microBatch)
        fail(path,
            "--micro-batch " + std::to_string(ctx.base.microBatch)
                + " contradicts [training] local_batch_size " + std::to_string(local));
    in.microBatch = local;
    in.seqLen = integer("training", "seq_len", 2048);
    // torchtitan's tensor parallel shards the norms and the residual stream along the sequence
    // (SequenceParallel): planned so where the planner can.
    in.sequenceParallel = in.tp > 1 && whyNoSequenceParallel(in.model, in.tp, in.seqLen).empty();
    if (in.sequenceParallel)
        out.resolved.push_back({"sequence parallel",
            "on (torchtitan's tensor parallel shards the norms along the sequence)"});
    const int64_t global = integer("training", "global_batch_size", -1);
    const int64_t dp = rep * shard;
    if (global > 0) {
        if (global % (local * dp) != 0)
            fail(path,
                "[training] global_batch_size " + std::to_string(global)
                    + " is not a multiple of local_batch_size x data-parallel degree ("
                    + std::to_string(local * dp) + ")");
        in.gradAccum = global / (local * dp);
        out.resolved.push_back({"gradient accumulation",
            std::to_string(in.gradAccum) + " (global_batch_size / (local_batch_size x "
                + std::to_string(dp) + "))"});
    } else {
        in.gradAccum = 1;
    }
    const std::string param = text("training", "mixed_precision_param", "bfloat16");
    const std::string reduce = text("training", "mixed_precision_reduce", "float32");
    if (param == "bfloat16")
        in.precision = Precision::Bf16Mixed;
    else if (param == "float32")
        in.precision = Precision::Fp32;
    else
        fail(path, "[training] mixed_precision_param \"" + param + "\" is not bfloat16 or float32");
    if (reduce != "float32" && reduce != "bfloat16")
        fail(path,
            "[training] mixed_precision_reduce \"" + reduce + "\" is not float32 or bfloat16");
    in.bf16Reduce = in.precision == Precision::Bf16Mixed && reduce == "bfloat16";
    if (!t["training"]["mixed_precision_param"])
        out.resolved.push_back(
            {"[training] mixed_precision_param", "bfloat16 (torchtitan's default)"});
    in.offload = flag("training", "enable_cpu_offload", false) ? Offload::ParamsAndOptimizer
                                                               : Offload::None;

    // Activation checkpointing: none, full, selective (planned as none: an upper bound).
    const std::string ac = text("activation_checkpoint", "mode", "selective");
    if (ac == "full")
        in.checkpointing = Checkpointing::Full;
    else if (ac == "none")
        in.checkpointing = Checkpointing::None;
    else if (ac == "selective") {
        in.checkpointing = Checkpointing::None;
        out.notModelled.push_back("[activation_checkpoint] mode \"selective\" ("
            + text("activation_checkpoint", "selective_ac_option", "2")
            + "): planned as no checkpointing, an upper bound on activations");
    } else {
        fail(path, "[activation_checkpoint] mode \"" + ac + "\" is not none, selective or full");
    }
    if (flag("compile", "enable", false))
        out.notModelled.push_back("[compile] enable: torch.compile's fused kernels are not "
                                  "modelled (activations may be smaller)");
    if (t["quantize"].as_table())
        out.notModelled.push_back("[quantize]: float8 training is not modelled");
    if (t["float8"].as_table())
        out.notModelled.push_back("[float8]: float8 training is not modelled");
    const std::string opt = text("optimizer", "name", "AdamW");
    if (opt != "AdamW" && opt != "Adam")
        out.notModelled.push_back("[optimizer] name " + opt + ": planned as AdamW");
    if (in.model.maxPositionEmbeddings > 0 && in.seqLen > in.model.maxPositionEmbeddings)
        out.warnings.push_back("[training] seq_len " + std::to_string(in.seqLen)
            + " exceeds the model's max_position_embeddings");
    validate(in);
    out.input = in;
    return out;
}

ImportedConfig readEngineConfig(
    EngineConfigKind kind, const std::string& path, const ConfigContext& ctx)
{
    switch (kind) {
    case EngineConfigKind::DeepSpeed:
        return readDeepSpeedConfig(path, ctx);
    case EngineConfigKind::Accelerate:
        return readAccelerateConfig(path, ctx);
    case EngineConfigKind::Torchtitan:
        return readTorchtitanConfig(path, ctx);
    }
    throw std::runtime_error("unknown config kind");
}

// --- Exports ---------------------------------------------------------------------------------

namespace {

void commonNotes(const PlanInput& in, std::vector<std::string>& notes, const std::string& target)
{
    if (in.usesLora())
        notes.push_back("--method " + toString(in.method) + " (rank " + std::to_string(in.loraRank)
            + ", targets " + in.loraTargets
            + "): LoRA is the training script's (PEFT), not "
              "the "
            + target + " config's");
    if (in.objective != "sft")
        notes.push_back("--objective " + in.objective + ": the training script's (TRL's "
            + (in.objective == "dpo" ? std::string("DPOTrainer") : std::string("ORPOTrainer"))
            + "), not the " + target + " config's");
    if (in.precision == Precision::Bf16)
        notes.push_back("pure bf16 (bf16 master weights and AdamW state) is not a " + target
            + " mode: written as bf16 mixed precision (fp32 master weights)");
    if (in.device.kind == DeviceKind::Cpu)
        notes.push_back("the plan is for CPU ranks; " + target + " configs describe GPU runs");
}

} // namespace

ExportedConfig writeDeepSpeedConfig(const PlanInput& in)
{
    ExportedConfig e;
    const DeepSpeedSettings ds = deepSpeedSettingsFor(in);
    json j;
    j["train_batch_size"] = in.microBatch * in.gradAccum * in.worldSize();
    j["train_micro_batch_size_per_gpu"] = in.microBatch;
    j["gradient_accumulation_steps"] = in.gradAccum;
    j["gradient_clipping"] = 1.0;
    if (in.precision == Precision::Bf16Mixed || in.precision == Precision::Bf16) {
        j["bf16"]["enabled"] = true;
        if (in.precision == Precision::Bf16Mixed && !in.bf16Reduce)
            j["communication_data_type"] = "fp32";
    } else if (in.precision == Precision::Fp16Mixed) {
        j["fp16"] = {{"enabled", true}, {"loss_scale", 0}, {"initial_scale_power", 16},
            {"loss_scale_window", 1000}, {"hysteresis", 2}, {"min_loss_scale", 1}};
    }
    json& z = j["zero_optimization"];
    z["stage"] = ds.stage;
    if (ds.stage >= 1) {
        z["overlap_comm"] = true;
        z["contiguous_gradients"] = true;
        z["reduce_bucket_size"] = static_cast<int64_t>(ds.reduceBucketSize);
    }
    if (ds.stage == 3) {
        z["stage3_prefetch_bucket_size"] = static_cast<int64_t>(ds.prefetchBucketSize);
        z["stage3_param_persistence_threshold"]
            = static_cast<int64_t>(ds.paramPersistenceThreshold);
        z["stage3_max_live_parameters"] = static_cast<int64_t>(ds.maxLiveParameters);
        z["stage3_max_reuse_distance"] = static_cast<int64_t>(1e9);
        z["sub_group_size"] = static_cast<int64_t>(ds.subGroupSize);
        z["stage3_gather_16bit_weights_on_model_save"] = true;
        if (ds.micsShardSize > 0)
            z["mics_shard_size"] = ds.micsShardSize;
    }
    if (ds.offloadOptimizer)
        z["offload_optimizer"] = {{"device", "cpu"}, {"pin_memory", true}};
    if (ds.offloadParams)
        z["offload_param"] = {{"device", "cpu"}, {"pin_memory", true}};
    j["steps_per_print"] = 10;
    j["wall_clock_breakdown"] = false;
    if (in.strategy == Strategy::Hybrid)
        e.notExpressed.push_back("hybrid sharding is written as ZeRO-3 with MiCS (mics_shard_size "
            + std::to_string(ds.micsShardSize) + "): shards inside groups, replicas across");
    if (in.offload == Offload::ParamsAndOptimizer && ds.stage < 3)
        e.notExpressed.push_back("offload params+optimizer under " + toString(in.strategy)
            + ": DeepSpeed offloads parameters only under ZeRO-3; written as offload_optimizer");
    if (ds.stage == 0 && in.offload != Offload::None)
        e.notExpressed.push_back("offload under ddp (ZeRO stage 0): DeepSpeed offloads from "
                                 "stage 1; not written");
    if (ds.stage == 0)
        j["zero_optimization"].erase("offload_optimizer");
    if (in.checkpointing == Checkpointing::Full)
        e.notExpressed.push_back("activation checkpointing is the training script's: pass "
                                 "--gradient_checkpointing to the Trainer");
    e.notExpressed.push_back("sequence length " + std::to_string(in.seqLen)
        + " is the training script's (e.g. --max_seq_length / --block_size)");
    commonNotes(in, e.notExpressed, "DeepSpeed");
    e.text = j.dump(2) + "\n";
    return e;
}

ExportedConfig writeAccelerateConfig(const PlanInput& in)
{
    ExportedConfig e;
    const bool deepspeed = in.strategy == Strategy::Zero1 || in.offload == Offload::Optimizer;
    YAML::Emitter y;
    y << YAML::BeginMap;
    y << YAML::Key << "compute_environment" << YAML::Value << "LOCAL_MACHINE";
    y << YAML::Key << "debug" << YAML::Value << false;
    std::string type = deepspeed       ? "DEEPSPEED"
        : in.strategy == Strategy::Ddp ? "MULTI_GPU"
                                       : "FSDP";
    if (type == "MULTI_GPU" && in.worldSize() == 1)
        type = "NO";
    y << YAML::Key << "distributed_type" << YAML::Value << type;
    y << YAML::Key << "downcast_bf16" << YAML::Value << YAML::DoubleQuoted << "no";
    if (deepspeed) {
        const DeepSpeedSettings ds = deepSpeedSettingsFor(in);
        y << YAML::Key << "deepspeed_config" << YAML::Value << YAML::BeginMap;
        y << YAML::Key << "gradient_accumulation_steps" << YAML::Value << in.gradAccum;
        y << YAML::Key << "gradient_clipping" << YAML::Value << 1.0;
        y << YAML::Key << "offload_optimizer_device" << YAML::Value
          << (ds.offloadOptimizer ? "cpu" : "none");
        y << YAML::Key << "offload_param_device" << YAML::Value
          << (ds.offloadParams ? "cpu" : "none");
        y << YAML::Key << "zero3_init_flag" << YAML::Value << (ds.stage == 3);
        y << YAML::Key << "zero_stage" << YAML::Value << ds.stage;
        y << YAML::EndMap;
        if (in.strategy == Strategy::Hybrid)
            e.notExpressed.push_back("hybrid sharding with optimizer-only offload: accelerate's "
                                     "inline DeepSpeed settings have no MiCS; written as ZeRO-3 "
                                     "over all GPUs (export the DeepSpeed config for MiCS)");
    } else if (type == "FSDP") {
        std::string strategy = in.strategy == Strategy::Zero2 ? "SHARD_GRAD_OP"
            : in.strategy == Strategy::Hybrid                 ? "HYBRID_SHARD"
                                                              : "FULL_SHARD";
        y << YAML::Key << "fsdp_config" << YAML::Value << YAML::BeginMap;
        y << YAML::Key << "fsdp_activation_checkpointing" << YAML::Value
          << (in.checkpointing == Checkpointing::Full);
        y << YAML::Key << "fsdp_auto_wrap_policy" << YAML::Value << "TRANSFORMER_BASED_WRAP";
        y << YAML::Key << "fsdp_backward_prefetch" << YAML::Value << "BACKWARD_PRE";
        y << YAML::Key << "fsdp_cpu_ram_efficient_loading" << YAML::Value << true;
        y << YAML::Key << "fsdp_forward_prefetch" << YAML::Value << false;
        y << YAML::Key << "fsdp_offload_params" << YAML::Value
          << (in.offload == Offload::ParamsAndOptimizer);
        y << YAML::Key << "fsdp_sharding_strategy" << YAML::Value << strategy;
        y << YAML::Key << "fsdp_state_dict_type" << YAML::Value << "SHARDED_STATE_DICT";
        y << YAML::Key << "fsdp_sync_module_states" << YAML::Value << true;
        y << YAML::Key << "fsdp_use_orig_params" << YAML::Value << true;
        y << YAML::EndMap;
        if (in.strategy == Strategy::Hybrid && in.shardGroup != in.gpusPerNode)
            e.notExpressed.push_back("shard group " + std::to_string(in.shardGroup)
                + ": HYBRID_SHARD shards inside each machine (" + std::to_string(in.gpusPerNode)
                + " GPUs)");
        if (in.bf16Reduce == false && in.precision == Precision::Bf16Mixed)
            e.notExpressed.push_back("fp32 gradient reduce: accelerate's FSDP mixed precision "
                                     "reduces in bf16");
    } else if (in.checkpointing == Checkpointing::Full) {
        e.notExpressed.push_back("activation checkpointing is the training script's under DDP: "
                                 "pass --gradient_checkpointing");
    }
    if (deepspeed && in.checkpointing == Checkpointing::Full)
        e.notExpressed.push_back("activation checkpointing is the training script's under "
                                 "DeepSpeed: pass --gradient_checkpointing");
    y << YAML::Key << "enable_cpu_affinity" << YAML::Value << false;
    y << YAML::Key << "machine_rank" << YAML::Value << 0;
    y << YAML::Key << "main_training_function" << YAML::Value << "main";
    const std::string mp = in.precision == Precision::Fp32 ? "no"
        : in.precision == Precision::Fp16Mixed             ? "fp16"
                                                           : "bf16";
    // Quoted: YAML 1.1 (PyYAML, which accelerate reads with) takes a bare `no` for false.
    y << YAML::Key << "mixed_precision" << YAML::Value << YAML::DoubleQuoted << mp;
    y << YAML::Key << "num_machines" << YAML::Value << in.nodes;
    y << YAML::Key << "num_processes" << YAML::Value << in.worldSize();
    y << YAML::Key << "rdzv_backend" << YAML::Value << (in.nodes > 1 ? "c10d" : "static");
    y << YAML::Key << "same_network" << YAML::Value << true;
    y << YAML::Key << "use_cpu" << YAML::Value << false;
    y << YAML::EndMap;
    e.notExpressed.push_back("micro-batch " + std::to_string(in.microBatch) + ", accumulation "
        + std::to_string(in.gradAccum) + " and sequence length " + std::to_string(in.seqLen)
        + " are the training script's arguments");
    commonNotes(in, e.notExpressed, "accelerate");
    std::string header = "# accelerate config written by `shard plan` for " + in.model.name + "\n";
    for (const auto& n : e.notExpressed)
        header += "# not in this file: " + n + "\n";
    e.text = header + y.c_str() + "\n";
    return e;
}

ExportedConfig writeTorchtitanConfig(const PlanInput& in)
{
    ExportedConfig e;
    toml::table t;
    const auto [name, flavor] = torchtitanOfPreset(in.model.name);
    if (name.empty())
        e.notExpressed.push_back("model " + in.model.name
            + ": torchtitan has no flavor the "
              "planner knows for it; set [model] name and flavor");
    t.insert("job",
        toml::table {{"description", "written by shard plan: " + in.model.name},
            {"dump_folder", "./outputs"}});
    t.insert("metrics",
        toml::table {{"log_freq", 10}, {"enable_tensorboard", true}, {"save_tb_folder", "tb"}});
    t.insert("model",
        toml::table {{"name", name.empty() ? in.model.modelType : name},
            {"flavor", flavor.empty() ? in.model.name : flavor}});
    t.insert("optimizer", toml::table {{"name", "AdamW"}});
    // The data-parallel degrees are the mesh's (what tensor and pipeline parallelism leave).
    PlanInput sized = in;
    if (sized.strategy == Strategy::Hybrid && sized.shardGroup <= 0)
        sized.shardGroup = std::max<int64_t>(1, in.gpusPerNode / in.tp);
    const protocol::DeviceMesh mesh = sized.mesh();
    const int64_t rep = mesh.dpReplicate, shard = mesh.dpShard;
    std::string reshard = "default";
    switch (in.strategy) {
    case Strategy::Ddp:
        break;
    case Strategy::Zero1:
        reshard = "never";
        e.notExpressed.push_back("zero1 (optimizer-only sharding) is not a torchtitan layout: "
                                 "written as FSDP without resharding after forward (ZeRO-2), "
                                 "which holds less gradient memory");
        break;
    case Strategy::Zero2:
        reshard = "never";
        break;
    case Strategy::Zero3:
        break;
    case Strategy::Hybrid:
        break;
    }
    toml::table training {{"local_batch_size", in.microBatch}, {"seq_len", in.seqLen},
        {"max_norm", 1.0}, {"steps", 1000},
        {"mixed_precision_param", in.precision == Precision::Fp32 ? "float32" : "bfloat16"},
        {"mixed_precision_reduce", in.bf16Reduce ? "bfloat16" : "float32"}};
    if (in.gradAccum > 1)
        training.insert("global_batch_size", in.microBatch * in.gradAccum * rep * shard);
    if (in.offload == Offload::ParamsAndOptimizer)
        training.insert("enable_cpu_offload", true);
    else if (in.offload == Offload::Optimizer)
        e.notExpressed.push_back("optimizer-only offload: torchtitan offloads parameters, "
                                 "gradients and optimizer together (enable_cpu_offload); not "
                                 "written");
    if (in.precision == Precision::Fp16Mixed)
        e.notExpressed.push_back("fp16: torchtitan trains in bfloat16 or float32; written as "
                                 "bfloat16");
    t.insert("training", std::move(training));
    toml::table parallelism {{"data_parallel_replicate_degree", rep},
        {"data_parallel_shard_degree", shard}, {"fsdp_reshard_after_forward", reshard},
        {"tensor_parallel_degree", in.tp}, {"pipeline_parallel_degree", in.pp},
        {"context_parallel_degree", 1}};
    if (in.pp > 1)
        parallelism.insert("pipeline_parallel_schedule", "1F1B");
    if (in.tp > 1 && !in.sequenceParallel)
        e.notExpressed.push_back("tensor parallel without sequence parallel: torchtitan's tensor "
                                 "parallel always shards the norms along the sequence (its "
                                 "activations are smaller than planned here)");
    t.insert("parallelism", std::move(parallelism));
    t.insert("activation_checkpoint",
        toml::table {{"mode", in.checkpointing == Checkpointing::Full ? "full" : "none"}});
    commonNotes(in, e.notExpressed, "torchtitan");
    std::ostringstream s;
    s << "# torchtitan config written by `shard plan` for " << in.model.name << " on "
      << in.worldSize() << " GPUs\n";
    for (const auto& n : e.notExpressed)
        s << "# not in this file: " << n << "\n";
    s << t << "\n";
    e.text = s.str();
    return e;
}

ExportedConfig writeLaunchCommand(const PlanInput& in, Launcher launcher, const std::string& script,
    const std::string& configPath)
{
    ExportedConfig e;
    const std::string g = std::to_string(in.gpusPerNode), n = std::to_string(in.nodes);
    std::string cmd;
    switch (launcher) {
    case Launcher::Torchrun:
        cmd = "torchrun --nnodes=" + n + " --nproc_per_node=" + g;
        if (in.nodes > 1)
            cmd += " --rdzv_backend=c10d --rdzv_endpoint=\"$MASTER_ADDR:$MASTER_PORT\"";
        cmd += " " + script;
        if (!configPath.empty()) {
            const bool toml = configPath.size() > 5
                && configPath.compare(configPath.size() - 5, 5, ".toml") == 0;
            cmd += toml ? " --job.config_file " + configPath : " --deepspeed " + configPath;
        }
        break;
    case Launcher::DeepSpeed:
        cmd = "deepspeed --num_gpus=" + g + " --num_nodes=" + n;
        if (in.nodes > 1)
            cmd += " --hostfile hostfile --master_addr \"$MASTER_ADDR\"";
        cmd += " " + script + " --deepspeed "
            + (configPath.empty() ? "ds_config.json" : configPath);
        break;
    case Launcher::Accelerate:
        cmd = "accelerate launch --config_file "
            + (configPath.empty() ? std::string("accelerate.yaml") : configPath);
        if (in.nodes > 1)
            cmd += " --machine_rank \"$NODE_RANK\" --main_process_ip \"$MASTER_ADDR\" "
                   "--main_process_port \"$MASTER_PORT\"";
        cmd += " " + script;
        break;
    }
    cmd += " --per_device_train_batch_size " + std::to_string(in.microBatch)
        + " --gradient_accumulation_steps " + std::to_string(in.gradAccum);
    if (in.checkpointing == Checkpointing::Full)
        cmd += " --gradient_checkpointing";
    if (in.precision == Precision::Bf16Mixed || in.precision == Precision::Bf16)
        cmd += " --bf16";
    else if (in.precision == Precision::Fp16Mixed)
        cmd += " --fp16";
    e.notExpressed.push_back("the script's arguments after " + script
        + " are the Hugging Face Trainer's names; a script with other flags needs its own");
    e.text = cmd + "\n";
    return e;
}

ExportedConfig exportFor(const PlanInput& in, const std::string& kind, const std::string& script,
    const std::string& configPath)
{
    const auto config = [&](const char* dflt) { return configPath.empty() ? dflt : configPath; };
    // Tensor and pipeline layouts go to torchtitan (its TOML, and torchrun or sbatch lines that
    // start it); DeepSpeed and accelerate configs here describe data parallelism only.
    if (in.threeD()
        && (kind == "deepspeed" || kind == "accelerate" || kind == "deepspeed-launch"
            || kind == "accelerate-launch" || kind == "sbatch-deepspeed"))
        throw std::runtime_error("--export " + kind + ": tensor parallel " + std::to_string(in.tp)
            + " and " + std::to_string(in.pp)
            + " pipeline stages are written for torchtitan only (--export torchtitan, torchrun "
              "or sbatch); plan tp 1 and pp 1 for a DeepSpeed or accelerate config");
    if (kind == "deepspeed")
        return writeDeepSpeedConfig(in);
    if (kind == "accelerate")
        return writeAccelerateConfig(in);
    if (kind == "torchtitan")
        return writeTorchtitanConfig(in);
    if (kind == "torchrun")
        return writeLaunchCommand(in, Launcher::Torchrun, script, configPath);
    if (kind == "deepspeed-launch")
        return writeLaunchCommand(in, Launcher::DeepSpeed, script, config("ds_config.json"));
    if (kind == "accelerate-launch")
        return writeLaunchCommand(in, Launcher::Accelerate, script, config("accelerate.yaml"));
    if (kind == "sbatch")
        return writeSbatchScript(in, Launcher::Torchrun, script, configPath);
    if (kind == "sbatch-deepspeed")
        return writeSbatchScript(in, Launcher::DeepSpeed, script, config("ds_config.json"));
    throw std::runtime_error("--export '" + kind
        + "' is not one of deepspeed, accelerate, torchtitan, torchrun, deepspeed-launch, "
          "accelerate-launch, sbatch, sbatch-deepspeed");
}

ExportedConfig writeSbatchScript(const PlanInput& in, Launcher launcher, const std::string& script,
    const std::string& configPath)
{
    ExportedConfig e;
    std::ostringstream s;
    s << "#!/bin/bash\n"
      << "# written by `shard plan` for " << in.model.name << ": " << in.nodes << " node"
      << (in.nodes == 1 ? "" : "s") << " x " << in.gpusPerNode << " GPUs, " << toString(in.strategy)
      << ", " << toString(in.precision) << "\n"
      << "#SBATCH --job-name=shard-" << in.model.name << "\n"
      << "#SBATCH --nodes=" << in.nodes << "\n"
      << "#SBATCH --ntasks-per-node=1\n"
      << "#SBATCH --gpus-per-node=" << in.gpusPerNode << "\n"
      << "#SBATCH --exclusive\n"
      << "#SBATCH --output=%x-%j.out\n"
      << "set -euo pipefail\n\n"
      << "export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n"
      << "export MASTER_PORT=${MASTER_PORT:-29500}\n"
      << "# NCCL: warnings only, fail fast on a dead rank, InfiniBand where there is one;\n"
      << "# set NCCL_SOCKET_IFNAME to the cluster's interface (ip -br link).\n"
      << "export NCCL_DEBUG=WARN\n"
      << "export TORCH_NCCL_ASYNC_ERROR_HANDLING=1\n"
      << "export NCCL_IB_DISABLE=0\n"
      << "export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-^lo,docker}\n"
      << "export OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}\n\n";
    switch (launcher) {
    case Launcher::Torchrun:
    case Launcher::Accelerate: {
        std::string args = " " + script;
        if (!configPath.empty())
            args += (launcher == Launcher::Accelerate ? "" : " --deepspeed " + configPath);
        s << "srun --kill-on-bad-exit=1 torchrun --nnodes=\"$SLURM_NNODES\" --nproc_per_node="
          << in.gpusPerNode
          << " \\\n    --rdzv_id=\"$SLURM_JOB_ID\" --rdzv_backend=c10d "
             "--rdzv_endpoint=\"$MASTER_ADDR:$MASTER_PORT\" \\\n   "
          << args;
        if (launcher == Launcher::Accelerate && !configPath.empty())
            e.notExpressed.push_back("accelerate's config (" + configPath
                + ") is read by the script under torchrun: pass it as the script expects");
        break;
    }
    case Launcher::DeepSpeed:
        s << "# deepspeed's own launcher reaches the nodes over ssh; under Slurm, srun starts\n"
             "# one torchrun per node instead (DeepSpeed reads the same environment).\n"
          << "srun --kill-on-bad-exit=1 torchrun --nnodes=\"$SLURM_NNODES\" --nproc_per_node="
          << in.gpusPerNode
          << " \\\n    --rdzv_id=\"$SLURM_JOB_ID\" --rdzv_backend=c10d "
             "--rdzv_endpoint=\"$MASTER_ADDR:$MASTER_PORT\" \\\n    "
          << script << " --deepspeed " << (configPath.empty() ? "ds_config.json" : configPath);
        break;
    }
    s << " \\\n    --per_device_train_batch_size " << in.microBatch
      << " --gradient_accumulation_steps " << in.gradAccum;
    if (in.checkpointing == Checkpointing::Full)
        s << " --gradient_checkpointing";
    if (in.precision == Precision::Bf16Mixed || in.precision == Precision::Bf16)
        s << " --bf16";
    else if (in.precision == Precision::Fp16Mixed)
        s << " --fp16";
    s << "\n";
    e.text = s.str();
    return e;
}

} // namespace shard::plan
