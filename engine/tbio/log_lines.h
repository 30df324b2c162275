// Metrics out of a training job's stdout, for a job that writes no event files (or whose
// files are not at hand, as with a Slurm job's slurm-<id>.out): the lines Hugging Face Trainer
// prints ({'loss': 1.23, 'grad_norm': 0.8, 'learning_rate': 2e-05, 'epoch': 0.1}) and the step
// lines torchtitan logs (step:  5  loss:  7.1  grad_norm:  1.3  memory: 12.5GiB(15.7%)  tps:
// 1,234  tflops: 56.7  mfu: 18.2%), with or without its colour codes. Values come out under the
// same tags those tools write to TensorBoard, so tbio::knownTag maps them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace shard::tbio {

struct LogLine {
    enum class Kind { HuggingFaceTrain, HuggingFaceEval, HuggingFaceSummary, Torchtitan };
    Kind kind;
    std::optional<int64_t> step; // torchtitan prints it; Hugging Face does not
    std::vector<std::pair<std::string, double>> values; // tag -> value
};

// One line (a carriage return starts it over, as a terminal shows it; ANSI colour codes are
// dropped); nothing when it is neither tool's metric line.
std::optional<LogLine> parseLogLine(std::string line);

} // namespace shard::tbio
