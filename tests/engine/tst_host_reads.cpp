// A training step reads no tensor value back to the host: the loss, the gradient norm and
// clipping's factor stay on the device, and the loop reads the steps not yet read once per logged
// step (engine::hostsync, docs/ARCHITECTURE.md "A step without host reads"). On a GPU each read
// waits for the device; on the CPU the same reads are counted, so this test fails on the CPU when
// a change makes a step read a value more often. Runs the product path: `shard-worker train` and
// `shard-worker launch` as processes, the metric records' `host_reads` read back.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine_test_util.h"
#include "plan/model_spec.h"
#include "tiny_run_inputs.h"

using namespace shard;

namespace {

std::string g_dir;

struct Record {
    int64_t step = 0;
    int64_t hostReads = -1;
    double loss = 0.0;
    double cpuTime = -1.0;
};

std::vector<Record> records(const std::string& runDir)
{
    std::vector<Record> out;
    std::ifstream in(runDir + "/metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty())
            continue;
        const auto j = nlohmann::json::parse(line);
        out.push_back({j.at("step").get<int64_t>(), j.value("host_reads", int64_t(-1)),
            j.at("loss").get<double>(), j.value("cpu_time", -1.0)});
    }
    return out;
}

// Trains and returns the run's records; `ranks` > 1 goes through `shard-worker launch`.
std::vector<Record> train(const std::string& name, const std::string& model,
    const std::string& data, int ranks, const std::string& extra)
{
    const std::string out = g_dir + "/" + name;
    const std::string args = " train --model " + model + " --data " + data
        + " --steps 6 --micro-batch 2 --seq-len 24 --lr 3e-3 --threads 1 --clip 0.5 --no-shuffle "
        + extra + " --out " + out;
    const std::string worker = SHARD_WORKER;
    const std::string cmd = ranks == 1
        ? worker + args
        : worker + " launch --nproc-per-node " + std::to_string(ranks) + " --" + args;
    const auto r = test::runCaptured(cmd + " >" + g_dir + "/" + name + ".out 2>&1");
    T_CHECK_MSG(r.code == 0, name + ": the run failed (see " + g_dir + "/" + name + ".out)");
    return records(out);
}

// Each record's reads: `perRecord` (the steps' one transfer, plus, when there are other ranks,
// the scalar all-reduce that replaces the barrier before the memory gather and carries the
// preemption flag, and rank 0's memory gather).
void checkReads(
    const std::string& name, const std::vector<Record>& recs, size_t count, int64_t perRecord)
{
    T_CHECK_MSG(recs.size() == count,
        name + ": " + std::to_string(recs.size()) + " records, " + std::to_string(count)
            + " expected");
    // Each record also carries rank 0's process CPU seconds, which only grow (tokens per
    // CPU-second in bench/engine come from them).
    for (size_t i = 0; i < recs.size(); ++i)
        T_CHECK_MSG(recs[i].cpuTime > 0 && (i == 0 || recs[i].cpuTime >= recs[i - 1].cpuTime),
            name + ": cpu_time " + std::to_string(recs[i].cpuTime) + " at step "
                + std::to_string(recs[i].step));
    for (const Record& r : recs)
        T_CHECK_MSG(r.hostReads == perRecord,
            name + ": the record of step " + std::to_string(r.step) + " counts "
                + std::to_string(r.hostReads) + " host reads since the previous record; "
                + std::to_string(perRecord)
                + " is the budget (a step must keep its values on the device)");
}

} // namespace

int main()
{
    g_dir = test::tempDir("tst_host_reads");
    auto spec = *plan::findPreset("tiny-1m");
    spec.torchDtype = "float32";
    const std::string model = test::writeTinyModel(g_dir + "/model", spec);
    const std::string data
        = test::writeCountingData(g_dir + "/data.jsonl", 64, static_cast<int>(spec.vocabSize), 4);

    // One rank, every strategy's path at world size 1, with accumulation and clipping: a record
    // every 3 steps holds the one read of its 3 steps.
    for (const std::string strategy : {"zero3", "ddp"}) {
        const auto every3 = train("one-" + strategy, model, data, 1,
            "--strategy " + strategy + " --grad-accum 2 --log-every 3");
        checkReads("1 rank " + strategy + ", --log-every 3", every3, 2, 1);
        const auto every1
            = train("one-" + strategy + "-e1", model, data, 1, "--strategy " + strategy);
        checkReads("1 rank " + strategy + ", --log-every 1", every1, 6, 1);
        // Deferring the reads changes no value: the records of steps 3 and 6 agree.
        if (every3.size() == 2 && every1.size() == 6)
            T_CHECK_MSG(every3[0].step == 3 && every3[1].step == 6,
                "records of --log-every 3 are not at steps 3 and 6");
    }
    {
        const auto bf16 = train("one-bf16", model, data, 1,
            "--strategy zero3 --precision bf16-mixed --log-every 2 --checkpointing full");
        checkReads("1 rank zero3 bf16-mixed with checkpointing, --log-every 2", bf16, 3, 1);
    }
    // Two ranks: rank 0 also reads the gathered memory of every rank once per record.
    for (const std::string strategy : {"zero3", "ddp"}) {
        const auto two = train("two-" + strategy, model, data, 2,
            "--strategy " + strategy + " --log-every 3 --nproc-per-node 2");
        checkReads("2 ranks " + strategy + ", --log-every 3", two, 2, 3);
    }
    return test::finish("tst_host_reads");
}
