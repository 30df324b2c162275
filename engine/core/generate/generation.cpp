// The decode loop. Text is re-decoded from the whole sequence at every step (so SentencePiece
// spaces and multi-token characters come out as the tokenizer decodes them) and released up to
// the last point that can no longer change.
#include "generation.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include <ATen/ATen.h>

#include "tokenizer/chat_template.h"

namespace shard::engine {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0)
{
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The longest prefix of s that does not end inside a UTF-8 sequence (or on the replacement
// character a decoder emits for an incomplete byte sequence).
size_t completeUtf8(const std::string& s)
{
    size_t n = s.size();
    if (n >= 3 && s.compare(n - 3, 3, "\xEF\xBF\xBD") == 0)
        return n - 3;
    for (size_t back = 1; back <= std::min<size_t>(3, n); ++back) {
        const auto c = static_cast<unsigned char>(s[n - back]);
        if ((c & 0xC0) == 0x80)
            continue; // continuation byte: look further back for the lead
        const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return need > back ? n - back : n;
    }
    return n;
}

} // namespace

std::vector<int32_t> endOfTurnIds(const tokenizer::Tokenizer& tok)
{
    std::vector<int32_t> ids;
    if (tok.eosId() >= 0)
        ids.push_back(tok.eosId());
    for (const char* t : {"<|eot_id|>", "<|im_end|>", "<|endoftext|>", "<|end|>", "</s>"})
        if (const int32_t id = tok.tokenToId(t);
            id >= 0 && std::find(ids.begin(), ids.end(), id) == ids.end())
            ids.push_back(id);
    return ids;
}

std::vector<int32_t> promptIds(const tokenizer::Tokenizer& tok, const PromptOptions& o)
{
    if (!o.chat)
        return tok.encode(o.text, true);
    std::vector<tokenizer::ChatMessage> messages;
    if (!o.system.empty())
        messages.push_back({"system", o.system});
    messages.push_back({"user", o.text});
    const auto kind = tokenizer::detectChatTemplate(tok, o.chatTemplate);
    std::string text;
    for (const auto& seg : tokenizer::renderChat(kind, messages, tok, true))
        text += seg.text;
    // The rendered text carries its own special tokens (e.g. <s>, <|begin_of_text|>).
    return tok.encode(text, false);
}

std::string continuationText(const tokenizer::Tokenizer& tok, const std::vector<int32_t>& prompt,
    const std::vector<int32_t>& ids)
{
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), ids.begin(), ids.end());
    const std::string head = tok.decode(prompt, true);
    const std::string whole = tok.decode(all, true);
    return whole.compare(0, head.size(), head) == 0 ? whole.substr(head.size())
                                                    : tok.decode(ids, true);
}

double GenerateResult::prefillTokensPerSec() const
{
    return prefillSec > 0 ? promptTokens / prefillSec : 0.0;
}

double GenerateResult::decodeTokensPerSec() const
{
    return decodeSec > 0 ? static_cast<double>(decodeSteps) / decodeSec : 0.0;
}

GenerateResult generate(Decoder& decoder, const tokenizer::Tokenizer& tok,
    const std::vector<int32_t>& prompt, const GenerateOptions& options,
    const std::function<void(const TokenPiece&)>& onToken)
{
    if (prompt.empty())
        throw std::runtime_error("the prompt has no tokens");
    if (static_cast<int64_t>(prompt.size()) > decoder.capacity())
        throw std::runtime_error("the prompt has " + std::to_string(prompt.size())
            + " tokens; the context holds " + std::to_string(decoder.capacity()));
    Sampler sampler(options.sampling);
    const std::vector<int32_t> stopIds
        = options.stopIds.empty() ? endOfTurnIds(tok) : options.stopIds;
    size_t longestStop = 0;
    for (const auto& s : options.stopStrings)
        longestStop = std::max(longestStop, s.size());

    GenerateResult r;
    r.promptTokens = static_cast<int64_t>(prompt.size());
    std::vector<int32_t> sequence = prompt; // prompt + generated (the penalty's history)
    const auto longs = at::TensorOptions().dtype(at::kLong);
    auto idsTensor = [&](const std::vector<int32_t>& v) {
        return at::tensor(std::vector<int64_t>(v.begin(), v.end()), longs).unsqueeze(0);
    };

    decoder.reset();
    const auto t0 = Clock::now();
    at::Tensor logits = options.useCache ? decoder.forward(idsTensor(prompt))
                                         : decoder.fullForward(idsTensor(prompt));
    auto tDecode = t0;
    std::string text; // generated text so far, as decoded
    size_t emitted = 0;
    for (int64_t n = 0; n < options.maxNewTokens; ++n) {
        const int32_t next = sampler.next(logits[0][-1], sequence);
        if (n == 0) {
            r.prefillSec = since(t0);
            tDecode = Clock::now();
        }
        if (std::find(stopIds.begin(), stopIds.end(), next) != stopIds.end()) {
            r.stopReason = "eos";
            break;
        }
        r.ids.push_back(next);
        sequence.push_back(next);
        text = continuationText(tok, prompt, r.ids);
        // A stop string ends the text where it starts.
        size_t cut = std::string::npos;
        const size_t from = emitted > longestStop ? emitted - longestStop : 0;
        for (const auto& s : options.stopStrings)
            if (!s.empty())
                cut = std::min(cut, text.find(s, from));
        size_t safe = cut != std::string::npos ? cut : completeUtf8(text);
        if (cut == std::string::npos)
            for (const auto& s : options.stopStrings)
                for (size_t len = std::min(s.size() - 1, safe); len > 0 && !s.empty(); --len)
                    if (text.compare(safe - len, len, s, 0, len) == 0) {
                        safe -= len;
                        break;
                    }
        safe = std::max(safe, emitted);
        TokenPiece piece {n, next, text.substr(emitted, safe - emitted)};
        emitted = safe;
        r.text += piece.text;
        if (onToken)
            onToken(piece);
        if (cut != std::string::npos) {
            r.stopReason = "stop_string";
            break;
        }
        if (n + 1 == options.maxNewTokens) {
            r.stopReason = "max_tokens";
            break;
        }
        if (static_cast<int64_t>(sequence.size()) >= decoder.capacity()) {
            r.stopReason = "context";
            break;
        }
        ++r.decodeSteps;
        logits = options.useCache ? decoder.forward(idsTensor({next}))
                                  : decoder.fullForward(idsTensor(sequence));
    }
    if (r.stopReason.empty())
        r.stopReason = "max_tokens"; // maxNewTokens <= 0
    if (r.stopReason != "stop_string" && emitted < text.size())
        r.tail = text.substr(emitted);
    r.text += r.tail;
    r.decodeSec = r.decodeSteps > 0 ? since(tDecode) : 0.0;
    return r;
}

} // namespace shard::engine
