// The scalar names of the tools people train with, mapped onto the run store's metric columns.
// Every other scalar keeps its tag (RunStore::scalarSeries). Names read from each project's
// source, cited beside each table entry in known_tags.cpp.
#pragma once

#include <optional>
#include <string>

namespace shard::tbio {

enum class StoreMetric { Loss, EvalLoss, LearningRate, GradNorm, TokensPerSec, Tokens, StepTime };

struct KnownTag {
    StoreMetric metric;
    const char* tool; // "Hugging Face Trainer", "torchtitan", "DeepSpeed", "Megatron-LM", ...
};

std::optional<KnownTag> knownTag(const std::string& tag);

// Hugging Face Trainer's names for its log keys, as its TensorBoardCallback writes them
// (transformers' rewrite_logs: "eval_loss" -> "eval/loss", "test_x" -> "test/x", "loss" ->
// "train/loss"): so a trainer_state.json and the same run's event files give the same tags.
std::string huggingFaceTag(const std::string& logKey);

} // namespace shard::tbio
