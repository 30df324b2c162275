#include "tbio/known_tags.h"

#include <cstring>

namespace shard::tbio {

namespace {

struct Entry {
    const char* tag;
    StoreMetric metric;
    const char* tool;
};

constexpr const char* kHf = "Hugging Face Trainer";
constexpr const char* kTitan = "torchtitan";
constexpr const char* kDs = "DeepSpeed";
constexpr const char* kMegatron = "Megatron-LM";
constexpr const char* kLightning = "PyTorch Lightning";

const Entry kExact[] = {
    // transformers, src/transformers/integrations/integration_utils.py (TensorBoardCallback.on_log
    // after rewrite_logs) and trainer.py's log keys: loss, learning_rate, grad_norm,
    // num_input_tokens_seen, eval_loss. Shard Studio's own event files use these names too.
    {"train/loss", StoreMetric::Loss, kHf},
    {"train/learning_rate", StoreMetric::LearningRate, kHf},
    {"train/grad_norm", StoreMetric::GradNorm, kHf},
    {"train/num_input_tokens_seen", StoreMetric::Tokens, kHf},
    {"eval/loss", StoreMetric::EvalLoss, kHf},
    {"train/tokens_per_sec", StoreMetric::TokensPerSec, "Shard Studio"},
    {"train/step_time", StoreMetric::StepTime, "Shard Studio"},
    // torchtitan, torchtitan/components/metrics.py (MetricsProcessor.log): loss_metrics/*,
    // grad_norm, throughput(tps) (formerly wps), tflops, mfu(%), memory/*, time_metrics/*,
    // n_tokens_seen, lr.
    {"loss_metrics/global_avg_loss", StoreMetric::Loss, kTitan},
    {"grad_norm", StoreMetric::GradNorm, kTitan},
    {"throughput(tps)", StoreMetric::TokensPerSec, kTitan},
    {"wps", StoreMetric::TokensPerSec, kTitan},
    {"tps", StoreMetric::TokensPerSec, kTitan},
    {"n_tokens_seen", StoreMetric::Tokens, kTitan},
    {"time_metrics/end_to_end(s)", StoreMetric::StepTime, kTitan},
    {"lr", StoreMetric::LearningRate, kTitan},
    // DeepSpeed, deepspeed/runtime/engine.py (the monitor's events after a step):
    // Train/Samples/train_loss, Train/Samples/lr, Train/Samples/loss_scale.
    {"Train/Samples/train_loss", StoreMetric::Loss, kDs},
    {"Train/Samples/lr", StoreMetric::LearningRate, kDs},
    // Megatron-LM, megatron/training/training.py (training_log) and evaluate_and_print_results:
    // "lm loss", "learning-rate", "grad-norm", "iteration-time", "lm loss validation".
    {"lm loss", StoreMetric::Loss, kMegatron},
    {"learning-rate", StoreMetric::LearningRate, kMegatron},
    {"grad-norm", StoreMetric::GradNorm, kMegatron},
    {"iteration-time", StoreMetric::StepTime, kMegatron},
    {"lm loss validation", StoreMetric::EvalLoss, kMegatron},
    // PyTorch Lightning: self.log names are the user's; train_loss / val_loss are its docs' and
    // templates' convention.
    {"train_loss", StoreMetric::Loss, kLightning},
    {"val_loss", StoreMetric::EvalLoss, kLightning},
};

struct Prefix {
    const char* prefix;
    StoreMetric metric;
    const char* tool;
};

const Prefix kPrefixes[] = {
    // torchtitan logs "lr/<optimizer>" in newer versions (one per optimizer).
    {"lr/", StoreMetric::LearningRate, kTitan},
    // Lightning's LearningRateMonitor: "lr-<OptimizerName>" (lightning/pytorch/callbacks/
    // lr_monitor.py, _add_prefix).
    {"lr-", StoreMetric::LearningRate, kLightning},
};

} // namespace

std::optional<KnownTag> knownTag(const std::string& tag)
{
    for (const auto& e : kExact)
        if (tag == e.tag)
            return KnownTag {e.metric, e.tool};
    for (const auto& p : kPrefixes)
        if (tag.rfind(p.prefix, 0) == 0)
            return KnownTag {p.metric, p.tool};
    return std::nullopt;
}

std::string huggingFaceTag(const std::string& key)
{
    if (key.rfind("eval_", 0) == 0)
        return "eval/" + key.substr(5);
    if (key.rfind("test_", 0) == 0)
        return "test/" + key.substr(5);
    return "train/" + key;
}

} // namespace shard::tbio
