// Other engines' configs in and out of the planner: the DeepSpeed, accelerate and torchtitan
// files other projects wrote (../shared/fixtures) are read, their "auto" values resolved, and
// planned with DeepSpeed's accounting checked against hand computations from the model's shapes
// and DeepSpeed's documented rules; every export reads back to the same plan; bad configs are
// refused with what is wrong.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "check.h"
#include "plan/engine_configs.h"

using namespace shard::plan;
namespace fs = std::filesystem;

namespace {

const fs::path kFixtures = fs::path(SHARD_SOURCE_DIR) / ".." / "shared" / "fixtures";

fs::path tempDir()
{
    static const fs::path d
        = fs::temp_directory_path() / ("shard-engine-configs-" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
}

fs::path writeFile(const std::string& name, const std::string& text)
{
    const fs::path p = tempDir() / name;
    std::ofstream(p, std::ios::binary) << text;
    return p;
}

bool contains(const std::vector<std::string>& v, const std::string& needle)
{
    for (const auto& s : v)
        if (s.find(needle) != std::string::npos)
            return true;
    return false;
}

std::string resolvedValue(const ImportedConfig& c, const std::string& key)
{
    for (const auto& [k, v] : c.resolved)
        if (k == key)
            return v;
    return {};
}

ConfigContext context(const std::string& model, int64_t gpus, int64_t nodes)
{
    ConfigContext ctx;
    ctx.base.model = *findPreset(model);
    ctx.base.gpusPerNode = gpus;
    ctx.base.nodes = nodes;
    ctx.base.seqLen = 2048;
    ctx.base.device = DeviceSpec::gpu(80);
    ctx.gpusGiven = true;
    return ctx;
}

// Llama-2-7B's shapes, written out: P parameters, the largest tensor (the embedding / head,
// 32000 x 4096) and the 65 RMSNorm weights of 4096.
constexpr double kP = 6738415616.0;
constexpr double kLargest = 32000.0 * 4096.0;
constexpr double kNorms = 65.0 * 4096.0;

void deepSpeedFixtures()
{
    const fs::path ax = kFixtures / "axolotl-ai-cloud__axolotl";
    // ZeRO-1, everything "auto": filled from the Trainer's side (the context).
    {
        ConfigContext ctx = context("llama-2-7b", 8, 1);
        ctx.base.microBatch = 2;
        ctx.base.gradAccum = 4;
        ctx.microBatchGiven = ctx.gradAccumGiven = true;
        const ImportedConfig c = readDeepSpeedConfig((ax / "zero1.json").string(), ctx);
        CHECK_EQ(c.deepspeed.stage, 1);
        CHECK(c.input.strategy == Strategy::Zero1);
        CHECK(c.input.precision == Precision::Bf16Mixed);
        CHECK_EQ(c.input.microBatch, 2);
        CHECK_EQ(c.input.gradAccum, 4);
        CHECK(resolvedValue(c, "train_batch_size").find("64") == 0);
        CHECK(resolvedValue(c, "gradient_clipping").find("1.0") == 0);
        CHECK(c.deepspeed.overlapComm);
        const PlanResult r = planDeepSpeed(c.input, c.deepspeed);
        const double n = 8;
        // 16-bit parameters whole + fp32 master partition; 16-bit gradients whole + the
        // master's fp32 gradient partition + one tensor's gradient before bucketing; AdamW m, v.
        CHECK_NEAR(static_cast<double>(r.perDevice.shardedParams), 2 * kP + 4 * kP / n, 1e-9);
        CHECK_NEAR(
            static_cast<double>(r.perDevice.grads), 2 * kP + 4 * kP / n + 2 * kLargest, 1e-9);
        CHECK_NEAR(static_cast<double>(r.perDevice.optimizer), 8 * kP / n, 1e-9);
        // overlap_comm: 4.5 x (reduce + all-gather buckets of 5e8) x 2 bytes = 9e9 bytes.
        CHECK_NEAR(static_cast<double>(r.perDevice.commBuffers), 9e9, 1e-12);
        CHECK_EQ(r.perDevice.gatheredParams, 0);
        CHECK_EQ(r.hostBytesPerDevice, 0);
        // DeepSpeed's own estimator: 4P + 16P/N.
        const DeepSpeedEstimate e = deepSpeedEstimator(c.input, c.deepspeed);
        CHECK_NEAR(static_cast<double>(e.gpuBytes), 4 * kP + 16 * kP / n, 1e-9);
        CHECK_EQ(e.largestLayerParams, static_cast<int64_t>(kLargest));
    }
    // ZeRO-2 with the optimizer offloaded: the GPU keeps the 16-bit parameters and buckets.
    {
        const ImportedConfig c
            = readDeepSpeedConfig((ax / "zero2.json").string(), context("llama-2-7b", 8, 1));
        CHECK(c.input.strategy == Strategy::Zero2);
        CHECK(c.input.offload == Offload::Optimizer);
        const PlanResult r = planDeepSpeed(c.input, c.deepspeed);
        CHECK_NEAR(static_cast<double>(r.perDevice.shardedParams), 2 * kP, 1e-9);
        CHECK_NEAR(static_cast<double>(r.perDevice.grads), 2 * kLargest, 1e-9);
        CHECK_EQ(r.perDevice.optimizer, 0);
        CHECK_NEAR(static_cast<double>(r.hostBytesPerDevice), 16 * kP / 8, 1e-9);
        const DeepSpeedEstimate e = deepSpeedEstimator(c.input, c.deepspeed);
        CHECK_NEAR(static_cast<double>(e.gpuBytes), 2 * kP, 1e-9);
        CHECK_NEAR(static_cast<double>(e.cpuBytesPerNode), kP * 32 * 1.5, 1e-9);
    }
    // ZeRO-3, both offloads, the Trainer's "auto" knobs, max_live_parameters 0.
    {
        const ImportedConfig c = readDeepSpeedConfig(
            (ax / "zero3_bf16_cpuoffload_all.json").string(), context("llama-2-7b", 8, 2));
        CHECK(c.input.strategy == Strategy::Zero3);
        CHECK(c.input.offload == Offload::ParamsAndOptimizer);
        CHECK_NEAR(c.deepspeed.reduceBucketSize, 4096.0 * 4096.0, 1e-12);
        CHECK_NEAR(c.deepspeed.prefetchBucketSize, 15099494.0, 1e-12);
        CHECK_NEAR(c.deepspeed.paramPersistenceThreshold, 40960.0, 1e-12);
        CHECK_EQ(c.deepspeed.maxLiveParameters, 0.0);
        CHECK(contains(c.notModelled, "max_reuse_distance"));
        const PlanResult r = planDeepSpeed(c.input, c.deepspeed);
        const double n = 16;
        CHECK_EQ(r.perDevice.shardedParams, 0);
        CHECK_EQ(r.perDevice.optimizer, 0);
        // Gathered: the largest tensor (max_live_parameters 0 still needs the running one) and
        // the norms under the persistence threshold, in 16 bits.
        CHECK_NEAR(static_cast<double>(r.perDevice.gatheredParams), 2 * (kLargest + kNorms), 1e-9);
        CHECK_NEAR(static_cast<double>(r.perDevice.grads), 2 * kLargest, 1e-9);
        CHECK_NEAR(static_cast<double>(r.perDevice.commBuffers), 2 * 4096.0 * 4096.0 * 2, 1e-9);
        // Host: fp32 master, AdamW, fp32 gradient and the 16-bit partition: 18P/N.
        CHECK_NEAR(static_cast<double>(r.hostBytesPerDevice), 18 * kP / n, 1e-9);
        const DeepSpeedEstimate e = deepSpeedEstimator(c.input, c.deepspeed);
        CHECK_NEAR(static_cast<double>(e.gpuBytes), 4 * kLargest, 1e-9);
        CHECK_NEAR(static_cast<double>(e.cpuBytesPerNode), kP * 18 / 2 * 1.5, 1e-9);
    }
    // Parameters offloaded without the optimizer: DeepSpeed's accounting holds it, the
    // engine has no such mode (said).
    {
        const ImportedConfig c = readDeepSpeedConfig(
            (ax / "zero3_bf16_cpuoffload_params.json").string(), context("llama-2-7b", 8, 1));
        CHECK(c.deepspeed.offloadParams && !c.deepspeed.offloadOptimizer);
        CHECK(contains(c.warnings, "offload_param without offload_optimizer"));
        const PlanResult r = planDeepSpeed(c.input, c.deepspeed);
        CHECK_NEAR(static_cast<double>(r.perDevice.shardedParams), 4 * kP / 8, 1e-9);
        CHECK_NEAR(static_cast<double>(r.hostBytesPerDevice), 2 * kP / 8, 1e-9);
    }
    // transformers' test config: fp16, "1e14" literals, no batch keys (the Trainer adds them).
    {
        const ImportedConfig c = readDeepSpeedConfig(
            (kFixtures / "huggingface__transformers/ds_config_zero3.json").string(),
            context("llama-2-7b", 8, 2));
        CHECK(c.input.precision == Precision::Fp16Mixed);
        CHECK_EQ(c.deepspeed.subGroupSize, 1e14);
        CHECK_EQ(c.deepspeed.reduceBucketSize, 0.0);
        CHECK(contains(c.warnings, "absent"));
        CHECK_EQ(c.input.microBatch, 1);
    }
    // DeepSpeedExamples: train_batch_size 256 with accumulation 1 over 8 GPUs = micro 32.
    {
        const fs::path p = kFixtures / "microsoft__DeepSpeedExamples/ds_fp16_z1_config.json";
        const ImportedConfig c = readDeepSpeedConfig(p.string(), context("llama-2-7b", 8, 1));
        CHECK_EQ(c.input.microBatch, 32);
        CHECK(contains(c.warnings, "cuda_visible_devices"));
        CHECK(c.input.precision == Precision::Fp16Mixed);
        CHECK_THROWS_WITH(readDeepSpeedConfig(p.string(), context("llama-2-7b", 6, 1)),
            "train_batch_size 256 is not a multiple of");
    }
}

void deepSpeedBadInput()
{
    const ConfigContext ctx = context("llama-2-7b", 8, 1);
    auto parse
        = [&](const std::string& text) { return parseDeepSpeedConfig(text, "ds.json", ctx); };
    CHECK_THROWS_WITH(
        parse("{\"train_batch_size\": 8, \"train_batch_size\": 16}"), "appears twice");
    CHECK_THROWS_WITH(parse("{\"train_batch_size\": 8,"), "not valid JSON");
    CHECK_THROWS_WITH(parse("[1, 2]"), "a DeepSpeed config is a JSON object");
    CHECK_THROWS_WITH(parse(R"({"train_batch_size": 8, "fp16": {"enabled": true},
        "bf16": {"enabled": true}})"),
        "both true");
    CHECK_THROWS_WITH(parse(R"({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 2})"),
        "train_batch_size 30 is not train_micro_batch_size_per_gpu 2 x "
        "gradient_accumulation_steps 2 x 8 GPUs = 32");
    CHECK_THROWS_WITH(parse(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
        "offload_param": {"device": "nvme", "nvme_path": "/nvme"}}})"),
        "\"nvme\" (ZeRO-Infinity)");
    CHECK_THROWS_WITH(parse(R"({"train_batch_size": 8, "zero_optimization": {"stage": 2,
        "offload_param": {"device": "cpu"}}})"),
        "offload_param needs ZeRO stage 3");
    CHECK_THROWS_WITH(parse(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
        "stage3_prefetch_bucket": 5}})"),
        "zero_optimization.stage3_prefetch_bucket is not a DeepSpeed ZeRO key");
    CHECK_THROWS_WITH(parse(R"({"train_batch_size": 8, "zero_optimization": {"stage": 5}})"),
        "must be 0, 1, 2 or 3");
    CHECK_THROWS_WITH(parse(R"({"train_batch_size": "eight"})"), "must be a number or \"auto\"");
    CHECK_THROWS_WITH(parse(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
        "mics_shard_size": 3}})"),
        "mics_shard_size 3 does not divide 8 GPUs");
    CHECK_THROWS_WITH(
        readDeepSpeedConfig((tempDir() / "missing.json").string(), ctx), "cannot open");
    {
        ConfigContext c = ctx;
        c.base.microBatch = 4;
        c.microBatchGiven = true;
        CHECK_THROWS_WITH(
            parseDeepSpeedConfig(R"({"train_micro_batch_size_per_gpu": 2})", "ds.json", c),
            "--micro-batch 4 contradicts the config's micro-batch 2");
    }
    // MiCS is hybrid sharding.
    const ImportedConfig mics = parse(R"({"train_micro_batch_size_per_gpu": 1,
        "zero_optimization": {"stage": 3, "mics_shard_size": 4}})");
    CHECK(mics.input.strategy == Strategy::Hybrid);
    CHECK_EQ(mics.input.shardGroup, 4);
}

