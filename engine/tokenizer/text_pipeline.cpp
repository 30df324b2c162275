// Normalizers, pre-tokenizers (regex splits through PCRE2 with JIT), post-processor templates
// and decoders of tokenizer.json.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/text_pipeline.h"

#include <pcre2.h>

#include <stdexcept>

#include <nlohmann/json.hpp>

#include "tokenizer/unicode_text.h"

namespace shard::tokenizer {

namespace {

[[noreturn]] void fail(const std::string& what)
{
    throw std::runtime_error("tokenizer.json: " + what);
}

std::string typeOf(const nlohmann::json& json, const char* stage)
{
    if (!json.is_object() || !json.contains("type") || !json["type"].is_string())
        fail(std::string(stage) + " has no \"type\"");
    return json["type"].get<std::string>();
}

void replaceAll(std::string& text, std::string_view from, std::string_view to)
{
    if (from.empty())
        return;
    std::string out;
    size_t pos = 0;
    for (size_t hit; (hit = text.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
        out.append(text, pos, hit - pos);
        out.append(to);
    }
    if (pos == 0)
        return;
    out.append(text, pos, std::string::npos);
    text.swap(out);
}

// A compiled PCRE2 pattern (UTF + Unicode properties, JIT when available).
class Regex {
public:
    explicit Regex(const std::string& pattern)
    {
        int err = 0;
        PCRE2_SIZE offset = 0;
        m_code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
            PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
        if (!m_code) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            fail("regex '" + pattern + "' does not compile at offset " + std::to_string(offset)
                + ": " + reinterpret_cast<const char*>(msg));
        }
        pcre2_jit_compile(m_code, PCRE2_JIT_COMPLETE); // falls back to the interpreter if not
        m_context = pcre2_match_context_create(nullptr);
        // A JIT stack per thread (a stack must not be shared by concurrent matches).
        pcre2_jit_stack_assign(m_context, &threadJitStack, nullptr);
    }
    Regex(const Regex&) = delete;
    Regex& operator=(const Regex&) = delete;
    ~Regex()
    {
        pcre2_match_context_free(m_context);
        pcre2_code_free(m_code);
    }

    // Calls onMatch(start, end) for each non-empty match, left to right.
    template<typename F> void forEachMatch(std::string_view text, F&& onMatch) const
    {
        pcre2_match_data* md = pcre2_match_data_create_from_pattern(m_code, nullptr);
        size_t pos = 0;
        while (pos <= text.size()) {
            const int rc = pcre2_match(m_code, reinterpret_cast<PCRE2_SPTR>(text.data()),
                text.size(), pos, PCRE2_NO_UTF_CHECK, md, m_context);
            if (rc == PCRE2_ERROR_NOMATCH)
                break;
            if (rc < 0) {
                pcre2_match_data_free(md);
                PCRE2_UCHAR msg[256];
                pcre2_get_error_message(rc, msg, sizeof msg);
                throw std::runtime_error(std::string("tokenizer: regex match failed: ")
                    + reinterpret_cast<const char*>(msg));
            }
            const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
            const size_t start = ov[0], end = ov[1];
            if (end > start) {
                onMatch(start, end);
                pos = end;
            } else {
                if (start >= text.size())
                    break;
                pos = start + utf8SequenceLength(static_cast<unsigned char>(text[start]));
            }
        }
        pcre2_match_data_free(md);
    }

private:
    pcre2_code* m_code = nullptr;
    pcre2_match_context* m_context = nullptr;

    static pcre2_jit_stack* threadJitStack(void*)
    {
        struct Holder {
            pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
            ~Holder() { pcre2_jit_stack_free(stack); }
        };
        thread_local Holder holder;
        return holder.stack;
    }
};

std::string escapeRegex(const std::string& literal)
{
    std::string out;
    for (char c : literal) {
        if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos)
            out.push_back('\\');
        out.push_back(c);
    }
    return out;
}

std::string patternOf(const nlohmann::json& pattern, const char* where)
{
    if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string())
        return pattern["Regex"].get<std::string>();
    if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string())
        return escapeRegex(pattern["String"].get<std::string>());
    fail(std::string(where) + " pattern must be {\"Regex\": ...} or {\"String\": ...}");
}

// ---------------------------------------------------------------------------------------------
// Normalizers

