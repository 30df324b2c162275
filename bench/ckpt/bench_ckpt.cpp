// Checkpoint save and load time per GB: synthetic fp32 state (parameters, AdamW m and v) saved
// by W "ranks" (threads running the real save protocol: temp dir, fsync, rename, DONE), then
// loaded back as the shards of the same layout and resharded to another world size, warm (page
// cache) and, when the caches can be dropped (root), cold.
//   bench_ckpt [--dir DIR] [--gb G] [--ranks W] [--to W2]
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "ckpt/checkpoint_reader.h"
#include "ckpt/checkpoint_store.h"
#include "ckpt/checkpoint_writer.h"

using namespace shard::ckpt;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

struct Agreement {
    std::mutex m;
    std::condition_variable cv;
    int n, arrived = 0, gen = 0;
    bool all = true, result = true;
    explicit Agreement(int count)
        : n(count)
    {
    }
    bool agree(bool ok)
    {
        std::unique_lock<std::mutex> lock(m);
        const int g = gen;
        all = all && ok;
        if (++arrived == n) {
            result = all;
            all = true;
            arrived = 0;
            ++gen;
            cv.notify_all();
        } else {
            cv.wait(lock, [&] { return gen != g; });
        }
        return result;
    }
};

double secondsSince(Clock::time_point t0)
{
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

bool dropCaches()
{
    ::sync();
    std::ofstream f("/proc/sys/vm/drop_caches");
    if (!f)
        return false;
    f << "3\n";
    f.close();
    return static_cast<bool>(f);
}

} // namespace

int main(int argc, char** argv)
{
    std::string dir = "/tmp/bench_ckpt";
    double gb = 1.0;
    int ranks = 4, to = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i];
        if (k == "--dir")
            dir = argv[i + 1];
        else if (k == "--gb")
            gb = std::stod(argv[i + 1]);
        else if (k == "--ranks")
            ranks = std::stoi(argv[i + 1]);
        else if (k == "--to")
            to = std::stoi(argv[i + 1]);
    }
    at::set_num_threads(1);
    // Llama-like shapes: square matrices of 2048 x 2048 (16 MiB fp32) plus a norm vector each.
    const int64_t h = 2048;
    const int64_t perTensorBytes = 3 * (h * h + h) * 4; // param + m + v
    const int64_t n = std::max<int64_t>(1, static_cast<int64_t>(gb * 1e9 / perTensorBytes));
    std::vector<TensorSpec> specs;
    std::vector<at::Tensor> params;
    for (int64_t i = 0; i < n; ++i) {
        specs.push_back({"layers." + std::to_string(i) + ".w", {h, h}, true});
        specs.push_back({"layers." + std::to_string(i) + ".norm", {h}, false});
        params.push_back(at::randn({h, h}));
        params.push_back(at::randn({h}));
    }
    const double totalGB = static_cast<double>(n * perTensorBytes) / 1e9;
    fs::remove_all(dir);
    const std::string ckpts = dir + "/checkpoints";

    // Each rank's buffers (its chunk of every tensor), built before the clock starts.
    std::vector<std::vector<LocalTensor>> local(ranks);
    for (int r = 0; r < ranks; ++r) {
        const ShardPlacement p = placementFor("zero3", r, ranks);
        for (size_t i = 0; i < specs.size(); ++i) {
            const RowRange rows = rowsOf(specs[i].shape[0], p);
            auto shape = specs[i].shape;
            shape[0] = rows.padded;
            at::Tensor buf = at::zeros(shape);
            if (rows.rows() > 0)
                buf.narrow(0, 0, rows.rows()).copy_(params[i].narrow(0, rows.begin, rows.rows()));
            local[r].push_back(
                {specs[i].name, specs[i].shape, specs[i].decay, buf, buf * 0.5, buf.abs()});
        }
    }

    auto save = [&](int64_t step) {
        Agreement agreement(ranks);
        std::vector<std::thread> threads;
        for (int r = 0; r < ranks; ++r)
            threads.emplace_back([&, r] {
                SaveRequest req;
                req.checkpointsDir = ckpts;
                req.step = step;
                req.runId = "bench";
                req.strategy = "zero3";
                req.rank = r;
                req.worldSize = ranks;
                req.keep = 1;
                req.agree = [&](bool ok) { return agreement.agree(ok); };
                saveCheckpoint(req, local[r]);
            });
        for (auto& t : threads)
            t.join();
    };
    auto load = [&](int world) {
        CheckpointReader reader(finalDirFor(ckpts, 2));
        std::vector<std::thread> threads;
        for (int r = 0; r < world; ++r)
            threads.emplace_back([&, r] {
                const ShardPlacement p = placementFor("zero3", r, world);
                for (const auto& s : specs)
                    for (const auto& kind : stateKinds())
                        (void)reader.readShard(kind, s.name, p);
            });
        for (auto& t : threads)
            t.join();
        return reader.bytesRead();
    };

    save(1); // warm-up (allocations, directory creation)
    auto t0 = Clock::now();
    save(2);
    const double saveSec = secondsSince(t0);

    t0 = Clock::now();
    const int64_t bytesSame = load(ranks);
    const double loadWarm = secondsSince(t0);
    t0 = Clock::now();
    load(to);
    const double reshardWarm = secondsSince(t0);
    double loadCold = -1, reshardCold = -1;
    if (dropCaches()) {
        t0 = Clock::now();
        load(ranks);
        loadCold = secondsSince(t0);
        dropCaches();
        t0 = Clock::now();
        load(to);
        reshardCold = secondsSince(t0);
    }
    std::printf("state: %.3f GB (fp32 params + AdamW m + v, %lld tensors), %d ranks zero3, "
                "hardware threads %u\n",
        totalGB, static_cast<long long>(specs.size()), ranks, std::thread::hardware_concurrency());
    std::printf("| operation | seconds | s per GB | GB/s |\n|---|---|---|---|\n");
    auto row = [&](const char* what, double s) {
        if (s >= 0)
            std::printf("| %s | %.3f | %.3f | %.2f |\n", what, s, s / totalGB, totalGB / s);
    };
    row("save (write + fsync + rename + DONE)", saveSec);
    row("load, same layout, warm cache", loadWarm);
    row("load resharded, warm cache", reshardWarm);
    row("load, same layout, cold cache", loadCold);
    row("load resharded, cold cache", reshardCold);
    if (loadCold < 0)
        std::printf("(cold-cache rows skipped: cannot write /proc/sys/vm/drop_caches)\n");
    std::printf("bytes read by a same-layout load: %lld (state %lld)\n",
        static_cast<long long>(bytesSame), static_cast<long long>(n * perTensorBytes));
    fs::remove_all(dir);
    return 0;
}
