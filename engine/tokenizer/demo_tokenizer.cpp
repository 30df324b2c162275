// Trains the demo tokenizer's merges on a built-in corpus (classic BPE: repeatedly merge the
// most frequent adjacent pair, ties broken by the smaller pair of ids) and writes HF files.
#include "tokenizer/demo_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <unordered_map>

#include "tokenizer/text_pipeline.h"
#include "tokenizer/unicode_text.h"

namespace shard::tokenizer {

namespace {

const char* const kSplitPattern
    = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

const char* const kChatTemplate
    = "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
      "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | "
      "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% "
      "endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
      "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

const char* const kSpecialTokens[] = {"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
    "<|end_header_id|>", "<|eot_id|>", "<|pad|>"};

// The corpus: plain English, the demo tasks' phrasing, numbers and a little code, so that the
// merges cover what the demo fine-tunes on.
const char* const kCorpus = R"(
The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a single
step. The model reads the question, thinks about the answer, and writes it down. We train small
language models on simple tasks so that we can see the loss fall and the answers become right.
What is the sum of two numbers? What is 12 plus 30? The answer is 42. What is 7 plus 8? The
answer is 15. What is 100 minus 58? The answer is 42. Add the numbers and give the result.
Repeat the following text exactly. Copy the words in the same order. The copy is correct when
every word matches. Please repeat: red green blue yellow orange purple black white.
You are a helpful assistant. The user asks a question and the assistant answers it clearly.
Instruction: answer the question. Input: the question. Response: the answer.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 30 40 50 60 70
80 90 99 100 200 300 400 500 600 700 800 900 1000 2024 3.14 2.718 1,000,000 -1 +1 = x y z
Training a transformer means computing the loss, its gradient, and an optimizer step. Each
step takes a batch of token sequences. The learning rate warms up and then decays. Sharding
splits parameters, gradients and optimizer state across devices so that large models fit.
def add(a, b):
    return a + b

for i in range(10):
    print(i, add(i, i))

int main() { int total = 0; for (int i = 0; i < 10; ++i) { total += i; } return total; }
{"role": "user", "content": "hello"} {"role": "assistant", "content": "hi there"}
It was the best of times, it was the worst of times, it was the age of wisdom, it was the age
of foolishness. In the beginning there was the word, and the word was written in the book.
People read books, write letters, send messages and talk with their friends about the weather,
the news, the city, the river, the mountain, the sea, the sun, the moon and the stars.
Monday Tuesday Wednesday Thursday Friday Saturday Sunday January February March April May June
July August September October November December morning afternoon evening night today
one two three four five six seven eight nine ten eleven twelve hundred thousand million first
second third last next previous before after above below between inside outside through
question answer problem solution example result number value correct wrong true false yes no
)";

std::string spell(const std::vector<uint8_t>& bytes)
{
    std::string s;
    for (uint8_t b : bytes)
        s += byteToUtf8()[b];
    return s;
}

} // namespace

