// Sequence-parallel training (`shard-worker train --tensor-parallel N --sequence-parallel`)
// against one rank, with real ranks on Gloo (fp32, 8 steps, AdamW, clipping, weight decay):
//  - TP2 and TP4 with sequence parallel, TP2 x zero3 DP2 with activation checkpointing (4
//    ranks), TP2 x PP2 (the stages send their positions only), LoRA on every projection, a
//    Qwen3-style model (tied table, grouped-query attention, q/k norms) with held-out losses,
//    and a Qwen2-style one (q/k/v biases) give the 1-rank run's losses within 1e-5 (relative)
//    and its final weights within 1e-4 (L2 relative): the norms' gradients, each rank's
//    positions' share, are summed over the group;
//  - the run's start event records sequence_parallel; the bytes per step per rank equal the
//    run without it within 2% (reduce-scatter + all-gather move what an all-reduce moves) and
//    the planner's tensor-parallel traffic within 2%;
//  - a checkpoint written under sequence parallel resumes at one rank (it is layout-free);
//  - refusals before training: sequence parallel without tensor parallel, a --seq-len the group
//    does not divide, a vocabulary it does not divide, each naming the numbers and the fix.
#include <cmath>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "layout_training.h"

using namespace shard::testing;
using namespace shard::testing::layout;

namespace {

nlohmann::json startData(const std::string& tag)
{
    for (const auto& e : events(dir() + "/" + tag))
        if (e.value("kind", "") == "start" && e.contains("data"))
            return e["data"];
    return nlohmann::json::object();
}

} // namespace

