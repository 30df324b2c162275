// Tokenizer: added-token matching, then normalizer -> pre-tokenizer -> BPE per chunk, with a
// cache of pre-token encodings; decode through the file's decoder chain.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "tokenizer/bpe_model.h"
#include "tokenizer/text_pipeline.h"
#include "tokenizer/unicode_text.h"

namespace shard::tokenizer {

namespace {

struct AddedToken {
    std::string content;
    int32_t id = -1;
    bool special = false;
    bool lstrip = false;
    bool rstrip = false;
};

// Byte trie over the added tokens for leftmost-longest matching.
class AddedTokenTrie {
public:
    void insert(const std::string& s, int32_t index)
    {
        int32_t node = 0;
        for (unsigned char c : s) {
            auto& next = m_nodes[node].next;
            auto it = next.find(c);
            if (it == next.end()) {
                m_nodes.push_back({});
                it = m_nodes[node].next.emplace(c, static_cast<int32_t>(m_nodes.size() - 1)).first;
            }
            node = it->second;
        }
        m_nodes[node].index = index;
        if (!s.empty())
            m_first[static_cast<unsigned char>(s[0])] = true;
    }
    // Longest token starting at `pos`: returns its index and sets `len`, or -1.
    int32_t matchAt(std::string_view text, size_t pos, size_t& len) const
    {
        if (!m_first[static_cast<unsigned char>(text[pos])])
            return -1;
        int32_t node = 0, best = -1;
        for (size_t i = pos; i < text.size(); ++i) {
            const auto& next = m_nodes[node].next;
            const auto it = next.find(static_cast<unsigned char>(text[i]));
            if (it == next.end())
                break;
            node = it->second;
            if (m_nodes[node].index >= 0) {
                best = m_nodes[node].index;
                len = i + 1 - pos;
            }
        }
        return best;
    }
    bool empty() const { return m_nodes.size() == 1; }

private:
    struct Node {
        std::unordered_map<unsigned char, int32_t> next;
        int32_t index = -1;
    };
    std::vector<Node> m_nodes {Node {}};
    bool m_first[256] = {};
};

std::string tokenString(const nlohmann::json& config, const char* key)
{
    if (!config.is_object() || !config.contains(key))
        return {};
    const auto& v = config[key];
    if (v.is_string())
        return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string())
        return v["content"].get<std::string>();
    return {};
}

bool isSpaceByte(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

} // namespace

struct Tokenizer::Impl {
    BpeModel model;
    std::unique_ptr<Normalizer> normalizer;
    std::unique_ptr<PreTokenizer> preTokenizer;
    std::unique_ptr<Decoder> decoder;
    PostTemplate post;
    std::vector<AddedToken> added;
    std::unordered_map<int32_t, size_t> addedById;
    std::unordered_map<std::string, int32_t> addedByContent;
    AddedTokenTrie trie;
    bool addBos = false;
    bool addEos = false;
    std::string bosToken, eosToken, padToken;
    int32_t bosId = -1, eosId = -1, padId = -1;
    int64_t vocabSize = 0;
    std::string chatTemplate;
    std::string tokenizerClass;
    std::string modelType;

    mutable std::mutex cacheMutex;
    mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

    int32_t lookup(const std::string& token) const
    {
        const auto it = addedByContent.find(token);
        return it != addedByContent.end() ? it->second : model.tokenToId(token);
    }

    void encodePiece(const PreToken& piece, std::vector<int32_t>& out) const
    {
        constexpr size_t kMaxCachedBytes = 256;
        constexpr size_t kMaxCacheEntries = 1 << 18;
        const bool cacheable = piece.text.size() <= kMaxCachedBytes;
        std::string key;
        if (cacheable) {
            key.reserve(piece.text.size() + 1);
            key.push_back(piece.byteLevel ? 'b' : 'w');
            key.append(piece.text);
            std::lock_guard<std::mutex> lock(cacheMutex);
            const auto it = cache.find(key);
            if (it != cache.end()) {
                out.insert(out.end(), it->second.begin(), it->second.end());
                return;
            }
        }
        const size_t before = out.size();
        if (piece.byteLevel)
            model.encodeBytes(piece.text, out);
        else
            model.encodeWord(piece.text, out);
        if (cacheable) {
            std::lock_guard<std::mutex> lock(cacheMutex);
            if (cache.size() >= kMaxCacheEntries)
                cache.clear();
            cache.emplace(std::move(key),
                std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(before), out.end()));
        }
    }

    void encodeChunk(std::string_view chunk, bool firstChunk, std::vector<int32_t>& out) const
    {
        if (chunk.empty())
            return;
        std::vector<PreToken> pieces(1);
        pieces[0].text
            = normalizer ? normalizer->normalize(std::string(chunk)) : std::string(chunk);
        if (pieces[0].text.empty())
            return;
        if (preTokenizer)
            preTokenizer->split(pieces, firstChunk);
        for (const auto& p : pieces)
            encodePiece(p, out);
    }
};