class SequenceNormalizer : public Normalizer {
public:
    std::vector<std::unique_ptr<Normalizer>> steps;
    std::string normalize(std::string text) const override
    {
        for (const auto& s : steps)
            text = s->normalize(std::move(text));
        return text;
    }
};

class UnicodeNormalizer : public Normalizer {
public:
    explicit UnicodeNormalizer(NormalForm form)
        : m_form(form)
    {
    }
    std::string normalize(std::string text) const override
    {
        return normalizeUnicode(text, m_form);
    }

private:
    NormalForm m_form;
};

class PrependNormalizer : public Normalizer {
public:
    explicit PrependNormalizer(std::string prefix)
        : m_prefix(std::move(prefix))
    {
    }
    std::string normalize(std::string text) const override
    {
        return text.empty() ? text : m_prefix + text;
    }

private:
    std::string m_prefix;
};

class ReplaceNormalizer : public Normalizer {
public:
    ReplaceNormalizer(const nlohmann::json& pattern, std::string content)
        : m_content(std::move(content))
    {
        if (pattern.contains("String") && pattern["String"].is_string())
            m_literal = pattern["String"].get<std::string>();
        else
            m_regex = std::make_unique<Regex>(patternOf(pattern, "Replace"));
    }
    std::string normalize(std::string text) const override
    {
        if (!m_regex) {
            replaceAll(text, m_literal, m_content);
            return text;
        }
        std::string out;
        size_t last = 0;
        m_regex->forEachMatch(text, [&](size_t s, size_t e) {
            out.append(text, last, s - last);
            out.append(m_content);
            last = e;
        });
        out.append(text, last, std::string::npos);
        return out;
    }

private:
    std::string m_literal;
    std::unique_ptr<Regex> m_regex;
    std::string m_content;
};

class LowercaseNormalizer : public Normalizer {
public:
    std::string normalize(std::string text) const override { return lowercaseUnicode(text); }
};

class StripNormalizer : public Normalizer {
public:
    StripNormalizer(bool left, bool right)
        : m_left(left)
        , m_right(right)
    {
    }
    std::string normalize(std::string text) const override
    {
        auto isSpace = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
        size_t b = 0, e = text.size();
        if (m_left)
            while (b < e && isSpace(text[b]))
                ++b;
        if (m_right)
            while (e > b && isSpace(text[e - 1]))
                --e;
        return text.substr(b, e - b);
    }

private:
    bool m_left, m_right;
};

// ---------------------------------------------------------------------------------------------
// Pre-tokenizers

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

SplitBehavior behaviorOf(const nlohmann::json& json)
{
    const std::string b = json.value("behavior", std::string("Isolated"));
    if (b == "Removed")
        return SplitBehavior::Removed;
    if (b == "Isolated")
        return SplitBehavior::Isolated;
    if (b == "MergedWithPrevious")
        return SplitBehavior::MergedWithPrevious;
    if (b == "MergedWithNext")
        return SplitBehavior::MergedWithNext;
    if (b == "Contiguous")
        return SplitBehavior::Contiguous;
    fail("unknown Split behavior '" + b + "'");
}

// Splits text into pieces given match spans, the way tokenizers' SplitDelimiterBehavior does.
void splitBySpans(const std::string& text, const std::vector<std::pair<size_t, size_t>>& matches,
    SplitBehavior behavior, bool invert, bool byteLevel, std::vector<PreToken>& out)
{
    struct Seg {
        size_t s, e;
        bool match;
    };
    std::vector<Seg> segs;
    size_t last = 0;
    for (const auto& [s, e] : matches) {
        if (s > last)
            segs.push_back({last, s, invert});
        segs.push_back({s, e, !invert});
        last = e;
    }
    if (last < text.size())
        segs.push_back({last, text.size(), invert});
    auto emit = [&](size_t s, size_t e) {
        if (e > s)
            out.push_back({text.substr(s, e - s), byteLevel});
    };
    switch (behavior) {
    case SplitBehavior::Removed:
        for (const auto& g : segs)
            if (!g.match)
                emit(g.s, g.e);
        break;
    case SplitBehavior::Isolated:
        for (const auto& g : segs)
            emit(g.s, g.e);
        break;
    case SplitBehavior::MergedWithPrevious: {
        size_t start = 0;
        for (size_t i = 0; i < segs.size(); ++i) {
            if (segs[i].match) {
                emit(start, segs[i].e);
                start = segs[i].e;
            }
        }
        emit(start, text.size());
        break;
    }
    case SplitBehavior::MergedWithNext: {
        size_t start = 0;
        for (size_t i = 0; i < segs.size(); ++i) {
            if (segs[i].match && segs[i].s > start) {
                emit(start, segs[i].s);
                start = segs[i].s;
            }
        }
        emit(start, text.size());
        break;
    }
    case SplitBehavior::Contiguous: {
        size_t i = 0;
        while (i < segs.size()) {
            size_t j = i;
            while (j + 1 < segs.size() && segs[j + 1].match == segs[i].match)
                ++j;
            emit(segs[i].s, segs[j].e);
            i = j + 1;
        }
        break;
    }
    }
}

