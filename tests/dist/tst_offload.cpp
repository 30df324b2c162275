// Offload through the real worker on CPU ranks (SHARD_OFFLOAD_ON_CPU=1: host-to-host copies stand
// in for the GPU's device-to-host and host-to-device ones; tiny-1m, fp32 unless said, 10 steps):
//  - zero3, zero2, zero1 and ddp at 2 ranks, hybrid at 4 ranks (shard groups of 2), zero3 with
//    gradient accumulation, zero3 at 1 rank and bf16-mixed zero3 at 2 ranks, with --offload
//    optimizer or params+optimizer, are bit-identical to the same runs without it (the same
//    AdamW loop on the same fp32 values, the same reductions);
//  - the memory records move the masters and AdamW state into "offloaded" (12 bytes per
//    parameter over N ranks), keep a compute-dtype shard on the device for optimizer offload
//    and none for params+optimizer, and the planner's host bytes are that plus the gradient
//    shard the step holds between its reduce and the zero-grad;
//  - TP2 with sequence parallel, PP2 and TP2 x PP2 offloaded are bit-identical to the same
//    layouts kept on the device;
//  - a 1-rank offload run killed after a checkpoint resumes bit-identically.
#include <cmath>
#include <cstdlib>
#include <map>

#include <nlohmann/json.hpp>

#include "plan/planner.h"
#include "process_runner.h"
#include "protocol/run_spec.h"
#include "run_outputs.h"

using namespace shard::testing;