// Every plan written as a DeepSpeed, accelerate or torchtitan config reads back to itself.
void roundTrips()
{
    struct Case {
        Strategy strategy;
        Offload offload;
        Checkpointing ckpt;
        int64_t micro, accum, gpus, nodes, group;
    };
    const Case cases[] = {
        {Strategy::Zero3, Offload::None, Checkpointing::Full, 2, 4, 8, 2, 0},
        {Strategy::Zero2, Offload::None, Checkpointing::None, 1, 1, 8, 1, 0},
        {Strategy::Zero1, Offload::Optimizer, Checkpointing::None, 4, 2, 4, 1, 0},
        {Strategy::Zero3, Offload::ParamsAndOptimizer, Checkpointing::None, 1, 8, 8, 1, 0},
        {Strategy::Hybrid, Offload::None, Checkpointing::Full, 1, 2, 8, 2, 8},
        {Strategy::Ddp, Offload::None, Checkpointing::None, 2, 1, 2, 1, 0},
    };
    int index = 0;
    for (const Case& k : cases) {
        ++index;
        PlanInput in = context("llama-2-7b", k.gpus, k.nodes).base;
        in.strategy = k.strategy;
        in.shardGroup = k.group;
        in.offload = k.offload;
        in.checkpointing = k.ckpt;
        in.microBatch = k.micro;
        in.gradAccum = k.accum;
        in.bf16Reduce = true;
        validate(in);
        const std::string tag = "case " + std::to_string(index) + " " + toString(in.strategy);
        ConfigContext ctx = context("llama-2-7b", k.gpus, k.nodes);
        ctx.base.checkpointing = k.ckpt;
        // DeepSpeed: the stage, the offload, the batch and MiCS come back.
        if (!(k.strategy == Strategy::Ddp && k.offload != Offload::None)) {
            const ExportedConfig e = writeDeepSpeedConfig(in);
            const ImportedConfig back
                = readDeepSpeedConfig(writeFile("rt.json", e.text).string(), ctx);
            if (back.input.strategy != in.strategy || back.input.offload != in.offload
                || back.input.microBatch != in.microBatch || back.input.gradAccum != in.gradAccum
                || back.input.precision != in.precision || back.input.shardGroup != in.shardGroup)
                shard::plan::test::fail(
                    __FILE__, __LINE__, tag + ": DeepSpeed round trip\n" + e.text);
            CHECK(back.warnings.empty());
        }
        // accelerate: FSDP, or its inline DeepSpeed for ZeRO-1 and optimizer-only offload.
        {
            const ExportedConfig e = writeAccelerateConfig(in);
            ConfigContext actx = ctx;
            actx.gpusGiven = false;
            actx.base.microBatch = k.micro;
            actx.base.gradAccum = k.accum;
            const ImportedConfig back
                = readAccelerateConfig(writeFile("rt.yaml", e.text).string(), actx);
            if (back.input.strategy != in.strategy || back.input.offload != in.offload
                || back.input.worldSize() != in.worldSize() || back.input.nodes != in.nodes
                || back.input.checkpointing != in.checkpointing
                || back.input.precision != in.precision)
                shard::plan::test::fail(
                    __FILE__, __LINE__, tag + ": accelerate round trip\n" + e.text);
            CHECK(back.warnings.empty());
        }
        // torchtitan: no ZeRO-1 and no optimizer-only offload (said in the file).
        {
            const ExportedConfig e = writeTorchtitanConfig(in);
            if (k.strategy == Strategy::Zero1) {
                CHECK(contains(e.notExpressed, "zero1"));
                CHECK(e.text.find("# not in this file: zero1") != std::string::npos);
            } else {
                ConfigContext tctx = ctx;
                tctx.checkpointingGiven = false;
                const ImportedConfig back
                    = readTorchtitanConfig(writeFile("rt.toml", e.text).string(), tctx);
                if (back.input.strategy != in.strategy || back.input.offload != in.offload
                    || back.input.microBatch != in.microBatch
                    || back.input.gradAccum != in.gradAccum
                    || back.input.shardGroup != (k.strategy == Strategy::Hybrid ? k.group : 0)
                    || back.input.checkpointing != in.checkpointing
                    || back.input.bf16Reduce != in.bf16Reduce)
                    shard::plan::test::fail(
                        __FILE__, __LINE__, tag + ": torchtitan round trip\n" + e.text);
            }
        }
    }
    // A tensor / pipeline layout goes to torchtitan and back; DeepSpeed and accelerate refuse it.
    {
        PlanInput in = context("llama-2-70b", 8, 8).base;
        in.mode = AccountingMode::ZeroPaper;
        in.strategy = Strategy::Zero3;
        in.tp = 4;
        in.pp = 2;
        in.gradAccum = 16;
        // Without sequence parallel: said, since torchtitan's tensor parallel always has it.
        in.sequenceParallel = false;
        CHECK(exportFor(in, "torchtitan", "train.py", "")
                  .text.find("# not in this file: tensor parallel without sequence parallel")
            != std::string::npos);
        in.sequenceParallel = true;
        const ExportedConfig e = exportFor(in, "torchtitan", "train.py", "");
        CHECK(e.text.find("without sequence parallel") == std::string::npos);
        CHECK(e.text.find("tensor_parallel_degree = 4") != std::string::npos);
        CHECK(e.text.find("pipeline_parallel_degree = 2") != std::string::npos);
        CHECK(e.text.find("data_parallel_shard_degree = 8") != std::string::npos);
        ConfigContext tctx = context("llama-2-70b", 8, 8);
        tctx.modelGiven = true;
        const ImportedConfig back
            = readTorchtitanConfig(writeFile("rt3d.toml", e.text).string(), tctx);
        CHECK_EQ(back.input.tp, 4);
        CHECK_EQ(back.input.pp, 2);
        CHECK(back.input.strategy == Strategy::Zero3);
        CHECK_EQ(back.input.gradAccum, 16);
        CHECK(back.input.sequenceParallel); // torchtitan's tensor parallel shards the norms
        CHECK_EQ(plan(back.input).perDevice.total(), plan(in).perDevice.total());
        CHECK_THROWS_WITH(
            exportFor(in, "deepspeed", "train.py", ""), "written for torchtitan only");
        CHECK_THROWS_WITH(
            exportFor(in, "accelerate-launch", "train.py", ""), "--export torchtitan");
    }
    // What a target cannot say is said.
    PlanInput lora = context("llama-2-7b", 8, 1).base;
    lora.method = Method::Lora;
    lora.objective = "dpo";
    lora.reference = "live";
    const ExportedConfig e = writeDeepSpeedConfig(lora);
    CHECK(contains(e.notExpressed, "LoRA is the training script's"));
    CHECK(contains(e.notExpressed, "DPOTrainer"));
}