class SequencePreTokenizer : public PreTokenizer {
public:
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    void split(std::vector<PreToken>& pieces, bool firstChunk) const override
    {
        for (const auto& s : steps)
            s->split(pieces, firstChunk);
    }
};

class RegexSplitPreTokenizer : public PreTokenizer {
public:
    RegexSplitPreTokenizer(const std::string& pattern, SplitBehavior behavior, bool invert)
        : m_regex(pattern)
        , m_behavior(behavior)
        , m_invert(invert)
    {
    }
    void split(std::vector<PreToken>& pieces, bool) const override
    {
        std::vector<PreToken> out;
        out.reserve(pieces.size() * 4);
        std::vector<std::pair<size_t, size_t>> matches;
        for (const auto& p : pieces) {
            if (p.byteLevel)
                fail("a Split pre-tokenizer after ByteLevel is not supported");
            matches.clear();
            m_regex.forEachMatch(p.text, [&](size_t s, size_t e) { matches.emplace_back(s, e); });
            splitBySpans(p.text, matches, m_behavior, m_invert, false, out);
        }
        pieces.swap(out);
    }

private:
    Regex m_regex;
    SplitBehavior m_behavior;
    bool m_invert;
};

const char* kGpt2Pattern
    = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPreTokenizer : public PreTokenizer {
public:
    ByteLevelPreTokenizer(bool addPrefixSpace, bool useRegex)
        : m_addPrefixSpace(addPrefixSpace)
    {
        if (useRegex)
            m_regex = std::make_unique<Regex>(kGpt2Pattern);
    }
    void split(std::vector<PreToken>& pieces, bool) const override
    {
        std::vector<PreToken> out;
        std::vector<std::pair<size_t, size_t>> matches;
        for (auto& p : pieces) {
            if (p.byteLevel)
                fail("ByteLevel pre-tokenizer applied twice");
            if (m_addPrefixSpace && (p.text.empty() || p.text[0] != ' '))
                p.text.insert(p.text.begin(), ' ');
            if (m_regex) {
                matches.clear();
                m_regex->forEachMatch(
                    p.text, [&](size_t s, size_t e) { matches.emplace_back(s, e); });
                splitBySpans(p.text, matches, SplitBehavior::Isolated, false, true, out);
            } else {
                p.byteLevel = true;
                out.push_back(std::move(p));
            }
        }
        pieces.swap(out);
    }

private:
    bool m_addPrefixSpace;
    std::unique_ptr<Regex> m_regex;
};

class MetaspacePreTokenizer : public PreTokenizer {
public:
    MetaspacePreTokenizer(std::string replacement, std::string scheme, bool split)
        : m_replacement(std::move(replacement))
        , m_scheme(std::move(scheme))
        , m_split(split)
    {
    }
    void split(std::vector<PreToken>& pieces, bool firstChunk) const override
    {
        std::vector<PreToken> out;
        for (size_t i = 0; i < pieces.size(); ++i) {
            std::string text = pieces[i].text;
            replaceAll(text, " ", m_replacement);
            const bool prepend
                = m_scheme == "always" || (m_scheme == "first" && firstChunk && i == 0);
            if (prepend && text.compare(0, m_replacement.size(), m_replacement) != 0)
                text.insert(0, m_replacement);
            if (!m_split) {
                out.push_back({std::move(text), false});
                continue;
            }
            size_t start = 0;
            for (size_t hit = text.find(m_replacement, 1); hit != std::string::npos;
                 hit = text.find(m_replacement, hit + m_replacement.size())) {
                if (hit > start)
                    out.push_back({text.substr(start, hit - start), false});
                start = hit;
            }
            if (start < text.size())
                out.push_back({text.substr(start), false});
        }
        pieces.swap(out);
    }

private:
    std::string m_replacement;
    std::string m_scheme;
    bool m_split;
};