Tokenizer Tokenizer::fromFolder(const std::string& dir)
{
    auto readJson = [](const std::string& path, bool required) -> nlohmann::json {
        std::ifstream in(path, std::ios::binary);
        if (!in) {
            if (required)
                throw std::runtime_error(path
                    + ": cannot open (a Hugging Face model folder needs "
                      "tokenizer.json)");
            return nlohmann::json::object();
        }
        try {
            return nlohmann::json::parse(in);
        } catch (const nlohmann::json::exception& e) {
            throw std::runtime_error(path + ": malformed JSON: " + e.what());
        }
    };
    const nlohmann::json tj = readJson(dir + "/tokenizer.json", true);
    const nlohmann::json cfg = readJson(dir + "/tokenizer_config.json", false);
    // The model type only helps to pick a chat template; config.json itself is the model
    // loader's to validate, so a missing or unreadable one just leaves the type unknown.
    std::string modelType;
    std::ifstream modelConfig(dir + "/config.json", std::ios::binary);
    if (modelConfig) {
        const auto j = nlohmann::json::parse(modelConfig, nullptr, false);
        if (j.is_object() && j.contains("model_type") && j["model_type"].is_string())
            modelType = j["model_type"].get<std::string>();
    }
    try {
        return build(tj, cfg, modelType);
    } catch (const std::exception& e) {
        throw std::runtime_error(dir + "/" + e.what());
    }
}

Tokenizer Tokenizer::fromJson(const nlohmann::json& tj, const nlohmann::json& cfg)
{
    return build(tj, cfg, {});
}

Tokenizer Tokenizer::build(
    const nlohmann::json& tj, const nlohmann::json& cfgIn, const std::string& modelType)
{
    if (!tj.is_object())
        throw std::runtime_error("tokenizer.json: top level is not a JSON object");
    const nlohmann::json cfg = cfgIn.is_object() ? cfgIn : nlohmann::json::object();
    auto impl = std::make_shared<Impl>();
    static const nlohmann::json kNull;
    // By reference: value() would copy the (large) model object.
    auto field = [&tj](const char* key) -> const nlohmann::json& {
        return tj.contains(key) ? tj[key] : kNull;
    };
    impl->model = BpeModel::fromJson(field("model"));
    impl->normalizer = Normalizer::fromJson(field("normalizer"));
    impl->preTokenizer = PreTokenizer::fromJson(field("pre_tokenizer"));
    impl->decoder = Decoder::fromJson(field("decoder"));

    int64_t maxId = impl->model.maxId();
    const auto& addedTokens = field("added_tokens");
    if (!addedTokens.is_null() && !addedTokens.is_array())
        throw std::runtime_error("tokenizer.json: \"added_tokens\" is not an array");
    for (const auto& a : addedTokens.is_array() ? addedTokens : nlohmann::json::array()) {
        AddedToken t;
        if (!a.contains("content") || !a["content"].is_string() || !a.contains("id")
            || !a["id"].is_number_integer())
            throw std::runtime_error("tokenizer.json: an added_tokens entry lacks content or id");
        t.content = a["content"].get<std::string>();
        t.id = a["id"].get<int32_t>();
        t.special = a.value("special", false);
        t.lstrip = a.value("lstrip", false);
        t.rstrip = a.value("rstrip", false);
        if (t.content.empty())
            continue;
        maxId = std::max<int64_t>(maxId, t.id);
        impl->addedById[t.id] = impl->added.size();
        impl->addedByContent[t.content] = t.id;
        impl->trie.insert(t.content, static_cast<int32_t>(impl->added.size()));
        impl->added.push_back(std::move(t));
    }
    impl->vocabSize = maxId + 1;
    const Impl& ref = *impl;
    impl->post = postTemplateFromJson(
        field("post_processor"), [&ref](const std::string& name) { return ref.lookup(name); });

    impl->bosToken = tokenString(cfg, "bos_token");
    impl->eosToken = tokenString(cfg, "eos_token");
    impl->padToken = tokenString(cfg, "pad_token");
    auto resolve = [&](const std::string& token, const char* key) -> int32_t {
        if (token.empty())
            return -1;
        const int32_t id = impl->lookup(token);
        if (id < 0)
            throw std::runtime_error("tokenizer_config.json: " + std::string(key) + " '" + token
                + "' is not in the vocabulary");
        return id;
    };
    impl->bosId = resolve(impl->bosToken, "bos_token");
    impl->eosId = resolve(impl->eosToken, "eos_token");
    impl->padId = resolve(impl->padToken, "pad_token");
    impl->addBos = cfg.value("add_bos_token", false) && impl->bosId >= 0;
    impl->addEos = cfg.value("add_eos_token", false) && impl->eosId >= 0;
    // transformers' Llama tokenizers rebuild the post-processor from add_bos_token /
    // add_eos_token, so for them the config overrides tokenizer.json's template.
    const std::string cls = cfg.value("tokenizer_class", std::string());
    const bool llamaClass = cls == "LlamaTokenizer" || cls == "LlamaTokenizerFast"
        || cls == "CodeLlamaTokenizer" || cls == "CodeLlamaTokenizerFast";
    if (llamaClass && (cfg.contains("add_bos_token") || cfg.contains("add_eos_token"))) {
        impl->post = PostTemplate {};
        impl->post.present = true;
        if (cfg.value("add_bos_token", true) && impl->bosId >= 0)
            impl->post.prefix.push_back(impl->bosId);
        if (cfg.value("add_eos_token", false) && impl->eosId >= 0)
            impl->post.suffix.push_back(impl->eosId);
    }
    if (cfg.contains("chat_template") && cfg["chat_template"].is_string()) {
        impl->chatTemplate = cfg["chat_template"].get<std::string>();
    } else if (cfg.contains("chat_template") && cfg["chat_template"].is_array()) {
        // Several named templates: [{"name": "default", "template": "..."}, ...].
        for (const auto& t : cfg["chat_template"])
            if (t.is_object() && t.value("name", std::string()) == "default"
                && t.contains("template") && t["template"].is_string())
                impl->chatTemplate = t["template"].get<std::string>();
    }
    impl->tokenizerClass = cfg.value("tokenizer_class", std::string());
    impl->modelType = modelType;
    Tokenizer t;
    t.m_impl = std::move(impl);
    return t;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool addSpecial) const
{
    const Impl& d = *m_impl;
    const int64_t bad = findInvalidUtf8(text);
    if (bad >= 0)
        throw std::runtime_error(
            "tokenizer: input is not valid UTF-8 (byte offset " + std::to_string(bad) + ")");
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 4);
    if (addSpecial) {
        if (d.post.present)
            out.insert(out.end(), d.post.prefix.begin(), d.post.prefix.end());
        else if (d.addBos)
            out.push_back(d.bosId);
    }
    size_t chunkStart = 0;
    size_t pos = 0;
    while (pos < text.size()) {
        size_t len = 0;
        const int32_t idx = d.trie.empty() ? -1 : d.trie.matchAt(text, pos, len);
        if (idx < 0) {
            ++pos;
            continue;
        }
        const AddedToken& tok = d.added[idx];
        size_t chunkEnd = pos;
        if (tok.lstrip)
            while (chunkEnd > chunkStart && isSpaceByte(text[chunkEnd - 1]))
                --chunkEnd;
        d.encodeChunk(text.substr(chunkStart, chunkEnd - chunkStart), chunkStart == 0, out);
        out.push_back(tok.id);
        pos += len;
        if (tok.rstrip)
            while (pos < text.size() && isSpaceByte(text[pos]))
                ++pos;
        chunkStart = pos;
    }
    d.encodeChunk(text.substr(chunkStart), chunkStart == 0, out);
    if (addSpecial) {
        if (d.post.present)
            out.insert(out.end(), d.post.suffix.begin(), d.post.suffix.end());
        else if (d.addEos)
            out.push_back(d.eosId);
    }
    return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skipSpecial) const
{
    const Impl& d = *m_impl;
    std::vector<DecodePiece> pieces;
    pieces.reserve(ids.size());
    for (int32_t id : ids) {
        const auto it = d.addedById.find(id);
        if (it != d.addedById.end()) {
            const AddedToken& tok = d.added[it->second];
            if (!(skipSpecial && tok.special))
                pieces.push_back({tok.content, true});
            continue;
        }
        const std::string& t = d.model.idToToken(id);
        if (t.empty())
            throw std::runtime_error("tokenizer: id " + std::to_string(id)
                + " is not in the vocabulary (size " + std::to_string(d.vocabSize) + ")");
        pieces.push_back({t, false});
    }
    if (d.decoder)
        d.decoder->decode(pieces);
    std::string out;
    for (const auto& p : pieces)
        out += p.text;
    return out;
}

