// Atomicity of checkpoint writes: a writer process killed with SIGKILL at every phase (and once
// by its parent in the middle of writing its shard file) leaves the previous checkpoint intact
// and discoverable; a full disk (a small tmpfs mounted here) gives a clear error and removes the
// partial directory; keep-last-K; --resume resolution.
#include <csignal>
#include <filesystem>
#include <fstream>

#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt/checkpoint_reader.h"
#include "ckpt/checkpoint_store.h"
#include "ckpt_test_util.h"
#include "protocol/process_signal.h"

using namespace shard::ckpt;
using namespace ckpt_test;
namespace fs = std::filesystem;

static const std::vector<std::pair<std::string, std::vector<int64_t>>> kSmall {
    {"w", {6, 4}}, {"b", {3}}};

static SaveRequest request(const std::string& ckpts, int64_t step, int keep = 0)
{
    SaveRequest req;
    req.checkpointsDir = ckpts;
    req.step = step;
    req.runId = "run-a";
    req.modelConfig = tinyModelConfig();
    req.keep = keep;
    return req;
}

// The child: saves step 2 of `shapes` into `ckpts` and SIGKILLs itself at `phase` ("" = never;
// "wait" = pause after the temporary directory exists, for the parent to kill it mid-write).
static int childMain(const std::string& ckpts, const std::string& phase, const std::string& big)
{
    at::set_num_threads(1);
    const Synthetic s
        = big == "big" ? makeSynthetic({{"w", {4096, 4096}}}, 9) : makeSynthetic(kSmall, 2);
    SaveRequest req = request(ckpts, 2);
    req.onPhase = [&](const std::string& p) {
        if (phase == "parent" && p == "temp-created")
            std::ofstream(ckpts + "/../child-ready").put('1');
        if (p == phase)
            raise(SIGKILL);
    };
    saveCheckpoint(req, localTensors(s, placementFor("single", 0, 1)));
    return 0;
}

static pid_t spawnChild(const std::string& ckpts, const std::string& phase, const std::string& big)
{
    const pid_t pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", "tst_ckpt_atomic", "--child", ckpts.c_str(), phase.c_str(),
            big.c_str(), static_cast<char*>(nullptr));
        _exit(127);
    }
    return pid;
}

static int waitChild(pid_t pid)
{
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
}

// The previous checkpoint (step 1 of `s`) is intact, discoverable and resumable.
static void checkPreviousIntact(const std::string& run, const Synthetic& s)
{
    const auto latest = latestComplete(run);
    CHECK(latest && *latest == run + "/checkpoints/step-1");
    CHECK(resolveResume("auto", run) == run + "/checkpoints/step-1");
    CHECK(resolveResume(run, run) == run + "/checkpoints/step-1");
    if (!latest)
        return;
    CheckpointReader reader(*latest);
    for (size_t i = 0; i < s.specs.size(); ++i)
        CHECK(bitEqual(reader.readFull(kParam, s.specs[i].name), s.param[i]));
}

static void testKilledWriter()
{
    const Synthetic s1 = makeSynthetic(kSmall, 1);
    for (const std::string phase :
        {"temp-created", "shard-written", "manifest-written", "renamed", "published"}) {
        TempDir tmp;
        const std::string run = tmp.path + "/run";
        const std::string ckpts = run + "/checkpoints";
        saveCheckpoint(request(ckpts, 1), localTensors(s1, placementFor("single", 0, 1)));
        const int status = waitChild(spawnChild(ckpts, phase, "small"));
        CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        if (phase == "published") {
            // Killed after DONE: the new checkpoint is complete and is the one resumed.
            CHECK(*latestComplete(run) == ckpts + "/step-2");
            CheckpointReader r2(ckpts + "/step-2");
            CHECK(bitEqual(r2.readFull(kParam, "w"), makeSynthetic(kSmall, 2).param[0]));
            continue;
        }
        checkPreviousIntact(run, s1);
        if (phase == "renamed") {
            // Renamed but never marked DONE: present, ignored, and refused when named.
            CHECK(fs::exists(ckpts + "/step-2") && !isCompleteCheckpoint(ckpts + "/step-2"));
            CHECK_THROWS_WITH([&] { resolveResume(ckpts + "/step-2", run); }, "incomplete", "DONE");
            CHECK_THROWS_WITH([&] { CheckpointReader r(ckpts + "/step-2"); }, "incomplete");
        } else {
            CHECK(!fs::exists(ckpts + "/step-2"));
        }
        // The next save cleans up the leftovers and succeeds.
        const Synthetic s3 = makeSynthetic(kSmall, 3);
        saveCheckpoint(request(ckpts, 3, 2), localTensors(s3, placementFor("single", 0, 1)));
        CHECK(*latestComplete(run) == ckpts + "/step-3");
        CHECK(!fs::exists(tempDirFor(ckpts, 2)));
        CHECK(!fs::exists(ckpts + "/step-2")); // incomplete and older than step 3: pruned
        CHECK(fs::exists(ckpts + "/step-1"));  // keep 2
    }
}