void accelerateFixtures()
{
    const fs::path acc = kFixtures / "huggingface__accelerate";
    ConfigContext ctx = context("llama-2-7b", 1, 1);
    ctx.gpusGiven = false;
    const ImportedConfig a = readAccelerateConfig((acc / "fsdp.yaml").string(), ctx);
    CHECK(a.input.strategy == Strategy::Zero3);
    CHECK_EQ(a.input.worldSize(), 2);
    CHECK(a.input.precision == Precision::Bf16Mixed);
    CHECK(a.input.bf16Reduce);
    CHECK(a.input.checkpointing == Checkpointing::None);
    CHECK(a.warnings.empty());
    CHECK(contains(a.notModelled, "fsdp_backward_prefetch"));
    const ImportedConfig b = readAccelerateConfig((acc / "latest_fsdp.yaml").string(), ctx);
    CHECK(b.input.precision == Precision::Fp32);
    CHECK_EQ(b.input.worldSize(), 1);
    CHECK(b.warnings.empty());
    // --gpus that disagree with num_processes.
    ConfigContext given = context("llama-2-7b", 8, 1);
    CHECK_THROWS_WITH(
        readAccelerateConfig((acc / "fsdp.yaml").string(), given), "but num_processes is 2");

    auto yaml = [&](const std::string& text) {
        return readAccelerateConfig(writeFile("bad.yaml", text).string(), ctx);
    };
    CHECK_THROWS_WITH(yaml("distributed_type: FSDP\nnum_processes: 3\nnum_machines: 2\n"),
        "does not split over num_machines 2");
    CHECK_THROWS_WITH(
        yaml("distributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n  fsdp_sharding_strategy: "
             "HALF_SHARD\n"),
        "fsdp_sharding_strategy 'HALF_SHARD' is not one of");
    CHECK_THROWS_WITH(yaml("distributed_type: FSDP\nmixed_precision: fp8\nnum_processes: 2\n"),
        "mixed_precision 'fp8' is not planned");
    CHECK_THROWS_WITH(yaml("distributed_type: [FSDP\n"), "not valid YAML at line");
    CHECK_THROWS_WITH(yaml("distributed_type: TPU\n"), "distributed_type TPU is not planned");
    const ImportedConfig typo = yaml("distributed_type: FSDP\nnum_proceses: 2\n");
    CHECK(contains(typo.warnings, "num_proceses"));
    // HYBRID_SHARD over two machines: groups of one machine's GPUs; numbers name strategies.
    const ImportedConfig h = yaml("distributed_type: FSDP\nnum_processes: 16\nnum_machines: 2\n"
                                  "fsdp_config:\n  fsdp_sharding_strategy: 4\n");
    CHECK(h.input.strategy == Strategy::Hybrid);
    CHECK_EQ(h.input.shardGroup, 8);
}

