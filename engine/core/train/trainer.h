// The fine-tuning loop of one rank: model from a Hugging Face folder, data, a strategy, AdamW,
// the schedule, clipping, accumulation, evaluation, records (docs/ARCHITECTURE.md) and the final HF
// folder. Everything a user can get wrong is checked in the constructor, before the run
// directory is touched.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/model/llama_model.h"
#include "core/train/batch_source.h"
#include "core/train/checkpoint_hooks.h"
#include "core/train/preference.h"
#include "core/train/strategy.h"
#include "dist/rank_env.h"
#include "protocol/device_mesh.h"
#include "protocol/run_spec.h"

namespace shard::protocol {
struct MetricRecord;
}

namespace shard::engine {

class ModelRunner;
class TrainingSamples;
struct StagePart;
struct StageOut;
namespace lora {
class AdapterSource;
}

struct TrainerOptions {
    bool recordsToStdout = true; // metric/event records also on stdout (for a launcher)
    bool saveModel = true;       // write <run>/model at the end
    bool writeRunDir = true;     // false: no files at all (benchmarks, tests)
    // Checkpoint save / resume (shard_ckpt's implementation, installed by the worker); null =
    // no checkpoints.
    std::shared_ptr<CheckpointHooks> checkpoints;
    // Set (by the worker's SIGUSR1 handler) when the run is to be preempted: the ranks agree on
    // it at a logged step (at once with one rank), write a checkpoint, write a "preempted" event
    // and run() returns with TrainResult::preemptedAt. Null: no preemption.
    const std::atomic<bool>* preemptRequest = nullptr;
};

struct TrainResult {
    std::vector<double> losses;                         // per step, before that step's update
    std::vector<double> gradNorms;                      // per step, before clipping
    std::vector<std::pair<int64_t, double>> evalLosses; // (step, loss)
    // Preference objectives: per step, the means over the step's pairs (preferenceStatNames).
    std::vector<std::map<std::string, double>> scalars;
    double tokensPerSec = 0.0; // mean over the steps after the first
    double meanStepSec = 0.0;
    double cpuTokensPerSec = 0.0; // the same per second of process CPU time (robust to load)
    int64_t peakBytes = 0;        // counting allocator, whole run
    std::string modelDir;         // where the HF folder was written ("" if not)
    // The step whose checkpoint a preemption signal wrote before run() returned early (0: ran
    // to the end).
    int64_t preemptedAt = 0;
};

// What Trainer::run throws when this rank ran out of memory (the message says the rank, the
// bytes asked for and what to change). The worker exits at once on it: a gather or reduce may
// still be in flight, and tearing the strategy down would wait for peers that are stopping too.
struct OutOfMemory : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Parses precision names: fp32 -> kFloat, bf16-mixed -> kBFloat16 (fp32 masters). Throws for
// the others with the reason.
at::ScalarType computeDtypeFor(const std::string& precision);

class Trainer {
public:
    explicit Trainer(protocol::RunSpec spec, TrainerOptions options = {});
    ~Trainer();
    TrainResult run();

    LlamaModel& model() { return *m_model; }
    Strategy& strategy() { return *m_strategy; }
    int64_t totalSteps() const { return m_steps; }
    // The device --device resolved to (cuda:<LOCAL_RANK> or cpu).
    c10::Device device() const { return m_device; }

private:
    struct Io;   // the record writer (metrics/events files, stdout), the logs, the run lock
    struct Loop; // the runner, AdamW, the schedule and the counters, shared by the steps
    struct Step; // what one optimizer step measured

