// Micro-batch limits (data, planner memory estimate) and the global batch across a resume.
#include "core/train/global_batch.h"

#include <stdexcept>

#include "plan/planner.h"
#include "plan/run_spec_bridge.h"

namespace shard::engine {

namespace {

std::string rowsText(int64_t micro, int64_t accum, int world)
{
    return std::to_string(micro * accum * world) + " rows (micro-batch " + std::to_string(micro)
        + " x grad-accum " + std::to_string(accum) + " x " + std::to_string(world) + " ranks)";
}

// The planner's input for this run on one node of localWorldSize ranks of `device`; throws for
// a setting the planner does not model.
plan::PlanInput planInputFor(const protocol::RunSpec& spec, const plan::ModelSpec& model,
    int64_t worldSize, int localWorldSize, const plan::DeviceSpec& device)
{
    plan::PlanInput in;
    in.model = model;
    plan::applyRunFieldsOf(spec, in);
    in.gpusPerNode = std::max(1, localWorldSize);
    in.nodes = std::max<int64_t>(1, worldSize / in.gpusPerNode);
    in.device = device;
    plan::validate(in);
    return in;
}

// The ranks that take rows of their own (the data-parallel copies of the run's layout, over
// the world that started).
int64_t dataParallelRanks(const protocol::RunSpec& spec, int64_t worldSize)
{
    protocol::ParallelDims dims = spec.parallelDims();
    dims.nodes = 1;
    dims.ranksPerNode = worldSize;
    return std::max<int64_t>(1, dims.dataParallel());
}

} // namespace

int64_t largestMicroBatchFor(const protocol::RunSpec& spec, const plan::ModelSpec& model,
    int worldSize, int localWorldSize, int64_t trainRecords, bool gpu, int64_t capacityBytesPerRank)
{
    const int64_t W = std::max(1, worldSize);
    const int64_t dataLimit = std::max<int64_t>(1, trainRecords / dataParallelRanks(spec, W));
    try {
        // A CPU node's memory is shared by its ranks: the planner divides it by them.
        const plan::DeviceSpec device = gpu
            ? plan::DeviceSpec::gpu(static_cast<double>(capacityBytesPerRank) / (1 << 30))
            : plan::DeviceSpec::cpu(capacityBytesPerRank * std::max(1, localWorldSize));
        return plan::largestMicroBatch(
            planInputFor(spec, model, W, localWorldSize, device), dataLimit);
    } catch (const std::exception&) {
        return -1;
    }
}

void checkMicroBatch(const protocol::RunSpec& spec, const plan::ModelSpec& model, int worldSize,
    int localWorldSize, int64_t trainRecords)
{
    const int64_t W = std::max(1, worldSize);
    // Tensor- and pipeline-parallel ranks share their data-parallel copy's rows.
    const int64_t D = dataParallelRanks(spec, W);
    const int64_t dataLimit = std::max<int64_t>(1, trainRecords / D);
    plan::PlanInput in;
    bool planned = spec.device == "cpu";
    if (planned) {
        try {
            in = planInputFor(
                spec, model, W, localWorldSize, plan::DeviceSpec::cpu(plan::physicalMemoryBytes()));
        } catch (const std::exception&) {
            planned = false; // a setting the planner does not model: the data bound still holds
        }
    }
    auto largestText = [&] {
        const int64_t largest = planned ? plan::largestMicroBatch(in, dataLimit) : dataLimit;
        if (largest <= 0)
            return std::string("; even micro-batch 1 does not fit: use fewer ranks per node, "
                               "--checkpointing full or a shorter --seq-len");
        return "; the largest micro-batch that fits is " + std::to_string(largest)
            + " (--micro-batch " + std::to_string(largest) + ")";
    };
    if (spec.microBatch * D > trainRecords)
        throw std::runtime_error("--micro-batch " + std::to_string(spec.microBatch) + " x "
            + std::to_string(D) + (D == W ? " ranks" : " data-parallel ranks") + " needs "
            + std::to_string(spec.microBatch * D)
            + " rows per micro-step but the training data has " + std::to_string(trainRecords)
            + " records" + largestText());
    if (!planned)
        return;
    const plan::PlanResult r = plan::plan(in);
    if (!r.fits)
        throw std::runtime_error("--micro-batch " + std::to_string(spec.microBatch)
            + " does not fit in memory: the planner estimates "
            + plan::formatGiB(r.perDevice.total()) + " per rank, " + std::to_string(in.gpusPerNode)
            + " ranks sharing this host's " + plan::formatGiB(in.device.memoryBytes) + " of RAM"
            + largestText());
}

void checkOffloadHostMemory(const protocol::RunSpec& spec, const plan::ModelSpec& model,
    int worldSize, int localWorldSize, int64_t hostMemoryBytes)
{
    if (spec.offload == "none")
        return;
    const int local = std::max(1, localWorldSize);
    // Host bytes do not depend on the GPU's size: any GPU will do for the planner.
    const plan::PlanResult r = plan::plan(
        planInputFor(spec, model, std::max(1, worldSize), local, plan::DeviceSpec::gpu(1024.0)));
    const int64_t need = r.hostBytesPerDevice * local;
    if (need <= hostMemoryBytes)
        return;
    throw std::runtime_error("--offload " + spec.offload + " keeps "
        + plan::formatGiB(r.hostBytesPerDevice) + " per rank in host memory, "
        + plan::formatGiB(need) + " for this node's " + std::to_string(local)
        + (local == 1 ? " rank" : " ranks") + ", but the node has "
        + plan::formatGiB(hostMemoryBytes)
        + ": spread the run over more nodes (each holds a smaller shard), use --offload optimizer "
          "instead of params+optimizer, or --offload none");
}

ResumeBatch resumeBatch(const protocol::RunSpec& spec, int worldSize, int64_t savedMicroBatch,
    int64_t savedGradAccum, int savedWorld)
{
    ResumeBatch out;
    out.microBatch = spec.microBatch;
    out.gradAccum = spec.gradAccum;
    if (savedMicroBatch <= 0 || savedGradAccum <= 0 || savedWorld <= 0)
        return out;
    const int64_t global = savedMicroBatch * savedGradAccum * savedWorld;
    const int64_t W = std::max(1, worldSize);
    if (spec.microBatch * spec.gradAccum * W == global)
        return out;
    const std::string was = "the checkpoint's global batch is "
        + rowsText(savedMicroBatch, savedGradAccum, savedWorld);
    if (spec.allowBatchChange) {
        out.message = was + "; --allow-batch-change: continuing with "
            + rowsText(spec.microBatch, spec.gradAccum, worldSize);
        return out;
    }
    if (global % W == 0) {
        const int64_t perRank = global / W;
        if (perRank % spec.gradAccum == 0) {
            out.microBatch = perRank / spec.gradAccum;
        } else if (perRank % spec.microBatch == 0) {
            out.gradAccum = perRank / spec.microBatch;
        } else {
            out.microBatch = perRank;
            out.gradAccum = 1;
        }
        out.changed = true;
        out.message = was + "; kept at " + std::to_string(worldSize) + " ranks as "
            + rowsText(out.microBatch, out.gradAccum, worldSize);
        return out;
    }
    std::string divisors;
    for (int64_t d = 1; d <= global && d <= 1024; ++d)
        if (global % d == 0)
            divisors += (divisors.empty() ? "" : ", ") + std::to_string(d);
    throw std::runtime_error(was + ", which " + std::to_string(worldSize)
        + " ranks cannot split evenly; resume at a rank count that divides it (" + divisors
        + "), or pass --allow-batch-change to continue with "
        + rowsText(spec.microBatch, spec.gradAccum, worldSize)
        + " (the losses will differ from the uninterrupted run)");
}

} // namespace shard::engine
