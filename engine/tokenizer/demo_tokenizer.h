// A small byte-level BPE tokenizer in Hugging Face format for the tiny presets and demos: 256
// byte tokens, merges learned from a built-in corpus, Llama 3 style special tokens and chat
// template; reserved special tokens fill the vocabulary to exactly the size asked for.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace shard::tokenizer {

struct DemoTokenizerFiles {
    nlohmann::json tokenizerJson;   // tokenizer.json
    nlohmann::json tokenizerConfig; // tokenizer_config.json
};

// Smallest vocabulary the demo tokenizer can have (256 bytes + 6 special tokens).
constexpr int kDemoTokenizerMinVocab = 262;

// Deterministic: the same vocabSize always gives the same files. Throws when vocabSize is
// below kDemoTokenizerMinVocab.
DemoTokenizerFiles makeDemoTokenizer(int vocabSize);

// Writes tokenizer.json and tokenizer_config.json into `dir` (created if needed).
void writeDemoTokenizer(const std::string& dir, int vocabSize);

} // namespace shard::tokenizer
