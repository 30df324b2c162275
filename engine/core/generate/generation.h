// Text generation on top of the decoder and the sampler: prompt building (plain text or the
// tokenizer's chat template), the decode loop with its stop conditions (EOS and end-of-turn
// tokens, a token limit, user stop strings, the context), and text streamed piece by piece
// (never half a UTF-8 character, never the start of a stop string that may still complete).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/generate/decoder.h"
#include "core/generate/sampler.h"
#include "tokenizer/tokenizer.h"

namespace shard::engine {

// EOS and the chat templates' end-of-turn markers the tokenizer has.
std::vector<int32_t> endOfTurnIds(const tokenizer::Tokenizer& tok);

struct PromptOptions {
    std::string text;
    bool chat = false;        // render through the chat template as one user turn
    std::string system;       // chat: a system turn first (empty = none)
    std::string chatTemplate; // chat: template name override (llama3, chatml, llama2)
};

// The text `ids` add after `prompt`, as the tokenizer decodes the whole sequence (so a
// SentencePiece word-start space right after the prompt is kept); special tokens skipped.
std::string continuationText(const tokenizer::Tokenizer& tok, const std::vector<int32_t>& prompt,
    const std::vector<int32_t>& ids);

// Prompt ids: plain text with the tokenizer's special prefix (e.g. BOS), or the chat template
// with the assistant header appended. An empty plain prompt is the prefix alone (BOS).
std::vector<int32_t> promptIds(const tokenizer::Tokenizer& tok, const PromptOptions& o);

struct GenerateOptions {
    int64_t maxNewTokens = 128;
    SamplingOptions sampling;
    std::vector<std::string> stopStrings;
    std::vector<int32_t> stopIds; // default: endOfTurnIds
    bool useCache = true;         // false: full recompute every step (the reference)
};

// One generated token and the text it releases (possibly empty: held back until complete).
struct TokenPiece {
    int64_t index = 0; // 0-based among the generated tokens
    int32_t id = 0;
    std::string text;
};

struct GenerateResult {
    std::vector<int32_t> ids; // generated (stop token excluded)
    std::string text;         // the streamed pieces and the tail joined (no stop string)
    std::string tail;         // text held back at the end (e.g. a stop string's start)
    std::string stopReason;   // eos, max_tokens, stop_string, context
    int64_t promptTokens = 0;
    double prefillSec = 0.0;
    double decodeSec = 0.0;  // the one-token steps after the prefill
    int64_t decodeSteps = 0; // one-token forwards run
    double prefillTokensPerSec() const;
    double decodeTokensPerSec() const;
};

// Generates from `prompt` (batch 1). The decoder's capacity bounds prompt + new tokens (stop
// reason "context" when it is reached); it is reset first. onToken sees every token as it is
// produced.
GenerateResult generate(Decoder& decoder, const tokenizer::Tokenizer& tok,
    const std::vector<int32_t>& prompt, const GenerateOptions& options,
    const std::function<void(const TokenPiece&)>& onToken = {});

} // namespace shard::engine
