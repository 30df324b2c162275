// Device selection (--device auto|cuda|cpu): the choice for a local rank and a GPU count, the run
// spec's field, and `shard-worker train` as a user runs it on this machine (auto trains on the
// CPU where LibTorch sees no GPU and run.json says so; cuda without one is a one-line error
// naming this build's LibTorch).
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "dist/build_info.h"
#include "dist/device_choice.h"
#include "engine_test_util.h"
#include "protocol/run_spec.h"
#include "protocol/train_flags.h"

using nlohmann::json;
namespace fs = std::filesystem;
using shard::dist::chooseDevice;

namespace {

std::string g_dir, g_model, g_data;

shard::test::CommandOutput worker(const std::string& args)
{
    return shard::test::runCaptured(
        "timeout -s KILL 120 " + std::string(SHARD_WORKER) + " " + args + " 2>&1");
}

bool contains(const shard::test::CommandOutput& r, const std::string& part)
{
    if (r.output.find(part) != std::string::npos)
        return true;
    std::fprintf(stderr, "output lacks '%s':\n%s\n", part.c_str(), r.output.c_str());
    return false;
}

std::string trainFlags(const std::string& out)
{
    return "train --model " + g_model + " --data " + g_data + " --out " + out
        + " --steps 1 --seq-len 16 --micro-batch 2 --threads 1";
}

void choice()
{
    T_CHECK(chooseDevice("auto", 0, 0) == c10::Device(c10::DeviceType::CPU));
    T_CHECK(chooseDevice("cpu", 3, 8) == c10::Device(c10::DeviceType::CPU));
    T_CHECK(chooseDevice("auto", 1, 2) == c10::Device(c10::DeviceType::CUDA, 1));
    T_CHECK(chooseDevice("cuda", 0, 1) == c10::Device(c10::DeviceType::CUDA, 0));
    EXPECT_THROW_WITH(
        chooseDevice("cuda", 2, 2), "local rank 2 has no GPU", "2 GPUs", "--nproc-per-node 2");
    EXPECT_THROW_WITH(chooseDevice("auto", 1, 1), "local rank 1 has no GPU", "1 GPU ",
        "--device cpu trains on the CPU instead");
    EXPECT_THROW_WITH(chooseDevice("cuda", 0, 0), "--device cuda: no CUDA GPU",
        shard::dist::buildInfo(), "use --device cpu");
    EXPECT_THROW_WITH(chooseDevice("gpu", 0, 4), "--device 'gpu' is not one of: auto, cuda, cpu");
    // This machine: what LibTorch sees decides auto.
    const int gpus = shard::dist::visibleCudaDevices();
    T_CHECK(shard::dist::resolveDevice("auto", 0)
        == (gpus > 0 ? c10::Device(c10::DeviceType::CUDA, 0) : c10::Device(c10::DeviceType::CPU)));
}

void specField()
{
    shard::protocol::RunSpec s;
    T_CHECK(s.device == "auto");
    for (const std::string d : {"auto", "cpu", "cuda"}) {
        s.device = d;
        T_CHECK(shard::protocol::runSpecFromJson(shard::protocol::toJson(s)).device == d);
    }
    T_CHECK(shard::protocol::runSpecFromJson(json::object()).device == "auto");
    s.model = "m";
    s.data = {"d.jsonl"};
    s.steps = 1;
    s.device = "tpu";
    EXPECT_THROW_WITH(shard::protocol::validate(s), "device 'tpu' is not one of: auto, cpu, cuda");
    s.device = "auto";
    shard::protocol::validate(s);
    shard::protocol::applyTrainFlags(s, {"--device", "cuda"});
    T_CHECK(s.device == "cuda");
    shard::protocol::applyTrainFlags(s, {"--device=cpu"});
    T_CHECK(s.device == "cpu");
}

void workerRuns()
{
    // auto (the default): the CPU here; run.json and the start event record it.
    const int gpus = shard::dist::visibleCudaDevices();
    const std::string expected = gpus > 0 ? "cuda" : "cpu";
    auto r = worker(trainFlags(g_dir + "/auto"));
    T_CHECK_MSG(r.code == 0, r.output);
    std::ifstream spec(g_dir + "/auto/run.json");
    T_CHECK(json::parse(spec, nullptr, false).value("device", "") == expected);
    bool started = false;
    std::ifstream events(g_dir + "/auto/events.jsonl");
    for (std::string line; std::getline(events, line);) {
        const json e = json::parse(line, nullptr, false);
        if (e.value("kind", "") == "start") {
            started = true;
            T_CHECK(e["data"].value("device", "") == (gpus > 0 ? "cuda:0" : "cpu"));
        }
    }
    T_CHECK(started);
    r = worker(trainFlags(g_dir + "/cpu") + " --device cpu");
    T_CHECK_MSG(r.code == 0, r.output);
    // A bad name: refused before anything is written.
    r = worker(trainFlags(g_dir + "/bad") + " --device gpu");
    T_CHECK(r.code == 1);
    T_CHECK(contains(r, "device 'gpu' is not one of: auto, cpu, cuda"));
    T_CHECK(!fs::exists(g_dir + "/bad/metrics.jsonl"));
    if (gpus > 0) {
        std::printf("skipping the --device cuda refusal: LibTorch sees %d GPU(s) here\n", gpus);
        return;
    }
    // cuda where LibTorch sees no GPU: one line naming the build.
    r = worker(trainFlags(g_dir + "/cuda") + " --device cuda");
    T_CHECK(r.code == 1);
    T_CHECK(contains(r, "--device cuda: no CUDA GPU is visible to this rank"));
    T_CHECK(contains(r, shard::dist::buildInfo()));
    T_CHECK(contains(r, "use --device cpu"));
    // A CUDA build says what the driver has to do with it (CI's CUDA root has none loaded).
    if (!shard::dist::cudaBuildVersion().empty() && !fs::exists("/proc/driver/nvidia/version"))
        T_CHECK(contains(r, "no NVIDIA driver is loaded on this node"));
    T_CHECK(!fs::exists(g_dir + "/cuda/metrics.jsonl"));
    // Under the launcher, the same error reaches the run's events.
    r = worker(
        "launch --nproc-per-node 1 -- " + trainFlags(g_dir + "/cuda-launched") + " --device cuda");
    T_CHECK(r.code != 0);
    T_CHECK(contains(r, "no CUDA GPU is visible"));
}

} // namespace

int main()
{
    g_dir = shard::test::tempDir("tst_device_choice");
    g_model = g_dir + "/model";
    g_data = g_dir + "/data.jsonl";
    const auto init = worker("init-model --preset tiny-1m --out " + g_model + " --seed 1");
    if (init.code != 0) {
        std::fprintf(stderr, "init-model failed:\n%s\n", init.output.c_str());
        return 1;
    }
    {
        std::ofstream out(g_data);
        for (int i = 0; i < 16; ++i) {
            json ids = json::array();
            for (int t = 0; t < 12; ++t)
                ids.push_back(10 + (i + t) % 50);
            out << json {{"input_ids", ids}}.dump() << "\n";
        }
    }
    choice();
    specField();
    workerRuns();
    fs::remove_all(g_dir);
    return shard::test::finish("tst_device_choice");
}
