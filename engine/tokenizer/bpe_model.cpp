// BPE merges with a priority queue over adjacent pairs (lowest rank first, then leftmost), the
// order Hugging Face tokenizers and transformers.js use.
#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "tokenizer/unicode_text.h"

namespace shard::tokenizer {

namespace {

[[noreturn]] void fail(const std::string& what)
{
    throw std::runtime_error("tokenizer.json: " + what);
}

} // namespace

BpeModel BpeModel::fromJson(const nlohmann::json& model)
{
    if (!model.is_object())
        fail("\"model\" is missing or not an object");
    const std::string type = model.value("type", std::string("BPE"));
    if (type != "BPE")
        fail("unsupported model type '" + type + "' (supported: BPE)");
    if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"] != 0.0)
        fail("BPE dropout is not supported (set \"dropout\": null)");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
        if (model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty())
            fail(std::string("BPE \"") + key + "\" is not supported");
    }
    BpeModel m;
    static const nlohmann::json kNull;
    static const nlohmann::json kEmpty = nlohmann::json::array();
    // By reference: value() would copy the (large) vocabulary and merge list.
    const auto& vocab = model.contains("vocab") ? model["vocab"] : kNull;
    if (!vocab.is_object() || vocab.empty())
        fail("model \"vocab\" is missing or empty");
    int32_t maxId = -1;
    m.m_vocab.reserve(vocab.size() * 2);
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
        if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0)
            fail("vocab entry '" + it.key() + "' has no valid id");
        const auto id = static_cast<int32_t>(it.value().get<int64_t>());
        m.m_vocab.emplace(it.key(), id);
        maxId = std::max(maxId, id);
    }
    m.m_idToToken.assign(static_cast<size_t>(maxId) + 1, std::string());
    for (const auto& [tok, id] : m.m_vocab)
        m.m_idToToken[id] = tok;

    const auto& merges = model.contains("merges") ? model["merges"] : kEmpty;
    if (!merges.is_array())
        fail("model \"merges\" is not an array");
    m.m_merges.reserve(merges.size());
    int32_t rank = 0;
    for (const auto& entry : merges) {
        std::string a, b;
        if (entry.is_string()) {
            const auto& s = entry.get_ref<const std::string&>();
            const size_t space = s.find(' ', 1);
            if (space == std::string::npos)
                fail("merge '" + s + "' is not two tokens separated by a space");
            a = s.substr(0, space);
            b = s.substr(space + 1);
        } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string()
            && entry[1].is_string()) {
            a = entry[0].get<std::string>();
            b = entry[1].get<std::string>();
        } else {
            fail("merge #" + std::to_string(rank) + " is neither \"a b\" nor [\"a\", \"b\"]");
        }
        const int32_t ia = m.tokenToId(a), ib = m.tokenToId(b), io = m.tokenToId(a + b);
        if (ia < 0 || ib < 0 || io < 0)
            fail("merge '" + a + " " + b + "' uses a token missing from the vocabulary");
        m.m_merges.insert(pairKey(ia, ib), Merge {rank, io});
        ++rank;
    }

    m.m_byteFallback = model.value("byte_fallback", false);
    m.m_fuseUnk = model.value("fuse_unk", false);
    m.m_ignoreMerges = model.value("ignore_merges", false);
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
        m.m_unkId = m.tokenToId(model["unk_token"].get<std::string>());
        if (m.m_unkId < 0)
            fail("unk_token '" + model["unk_token"].get<std::string>()
                + "' is not in the vocabulary");
    }
    m.m_bmpIds.assign(0x10000, -1);
    for (const auto& [tok, id] : m.m_vocab) {
        size_t pos = 0;
        const char32_t cp = decodeUtf8(tok, pos);
        if (pos != tok.size())
            continue;
        if (cp < 0x10000)
            m.m_bmpIds[cp] = id;
        else
            m.m_astralIds[cp] = id;
    }
    m.m_hasByteAlphabet = true;
    for (int b = 0; b < 256; ++b) {
        m.m_byteIds[b] = m.tokenToId(byteToUtf8()[b]);
        if (m.m_byteIds[b] < 0)
            m.m_hasByteAlphabet = false;
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        m.m_byteFallbackIds[b] = m.tokenToId(name);
    }
    return m;
}

int32_t BpeModel::tokenToId(const std::string& token) const
{
    const auto it = m_vocab.find(token);
    return it == m_vocab.end() ? -1 : it->second;
}

const std::string& BpeModel::idToToken(int32_t id) const
{
    static const std::string empty;
    return id >= 0 && id < static_cast<int32_t>(m_idToToken.size()) ? m_idToToken[id] : empty;
}

void BpeModel::appendUnknown(std::string_view ch, std::vector<int32_t>& ids) const
{
    if (m_byteFallback) {
        bool all = true;
        for (unsigned char c : ch)
            all = all && m_byteFallbackIds[c] >= 0;
        if (all) {
            for (unsigned char c : ch)
                ids.push_back(m_byteFallbackIds[c]);
            return;
        }
    }
    if (m_unkId < 0)
        throw std::runtime_error("tokenizer: character '" + std::string(ch)
            + "' is not in the vocabulary and the model has no unk_token or byte fallback");
    if (m_fuseUnk && !ids.empty() && ids.back() == m_unkId)
        return;
    ids.push_back(m_unkId);
}