void torchtitanFixtures()
{
    const fs::path tt = kFixtures / "pytorch__torchtitan";
    ConfigContext ctx = context("llama-2-7b", 8, 8);
    ctx.modelGiven = false;
    const ImportedConfig c = readTorchtitanConfig((tt / "llama3_8b.toml").string(), ctx);
    CHECK_EQ(c.input.model.name, std::string("llama-3.1-8b"));
    CHECK(c.input.strategy == Strategy::Zero3);
    CHECK_EQ(c.input.seqLen, 8192);
    CHECK_EQ(c.input.microBatch, 1);
    CHECK(c.input.precision == Precision::Bf16Mixed);
    CHECK(!c.input.bf16Reduce);
    CHECK(contains(c.notModelled, "selective"));
    CHECK(resolvedValue(c, "[parallelism] data_parallel_shard_degree").find("64") == 0);
    // DeepSeek-V3 16B has no preset: --model is asked for; with one, expert parallel is said.
    CHECK_THROWS_WITH(
        readTorchtitanConfig((tt / "deepseek_v3_16b.toml").string(), ctx), "pass --model");
    ConfigContext withModel = context("llama-2-7b", 8, 1);
    const ImportedConfig d
        = readTorchtitanConfig((tt / "deepseek_v3_16b.toml").string(), withModel);
    CHECK(contains(d.notModelled, "expert_parallel_degree 8"));
    CHECK_EQ(d.input.microBatch, 4);

    auto toml = [&](const std::string& text) {
        return readTorchtitanConfig(writeFile("bad.toml", text).string(), withModel);
    };
    CHECK_THROWS_WITH(
        toml("[parallelism]\ncontext_parallel_degree = 2\n"), "does not model context parallelism");
    CHECK_THROWS_WITH(toml("[parallelism]\ntensor_parallel_degree = 3\n"),
        "tensor_parallel_degree 3 x pipeline_parallel_degree 1 does not divide the 8 GPUs");
    {
        // Tensor and pipeline parallelism are planned (issue 29) in the paper's accounting.
        const ImportedConfig tp = toml("[parallelism]\ntensor_parallel_degree = 2\n"
                                       "pipeline_parallel_degree = 2\n"
                                       "pipeline_parallel_schedule = \"Interleaved1F1B\"\n");
        CHECK_EQ(tp.input.tp, 2);
        CHECK_EQ(tp.input.pp, 2);
        CHECK(tp.input.mode == AccountingMode::ZeroPaper);
        CHECK(resolvedValue(tp, "accounting").find("zero-paper") == 0);
        CHECK(resolvedValue(tp, "[parallelism] data_parallel_shard_degree").find("2") == 0);
        CHECK(contains(tp.notModelled, "Interleaved1F1B"));
        CHECK_EQ(plan(tp.input).input.mesh().dpShard, 2);
    }
    CHECK_THROWS_WITH(toml("[parallelism]\ndata_parallel_replicate_degree = 2\n"
                           "data_parallel_shard_degree = 2\n"),
        "is not the 8 GPUs");
    CHECK_THROWS_WITH(toml("[training\nseq_len = 5\n"), "not valid TOML at line 1");
    CHECK_THROWS_WITH(toml("[activation_checkpoint]\nmode = \"some\"\n"),
        "mode \"some\" is not none, selective or full");
    CHECK_THROWS_WITH(toml("[training]\nlocal_batch_size = \"two\"\n"), "must be an integer");
}