    // Set-up, before anything else is written: the run folder's lock, the logs, run.json and
    // the record files. Returns whether the run continues from a checkpoint (asked once, with
    // the lock held).
    bool setUpRun(Io& io);
    // Places the parameters on the strategy (from the weights, or for the checkpoint to fill)
    // and prepares the start event's data.
    void placeModel(Io& io, bool resuming, int threads);
    // The start event, at the step and time a resume restored (and the data event for skipped
    // lines).
    void announceStart(Io& io, Loop& loop, bool resuming);
    // Restores the checkpoint into the loop and keeps its global batch at another rank count.
    void resume(Io& io, Loop& loop);
    // One optimizer step (0-based `step`) over its micro-batches: forward, backward, clipping,
    // AdamW.
    Step trainStep(Loop& loop, int64_t step);
    // Reads the loss and gradient norm of every step not yet read to the host, in one transfer,
    // into the result; throws at the first non-finite loss, naming its step.
    void readSteps(Loop& loop);
    std::string nonFiniteLossMessage(double loss, int64_t step) const;
    // The metric record of a step done (1-based `step`); takes the step's comm bytes.
    protocol::MetricRecord metricRecord(
        const Io& io, const Loop& loop, const Step& done, int64_t step);
    // The mean loss per token over the held-out rows (collective); preference objectives: the
    // mean loss per pair, and their reward accuracy into `scalars` ("eval/...").
    double evaluate(Loop& loop, std::map<std::string, double>& scalars);
    // Supervised: one optimizer step's micro-batches (next-token loss over stepTokens tokens).
    void supervisedMicroSteps(Loop& loop, const std::vector<std::vector<TrainRow>>& micro,
        int64_t stepTokens, Step& done);
    // Pipeline parallel: the same over this rank's stage (pipelineSchedule).
    void pipelineMicroSteps(Loop& loop, const std::vector<std::vector<TrainRow>>& micro,
        int64_t stepTokens, Step& done);
    struct CopyRows {
        at::Tensor ids;
        at::Tensor labels;
    };
    // Pipeline parallel: one optimizer step's forwards and backwards of this rank's stage over
    // the micro-batches `inputs`, in the 1F1B order (docs/ARCHITECTURE.md, "Pipeline
    // parallel"): activations to the next stage, their gradients back. The last stage ends each
    // micro-batch in the loss sum (logProbs: the token log-probabilities) and runs the backward
    // from what lastLoss(micro-batch, its output) returns; gradScale as ModelRunner::stage's.
    void pipelineSchedule(Loop& loop, const std::vector<CopyRows>& inputs, bool logProbs,
        double gradScale, const std::function<at::Tensor(int, const StageOut&)>& lastLoss,
        Step& done);
    // Pipeline parallel, without gradients: each batch's sums, defined on the last stage only
    // (undefined elsewhere), fp64 on the device: its rows' sequence log-probabilities
    // (`logProbs`), or its loss sum (shape {1}). Collective over the pipeline group: every stage
    // calls it with its copy's batches.
    std::vector<at::Tensor> pipelineForwardSums(
        Loop& loop, const std::vector<CopyRows>& batches, bool logProbs);
    // DPO's reference sums of each batch of pairs under pipeline parallel (defined on the last
    // stage; none for ORPO): the live reference, the base with its adapters off through the
    // stages without gradients (collective), or the precomputed one for the pairs [lo, hi) of
    // pairRanges.
    std::vector<at::Tensor> pipelineReference(Loop& loop,
        const std::vector<std::vector<TrainRow>>& batches, const std::vector<CopyRows>& inputs,
        const std::vector<std::pair<int64_t, int64_t>>& pairRanges);
    // A data-parallel copy's rows [lo, hi) of `rows` as ids and labels (on the host). A copy
    // with none (fewer rows than copies) gets the first row with every label masked: it adds
    // nothing to a sum, and the forward still runs, which sharded stages gather inside.
    CopyRows copyRows(const std::vector<TrainRow>& rows, int64_t lo, int64_t hi) const;
    // The buffer a later pipeline stage receives its input activation for `ids` into.
    at::Tensor activationBuffer(const ModelRunner& runner, const at::Tensor& ids) const;
    // The part of the model a model chunk of this rank's stage runs (its layers, whether it is
    // the first or last virtual stage).
    StagePart stagePart(int chunk) const;
    // Preference objectives: one optimizer step's micro-batches of pairs (forward, loss,
    // backward); fills the step's loss and statistics (on the device).
    void preferenceMicroSteps(
        Loop& loop, const std::vector<std::vector<TrainRow>>& micro, Step& done);
    // The policy's and (DPO) the reference's log-probabilities of this rank's pairs among
    // `rows` (chosen, rejected, chosen, ...), and the preference loss of each pair.
    struct PairForward;
    PairForward pairForward(Loop& loop, const std::vector<TrainRow>& rows, int64_t lo, int64_t hi);
    // The pair losses of the rows whose labels are `labels` (chosen, rejected, ...) from the
    // sequences' summed log-probabilities (fp64, one a row) of the policy and (DPO) the
    // reference (undefined for ORPO).
    PairForward pairLoss(const at::Tensor& labels, const at::Tensor& policySums,
        const at::Tensor& referenceSums) const;
    // DPO with --reference precomputed: the reference sums of this rank's pairs [lo, hi) of
    // `rows`, by record number.
    at::Tensor precomputedReference(
        const std::vector<TrainRow>& rows, int64_t lo, int64_t hi) const;
    // DPO with --reference precomputed: every record's reference log-probabilities, one
    // forward pass over the data without gradients (collective), before training.
    void precomputeReference(Io& io, Loop& loop);
    void writeSamples(Io& io, int64_t step);
    // Adds every rank's memory to the record (collective), writes it (rank 0) and logs the step.
    void writeMetrics(Io& io, Loop& loop, protocol::MetricRecord& rec, int64_t activationBytes);
    // Hands the step to the checkpoint hooks (`force`: saves, due or not); a checkpoint written
    // gets an event.
    void saveCheckpoint(Io& io, Loop& loop, int64_t step, bool last, bool force = false);
    // Whether the ranks stop here for a preemption (TrainerOptions::preemptRequest): one rank at
    // once; more ranks as agreed at the last metric record (writeMetrics).
    bool preemptAgreed(const Loop& loop) const;
    // The preemption's checkpoint (unless this step's was just written) and event; run()'s
    // result with preemptedAt.
    TrainResult preempt(Io& io, Loop& loop, int64_t step);
    // The write-up of a completed run: throughput, the final model, the finish event.
    TrainResult finish(Io& io, Loop& loop);
    void writeFinalModel(Io& io, TrainResult& result);
    // Records the error that ended the run (error and finish events) and rethrows it (an
    // OutOfMemory for an out-of-memory). Called from run's handler only.
    [[noreturn]] void fail(Io& io, const std::exception& e, int64_t step) const;
    // The error message (and the error event's data) of an out-of-memory on this rank: the
    // rank, the device, the bytes asked for and what to change.
    std::string outOfMemoryMessage(
        const std::exception& e, int64_t step, nlohmann::json& data) const;
    protocol::RunSpec m_spec;
    TrainerOptions m_options;
    std::string m_modelDir;
    std::unique_ptr<LlamaModel> m_model;
    std::unique_ptr<Strategy> m_strategy;
    std::unique_ptr<BatchSource> m_data;
    std::unique_ptr<SafetensorsReader> m_weights;
    std::unique_ptr<TrainingSamples> m_samples;      // sample_every > 0
    std::unique_ptr<lora::AdapterSource> m_adapters; // method lora: the adapters' first values
    std::unique_ptr<PreferenceConfig> m_preference;  // objective dpo or orpo
    // DPO with a live reference under full fine-tuning: a frozen copy of the model, placed by
    // a strategy of its own over the trained strategy's groups (sharded like it under zero3).
    std::unique_ptr<LlamaModel> m_referenceModel;
    std::unique_ptr<Strategy> m_referenceStrategy;
    // DPO, reference precomputed: (chosen, rejected) summed log-probabilities per record, by
    // the record's global number (fp64, 2 x records, on the device).
    at::Tensor m_reference;
    at::ScalarType m_computeDtype = at::kFloat;
    c10::Device m_device = c10::Device(c10::DeviceType::CPU);
    int64_t m_steps = 0;
    dist::RankEnv m_rankEnv; // read once from the environment; passed to the strategy
    int m_rank = 0;
    int m_worldSize = 1;
    // Where this rank sits among the run's ranks (the one owner of placement): the rows of a
    // global micro-batch it computes and the data-parallel copies a step's rows split over.
    protocol::DeviceMesh m_mesh;
    int dataParallel() const { return static_cast<int>(m_mesh.dataParallel()); }
};

// The cores this process may run on (its affinity mask; else the hardware's count).
int usableCores();
// Throws unless 0 <= requested <= usableCores() (more threads than cores only slows a rank down).
void checkThreads(int requested);
// Intra-op threads for a rank: `requested` if > 0, else usable cores / ranks on this node
// (RankEnv::localWorldSize), at least 1. Sets them and returns the count.
int configureThreads(int requested, int localWorldSize);

} // namespace shard::engine