static void testKilledByParentMidWrite()
{
    TempDir tmp;
    const std::string run = tmp.path + "/run";
    const std::string ckpts = run + "/checkpoints";
    const Synthetic s1 = makeSynthetic(kSmall, 1);
    saveCheckpoint(request(ckpts, 1), localTensors(s1, placementFor("single", 0, 1)));
    const pid_t pid = spawnChild(ckpts, "parent", "big"); // 3 x 64 MiB to write
    const std::string partial = tempDirFor(ckpts, 2) + "/" + rankFileName(0) + ".tmp";
    bool sawPartial = false;
    for (int i = 0; i < 20000; ++i) {
        std::error_code ec;
        if (fs::exists(partial, ec) && fs::file_size(partial, ec) > 0) {
            sawPartial = true;
            break;
        }
        int status = 0;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            std::fprintf(stderr, "child exited before it was killed (status %d)\n", status);
            ++failures();
            return;
        }
        usleep(500);
    }
    shard::protocol::signalProcess(pid, SIGKILL);
    const int status = waitChild(pid);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    std::printf("killed the writer %s writing its shard file\n", sawPartial ? "while" : "before");
    CHECK(sawPartial);
    checkPreviousIntact(run, s1);
    CHECK(!fs::exists(ckpts + "/step-2"));
}

static void testFullDisk()
{
    TempDir tmp;
    const std::string mnt = tmp.path + "/small";
    const SmallTmpfs small2m(mnt, "full-disk test");
    if (!small2m.mounted())
        return;
    const std::string run = mnt + "/run";
    const std::string ckpts = run + "/checkpoints";
    const Synthetic small = makeSynthetic(kSmall, 1);
    saveCheckpoint(request(ckpts, 1), localTensors(small, placementFor("zero3", 0, 1)));
    // 3 x 2 MiB (3 x 1 MiB per rank at 2 ranks) does not fit in what is left of 2 MiB.
    const Synthetic big = makeSynthetic({{"w", {1024, 512}}}, 2);
    SaveRequest req = request(ckpts, 2);
    CHECK_THROWS_WITH([&] { saveCheckpoint(req, localTensors(big, placementFor("single", 0, 1))); },
        "checkpoint step-2", "No space left on device", "previous checkpoints are intact");
    CHECK(!fs::exists(tempDirFor(ckpts, 2)));
    CHECK(!fs::exists(ckpts + "/step-2"));
    checkPreviousIntact(run, small);
    // Two "ranks" writing 3 MiB each: the one that runs out of space names ENOSPC, the other
    // says another rank failed, and both stop.
    Agreement agreement(2);
    std::string errors[2];
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
        threads.emplace_back([&, r] {
            SaveRequest q = request(ckpts, 3);
            q.strategy = "zero3";
            q.worldSize = 2;
            q.rank = r;
            q.agree = [&](bool ok) { return agreement.agree(ok); };
            // The ranks must agree on the tensors: both hold their half of `big`.
            const auto tensors = localTensors(big, placementFor("zero3", r, 2));
            try {
                saveCheckpoint(q, tensors);
            } catch (const std::exception& e) {
                errors[r] = e.what();
            }
        });
    for (auto& t : threads)
        t.join();
    CHECK(!errors[0].empty() && !errors[1].empty());
    CHECK(errors[0].find("No space left on device") != std::string::npos
        || errors[1].find("No space left on device") != std::string::npos);
    for (const auto& e : errors)
        CHECK(e.find("No space left on device") != std::string::npos
            || e.find("another rank failed") != std::string::npos);
    CHECK(!fs::exists(tempDirFor(ckpts, 3)) && !fs::exists(ckpts + "/step-3"));
    checkPreviousIntact(run, small);
}

static void testKeepAndResolve()
{
    TempDir tmp;
    const std::string run = tmp.path + "/run";
    const std::string ckpts = run + "/checkpoints";
    CHECK(resolveResume("", run).empty());
    CHECK(resolveResume("auto", run).empty()); // nothing yet: a fresh start
    CHECK_THROWS_WITH([&] { resolveResume(tmp.path + "/nope", run); }, "no such directory");
    fs::create_directories(run + "/checkpoints");
    CHECK_THROWS_WITH([&] { resolveResume(run, run); }, "no complete checkpoint");
    const Synthetic s = makeSynthetic(kSmall, 1);
    for (int step : {5, 10, 15, 20}) {
        auto res = saveCheckpoint(
            request(ckpts, step, 2), localTensors(s, placementFor("single", 0, 1)));
        CHECK(res.dir == ckpts + "/step-" + std::to_string(step));
        CHECK(res.bytesWritten == (6 * 4 + 3) * 4 * 3);
    }
    const auto all = listCheckpoints(ckpts);
    CHECK(all.size() == 2 && all[0].step == 15 && all[1].step == 20);
    CHECK(resolveResume("auto", run) == ckpts + "/step-20");
    CHECK(resolveResume(ckpts + "/step-15", run) == ckpts + "/step-15");
    // Re-saving an existing step replaces it.
    const Synthetic s2 = makeSynthetic(kSmall, 2);
    saveCheckpoint(request(ckpts, 20, 2), localTensors(s2, placementFor("single", 0, 1)));
    CheckpointReader reader(ckpts + "/step-20");
    CHECK(bitEqual(reader.readFull(kParam, "w"), s2.param[0]));
    CHECK(listCheckpoints(ckpts).size() == 2);
    // Step directories sort numerically, not as text.
    saveCheckpoint(request(ckpts, 100, 0), localTensors(s, placementFor("single", 0, 1)));
    CHECK(resolveResume("auto", run) == ckpts + "/step-100");
}

int main(int argc, char** argv)
{
    if (argc == 5 && std::string(argv[1]) == "--child")
        return childMain(argv[2], argv[3], argv[4]);
    at::set_num_threads(1);
    testKeepAndResolve();
    testKilledWriter();
    testKilledByParentMidWrite();
    testFullDisk();
    return finish("atomicity");
}