void launchers()
{
    PlanInput in = context("llama-2-7b", 8, 2).base;
    in.microBatch = 2;
    in.checkpointing = Checkpointing::Full;
    const ExportedConfig t = writeLaunchCommand(in, Launcher::Torchrun, "train.py", "");
    CHECK(t.text.find("torchrun --nnodes=2 --nproc_per_node=8") == 0);
    CHECK(t.text.find("--per_device_train_batch_size 2") != std::string::npos);
    CHECK(t.text.find("--gradient_checkpointing --bf16") != std::string::npos);
    const ExportedConfig d = writeLaunchCommand(in, Launcher::DeepSpeed, "train.py", "ds.json");
    CHECK(d.text.find("deepspeed --num_gpus=8 --num_nodes=2 --hostfile hostfile") == 0);
    CHECK(d.text.find("--deepspeed ds.json") != std::string::npos);
    const ExportedConfig s = writeSbatchScript(in, Launcher::Torchrun, "train.py", "");
    for (const char* needle : {"#!/bin/bash\n", "#SBATCH --nodes=2\n",
             "#SBATCH --gpus-per-node=8\n", "NCCL_DEBUG=WARN", "TORCH_NCCL_ASYNC_ERROR_HANDLING=1",
             "srun --kill-on-bad-exit=1 "
             "torchrun --nnodes=\"$SLURM_NNODES\" --nproc_per_node=8",
             "--rdzv_endpoint=\"$MASTER_ADDR:$MASTER_PORT\""})
        if (s.text.find(needle) == std::string::npos)
            shard::plan::test::fail(__FILE__, __LINE__, std::string("sbatch lacks ") + needle);
    CHECK_THROWS_WITH(parseLauncher("mpirun"), "not one of torchrun, deepspeed, accelerate");
}

} // namespace

int main()
{
    deepSpeedBadInput();
    roundTrips();
    launchers();
    if (fs::is_directory(kFixtures)) {
        deepSpeedFixtures();
        accelerateFixtures();
        torchtitanFixtures();
    } else {
        std::printf("SKIP fixtures: %s is absent (configs other projects wrote)\n",
            kFixtures.string().c_str());
    }
    fs::remove_all(tempDir());
    return shard::plan::test::finish("tst_engine_configs");
}