void BpeModel::encodeWord(std::string_view word, std::vector<int32_t>& out) const
{
    if (word.empty())
        return;
    if (m_ignoreMerges) {
        const int32_t whole = tokenToId(std::string(word));
        if (whole >= 0) {
            out.push_back(whole);
            return;
        }
    }
    std::vector<int32_t> ids;
    ids.reserve(word.size());
    std::string ch;
    for (size_t pos = 0; pos < word.size();) {
        const size_t start = pos;
        pos += std::min<size_t>(
            utf8SequenceLength(static_cast<unsigned char>(word[pos])), word.size() - pos);
        ch.assign(word.substr(start, pos - start));
        const int32_t id = tokenToId(ch);
        if (id >= 0)
            ids.push_back(id);
        else
            appendUnknown(ch, ids);
    }
    mergeSymbols(ids);
    out.insert(out.end(), ids.begin(), ids.end());
}

void BpeModel::encodeBytes(std::string_view bytes, std::vector<int32_t>& out) const
{
    if (bytes.empty())
        return;
    if (m_ignoreMerges) {
        std::string spelled;
        for (unsigned char c : bytes)
            spelled += byteToUtf8()[c];
        const int32_t whole = tokenToId(spelled);
        if (whole >= 0) {
            out.push_back(whole);
            return;
        }
    }
    std::vector<int32_t> ids;
    ids.reserve(bytes.size());
    for (unsigned char c : bytes) {
        if (m_byteIds[c] < 0)
            appendUnknown(byteToUtf8()[c], ids);
        else
            ids.push_back(m_byteIds[c]);
    }
    mergeSymbols(ids);
    out.insert(out.end(), ids.begin(), ids.end());
}

void BpeModel::MergeTable::reserve(size_t n)
{
    size_t cap = 16;
    int bits = 4;
    while (cap < 2 * n + 1) {
        cap <<= 1;
        ++bits;
    }
    m_keys.assign(cap, kEmpty);
    m_values.assign(cap, Merge {0, 0});
    m_mask = cap - 1;
    m_shift = 64 - bits;
    m_size = 0;
}

void BpeModel::MergeTable::insert(uint64_t key, Merge value)
{
    if (m_keys.empty() || 2 * (m_size + 1) > m_keys.size()) {
        std::vector<uint64_t> keys;
        std::vector<Merge> values;
        keys.swap(m_keys);
        values.swap(m_values);
        reserve(std::max<size_t>(m_size + 1, keys.size()));
        for (size_t i = 0; i < keys.size(); ++i)
            if (keys[i] != kEmpty)
                insert(keys[i], values[i]);
    }
    for (size_t i = slot(key);; i = (i + 1) & m_mask) {
        if (m_keys[i] == key) {
            m_values[i] = value;
            return;
        }
        if (m_keys[i] == kEmpty) {
            m_keys[i] = key;
            m_values[i] = value;
            ++m_size;
            return;
        }
    }
}

int32_t BpeModel::charId(char32_t cp) const
{
    if (cp < 0x10000)
        return m_bmpIds[cp];
    const auto it = m_astralIds.find(cp);
    return it == m_astralIds.end() ? -1 : it->second;
}

void BpeModel::mergeSymbols(std::vector<int32_t>& ids) const
{
    const int n = static_cast<int>(ids.size());
    if (n < 2 || m_merges.empty())
        return;
    // A candidate is (rank << 32 | position) in one 8-byte key: the heap of a long run stays
    // small enough for the caches, and keys order by rank, then leftmost. A popped candidate is
    // checked against the pair now at its position (a rank names one pair), so entries made
    // stale by a neighbour's merge are skipped.
    using Candidate = uint64_t;
    // Scratch reused across calls (per thread): no allocation per pre-token.
    struct Scratch {
        std::vector<int32_t> prev, next;
        std::vector<Candidate> heap;
    };
    thread_local Scratch scratch;
    auto& prev = scratch.prev;
    auto& next = scratch.next;
    auto& heap = scratch.heap;
    prev.resize(n);
    next.resize(n);
    heap.clear();
    for (int i = 0; i < n; ++i) {
        prev[i] = i - 1;
        next[i] = i + 1 < n ? i + 1 : -1;
    }
    const std::greater<> later;
    auto key = [](int32_t rank, int32_t pos) {
        return static_cast<uint64_t>(static_cast<uint32_t>(rank)) << 32
            | static_cast<uint32_t>(pos);
    };
    auto mergeAt = [&](int32_t left) -> const Merge* {
        const int32_t right = next[left];
        return right < 0 ? nullptr : m_merges.find(pairKey(ids[left], ids[right]));
    };
    auto consider = [&](int32_t left) {
        if (const Merge* m = mergeAt(left)) {
            heap.push_back(key(m->rank, left));
            std::push_heap(heap.begin(), heap.end(), later);
        }
    };
    for (int i = 0; i + 1 < n; ++i)
        if (const Merge* m = mergeAt(i))
            heap.push_back(key(m->rank, i));
    std::make_heap(heap.begin(), heap.end(), later);
    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), later);
        const Candidate top = heap.back();
        heap.pop_back();
        const auto pos = static_cast<int32_t>(top & 0xffffffffu);
        const auto rank = static_cast<int32_t>(top >> 32);
        // Merged-away symbols have prev == -2; another rank means a neighbour merged meanwhile.
        if (prev[pos] == -2)
            continue;
        const Merge* m = mergeAt(pos);
        if (m == nullptr || m->rank != rank)
            continue;
        const int32_t right = next[pos];
        ids[pos] = m->newId;
        prev[right] = -2;
        next[pos] = next[right];
        if (next[right] >= 0)
            prev[next[right]] = pos;
        if (prev[pos] >= 0)
            consider(prev[pos]);
        consider(pos);
    }
    int w = 0;
    for (int i = 0; i >= 0 && i < n; i = next[i])
        ids[w++] = ids[i];
    ids.resize(w);
}

} // namespace shard::tokenizer