class DigitsPreTokenizer : public PreTokenizer {
public:
    explicit DigitsPreTokenizer(bool individual)
        : m_regex(individual ? "\\p{Nd}" : "\\p{Nd}+")
    {
    }
    void split(std::vector<PreToken>& pieces, bool) const override
    {
        std::vector<PreToken> out;
        std::vector<std::pair<size_t, size_t>> matches;
        for (const auto& p : pieces) {
            matches.clear();
            m_regex.forEachMatch(p.text, [&](size_t s, size_t e) { matches.emplace_back(s, e); });
            splitBySpans(p.text, matches, SplitBehavior::Isolated, false, p.byteLevel, out);
        }
        pieces.swap(out);
    }

private:
    Regex m_regex;
};

// ---------------------------------------------------------------------------------------------
// Decoders

class SequenceDecoder : public Decoder {
public:
    std::vector<std::unique_ptr<Decoder>> steps;
    void decode(std::vector<DecodePiece>& pieces) const override
    {
        for (const auto& s : steps)
            s->decode(pieces);
    }
};

class ByteLevelDecoder : public Decoder {
public:
    void decode(std::vector<DecodePiece>& pieces) const override
    {
        std::vector<DecodePiece> out;
        std::string bytes;
        auto flush = [&] {
            if (!bytes.empty())
                out.push_back({utf8Lossy(bytes), false});
            bytes.clear();
        };
        for (const auto& p : pieces) {
            if (p.added) {
                flush();
                out.push_back(p);
                continue;
            }
            for (size_t pos = 0; pos < p.text.size();) {
                const size_t start = pos;
                const char32_t cp = decodeUtf8(p.text, pos);
                const int b = codePointToByte(cp);
                if (b >= 0)
                    bytes.push_back(static_cast<char>(b));
                else
                    bytes.append(p.text, start, pos - start);
            }
        }
        flush();
        pieces.swap(out);
    }
};

class ReplaceDecoder : public Decoder {
public:
    ReplaceDecoder(std::string from, std::string to)
        : m_from(std::move(from))
        , m_to(std::move(to))
    {
    }
    void decode(std::vector<DecodePiece>& pieces) const override
    {
        for (auto& p : pieces)
            if (!p.added)
                replaceAll(p.text, m_from, m_to);
    }

private:
    std::string m_from, m_to;
};

