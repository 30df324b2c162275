// Training throughput of the engine on a preset (seeded random weights, random tokens), plus a
// large fp32 matmul's FLOP/s with the same thread count. Prints one JSON object.
// usage: bench_engine_train --preset tiny-15m --batch 4 --seq 256 --steps 6 --threads 2
//        [--precision fp32|bf16-mixed] [--checkpointing none|full] [--layers N] [--vocab V]
//        [--strategy single|ddp|zero3|...] (default single: the in-process strategy; the others
//        are shard-worker's sharded strategy at one rank, for profiling the product's step)
//        [--profile-steps N] (self time per ATen op over N extra steps, in "profile")
//        [--model-out DIR] (only writes the model folder there: config.json for bench_eager.py,
//        seeded weights for shard-worker train)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <time.h>
#include <unistd.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <nlohmann/json.hpp>

#include "core/model/hf_folder.h"
#include "core/model/llama_model.h"
#include "core/optim/adamw.h"
#include "core/train/model_runner.h"
#include "core/train/trainer.h"
#include "op_profile.h"
#ifdef SHARD_HAVE_FSDP
#include "fsdp/register_strategies.h"
#endif

using namespace shard;
using namespace shard::engine;

int main(int argc, char** argv)
{
    std::string preset = "tiny-15m", precision = "fp32", checkpointing = "none",
                strategy = "single";
    std::filesystem::path modelOut;
    int64_t batch = 4, seq = 256, steps = 6, layers = 0, vocab = 0, profileSteps = 0;
    int threads = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i], v = argv[i + 1];
        if (k == "--preset")
            preset = v;
        else if (k == "--batch")
            batch = std::stoll(v);
        else if (k == "--seq")
            seq = std::stoll(v);
        else if (k == "--steps")
            steps = std::stoll(v);
        else if (k == "--threads")
            threads = std::stoi(v);
        else if (k == "--precision")
            precision = v;
        else if (k == "--checkpointing")
            checkpointing = v;
        else if (k == "--layers")
            layers = std::stoll(v);
        else if (k == "--vocab")
            vocab = std::stoll(v);
        else if (k == "--strategy")
            strategy = v;
        else if (k == "--profile-steps")
            profileSteps = std::stoll(v);
        else if (k == "--model-out")
            modelOut = v;
        else {
            std::fprintf(stderr, "unknown option %s\n", k.c_str());
            return 2;
        }
    }
    try {
        auto spec = plan::findPreset(preset);
        if (!spec)
            throw std::runtime_error("unknown preset " + preset);
        const auto dir = std::filesystem::temp_directory_path()
            / ("bench-engine-" + preset + "-" + std::to_string(::getpid()));
        std::filesystem::create_directories(dir);
        spec->torchDtype = "float32";
        if (layers > 0)
            spec->numLayers = layers;
        if (vocab > 0)
            spec->vocabSize = vocab;
        {
            LlamaModel model(*spec);
            NamedTensors tensors;
            for (Param* p : model.params())
                tensors.push_back({p->info.name, LlamaModel::initialValue(*p, 1)});
            writeHfConfigAndTokenizer(dir.string(), *spec, {});
            writeSafetensorsFolder(dir.string(), tensors);
        }
        {
            std::ofstream data(dir / "data.jsonl");
            std::mt19937 rng(3);
            for (int64_t r = 0; r < batch * (steps + 1); ++r) {
                std::vector<int> ids(seq);
                for (auto& id : ids)
                    id = static_cast<int>(rng() % spec->vocabSize);
                data << nlohmann::json {{"input_ids", ids}}.dump() << "\n";
            }
        }
        if (!modelOut.empty()) {
            std::filesystem::create_directories(modelOut);
            for (const auto& e : std::filesystem::directory_iterator(dir))
                std::filesystem::copy(e.path(), modelOut / e.path().filename(),
                    std::filesystem::copy_options::overwrite_existing);
            std::filesystem::remove_all(dir);
            return 0;
        }
        protocol::RunSpec rs;
        rs.model = dir.string();
        rs.data = {(dir / "data.jsonl").string()};
        rs.steps = steps;
        rs.microBatch = batch;
        rs.seqLen = seq;
        rs.lr = 1e-4;
        rs.threads = threads;
        rs.precision = precision;
        rs.checkpointing = checkpointing;
        rs.shuffle = false;
        // Unregistered, a strategy name at one rank is the single-process strategy.
        if (strategy != "single") {
            rs.strategy = strategy;
#ifdef SHARD_HAVE_FSDP
            fsdp::registerStrategies();
#else
            throw std::runtime_error("--strategy " + strategy + " needs shard_fsdp in this build");
#endif
        }
        Trainer trainer(rs, TrainerOptions {false, false, false});
        TrainResult result = trainer.run();
        const int64_t params = trainer.model().numParams();

        // Where the time of one step goes (process CPU time, the trained model, same shapes).
        auto cpuNow = [] {
            timespec ts {};
            clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
            return ts.tv_sec + 1e-9 * ts.tv_nsec;
        };
        ModelRunner runner(trainer.model(), trainer.strategy(),
            ForwardConfig {computeDtypeFor(precision), checkpointing == "full"});
        at::Tensor ids = at::randint(0, spec->vocabSize, {batch, seq}, at::kLong);
        AdamW adamw(AdamWConfig {});
        double fwd = 0, bwd = 0, opt = 0;
        const int phaseReps = profileSteps > 0 ? 2 : 0;
        bench::OpProfile profiler;
        double profiledSec = 0.0;
        for (int r = 0; r <= phaseReps + profileSteps && phaseReps > 0; ++r) { // 0 warms up
            const bool profiling = r > phaseReps;
            if (profiling && r == phaseReps + 1)
                profiler.start();
            const auto w0 = std::chrono::steady_clock::now();
            const double c0 = cpuNow();
            LossSum ls = runner.lossSum(ids, ids);
            const double c1 = cpuNow();
            (ls.sum / static_cast<double>(ls.tokens)).backward();
            const double c2 = cpuNow();
            {
                RECORD_USER_SCOPE("shard::optimizer_step");
                auto targets = trainer.strategy().optimizerTargets();
                const double norm = std::sqrt(trainer.strategy().globalGradSquaredNorm(targets));
                adamw.step(targets, 1e-5, norm > 1.0 ? 1.0 / (norm + 1e-6) : 1.0);
                trainer.strategy().zeroGrad();
            }
            const double c3 = cpuNow();
            if (profiling)
                profiledSec
                    += std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
            if (r == 0 || profiling)
                continue;
            fwd += c1 - c0;
            bwd += c2 - c1;
            opt += c3 - c2;
        }
        nlohmann::json profile = nlohmann::json::object();
        if (profileSteps > 0) {
            for (const auto& [name, sec] : profiler.stop())
                profile[name] = sec / profileSteps;
            profile["wall_per_step"] = profiledSec / profileSteps;
        }

        // A large matmul with the same threads, in fp32 and in bf16 (at::mm): the machine's
        // practical peaks for MFU.
        at::set_num_threads(threads);
        const int64_t n = 2048;
        auto mmRate = [&](at::ScalarType dtype, int reps, double* cpuRate) {
            at::Tensor a = at::randn({n, n}).to(dtype), b = at::randn({n, n}).to(dtype);
            at::mm(a, b);
            const auto t0 = std::chrono::steady_clock::now();
            const double cpu0 = cpuNow();
            for (int i = 0; i < reps; ++i)
                at::mm(a, b);
            const double cpuSec = cpuNow() - cpu0;
            const double sec
                = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            // Per CPU-second, comparable with cpu_tokens_per_sec on a loaded machine.
            if (cpuRate)
                *cpuRate = reps * 2.0 * n * n * n / cpuSec;
            return reps * 2.0 * n * n * n / sec;
        };
        double matmulCpuFlops = 0, bf16MatmulCpuFlops = 0;
        const double matmulFlops = mmRate(at::kFloat, 5, &matmulCpuFlops);
        const double bf16MatmulFlops = mmRate(at::kBFloat16, 1, &bf16MatmulCpuFlops);
        const double flopsPerToken = 6.0 * params + 12.0 * spec->numLayers * spec->hiddenSize * seq;
        nlohmann::json out = {{"impl", "engine"}, {"preset", preset}, {"params", params},
            {"batch", batch}, {"seq", seq}, {"threads", at::get_num_threads()},
            {"precision", precision}, {"steps", steps}, {"tokens_per_sec", result.tokensPerSec},
            {"cpu_tokens_per_sec", result.cpuTokensPerSec}, {"step_sec", result.meanStepSec},
            {"flops_per_token", flopsPerToken},
            {"achieved_flops", result.tokensPerSec * flopsPerToken}, {"matmul_flops", matmulFlops},
            {"matmul_cpu_flops", matmulCpuFlops}, {"bf16_matmul_flops", bf16MatmulFlops},
            {"bf16_matmul_cpu_flops", bf16MatmulCpuFlops}, {"profile", profile},
            {"phase_cpu_sec",
                {{"forward", fwd / std::max(1, phaseReps)},
                    {"backward", bwd / std::max(1, phaseReps)},
                    {"optimizer", opt / std::max(1, phaseReps)}}},
            {"peak_bytes", result.peakBytes}, {"losses", result.losses}};
        std::printf("%s\n", out.dump().c_str());
        std::filesystem::remove_all(dir);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_engine_train: %s\n", e.what());
        return 1;
    }
    return 0;
}