int main()
{
    dir() = makeTempDir("sp-train");
    writeData();
    nlohmann::json base;
    makeLlamaAndQwenModels(&base);
    nlohmann::json odd = base;
    odd["model_type"] = "llama";
    odd["architectures"] = {"LlamaForCausalLM"};
    odd["vocab_size"] = 514; // 2 divides it, 4 does not
    odd["num_key_value_heads"] = 4;
    makeModel("odd-vocab", odd);

    const std::vector<std::string> sp = {"--tensor-parallel", "2", "--sequence-parallel"};
    const auto with = [](std::vector<std::string> a, const std::vector<std::string>& b) {
        a.insert(a.end(), b.begin(), b.end());
        return a;
    };

    const Run ref = train("llama", "llama-1", 1, {"--micro-batch", "4"});
    const Run refGa = train("llama", "llama-1-ga2", 1, {"--micro-batch", "2", "--grad-accum", "2"});
    const Run tp2
        = train("llama", "llama-tp2", 2, {"--micro-batch", "4", "--tensor-parallel", "2"});
    const Run sp2 = train("llama", "llama-sp2", 2, with({"--micro-batch", "4"}, sp));
    expectClose("llama TP2 SP vs 1 rank", ref, sp2);
    const nlohmann::json start = startData("llama-sp2");
    SHARD_EXPECT(start.value("sequence_parallel", false),
        "the start event records sequence_parallel: " + start.dump());
    expectClose("llama TP4 SP vs 1 rank", ref,
        train("llama", "llama-sp4", 4,
            {"--micro-batch", "4", "--tensor-parallel", "4", "--sequence-parallel"}));
    expectClose("llama TP2 SP x zero3 DP2 + ckpt vs 1 rank split", refGa,
        train("llama", "llama-sp2-zero3-dp2-ckpt", 4,
            with({"--micro-batch", "2", "--strategy", "zero3", "--checkpointing", "full"}, sp)));
    expectClose("llama TP2 SP x PP2 vs 1 rank split", refGa,
        train("llama", "llama-sp2-pp2", 4,
            with({"--micro-batch", "2", "--grad-accum", "2", "--pipeline-parallel", "2"}, sp)));

    // LoRA on every projection: the adapters are compared too.
    {
        const std::vector<std::string> lora
            = {"--method", "lora", "--lora-targets", "q,k,v,o,gate,up,down"};
        const Run loraRef = train("llama", "lora-1", 1, with({"--micro-batch", "4"}, lora));
        const Run loraSp
            = train("llama", "lora-sp2", 2, with(with({"--micro-batch", "4"}, lora), sp));
        expectClose("llama LoRA TP2 SP vs 1 rank", loraRef, loraSp);
        const auto a = f32Tensors(dir() + "/lora-1/adapter/adapter_model.safetensors");
        const auto b = f32Tensors(dir() + "/lora-sp2/adapter/adapter_model.safetensors");
        const RunDiff d = compareRuns({1.0}, {1.0}, a, b);
        std::printf(
            "%-40s adapters L2 rel %.3g (%zu tensors)\n", "LoRA TP2 SP", d.weightL2, a.size());
        SHARD_EXPECT(a.size() == 56 && d.weightL2 <= 1e-4, "LoRA TP2 SP adapters match one rank");
    }

    // Qwen3 (tied table split by vocabulary, q/k norms) with held-out losses; Qwen2 (biases).
    {
        const std::vector<std::string> eval = {"--eval-every", "4", "--eval-fraction", "0.1"};
        const Run q = train("qwen3", "qwen3-1", 1, with({"--micro-batch", "4"}, eval));
        const Run qSp
            = train("qwen3", "qwen3-sp2", 2, with(with({"--micro-batch", "4"}, eval), sp));
        expectClose("qwen3 TP2 SP vs 1 rank", q, qSp);
        const std::vector<double> a = evalLosses(q), b = evalLosses(qSp);
        SHARD_EXPECT(!a.empty() && a.size() == b.size(), "held-out losses on both runs");
        for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
            std::printf("qwen3 TP2 SP eval loss %.9g, 1 rank %.9g\n", b[i], a[i]);
            SHARD_EXPECT(std::abs(a[i] - b[i]) <= 1e-5 * std::abs(a[i]),
                "qwen3 TP2 SP held-out loss matches one rank's");
        }
    }
    expectClose("qwen2 TP2 SP vs 1 rank", train("qwen2", "qwen2-1", 1, {"--micro-batch", "4"}),
        train("qwen2", "qwen2-sp2", 2, with({"--micro-batch", "4"}, sp)));

    // Bytes: a reduce-scatter and an all-gather move what the all-reduce they replace moves.
    {
        const int64_t withSp = stepBytes(sp2), without = stepBytes(tp2);
        const int64_t planned = plannedTpBytes(false, true);
        std::printf("TP2 SP bytes/step/rank %lld, TP2 %lld (ratio %.4f), planner %lld (ratio "
                    "%.4f)\n",
            static_cast<long long>(withSp), static_cast<long long>(without),
            double(withSp) / double(without), static_cast<long long>(planned),
            double(withSp) / double(planned));
        SHARD_EXPECT(without > 0 && std::abs(double(withSp) / double(without) - 1.0) <= 0.02,
            "TP2 SP bytes per step within 2% of TP2's");
        SHARD_EXPECT(planned > 0 && std::abs(double(withSp) / double(planned) - 1.0) <= 0.02,
            "TP2 SP bytes per step within 2% of the planner's");
    }

    // Resume: a TP2 SP x zero3 DP2 checkpoint of step 3 at one rank.
    expectClose("resumed TP2 SP x DP2 -> 1 rank vs 1 rank", ref,
        chainedRun("llama",
            {{4, with({"--micro-batch", "2", "--strategy", "zero3"}, sp)},
                {1, {"--micro-batch", "4"}}})
            .run);

    // Refusals, before any step, naming the numbers and the fix.
    expectRefusal("llama", "refuse-no-tp", 2, {"--sequence-parallel"},
        "--sequence-parallel splits the residual stream over the tensor-parallel ranks, and "
        "this run has none; use --tensor-parallel 2 or more");
    expectRefusal("llama", "refuse-seq", 2, with({"--seq-len", "31"}, sp),
        "--sequence-parallel splits each sequence of --seq-len 31 over the 2 tensor-parallel "
        "ranks, and 2 does not divide it; use --seq-len 30 or 32");
    expectRefusal("odd-vocab", "refuse-vocab", 4,
        {"--tensor-parallel", "4", "--sequence-parallel", "--micro-batch", "1"},
        "--tensor-parallel 4 does not divide the model's vocabulary of 514");

    if (g_failures == 0) {
        std::printf("tst_sp_training: all passed\n");
        removeTempDirs();
    }
    return g_failures == 0 ? 0 : 1;
}