int32_t Tokenizer::bosId() const
{
    return m_impl->bosId;
}
int32_t Tokenizer::eosId() const
{
    return m_impl->eosId;
}
int32_t Tokenizer::padId() const
{
    return m_impl->padId >= 0 ? m_impl->padId : (m_impl->eosId >= 0 ? m_impl->eosId : 0);
}
const std::string& Tokenizer::bosToken() const
{
    return m_impl->bosToken;
}
const std::string& Tokenizer::eosToken() const
{
    return m_impl->eosToken;
}
int64_t Tokenizer::vocabSize() const
{
    return m_impl->vocabSize;
}

int32_t Tokenizer::tokenToId(std::string_view token) const
{
    return m_impl->lookup(std::string(token));
}

std::string Tokenizer::idToToken(int32_t id) const
{
    const auto it = m_impl->addedById.find(id);
    if (it != m_impl->addedById.end())
        return m_impl->added[it->second].content;
    return m_impl->model.idToToken(id);
}

bool Tokenizer::isSpecial(int32_t id) const
{
    const auto it = m_impl->addedById.find(id);
    return it != m_impl->addedById.end() && m_impl->added[it->second].special;
}

const std::string& Tokenizer::chatTemplate() const
{
    return m_impl->chatTemplate;
}
const std::string& Tokenizer::tokenizerClass() const
{
    return m_impl->tokenizerClass;
}

const std::string& Tokenizer::modelType() const
{
    return m_impl->modelType;
}

} // namespace shard::tokenizer