int parseByteToken(const std::string& t)
{
    if (t.size() != 6 || t[0] != '<' || t[1] != '0' || t[2] != 'x' || t[5] != '>')
        return -1;
    auto hex = [](char c) {
        if (c >= '0' && c <= '9')
            return c - '0';
        if (c >= 'A' && c <= 'F')
            return c - 'A' + 10;
        if (c >= 'a' && c <= 'f')
            return c - 'a' + 10;
        return -1;
    };
    const int hi = hex(t[3]), lo = hex(t[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

class ByteFallbackDecoder : public Decoder {
public:
    void decode(std::vector<DecodePiece>& pieces) const override
    {
        std::vector<DecodePiece> out;
        std::string bytes;
        auto flush = [&] {
            if (bytes.empty())
                return;
            // Like tokenizers: invalid byte runs become one U+FFFD per byte.
            if (findInvalidUtf8(bytes) < 0) {
                out.push_back({bytes, false});
            } else {
                std::string repl;
                for (size_t i = 0; i < bytes.size(); ++i)
                    repl += "\xEF\xBF\xBD";
                out.push_back({repl, false});
            }
            bytes.clear();
        };
        for (auto& p : pieces) {
            const int b = p.added ? -1 : parseByteToken(p.text);
            if (b >= 0) {
                bytes.push_back(static_cast<char>(b));
                continue;
            }
            flush();
            out.push_back(std::move(p));
        }
        flush();
        pieces.swap(out);
    }
};

class FuseDecoder : public Decoder {
public:
    void decode(std::vector<DecodePiece>& pieces) const override
    {
        DecodePiece all;
        for (const auto& p : pieces)
            all.text += p.text;
        pieces.assign(1, std::move(all));
    }
};

class StripDecoder : public Decoder {
public:
    StripDecoder(std::string content, int start, int stop)
        : m_content(std::move(content))
        , m_start(start)
        , m_stop(stop)
    {
    }
    void decode(std::vector<DecodePiece>& pieces) const override
    {
        for (auto& p : pieces) {
            for (int i = 0; i < m_start && p.text.compare(0, m_content.size(), m_content) == 0; ++i)
                p.text.erase(0, m_content.size());
            for (int i = 0; i < m_stop && p.text.size() >= m_content.size()
                 && p.text.compare(p.text.size() - m_content.size(), m_content.size(), m_content)
                     == 0;
                 ++i)
                p.text.erase(p.text.size() - m_content.size());
        }
    }

private:
    std::string m_content;
    int m_start, m_stop;
};

class MetaspaceDecoder : public Decoder {
public:
    MetaspaceDecoder(std::string replacement, bool stripFirst)
        : m_replacement(std::move(replacement))
        , m_stripFirst(stripFirst)
    {
    }
    void decode(std::vector<DecodePiece>& pieces) const override
    {
        for (size_t i = 0; i < pieces.size(); ++i) {
            auto& p = pieces[i];
            if (p.added)
                continue;
            replaceAll(p.text, m_replacement, " ");
            if (i == 0 && m_stripFirst && !p.text.empty() && p.text[0] == ' ')
                p.text.erase(0, 1);
        }
    }

private:
    std::string m_replacement;
    bool m_stripFirst;
};

std::string metaspaceScheme(const nlohmann::json& json)
{
    if (json.contains("prepend_scheme") && json["prepend_scheme"].is_string())
        return json["prepend_scheme"].get<std::string>();
    return json.value("add_prefix_space", true) ? "always" : "never";
}

} // namespace

std::unique_ptr<Normalizer> Normalizer::fromJson(const nlohmann::json& json)
{
    if (json.is_null())
        return nullptr;
    const std::string type = typeOf(json, "normalizer");
    if (type == "Sequence") {
        auto seq = std::make_unique<SequenceNormalizer>();
        for (const auto& step : json.value("normalizers", nlohmann::json::array()))
            if (auto n = fromJson(step))
                seq->steps.push_back(std::move(n));
        return seq;
    }
    if (type == "NFC")
        return std::make_unique<UnicodeNormalizer>(NormalForm::NFC);
    if (type == "NFD")
        return std::make_unique<UnicodeNormalizer>(NormalForm::NFD);
    if (type == "NFKC")
        return std::make_unique<UnicodeNormalizer>(NormalForm::NFKC);
    if (type == "NFKD")
        return std::make_unique<UnicodeNormalizer>(NormalForm::NFKD);
    if (type == "Prepend")
        return std::make_unique<PrependNormalizer>(json.value("prepend", std::string()));
    if (type == "Replace")
        return std::make_unique<ReplaceNormalizer>(
            json.value("pattern", nlohmann::json::object()), json.value("content", std::string()));
    if (type == "Lowercase")
        return std::make_unique<LowercaseNormalizer>();
    if (type == "Strip")
        return std::make_unique<StripNormalizer>(
            json.value("strip_left", true), json.value("strip_right", true));
    fail("unsupported normalizer type '" + type
        + "' (supported: Sequence, NFC, NFD, NFKC, NFKD, Prepend, Replace, Lowercase, Strip)");
}

std::unique_ptr<PreTokenizer> PreTokenizer::fromJson(const nlohmann::json& json)
{
    if (json.is_null())
        return nullptr;
    const std::string type = typeOf(json, "pre_tokenizer");
    if (type == "Sequence") {
        auto seq = std::make_unique<SequencePreTokenizer>();
        for (const auto& step : json.value("pretokenizers", nlohmann::json::array()))
            if (auto p = fromJson(step))
                seq->steps.push_back(std::move(p));
        return seq;
    }
    if (type == "Split")
        return std::make_unique<RegexSplitPreTokenizer>(
            patternOf(json.value("pattern", nlohmann::json()), "Split"), behaviorOf(json),
            json.value("invert", false));
    if (type == "ByteLevel")
        return std::make_unique<ByteLevelPreTokenizer>(
            json.value("add_prefix_space", false), json.value("use_regex", true));
    if (type == "Metaspace")
        return std::make_unique<MetaspacePreTokenizer>(
            json.value("replacement", std::string("\xE2\x96\x81")), metaspaceScheme(json),
            json.value("split", true));
    if (type == "Digits")
        return std::make_unique<DigitsPreTokenizer>(json.value("individual_digits", false));
    if (type == "WhitespaceSplit")
        return std::make_unique<RegexSplitPreTokenizer>("\\s+", SplitBehavior::Removed, false);
    if (type == "Whitespace")
        return std::make_unique<RegexSplitPreTokenizer>(
            "\\w+|[^\\w\\s]+", SplitBehavior::Isolated, true);
    fail("unsupported pre_tokenizer type '" + type
        + "' (supported: Sequence, Split, ByteLevel, Metaspace, Digits, Whitespace, "
          "WhitespaceSplit)");
}

std::unique_ptr<Decoder> Decoder::fromJson(const nlohmann::json& json)
{
    if (json.is_null())
        return nullptr;
    const std::string type = typeOf(json, "decoder");
    if (type == "Sequence") {
        auto seq = std::make_unique<SequenceDecoder>();
        for (const auto& step : json.value("decoders", nlohmann::json::array()))
            if (auto d = fromJson(step))
                seq->steps.push_back(std::move(d));
        return seq;
    }
    if (type == "ByteLevel")
        return std::make_unique<ByteLevelDecoder>();
    if (type == "Replace") {
        const auto& pattern = json.value("pattern", nlohmann::json::object());
        if (!pattern.contains("String") || !pattern["String"].is_string())
            fail("Replace decoder supports only {\"String\": ...} patterns");
        return std::make_unique<ReplaceDecoder>(
            pattern["String"].get<std::string>(), json.value("content", std::string()));
    }
    if (type == "ByteFallback")
        return std::make_unique<ByteFallbackDecoder>();
    if (type == "Fuse")
        return std::make_unique<FuseDecoder>();
    if (type == "Strip")
        return std::make_unique<StripDecoder>(
            json.value("content", std::string(" ")), json.value("start", 0), json.value("stop", 0));
    if (type == "Metaspace")
        return std::make_unique<MetaspaceDecoder>(
            json.value("replacement", std::string("\xE2\x96\x81")),
            metaspaceScheme(json) != "never");
    fail("unsupported decoder type '" + type
        + "' (supported: Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace)");
}

PostTemplate postTemplateFromJson(
    const nlohmann::json& json, const std::function<int32_t(const std::string&)>& lookup)
{
    PostTemplate t;
    if (json.is_null())
        return t;
    const std::string type = typeOf(json, "post_processor");
    auto idOf = [&](const std::string& name) {
        const int32_t id = lookup(name);
        if (id < 0)
            fail("post_processor names token '" + name + "' which is not in the vocabulary");
        return id;
    };
    if (type == "ByteLevel")
        return t;
    if (type == "Sequence") {
        for (const auto& step : json.value("processors", nlohmann::json::array())) {
            PostTemplate s = postTemplateFromJson(step, lookup);
            if (s.present)
                t = s;
        }
        return t;
    }
    if (type == "TemplateProcessing") {
        t.present = true;
        const auto& special = json.value("special_tokens", nlohmann::json::object());
        bool seenSequence = false;
        for (const auto& item : json.value("single", nlohmann::json::array())) {
            if (item.contains("Sequence")) {
                seenSequence = true;
                continue;
            }
            if (!item.contains("SpecialToken"))
                fail("TemplateProcessing item is neither SpecialToken nor Sequence");
            const std::string name = item["SpecialToken"].value("id", std::string());
            std::vector<int32_t> ids;
            if (special.contains(name) && special[name].contains("ids"))
                ids = special[name]["ids"].get<std::vector<int32_t>>();
            else
                ids.push_back(idOf(name));
            auto& dst = seenSequence ? t.suffix : t.prefix;
            dst.insert(dst.end(), ids.begin(), ids.end());
        }
        return t;
    }
    if (type == "RobertaProcessing" || type == "BertProcessing") {
        t.present = true;
        const auto& cls = json.value("cls", nlohmann::json::array());
        const auto& sep = json.value("sep", nlohmann::json::array());
        if (!cls.is_array() || cls.size() != 2 || !sep.is_array() || sep.size() != 2)
            fail(type + " needs \"cls\" and \"sep\" as [token, id]");
        t.prefix.push_back(cls[1].get<int32_t>());
        t.suffix.push_back(sep[1].get<int32_t>());
        return t;
    }
    fail("unsupported post_processor type '" + type
        + "' (supported: TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing, "
          "Sequence)");
}

} // namespace shard::tokenizer
