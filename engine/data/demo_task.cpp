// Demo task generation and scoring.
#include "data/demo_task.h"

#include "data/sample.h"
#include "data/split_mix64.h"

#include <cctype>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace shard::data {

namespace {

const char* const kWords[] = {"red", "green", "blue", "cat", "dog", "sun", "moon", "tree", "river",
    "stone", "bird", "fish", "one", "two", "three", "four"};

std::string trim(const std::string& s)
{
    size_t b = 0, e = s.size();
    while (b < e && std::isspace(static_cast<unsigned char>(s[b])))
        ++b;
    while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1])))
        --e;
    return s.substr(b, e - b);
}

} // namespace

DemoTask parseDemoTask(std::string_view name)
{
    if (name == "arithmetic")
        return DemoTask::Arithmetic;
    if (name == "copy")
        return DemoTask::Copy;
    throw std::runtime_error(
        "unknown demo task '" + std::string(name) + "' (use arithmetic or copy)");
}

std::string demoTaskName(DemoTask task)
{
    return task == DemoTask::Arithmetic ? "arithmetic" : "copy";
}

std::vector<DemoExample> generateDemoExamples(DemoTask task, int64_t count, uint64_t seed)
{
    if (count <= 0)
        throw std::runtime_error("demo data: --count must be positive");
    SplitMix64 rng {seed * 0xD1B54A32D192ED03ull + static_cast<uint64_t>(task) + 7};
    std::vector<DemoExample> out;
    out.reserve(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) {
        if (task == DemoTask::Arithmetic) {
            const int64_t a = rng.below(100), b = rng.below(100);
            out.push_back({"What is " + std::to_string(a) + " + " + std::to_string(b) + "?",
                std::to_string(a + b)});
        } else {
            const int64_t n = 2 + rng.below(4);
            std::string words;
            for (int64_t k = 0; k < n; ++k)
                words += (k ? " " : "") + std::string(kWords[rng.below(std::size(kWords))]);
            out.push_back({"Repeat: " + words, words});
        }
    }
    return out;
}

std::string demoWrongAnswer(DemoTask task, const DemoExample& ex)
{
    uint64_t h = 1469598103934665603ull; // FNV-1a of the prompt: the same wrong answer each time
    for (unsigned char c : ex.prompt)
        h = (h ^ c) * 1099511628211ull;
    if (task == DemoTask::Arithmetic) {
        const long long right = std::stoll(ex.answer);
        const long long off = 1 + static_cast<long long>(h % 9);
        return std::to_string((h >> 8) % 2 == 0 || right - off < 0 ? right + off : right - off);
    }
    // Copy: the words in another order, or one word too many when there is one order only.
    std::vector<std::string> words;
    std::string w;
    for (char c : ex.answer + " ") {
        if (c != ' ') {
            w += c;
        } else if (!w.empty()) {
            words.push_back(w);
            w.clear();
        }
    }
    std::string out;
    if (words.size() >= 2 && words.front() != words.back()) {
        std::swap(words.front(), words.back());
    } else {
        words.push_back(words.empty() ? std::string("again") : words.back());
    }
    for (size_t i = 0; i < words.size(); ++i)
        out += (i ? " " : "") + words[i];
    return out;
}

nlohmann::json demoPreferenceRecord(DemoTask task, const DemoExample& ex)
{
    return {{"prompt", nlohmann::json::array({{{"role", "user"}, {"content", ex.prompt}}})},
        {"chosen", nlohmann::json::array({{{"role", "assistant"}, {"content", ex.answer}}})},
        {"rejected",
            nlohmann::json::array(
                {{{"role", "assistant"}, {"content", demoWrongAnswer(task, ex)}}})}};
}

nlohmann::json demoRecord(const DemoExample& ex, DataFormat format)
{
    switch (format) {
    case DataFormat::Chat:
        return {{"messages",
            nlohmann::json::array({{{"role", "user"}, {"content", ex.prompt}},
                {{"role", "assistant"}, {"content", ex.answer}}})}};
    case DataFormat::Alpaca:
        return {{"instruction", ex.prompt}, {"input", ""}, {"output", ex.answer}};
    default:
        throw std::runtime_error("demo data: format must be chat, alpaca or preference (got "
            + dataFormatName(format) + ")");
    }
}

void writeDemoData(
    const std::string& path, DemoTask task, int64_t count, uint64_t seed, DataFormat format)
{
    const auto examples = generateDemoExamples(task, count, seed);
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out)
        throw std::runtime_error(path + ": cannot write");
    for (const auto& ex : examples)
        out << (format == DataFormat::Preference ? demoPreferenceRecord(task, ex)
                                                 : demoRecord(ex, format))
                   .dump()
            << '\n';
    if (!out)
        throw std::runtime_error(path + ": write failed");
}

std::vector<int32_t> demoPromptIds(const tokenizer::Tokenizer& tokenizer,
    const DemoExample& example, DataFormat format, const std::string& chatTemplate)
{
    if (format == DataFormat::Preference)
        format = DataFormat::Chat; // the pairs' prompt is the chat prompt
    SampleBuilder builder(&tokenizer, false, chatTemplate);
    Example ex = builder.build(demoRecord(example, format), format);
    size_t k = 0;
    while (k < ex.labels.size() && ex.labels[k] == kIgnoreLabel)
        ++k;
    ex.ids.resize(k);
    return ex.ids;
}

bool scoreDemoAnswer(DemoTask task, const std::string& expected, const std::string& output)
{
    if (task == DemoTask::Copy)
        return trim(output) == trim(expected);
    // The first integer (optional minus sign) in the output.
    for (size_t i = 0; i < output.size(); ++i) {
        if (!std::isdigit(static_cast<unsigned char>(output[i])))
            continue;
        size_t start = i;
        if (i > 0 && output[i - 1] == '-')
            start = i - 1;
        size_t end = i;
        while (end < output.size() && std::isdigit(static_cast<unsigned char>(output[end])))
            ++end;
        return output.substr(start, end - start) == trim(expected);
    }
    return false;
}

double demoAccuracy(DemoTask task, const std::vector<std::string>& expected,
    const std::vector<std::string>& outputs)
{
    if (expected.size() != outputs.size())
        throw std::runtime_error("demo accuracy: expected and outputs differ in length");
    if (expected.empty())
        return 0.0;
    int64_t right = 0;
    for (size_t i = 0; i < expected.size(); ++i)
        right += scoreDemoAnswer(task, expected[i], outputs[i]) ? 1 : 0;
    return static_cast<double>(right) / static_cast<double>(expected.size());
}

} // namespace shard::data
