// The global batch across a resume at another rank count, through the real launcher: a 2-rank
// run resumed at 1 rank (and a 2-rank run at 4) with the same --micro-batch keeps the
// checkpoint's global batch (the micro-batch is adjusted, a "batch" event says so) and its losses
// match the uninterrupted run's; at 3 ranks, which cannot split it, the resume is refused unless
// --allow-batch-change, which the events record.
#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint_store.h"
#include "ckpt_test_util.h"

using namespace ckpt_test;
namespace fs = std::filesystem;

static std::string g_worker;
static std::string g_root;

static int train(int ranks, int microBatch, const std::string& out, bool resume,
    const std::string& log, std::vector<std::string> extra = {})
{
    std::vector<std::string> args {"launch", "--nproc-per-node", std::to_string(ranks), "--",
        "train", "--model", g_root + "/model", "--data", g_root + "/data.jsonl", "--steps", "8",
        "--seq-len", "32", "--lr", "3e-3", "--seed", "3", "--threads", "1", "--checkpoint-every",
        "4", "--keep-checkpoints", "2", "--micro-batch", std::to_string(microBatch), "--strategy",
        "zero3", "--out", out};
    if (resume)
        args.push_back("--resume");
    args.insert(args.end(), extra.begin(), extra.end());
    return runWorker(g_worker, args, log);
}

// A copy of `run` that holds only its step-4 checkpoint (same directory name: same run id).
static std::string copyAtStep4(const std::string& run, const std::string& parent)
{
    const std::string dst = parent + "/" + fs::path(run).filename().string();
    fs::create_directories(parent);
    fs::copy(run, dst, fs::copy_options::recursive);
    fs::remove_all(dst + "/model");
    for (const auto& c : shard::ckpt::listCheckpoints(dst + "/checkpoints"))
        if (c.step != 4)
            fs::remove_all(c.dir);
    return dst;
}

static std::vector<nlohmann::json> events(const std::string& run, const std::string& kind)
{
    std::vector<nlohmann::json> out;
    std::ifstream in(run + "/events.jsonl");
    for (std::string line; std::getline(in, line);) {
        const auto j = nlohmann::json::parse(line);
        if (j.value("kind", "") == kind)
            out.push_back(j);
    }
    return out;
}

static std::string slurp(const std::string& path)
{
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

// Largest relative loss difference over the steps after the checkpoint (8 steps expected).
static double worstAfterResume(
    const std::map<int64_t, double>& reference, const std::map<int64_t, double>& got)
{
    CHECK(got.size() == 8);
    double worst = 0;
    for (const auto& [step, loss] : reference)
        if (step > 4)
            worst = std::max(
                worst, got.count(step) ? std::abs(got.at(step) - loss) / std::abs(loss) : 1.0);
    return worst;
}

// `from` ranks x `micro` rows; resumed at `to` ranks with the same --micro-batch: the micro-batch
// becomes `expectMicro` and the losses follow the uninterrupted run.
static void keptAcross(int from, int micro, int to, int expectMicro)
{
    const std::string tag = std::to_string(from) + "to" + std::to_string(to);
    const std::string ref = g_root + "/ref" + tag;
    if (train(from, micro, ref, false, ref + ".log") != 0) {
        std::fprintf(stderr, "reference failed:\n%s\n", slurp(ref + ".log").c_str());
        ++failures();
        return;
    }
    const auto reference = stepLosses(ref);
    const std::string resumed = copyAtStep4(ref, g_root + "/resumed" + tag);
    const int rc = train(to, micro, resumed, true, resumed + ".log");
    CHECK(rc == 0);
    if (rc != 0)
        std::fprintf(stderr, "%s\n", slurp(resumed + ".log").c_str());
    const auto batch = events(resumed, "batch");
    CHECK(batch.size() == 1);
    if (batch.size() == 1) {
        CHECK(batch[0]["data"]["micro_batch"] == expectMicro);
        CHECK(batch[0]["data"]["global_batch"] == from * micro);
        CHECK(batch[0]["data"]["kept_global_batch"] == true);
    }
    const auto spec = nlohmann::json::parse(slurp(resumed + "/run.json"));
    CHECK(spec["procs_per_node"] == to && spec["micro_batch"] == expectMicro);
    const double worst = worstAfterResume(reference, stepLosses(resumed));
    std::printf("%d x mb %d -> %d ranks: micro-batch %d, max relative loss difference %.3g\n", from,
        micro, to, expectMicro, worst);
    CHECK(worst < 1e-5);
}

int main()
{
    TempDir tmp;
    g_root = tmp.path;
    if (!setUpWorkerTest(g_worker, g_root, 40))
        return 1;
    keptAcross(2, 1, 1, 2); // 2 rows: 1 rank takes both
    keptAcross(2, 2, 4, 1); // 4 rows: 4 ranks take one each

    // 2 rows cannot be split by 3 ranks: refused, naming the way out.
    const std::string ref = g_root + "/ref2to1";
    const std::string three = copyAtStep4(ref, g_root + "/three");
    CHECK(train(3, 1, three, true, three + ".log") != 0);
    const std::string log = slurp(three + ".log");
    CHECK(log.find("global batch is 2 rows") != std::string::npos);
    CHECK(log.find("--allow-batch-change") != std::string::npos);
    CHECK(!events(three, "error").empty());
    // Asked for: the new batch is used and recorded.
    CHECK(train(3, 1, three, true, three + "-allowed.log", {"--allow-batch-change"}) == 0);
    const auto batch = events(three, "batch");
    CHECK(batch.size() == 1 && batch[0]["data"]["global_batch"] == 3
        && batch[0]["data"]["kept_global_batch"] == false);
    CHECK(stepLosses(three).size() == 8);
    return finish("global batch");
}