DemoTokenizerFiles makeDemoTokenizer(int vocabSize)
{
    if (vocabSize < kDemoTokenizerMinVocab)
        throw std::runtime_error("demo tokenizer: vocabulary size " + std::to_string(vocabSize)
            + " is below the minimum " + std::to_string(kDemoTokenizerMinVocab));
    constexpr int kSpecials = static_cast<int>(std::size(kSpecialTokens));
    const int maxMerges = vocabSize - 256 - kSpecials;

    // Pre-tokenize the corpus exactly as the tokenizer will, then count words.
    nlohmann::json preTok = {{"type", "Sequence"},
        {"pretokenizers",
            nlohmann::json::array({{{"type", "Split"}, {"pattern", {{"Regex", kSplitPattern}}},
                                       {"behavior", "Isolated"}, {"invert", false}},
                {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                    {"use_regex", false}}})}};
    const auto splitter = PreTokenizer::fromJson(preTok);
    std::vector<PreToken> pieces {{kCorpus, false}};
    splitter->split(pieces, true);
    std::map<std::string, int64_t> wordCounts; // ordered: deterministic
    for (const auto& p : pieces)
        ++wordCounts[p.text];

    // Token id -> bytes; words as id sequences.
    std::vector<std::vector<uint8_t>> tokenBytes(256);
    for (int b = 0; b < 256; ++b)
        tokenBytes[b] = {static_cast<uint8_t>(b)};
    std::map<std::vector<uint8_t>, int32_t> idOfBytes;
    for (int b = 0; b < 256; ++b)
        idOfBytes[tokenBytes[b]] = b;
    std::vector<std::vector<int32_t>> words;
    std::vector<int64_t> counts;
    for (const auto& [w, c] : wordCounts) {
        std::vector<int32_t> ids;
        for (unsigned char ch : w)
            ids.push_back(ch);
        words.push_back(std::move(ids));
        counts.push_back(c);
    }
    std::vector<std::pair<int32_t, int32_t>> merges;
    while (static_cast<int>(tokenBytes.size()) - 256 < maxMerges) {
        std::unordered_map<uint64_t, int64_t> pairCounts;
        for (size_t w = 0; w < words.size(); ++w)
            for (size_t i = 0; i + 1 < words[w].size(); ++i)
                pairCounts[(static_cast<uint64_t>(words[w][i]) << 32) | words[w][i + 1]]
                    += counts[w];
        uint64_t best = 0;
        int64_t bestCount = 0;
        for (const auto& [k, c] : pairCounts)
            if (c > bestCount || (c == bestCount && k < best)) {
                best = k;
                bestCount = c;
            }
        if (bestCount < 2)
            break;
        const auto a = static_cast<int32_t>(best >> 32),
                   b = static_cast<int32_t>(best & 0xffffffff);
        std::vector<uint8_t> joined = tokenBytes[a];
        joined.insert(joined.end(), tokenBytes[b].begin(), tokenBytes[b].end());
        // Two merge paths can spell the same bytes ("ab"+"c", "a"+"bc"): reuse that token.
        auto [known, isNew] = idOfBytes.emplace(joined, static_cast<int32_t>(tokenBytes.size()));
        const int32_t newId = known->second;
        if (isNew)
            tokenBytes.push_back(std::move(joined));
        merges.emplace_back(a, b);
        for (auto& ids : words) {
            std::vector<int32_t> out;
            out.reserve(ids.size());
            for (size_t i = 0; i < ids.size(); ++i) {
                if (i + 1 < ids.size() && ids[i] == a && ids[i + 1] == b) {
                    out.push_back(newId);
                    ++i;
                } else {
                    out.push_back(ids[i]);
                }
            }
            ids.swap(out);
        }
    }

    nlohmann::json vocab = nlohmann::json::object();
    for (size_t id = 0; id < tokenBytes.size(); ++id)
        vocab[spell(tokenBytes[id])] = id;
    nlohmann::json mergeList = nlohmann::json::array();
    for (const auto& [a, b] : merges)
        mergeList.push_back(nlohmann::json::array({spell(tokenBytes[a]), spell(tokenBytes[b])}));
    nlohmann::json added = nlohmann::json::array();
    int32_t next = static_cast<int32_t>(tokenBytes.size());
    auto addSpecial = [&](const std::string& content) {
        added.push_back({{"id", next++}, {"content", content}, {"single_word", false},
            {"lstrip", false}, {"rstrip", false}, {"normalized", false}, {"special", true}});
    };
    for (const char* s : kSpecialTokens)
        addSpecial(s);
    for (int r = 0; next < vocabSize; ++r)
        addSpecial("<|reserved_special_token_" + std::to_string(r) + "|>");

    const int32_t bos = static_cast<int32_t>(tokenBytes.size());
    DemoTokenizerFiles files;
    files.tokenizerJson = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr},
        {"added_tokens", added}, {"normalizer", nullptr}, {"pre_tokenizer", preTok},
        {"post_processor",
            {{"type", "TemplateProcessing"},
                {"single",
                    nlohmann::json::array(
                        {{{"SpecialToken", {{"id", kSpecialTokens[0]}, {"type_id", 0}}}},
                            {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                {"pair",
                    nlohmann::json::array(
                        {{{"SpecialToken", {{"id", kSpecialTokens[0]}, {"type_id", 0}}}},
                            {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                            {{"SpecialToken", {{"id", kSpecialTokens[0]}, {"type_id", 1}}}},
                            {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
                {"special_tokens",
                    {{kSpecialTokens[0],
                        {{"id", kSpecialTokens[0]}, {"ids", {bos}},
                            {"tokens", {kSpecialTokens[0]}}}}}}}},
        {"decoder",
            {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true},
                {"use_regex", true}}},
        {"model",
            {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
                {"vocab", vocab}, {"merges", mergeList}}}};
    files.tokenizerConfig = {{"bos_token", kSpecialTokens[0]}, {"eos_token", kSpecialTokens[1]},
        {"pad_token", "<|pad|>"}, {"chat_template", kChatTemplate},
        {"clean_up_tokenization_spaces", false},
        {"model_input_names", {"input_ids", "attention_mask"}}, {"model_max_length", 131072},
        {"tokenizer_class", "PreTrainedTokenizerFast"}};
    return files;
}

void writeDemoTokenizer(const std::string& dir, int vocabSize)
{
    const DemoTokenizerFiles files = makeDemoTokenizer(vocabSize);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    auto write = [&](const std::string& name, const nlohmann::json& j) {
        const std::string path = dir + "/" + name;
        std::ofstream out(path, std::ios::binary | std::ios::trunc);
        if (!out)
            throw std::runtime_error(path + ": cannot write");
        out << j.dump(2) << '\n';
        if (!out)
            throw std::runtime_error(path + ": write failed");
    };
    write("tokenizer.json", files.tokenizerJson);
    write("tokenizer_config.json", files.tokenizerConfig);
}

} // namespace shard::tokenizer
