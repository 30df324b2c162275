// Built-in demo tasks with checkable answers (two-number addition, copying words), written as
// chat or Alpaca JSONL for the headless demo, plus the scorer for a model's answers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "data/sample_builder.h"

namespace shard::tokenizer {
class Tokenizer;
}

namespace shard::data {

enum class DemoTask { Arithmetic, Copy };

// "arithmetic" or "copy"; throws naming the accepted names.
DemoTask parseDemoTask(std::string_view name);
std::string demoTaskName(DemoTask task);

struct DemoExample {
    std::string prompt; // the user's question
    std::string answer; // the exact expected answer
};

// Deterministic for a given (task, count, seed).
std::vector<DemoExample> generateDemoExamples(DemoTask task, int64_t count, uint64_t seed);

// One JSONL record: chat {"messages":[user, assistant]} or Alpaca {"instruction","input",
// "output"}; other formats throw.
nlohmann::json demoRecord(const DemoExample& example, DataFormat format);

// A wrong answer of the same kind, deterministic per example: arithmetic off by 1 to 9, copy
// with words swapped (or one repeated).
std::string demoWrongAnswer(DemoTask task, const DemoExample& example);
// A preference pair (conversational, TRL's form): the right answer chosen over a wrong one.
nlohmann::json demoPreferenceRecord(DemoTask task, const DemoExample& example);
// Writes `count` records to `path` (one JSON object per line): chat, alpaca or preference.
void writeDemoData(
    const std::string& path, DemoTask task, int64_t count, uint64_t seed, DataFormat format);

// The token ids to prompt a model with to answer `example`, exactly as training showed it: the
// record's tokens before its first answer token (for chat, up to and including the assistant
// header). chatTemplate as in DataConfig (empty: from the tokenizer).
std::vector<int32_t> demoPromptIds(const tokenizer::Tokenizer& tokenizer,
    const DemoExample& example, DataFormat format, const std::string& chatTemplate = {});

// Whether a model's output answers correctly: arithmetic compares the first integer in the
// output with the expected one; copy compares the output with the expected text, ignoring
// surrounding whitespace.
bool scoreDemoAnswer(DemoTask task, const std::string& expected, const std::string& output);

// Fraction of outputs[i] that score correct against expected[i] (0 when empty).
double demoAccuracy(DemoTask task, const std::vector<std::string>& expected,
    const std::vector<std::string>& outputs);

} // namespace shard::data
