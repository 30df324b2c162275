// Pipeline-parallel training (`shard-worker train --pipeline-parallel N`, 1F1B over the
// --grad-accum micro-batches) against one rank, with real ranks on Gloo (fp32, 8 steps, AdamW,
// clipping, weight decay; every row full length):
//  - PP2, PP4 (four micro-batches in the steady 1F1B state, and two: fewer than the stages),
//    PP2 with one micro-batch, PP2 x zero3 DP2 and PP2 x ddp DP2 (4 ranks), PP2 x hybrid DP4
//    (8 ranks, shard groups of 2), TP2 x PP2 (4 ranks),
//    PP2 x zero2 with activation checkpointing, and interleaved 1F1B (two model chunks a stage:
//    PP2 over 2 and 4 micro-batches, PP2 x zero3 DP2) give the 1-rank run's losses within 1e-5
//    (relative) and its final weights within 1e-4 (L2 relative), against the 1-rank run that
//    splits the global batch the same way; the exported model is whole;
//  - a tied-embedding model (Qwen3 style) at PP3, at PP2 interleaved and at TP2 x PP2 (the
//    table split by vocabulary on both ends): the first and last stage hold the embedding and
//    sum its gradient; held-out losses (--eval-every) match one
//    rank's too;
//  - a model with a heavy head (vocabulary 4096, hidden 64) at PP2 is cut by compute, 5 + 1
//    layers (plan::balancedStages; the start event records it), and matches one rank;
//  - LoRA (dropout on) at PP2: the merged model and the adapters match one rank's;
//  - QLoRA (NF4 base, double-quantised scales) at PP2 and at TP2 x PP2 matches the 1-rank QLoRA
//    run: each stage quantises its layers as one rank does;
//  - bf16-mixed PP2 tracks one bf16-mixed rank;
//  - rank 0's bytes per step at PP2 within 2% of the planner's pipeline traffic, and its
//    record of the share of each step it waited for its neighbour (the bubble);
//  - checkpoints are layout-independent: TP2 x zero3 DP2 (steps 1-3) -> PP2 x zero3 DP2
//    interleaved (4-6) -> one rank (7-8) gives the uninterrupted run's losses within 1e-5 and
//    weights within 1e-4;
//  - refusals before training: stages that do not divide the ranks, more stages than layers,
//    more virtual stages than layers, interleaving with micro-batches not a multiple of the
//    stages, each naming the numbers and the fix (preference objectives: tst_preference).
#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "layout_training.h"
#include "plan/planner.h"

using namespace shard::testing;
using namespace shard::testing::layout;

namespace {

// The planner's pipeline bytes per rank per step for the llama model at PP2, one data-parallel
// copy of micro-batch 2 and 2 micro-batches.
int64_t plannedPpBytes()
{
    shard::plan::PlanInput in;
    in.model = shard::plan::loadHfConfig(dir() + "/llama");
    in.strategy = shard::plan::Strategy::Zero3;
    in.precision = shard::plan::Precision::Fp32;
    in.mode = shard::plan::AccountingMode::ZeroPaper;
    in.gpusPerNode = 2;
    in.pp = 2;
    in.microBatch = 2;
    in.gradAccum = 2;
    in.seqLen = kSeq;
    in.device = shard::plan::DeviceSpec::cpu(24LL << 30);
    return shard::plan::plan(in).ppBytesPerDevicePerStep;
}

} // namespace

