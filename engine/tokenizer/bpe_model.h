// The BPE model of a Hugging Face tokenizer.json: vocabulary, ranked merges, byte fallback and
// unknown-token handling. Merging uses a linked list of symbols and a priority queue of
// candidate pairs, so a pre-token of n symbols costs O(n log n), never O(n^2).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace shard::tokenizer {

class BpeModel {
public:
    // Parses tokenizer.json's "model" object; throws with a message naming what is wrong.
    static BpeModel fromJson(const nlohmann::json& model);

    // Encodes one pre-token spelled in the model's own alphabet (e.g. "▁Hello").
    void encodeWord(std::string_view word, std::vector<int32_t>& out) const;
    // Encodes one pre-token given as raw bytes of a byte-level model: each byte starts as the
    // token of its GPT-2 alphabet character.
    void encodeBytes(std::string_view bytes, std::vector<int32_t>& out) const;

    int32_t tokenToId(const std::string& token) const; // -1 when absent
    const std::string& idToToken(int32_t id) const;    // empty when absent
    int32_t maxId() const { return static_cast<int32_t>(m_idToToken.size()) - 1; }
    bool byteFallback() const { return m_byteFallback; }
    // Whether every GPT-2 alphabet character is in the vocabulary (byte-level models).
    bool hasByteAlphabet() const { return m_hasByteAlphabet; }

private:
    struct Merge {
        int32_t rank;
        int32_t newId;
    };
    static uint64_t pairKey(int32_t a, int32_t b)
    {
        return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
    }
    // Open-addressing hash of (left id, right id) -> merge; lookups dominate BPE time.
    class MergeTable {
    public:
        void insert(uint64_t key, Merge value); // a repeated pair keeps the later merge
        const Merge* find(uint64_t key) const
        {
            if (m_keys.empty())
                return nullptr;
            for (size_t i = slot(key);; i = (i + 1) & m_mask) {
                if (m_keys[i] == key)
                    return &m_values[i];
                if (m_keys[i] == kEmpty)
                    return nullptr;
            }
        }
        void reserve(size_t n);
        bool empty() const { return m_size == 0; }

    private:
        static constexpr uint64_t kEmpty = ~0ull;
        size_t slot(uint64_t key) const
        {
            return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> m_shift);
        }
        std::vector<uint64_t> m_keys;
        std::vector<Merge> m_values;
        size_t m_mask = 0;
        int m_shift = 64;
        size_t m_size = 0;
    };

    void mergeSymbols(std::vector<int32_t>& ids) const;
    int32_t charId(char32_t cp) const;
    void appendUnknown(std::string_view ch, std::vector<int32_t>& ids) const;

    std::unordered_map<std::string, int32_t> m_vocab;
    std::vector<std::string> m_idToToken;
    MergeTable m_merges;
    std::vector<int32_t> m_bmpIds;                     // single-code-point tokens, U+0000..FFFF
    std::unordered_map<char32_t, int32_t> m_astralIds; // and above
    std::array<int32_t, 256> m_byteIds {};             // byte-level alphabet -> id
    std::array<int32_t, 256> m_byteFallbackIds {};     // <0xXX> -> id
    int32_t m_unkId = -1;
    bool m_fuseUnk = false;
    bool m_byteFallback = false;
    bool m_ignoreMerges = false;
    bool m_hasByteAlphabet = false;
};

} // namespace shard::tokenizer
