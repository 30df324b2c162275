// Helpers shared by the checkpoint tests: checks that count failures, temporary directories, a
// thread-backed all-ranks agreement so that several "ranks" of one save run in one process, and
// for the tests that train through the real shard-worker: running it, token data, step losses.
#pragma once

#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>

#include "ckpt/checkpoint_writer.h"
#include "process_runner.h"

namespace ckpt_test {

inline int& failures()
{
    static int n = 0;
    return n;
}

// main()'s result: 0 after "all <what> checks passed", else 1 after the failure count.
inline int finish(const char* what)
{
    if (failures())
        std::fprintf(stderr, "%d check(s) failed\n", failures());
    else
        std::printf("all %s checks passed\n", what);
    return failures() ? 1 : 0;
}

// Ours, not glog's (c10's logging header defines one when Torch is included first).
#undef CHECK
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);          \
            ++ckpt_test::failures();                                                               \
        }                                                                                          \
    } while (0)

// Expects `fn` to throw with a message containing every one of `parts`.
#define CHECK_THROWS_WITH(fn, ...)                                                                 \
    do {                                                                                           \
        std::string msg_;                                                                          \
        try {                                                                                      \
            fn();                                                                                  \
        } catch (const std::exception& e_) {                                                       \
            msg_ = e_.what();                                                                      \
        }                                                                                          \
        if (msg_.empty()) {                                                                        \
            std::fprintf(stderr, "%s:%d: expected an exception\n", __FILE__, __LINE__);            \
            ++ckpt_test::failures();                                                               \
        }                                                                                          \
        for (const std::string part_ : {__VA_ARGS__})                                              \
            if (!msg_.empty() && msg_.find(part_) == std::string::npos) {                          \
                std::fprintf(stderr, "%s:%d: message '%s' lacks '%s'\n", __FILE__, __LINE__,       \
                    msg_.c_str(), part_.c_str());                                                  \
                ++ckpt_test::failures();                                                           \
            }                                                                                      \
    } while (0)

inline bool bitEqual(const at::Tensor& a, const at::Tensor& b)
{
    return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type()
        && std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.nbytes()) == 0;
}