int main()
{
    dir() = makeTempDir("pp-train");
    writeData();
    auto p = spawnProcess({workerPath(), "init-model", "--preset", "tiny-1m", "--out",
        dir() + "/llama", "--seed", "1"});
    SHARD_EXPECT(p.wait(60) && p.exitCode() == 0, "init-model: " + p.err);
    nlohmann::json tied = {{"hidden_size", 128}, {"intermediate_size", 256},
        {"num_hidden_layers", 3}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
        {"vocab_size", 512}, {"max_position_embeddings", 256}, {"rms_norm_eps", 1e-6},
        {"rope_theta", 10000.0}, {"hidden_act", "silu"}, {"model_type", "qwen3"},
        {"architectures", {"Qwen3ForCausalLM"}}, {"head_dim", 48}, {"tie_word_embeddings", true}};
    makeModel("tied", tied);
    tied["num_hidden_layers"] = 4;
    makeModel("tied4", tied);

    // Llama (tiny-1m: 4 layers, untied head).
    const Run ref = train("llama", "llama-1", 1, {"--micro-batch", "4"});
    const Run refGa2
        = train("llama", "llama-1-ga2", 1, {"--micro-batch", "2", "--grad-accum", "2"});
    const Run refGa4
        = train("llama", "llama-1-ga4", 1, {"--micro-batch", "1", "--grad-accum", "4"});
    const Run pp2 = train("llama", "llama-pp2", 2,
        {"--micro-batch", "2", "--grad-accum", "2", "--pipeline-parallel", "2"});
    expectClose("llama PP2 (2 micro-batches) vs 1 rank", refGa2, pp2);
    expectClose("llama PP2 (1 micro-batch) vs 1 rank", ref,
        train("llama", "llama-pp2-ga1", 2, {"--micro-batch", "4", "--pipeline-parallel", "2"}));
    expectClose("llama PP4 (4 micro-batches) vs 1 rank", refGa4,
        train("llama", "llama-pp4-ga4", 4,
            {"--micro-batch", "1", "--grad-accum", "4", "--pipeline-parallel", "4"}));
    expectClose("llama PP4 (2 micro-batches) vs 1 rank", refGa2,
        train("llama", "llama-pp4-ga2", 4,
            {"--micro-batch", "2", "--grad-accum", "2", "--pipeline-parallel", "4"}));
    expectClose("llama PP2 x zero3 DP2 vs 1 rank split", refGa4,
        train("llama", "llama-pp2-zero3-dp2", 4,
            {"--micro-batch", "1", "--grad-accum", "2", "--pipeline-parallel", "2", "--strategy",
                "zero3"}));
    expectClose("llama PP2 x ddp DP2 vs 1 rank split", refGa4,
        train("llama", "llama-pp2-ddp-dp2", 4,
            {"--micro-batch", "1", "--grad-accum", "2", "--pipeline-parallel", "2", "--strategy",
                "ddp"}));
    expectClose("llama PP2 x hybrid DP4 (shard group 2) vs 1 rank split", refGa4,
        train("llama", "llama-pp2-hybrid-dp4", 8,
            {"--micro-batch", "1", "--pipeline-parallel", "2", "--strategy", "hybrid",
                "--shard-group", "2"}));
    expectClose("llama TP2 x PP2 vs 1 rank", refGa2,
        train("llama", "llama-tp2-pp2", 4,
            {"--micro-batch", "2", "--grad-accum", "2", "--pipeline-parallel", "2",
                "--tensor-parallel", "2"}));
    expectClose("llama PP2 interleaved (2 chunks, 2 micro-batches) vs 1 rank", refGa2,
        train("llama", "llama-pp2-v2-ga2", 2,
            {"--micro-batch", "2", "--grad-accum", "2", "--pipeline-parallel", "2",
                "--virtual-stages", "2"}));
    expectClose("llama PP2 interleaved (2 chunks, 4 micro-batches) vs 1 rank", refGa4,
        train("llama", "llama-pp2-v2-ga4", 2,
            {"--micro-batch", "1", "--grad-accum", "4", "--pipeline-parallel", "2",
                "--virtual-stages", "2"}));
    expectClose("llama PP2 interleaved x zero3 DP2 vs 1 rank split", refGa4,
        train("llama", "llama-pp2-v2-zero3-dp2", 4,
            {"--micro-batch", "1", "--grad-accum", "2", "--pipeline-parallel", "2",
                "--virtual-stages", "2", "--strategy", "zero3"}));
    expectClose("llama PP2 x zero2 + checkpointing vs 1 rank", refGa2,
        train("llama", "llama-pp2-zero2-ckpt", 2,
            {"--micro-batch", "2", "--grad-accum", "2", "--pipeline-parallel", "2", "--strategy",
                "zero2", "--checkpointing", "full"}));

    // A tied embedding over three stages (the first embeds, the last's head uses the same
    // weight): gradients summed over the two, held-out losses through the pipeline.
    {
        const std::vector<std::string> eval = {"--eval-fraction", "0.1", "--eval-every", "4"};
        auto with = [&](std::vector<std::string> a) {
            a.insert(a.end(), eval.begin(), eval.end());
            return a;
        };
        const Run tiedRef
            = train("tied", "tied-1", 1, with({"--micro-batch", "2", "--grad-accum", "2"}));
        const Run tiedPp3 = train("tied", "tied-pp3", 3,
            with({"--micro-batch", "2", "--grad-accum", "2", "--pipeline-parallel", "3"}));
        const Run tied4Ref
            = train("tied4", "tied4-1", 1, with({"--micro-batch", "2", "--grad-accum", "2"}));
        const Run tied4V2 = train("tied4", "tied4-pp2-v2", 2,
            with({"--micro-batch", "2", "--grad-accum", "2", "--pipeline-parallel", "2",
                "--virtual-stages", "2"}));
        // Tensor parallel inside each stage: the one table split by vocabulary on the first and
        // last stage, each TP rank's rows summed with the same rows of the other end.
        const Run tied4Tp2Pp2 = train("tied4", "tied4-tp2-pp2", 4,
            with({"--micro-batch", "2", "--grad-accum", "2", "--pipeline-parallel", "2",
                "--tensor-parallel", "2"}));
        for (const auto& [what, ref, run] : {std::tuple {"tied PP3", &tiedRef, &tiedPp3},
                 std::tuple {"tied PP2 interleaved", &tied4Ref, &tied4V2},
                 std::tuple {"tied TP2 x PP2", &tied4Ref, &tied4Tp2Pp2}}) {
            expectClose(std::string(what) + " vs 1 rank", *ref, *run);
            const std::vector<double> a = evalLosses(*ref), b = evalLosses(*run);
            SHARD_EXPECT(a.size() == 2 && a.size() == b.size(), "two held-out losses each");
            for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
                std::printf("%s eval loss %.9g, 1 rank %.9g\n", what, b[i], a[i]);
                SHARD_EXPECT(std::abs(a[i] - b[i]) <= 1e-5 * std::abs(a[i]),
                    "held-out loss through the pipeline within 1e-5 of one rank's");
            }
        }
    }

    // A heavy head (vocabulary 4096 on hidden 64: its products cost seven of the six blocks'):
    // the stages are cut by compute, 5 + 1 layers, and train as one rank does; the start event
    // records the cut.
    {
        nlohmann::json wide = {{"hidden_size", 64}, {"intermediate_size", 128},
            {"num_hidden_layers", 6}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
            {"vocab_size", 4096}, {"max_position_embeddings", 256}, {"rms_norm_eps", 1e-6},
            {"rope_theta", 10000.0}, {"hidden_act", "silu"}, {"model_type", "llama"},
            {"architectures", {"LlamaForCausalLM"}}, {"tie_word_embeddings", false}};
        makeModel("wide", wide);
        expectClose("heavy-head PP2 (cut 5 + 1) vs 1 rank",
            train("wide", "wide-1", 1, {"--micro-batch", "2", "--grad-accum", "2"}),
            train("wide", "wide-pp2", 2,
                {"--micro-batch", "2", "--grad-accum", "2", "--pipeline-parallel", "2"}));
        nlohmann::json cut;
        for (const auto& e : events(dir() + "/wide-pp2"))
            if (e.value("kind", "") == "start" && e.contains("data"))
                cut = e["data"].value("pipeline_layers", nlohmann::json());
        std::printf("heavy-head PP2 stage layers %s\n", cut.dump().c_str());
        SHARD_EXPECT(cut == nlohmann::json::parse("[[0,5],[5,6]]"),
            "the heavy head's stage gets one layer: " + cut.dump());
    }

    // LoRA on every projection with dropout: the masks follow the 1-rank run's draws.
    {
        const std::vector<std::string> lora
            = {"--method", "lora", "--lora-targets", "q,k,v,o,gate,up,down", "--lora-dropout",
                "0.1", "--micro-batch", "2", "--grad-accum", "2"};
        const Run loraRef = train("llama", "lora-1", 1, lora);
        std::vector<std::string> pipelined = lora;
        pipelined.insert(pipelined.end(), {"--pipeline-parallel", "2"});
        const Run loraPp2 = train("llama", "lora-pp2", 2, pipelined);
        expectClose("llama LoRA PP2 vs 1 rank", loraRef, loraPp2);
        const auto a = f32Tensors(dir() + "/lora-1/adapter/adapter_model.safetensors");
        const auto b = f32Tensors(dir() + "/lora-pp2/adapter/adapter_model.safetensors");
        const RunDiff d = compareRuns({1.0}, {1.0}, a, b);
        std::printf("%-40s adapters max rel %.3g  L2 rel %.3g (%zu tensors)\n", "LoRA PP2 adapters",
            d.weightMax, d.weightL2, a.size());
        SHARD_EXPECT(a.size() == 56 && b.size() == 56 && d.weightL2 <= 1e-4,
            "LoRA PP2: every adapter, within 1e-4 (L2) of one rank's");
    }

    // QLoRA: each stage's NF4 base is its layers' part of the 1-rank quantisation (and each
    // tensor-parallel rank its part of that).
    {
        const std::vector<std::string> qlora = {"--method", "qlora", "--lora-targets",
            "q,k,v,o,gate,up,down", "--micro-batch", "2", "--grad-accum", "2"};
        auto with = [&](std::vector<std::string> a) {
            a.insert(a.begin(), qlora.begin(), qlora.end());
            return a;
        };
        const Run qRef = train("llama", "qlora-1", 1, qlora);
        expectClose("llama QLoRA PP2 vs 1 rank", qRef,
            train("llama", "qlora-pp2", 2, with({"--pipeline-parallel", "2"})));
        expectClose("llama QLoRA TP2 x PP2 vs 1 rank", qRef,
            train("llama", "qlora-tp2-pp2", 4,
                with({"--pipeline-parallel", "2", "--tensor-parallel", "2"})));
    }

    // bf16-mixed (bf16 activations between stages).
    {
        const Run bf = train("llama", "bf16-1", 1,
            {"--micro-batch", "2", "--grad-accum", "2", "--precision", "bf16-mixed"});
        const Run bfPp = train("llama", "bf16-pp2", 2,
            {"--micro-batch", "2", "--grad-accum", "2", "--precision", "bf16-mixed",
                "--pipeline-parallel", "2"});
        const RunDiff d = compareRuns(bf.losses, bfPp.losses, bf.weights, bfPp.weights);
        std::printf("%-40s loss max rel %.3g\n", "llama bf16-mixed PP2 vs 1 rank", d.loss);
        SHARD_EXPECT(d.loss <= 5e-3, "bf16-mixed PP2 tracks the 1-rank bf16-mixed run");
    }

    // Bytes per step: rank 0 (the first stage) sends each micro-batch's activation once (and a
    // few scalars), as the planner counts an end stage.
    {
        const int64_t got = stepBytes(pp2);
        const int64_t planned = plannedPpBytes();
        std::printf("PP2 bytes/step rank 0 %lld, planner %lld (ratio %.4f)\n",
            static_cast<long long>(got), static_cast<long long>(planned),
            double(got) / double(planned));
        SHARD_EXPECT(planned > 0 && std::abs(double(got) / double(planned) - 1.0) <= 0.02,
            "PP2 bytes per step within 2% of the planner's");
    }

    // The bubble's record: rank 0's share of each step spent waiting for its neighbour.
    for (const auto& j : pp2.metrics) {
        const double idle = j.contains("scalars") && j["scalars"].is_object()
            ? j["scalars"].value("pipeline/idle_fraction", -1.0)
            : -1.0;
        SHARD_EXPECT(idle >= 0.0 && idle < 1.0,
            "each PP2 metric record has the pipeline's idle fraction (got " + std::to_string(idle)
                + ")");
    }

    // Resume across layouts: TP2 x zero3 DP2 (steps 1-3) -> PP2 x zero3 DP2 interleaved (4-6)
    // -> one rank (7-8).
    {
        const Chain chain = chainedRun("llama",
            {{4, {"--micro-batch", "2", "--tensor-parallel", "2", "--strategy", "zero3"}},
                {4,
                    {"--micro-batch", "1", "--grad-accum", "2", "--pipeline-parallel", "2",
                        "--virtual-stages", "2", "--strategy", "zero3"}},
                {1, {"--micro-batch", "4"}}});
        const nlohmann::json manifest = nlohmann::json::parse(
            readFile(chain.dirs.at(1) + "/checkpoints/step-6/manifest.json"), nullptr, false);
        SHARD_EXPECT(manifest.is_object() && manifest.value("pipeline_parallel", 0) == 2,
            "the PP2 checkpoint's manifest records its 2 stages");
        expectClose("resumed TP2xDP2 -> PP2xDP2 interleaved -> 1 rank vs 1 rank", ref, chain.run);
    }

    // Refusals, before any step, naming the numbers and the fix.
    expectRefusal("llama", "refuse-ranks", 2, {"--pipeline-parallel", "3"},
        "pipeline parallel size 3 does not divide the 2 ranks");
    expectRefusal("tied", "refuse-layers", 4, {"--pipeline-parallel", "4", "--micro-batch", "1"},
        "--pipeline-parallel 4 for 3 layers: each stage needs a layer; use --pipeline-parallel 3");
    expectRefusal("tied", "refuse-virtual", 3,
        {"--pipeline-parallel", "3", "--virtual-stages", "2", "--grad-accum", "3"},
        "--pipeline-parallel 3 x --virtual-stages 2 = 6 virtual stages need a layer each and the "
        "model has 3; use --virtual-stages 1 or less");
    expectRefusal("llama", "refuse-interleave-micro", 2,
        {"--pipeline-parallel", "2", "--virtual-stages", "2", "--grad-accum", "3"},
        "--grad-accum 3 is not a multiple of 2; use --grad-accum 2 or 4");

    if (g_failures == 0) {
        std::printf("tst_pp_training: all passed\n");
        removeTempDirs();
    }
    return g_failures == 0 ? 0 : 1;
}