namespace {

std::string g_dir;

struct Run {
    std::vector<double> losses;
    std::vector<nlohmann::json> metrics;
    std::map<std::string, std::vector<float>> weights;
};

std::vector<std::string> trainArgs(const std::string& out, const std::vector<std::string>& extra)
{
    std::vector<std::string> args = {"train", "--model", g_dir + "/model", "--data",
        g_dir + "/data.jsonl", "--steps", "10", "--seq-len", "32", "--lr", "1e-3", "--seed", "3",
        "--clip", "1.0", "--weight-decay", "0.1", "--threads", "1", "--out", out};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
}

Run train(const std::string& tag, int ranks, const std::vector<std::string>& extra)
{
    const std::string out = g_dir + "/" + tag;
    trainWithWorker(tag, ranks, trainArgs(out, extra), out, 200);
    Run r;
    r.metrics = metricRecords(out);
    for (const auto& j : r.metrics)
        r.losses.push_back(j.value("loss", 0.0));
    r.weights = f32Tensors(out + "/model/model.safetensors");
    SHARD_EXPECT(r.losses.size() == 10 && !r.weights.empty(), tag + ": no metrics or weights");
    return r;
}

int64_t memoryField(const Run& r, int rank, const char* field)
{
    return lastMemoryField(r.metrics, rank, field, int64_t(0));
}

void expectIdentical(const std::string& what, const Run& a, const Run& b)
{
    const RunDiff d = compareRuns(a.losses, b.losses, a.weights, b.weights);
    std::printf(
        "%-40s loss max rel %.3g  weights max rel %.3g\n", what.c_str(), d.loss, d.weightMax);
    SHARD_EXPECT(d.loss == 0 && d.weightMax == 0, what + ": bit-identical");
}

// tiny-1m: P parameters, every dim divisible by 2 (no shard padding).
constexpr int64_t kParams = 984192;

void testEquivalenceAndMemory()
{
    const std::vector<std::string> mb2 = {"--micro-batch", "2"};
    auto with = [](std::vector<std::string> a, std::initializer_list<const char*> more) {
        a.insert(a.end(), more.begin(), more.end());
        return a;
    };
    const Run z3 = train("zero3-2", 2, with(mb2, {"--strategy", "zero3"}));
    const Run z3Opt
        = train("zero3-2-opt", 2, with(mb2, {"--strategy", "zero3", "--offload", "optimizer"}));
    const Run z3All = train(
        "zero3-2-all", 2, with(mb2, {"--strategy", "zero3", "--offload", "params+optimizer"}));
    expectIdentical("zero3-2 --offload optimizer", z3, z3Opt);
    expectIdentical("zero3-2 --offload params+optimizer", z3, z3All);
    for (const char* s : {"zero2", "ddp"}) {
        const Run base = train(std::string(s) + "-2", 2, with(mb2, {"--strategy", s}));
        const Run off = train(std::string(s) + "-2-all", 2,
            with(mb2, {"--strategy", s, "--offload", "params+optimizer"}));
        expectIdentical(std::string(s) + "-2 --offload params+optimizer", base, off);
    }
    {
        const Run base = train("zero1-2", 2, with(mb2, {"--strategy", "zero1"}));
        const Run off
            = train("zero1-2-opt", 2, with(mb2, {"--strategy", "zero1", "--offload", "optimizer"}));
        expectIdentical("zero1-2 --offload optimizer", base, off);
    }
    // Hybrid: the reduced shard is all-reduced over the replicas before it goes to the host.
    const std::vector<std::string> hybrid
        = {"--micro-batch", "1", "--strategy", "hybrid", "--shard-group", "2"};
    expectIdentical("hybrid-4 --offload optimizer", train("hybrid-4", 4, hybrid),
        train("hybrid-4-opt", 4, with(hybrid, {"--offload", "optimizer"})));
    // Gradient accumulation: the unsharded gradients sum over the micro-steps on the device and
    // are reduced (and sent to the host) once per step.
    const std::vector<std::string> ga
        = {"--micro-batch", "1", "--grad-accum", "2", "--strategy", "zero3"};
    expectIdentical("zero3-2 grad-accum 2 --offload params+optimizer", train("zero3-ga2-2", 2, ga),
        train("zero3-ga2-2-all", 2, with(ga, {"--offload", "params+optimizer"})));
    const std::vector<std::string> one = {"--micro-batch", "4", "--strategy", "zero3"};
    expectIdentical("zero3-1 --offload optimizer", train("zero3-1", 1, one),
        train("zero3-1-opt", 1, with(one, {"--offload", "optimizer"})));
    // Tensor and pipeline layouts: each rank offloads its slice's (its stage's) state. Under
    // sequence parallel the norms' gradient parts are summed over the tensor-parallel group
    // from the host shard; TP2 x PP2 offloads on every stage of every slice.
    const std::vector<std::string> tpSp
        = {"--micro-batch", "4", "--tensor-parallel", "2", "--sequence-parallel"};
    expectIdentical("TP2 + SP --offload params+optimizer", train("tp2-sp", 2, tpSp),
        train("tp2-sp-all", 2, with(tpSp, {"--offload", "params+optimizer"})));
    const std::vector<std::string> pp
        = {"--micro-batch", "2", "--grad-accum", "2", "--pipeline-parallel", "2"};
    expectIdentical("PP2 --offload optimizer", train("pp2", 2, pp),
        train("pp2-opt", 2, with(pp, {"--offload", "optimizer"})));
    const std::vector<std::string> tpPp = with(pp, {"--tensor-parallel", "2"});
    expectIdentical("TP2 x PP2 --offload params+optimizer", train("tp2-pp2", 4, tpPp),
        train("tp2-pp2-all", 4, with(tpPp, {"--offload", "params+optimizer"})));
    const std::vector<std::string> bf16
        = with(mb2, {"--strategy", "zero3", "--precision", "bf16-mixed"});
    const Run b = train("bf16-zero3-2", 2, bf16);
    const Run bAll = train("bf16-zero3-2-all", 2, with(bf16, {"--offload", "params+optimizer"}));
    expectIdentical("bf16-mixed zero3-2 --offload params+optimizer", b, bAll);

    // Memory (the last record, after the step's zero-grad): masters and AdamW m, v offloaded.
    const int64_t P = kParams;
    for (int rank = 0; rank < 2; ++rank) {
        std::printf("rank %d: offloaded %lld / %lld / %lld (opt / all / bf16 all), sharded "
                    "%lld / %lld / %lld, optimizer %lld\n",
            rank, static_cast<long long>(memoryField(z3Opt, rank, "offloaded")),
            static_cast<long long>(memoryField(z3All, rank, "offloaded")),
            static_cast<long long>(memoryField(bAll, rank, "offloaded")),
            static_cast<long long>(memoryField(z3Opt, rank, "sharded_params")),
            static_cast<long long>(memoryField(z3All, rank, "sharded_params")),
            static_cast<long long>(memoryField(bAll, rank, "sharded_params")),
            static_cast<long long>(memoryField(z3Opt, rank, "optimizer")));
        SHARD_EXPECT(memoryField(z3, rank, "offloaded") == 0, "no offload, nothing offloaded");
        SHARD_EXPECT(memoryField(z3Opt, rank, "offloaded") == 12 * P / 2,
            "optimizer offload: fp32 masters and AdamW state in host memory");
        SHARD_EXPECT(memoryField(z3Opt, rank, "optimizer") == 0
                && memoryField(z3All, rank, "optimizer") == 0,
            "offload: no optimizer state on the device");
        SHARD_EXPECT(memoryField(z3Opt, rank, "sharded_params") == 4 * P / 2,
            "optimizer offload: the device keeps a compute-dtype (fp32) shard to gather from");
        SHARD_EXPECT(memoryField(z3All, rank, "sharded_params") == 0
                && memoryField(z3All, rank, "offloaded") == 12 * P / 2,
            "params+optimizer in fp32: no shard on the device, the masters are the source");
        SHARD_EXPECT(memoryField(bAll, rank, "sharded_params") == 0
                && memoryField(bAll, rank, "offloaded") == (12 + 2) * P / 2,
            "params+optimizer in bf16: a bf16 host shard beside the masters");
    }
    // The planner's host bytes per rank: the same state plus the fp32 gradient shard.
    for (const auto& [offload, measured] :
        {std::pair {shard::plan::Offload::Optimizer, memoryField(z3Opt, 0, "offloaded")},
            std::pair {
                shard::plan::Offload::ParamsAndOptimizer, memoryField(bAll, 0, "offloaded")}}) {
        shard::plan::PlanInput in;
        in.model = shard::plan::loadHfConfig(g_dir + "/model");
        in.strategy = shard::plan::Strategy::Zero3;
        in.precision = offload == shard::plan::Offload::Optimizer
            ? shard::plan::Precision::Fp32
            : shard::plan::Precision::Bf16Mixed;
        in.offload = offload;
        in.gpusPerNode = 2;
        in.microBatch = 2;
        in.seqLen = 32;
        in.device = shard::plan::DeviceSpec::gpu(80);
        const auto plan = shard::plan::plan(in);
        std::printf("planner host bytes %lld, measured %lld + gradient shard %lld\n",
            static_cast<long long>(plan.hostBytesPerDevice), static_cast<long long>(measured),
            static_cast<long long>(4 * P / 2));
        SHARD_EXPECT(plan.hostBytesPerDevice == measured + 4 * P / 2,
            "the planner's host bytes are the engine's offloaded state and gradient shard");
    }
}

void testResume()
{
    const std::vector<std::string> ck = {"--micro-batch", "4", "--strategy", "zero3", "--offload",
        "optimizer", "--checkpoint-every", "4", "--keep-checkpoints", "3"};
    const Run reference = train("resume-ref", 1, ck);
    const std::string out = g_dir + "/resume-killed";
    std::vector<std::string> argv = {workerPath()};
    for (const auto& a : trainArgs(out, ck))
        argv.push_back(a);
    auto p = spawnProcess(argv);
    SHARD_EXPECT(
        killWhen(p, out + "/checkpoints/step-4/DONE"), "killed after the step-4 checkpoint");
    argv.push_back("--resume");
    auto r = spawnProcess(argv);
    SHARD_EXPECT(r.wait(200) && r.exitCode() == 0, "resume: " + r.err);
    const auto a = stepLosses(g_dir + "/resume-ref");
    const auto b = stepLosses(out);
    SHARD_EXPECT(a.size() == 10 && a == b, "resumed offload losses are bit-identical");
    SHARD_EXPECT(f32Tensors(out + "/model/model.safetensors") == reference.weights,
        "resumed offload weights are bit-identical");
}

} // namespace

int main()
{
    g_dir = makeTempDir("offload");
    if (!makeTinyRunInputs(g_dir))
        return 1;
    ::setenv(shard::protocol::kOffloadOnCpuEnv, "1", 1); // the ranks inherit it
    testEquivalenceAndMemory();
    testResume();
    if (g_failures == 0) {
        std::printf("tst_offload: all passed\n");
        removeTempDirs();
    }
    return g_failures == 0 ? 0 : 1;
}
