// Greedy decoding through the strategy's unit weights with the KV-cache decoder.
#include "training_samples.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "core/generate/generation.h"

namespace shard::engine {

std::vector<std::string> readSamplePrompts(const std::string& path)
{
    std::ifstream in(path);
    if (!in)
        throw std::runtime_error("sample_prompts " + path + ": cannot read the file");
    std::vector<std::string> out;
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
        if (line.find_first_not_of(" \t\r") == std::string::npos)
            continue;
        if (line.front() == '{') {
            const auto j = nlohmann::json::parse(line, nullptr, false);
            if (!j.is_object() || !j.contains("prompt") || !j["prompt"].is_string())
                throw std::runtime_error(path + ":" + std::to_string(n)
                    + ": a JSON line needs a \"prompt\" string (or write the prompt as plain "
                      "text)");
            out.push_back(j["prompt"].get<std::string>());
        } else {
            out.push_back(line.back() == '\r' ? line.substr(0, line.size() - 1) : line);
        }
    }
    if (out.empty())
        throw std::runtime_error("sample_prompts " + path + ": no prompts (one per line)");
    return out;
}

namespace {

tokenizer::Tokenizer sampleTokenizer(const protocol::RunSpec& spec, const std::string& modelDir)
{
    const std::string dir = spec.tokenizer.empty() ? modelDir : spec.tokenizer;
    if (!std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json"))
        throw std::runtime_error("sample_every needs a tokenizer: " + dir
            + " has no tokenizer.json (set --tokenizer DIR)");
    return tokenizer::Tokenizer::fromFolder(dir);
}

} // namespace

TrainingSamples::TrainingSamples(const protocol::RunSpec& spec, const std::string& modelDir)
    : m_every(spec.sampleEvery)
    , m_maxTokens(spec.sampleMaxTokens)
    , m_prompts(readSamplePrompts(spec.samplePrompts))
    , m_tokenizer(sampleTokenizer(spec, modelDir))
{
}

bool TrainingSamples::due(int64_t step, bool last) const
{
    return m_every > 0 && (step % m_every == 0 || last);
}

std::vector<protocol::SampleEvent> TrainingSamples::run(const LlamaModel& model, Strategy& strategy,
    at::ScalarType dtype, at::Device device, int64_t step) const
{
    const bool hooks = strategy.wantsUnitHooks();
    UnitAccess access;
    access.acquire = [&](int unit) {
        if (hooks)
            strategy.preForward(unit);
        // Whole under tensor parallel, and every stage's under pipeline parallel.
        return strategy.wholeUnitWeights(unit);
    };
    access.release = [&](int unit) {
        if (hooks)
            strategy.postForward(unit);
    };
    const int64_t context = model.spec().maxPositionEmbeddings;
    const bool lockstep = strategy.worldSize() > 1;
    std::vector<protocol::SampleEvent> out;
    for (const std::string& text : m_prompts) {
        std::vector<int32_t> prompt = m_tokenizer.encode(text, true);
        if (prompt.empty())
            continue;
        int64_t capacity = static_cast<int64_t>(prompt.size()) + m_maxTokens;
        if (context > 0 && capacity > context) {
            capacity = context;
            if (static_cast<int64_t>(prompt.size()) >= context)
                prompt.erase(prompt.begin(), prompt.end() - (context - 1));
        }
        Decoder decoder(model, access, dtype, device, capacity);
        GenerateOptions o;
        o.maxNewTokens = m_maxTokens;
        if (lockstep)
            o.stopIds = {-1};
        GenerateResult r = generate(decoder, m_tokenizer, prompt, o);
        if (lockstep) {
            const auto stops = endOfTurnIds(m_tokenizer);
            const auto end = std::find_if(r.ids.begin(), r.ids.end(), [&](int32_t id) {
                return std::find(stops.begin(), stops.end(), id) != stops.end();
            });
            r.text = continuationText(m_tokenizer, prompt, {r.ids.begin(), end});
        }
        out.push_back({step, text, r.text});
    }
    return out;
}

} // namespace shard::engine