struct TempDir {
    std::string path;
    TempDir()
    {
        char tmpl[] = "/tmp/tst_ckpt_XXXXXX";
        path = mkdtemp(tmpl);
    }
    ~TempDir()
    {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
};

// A 2 MiB tmpfs mounted at `path` (created) for the full-disk tests, unmounted when this goes
// out of scope; mounted() is false (after a SKIP line naming `what`) where mounting is not
// allowed (not root).
struct SmallTmpfs {
    std::string path;
    bool ok = false;
    SmallTmpfs(const std::string& at, const char* what)
        : path(at)
    {
        std::filesystem::create_directories(path);
        ok = mount("tmpfs", path.c_str(), "tmpfs", 0, "size=2m") == 0;
        if (!ok)
            std::printf("SKIP %s: cannot mount a tmpfs here (%s); run as root to test ENOSPC\n",
                what, std::strerror(errno));
    }
    ~SmallTmpfs()
    {
        if (ok)
            umount2(path.c_str(), MNT_DETACH);
    }
    bool mounted() const { return ok; }
};

// The shard-worker binary named by $SHARD_WORKER (the test's CMake sets it), or "" after saying
// on stderr what is missing.
inline std::string workerFromEnv()
{
    const char* worker = std::getenv("SHARD_WORKER");
    if (!worker || !std::filesystem::exists(worker)) {
        std::fprintf(stderr, "SHARD_WORKER must name the shard-worker binary\n");
        return {};
    }
    return worker;
}

// Starts `worker args...` with stdout and stderr written to `log`.
inline pid_t spawnWorker(
    const std::string& worker, std::vector<std::string> args, const std::string& log)
{
    const pid_t pid = fork();
    if (pid == 0) {
        const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        std::vector<char*> argv {const_cast<char*>(worker.c_str())};
        for (auto& a : args)
            argv.push_back(a.data());
        argv.push_back(nullptr);
        execv(worker.c_str(), argv.data());
        _exit(127);
    }
    return pid;
}

// Runs `worker args...` to its end: its exit code, or 128 + the signal that ended it.
inline int runWorker(
    const std::string& worker, const std::vector<std::string>& args, const std::string& log)
{
    int status = 0;
    waitpid(spawnWorker(worker, args, log), &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

using shard::testing::stepLosses;
using shard::testing::writeTokenRows;

// What the worker-driven tests train on: root/model, a tiny-1m model (seed 1), and
// root/data.jsonl (writeTokenRows). False when init-model failed (its log: root/init.log).
inline bool makeTinyModelAndData(const std::string& worker, const std::string& root, int spread)
{
    writeTokenRows(root + "/data.jsonl", spread);
    return runWorker(worker,
               {"init-model", "--preset", "tiny-1m", "--out", root + "/model", "--seed", "1"},
               root + "/init.log")
        == 0;
}

// The start of a worker-driven test: single-threaded ATen, `worker` from $SHARD_WORKER and
// makeTinyModelAndData under `root`. False after saying on stderr what is missing or failed.
inline bool setUpWorkerTest(std::string& worker, const std::string& root, int spread)
{
    at::set_num_threads(1);
    worker = workerFromEnv();
    if (worker.empty())
        return false;
    if (!makeTinyModelAndData(worker, root, spread)) {
        std::fprintf(stderr, "init-model failed: see %s/init.log\n", root.c_str());
        return false;
    }
    return true;
}

// Collective AND across `n` threads (a reusable barrier).
class Agreement {
public:
    explicit Agreement(int n)
        : m_n(n)
    {
    }
    bool agree(bool ok)
    {
        std::unique_lock<std::mutex> lock(m_mutex);
        const int gen = m_generation;
        m_allOk = m_allOk && ok;
        if (++m_arrived == m_n) {
            m_result = m_allOk;
            m_arrived = 0;
            m_allOk = true;
            ++m_generation;
            m_cv.notify_all();
        } else {
            m_cv.wait(lock, [&] { return m_generation != gen; });
        }
        return m_result;
    }

private:
    int m_n;
    int m_arrived = 0;
    int m_generation = 0;
    bool m_allOk = true;
    bool m_result = true;
    std::mutex m_mutex;
    std::condition_variable m_cv;
};

// A synthetic model: global parameter, m and v per tensor, deterministic per (seed, name).
struct Synthetic {
    std::vector<shard::ckpt::TensorSpec> specs;
    std::vector<at::Tensor> param, m, v;
};

inline Synthetic makeSynthetic(
    const std::vector<std::pair<std::string, std::vector<int64_t>>>& shapes, int seed)
{
    Synthetic s;
    int i = 0;
    for (const auto& [name, shape] : shapes) {
        s.specs.push_back({name, shape, shape.size() > 1});
        at::Generator gen = at::detail::createCPUGenerator(1000 * seed + i++);
        s.param.push_back(at::randn(shape, gen, at::kFloat));
        s.m.push_back(at::randn(shape, gen, at::kFloat) * 0.1);
        s.v.push_back(at::rand(shape, gen, at::kFloat) * 0.01);
    }
    return s;
}

// The buffer a rank holds under a placement: its rows of `global`, zero-padded.
inline at::Tensor localBuffer(const at::Tensor& global, const shard::ckpt::ShardPlacement& p)
{
    const auto rows = shard::ckpt::rowsOf(global.size(0), p);
    auto shape = global.sizes().vec();
    shape[0] = rows.padded;
    at::Tensor out = at::zeros(shape, at::kFloat);
    if (rows.rows() > 0)
        out.narrow(0, 0, rows.rows()).copy_(global.narrow(0, rows.begin, rows.rows()));
    return out;
}

inline std::vector<shard::ckpt::LocalTensor> localTensors(
    const Synthetic& s, const shard::ckpt::ShardPlacement& p)
{
    std::vector<shard::ckpt::LocalTensor> out;
    for (size_t i = 0; i < s.specs.size(); ++i)
        out.push_back({s.specs[i].name, s.specs[i].shape, s.specs[i].decay,
            localBuffer(s.param[i], p), localBuffer(s.m[i], p), localBuffer(s.v[i], p)});
    return out;
}

inline nlohmann::json tinyModelConfig(int layers = 2)
{
    return {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"vocab_size", 64},
        {"hidden_size", 16}, {"intermediate_size", 32}, {"num_hidden_layers", layers},
        {"num_attention_heads", 2}, {"num_key_value_heads", 2}, {"max_position_embeddings", 64},
        {"rms_norm_eps", 1e-5}, {"rope_theta", 10000.0}, {"tie_word_embeddings", false}};
}

// Saves `s` as `strategy` at `world` ranks (one thread per rank). Returns rank 0's result or
// throws rank 0's error.
inline shard::ckpt::SaveResult saveSynthetic(const Synthetic& s, const std::string& ckptDir,
    int64_t step, const std::string& strategy, int world, int group = 0,
    const std::string& runId = "run-a", nlohmann::json modelConfig = tinyModelConfig(),
    int keep = 0)
{
    Agreement agreement(world);
    std::vector<std::thread> threads;
    std::vector<std::string> errors(world);
    shard::ckpt::SaveResult result;
    for (int r = 0; r < world; ++r) {
        threads.emplace_back([&, r] {
            shard::ckpt::SaveRequest req;
            req.checkpointsDir = ckptDir;
            req.step = step;
            req.runId = runId;
            req.strategy = strategy;
            req.rank = r;
            req.worldSize = world;
            req.shardGroup = group;
            req.modelConfig = modelConfig;
            req.data = {{"files", {"train.jsonl"}}, {"seq_len", 16}};
            req.trainState = {{"step", step}, {"data_position", {{"epoch", 0}, {"index", 4}}}};
            req.rankState = {{"rank", r}};
            req.rng = at::full({8}, r, at::kByte);
            req.keep = keep;
            req.agree = [&](bool ok) { return agreement.agree(ok); };
            const auto p = shard::ckpt::placementFor(strategy, r, world, group);
            try {
                auto res = shard::ckpt::saveCheckpoint(req, localTensors(s, p));
                if (r == 0)
                    result = res;
            } catch (const std::exception& e) {
                errors[r] = e.what();
            }
        });
    }
    for (auto& t : threads)
        t.join();
    if (!errors[0].empty())
        throw std::runtime_error(errors[0]);
    return result;
}

} // namespace ckpt_test
