// UTF-8 helpers for the tokenizer: validation, code point iteration, the GPT-2 byte-to-unicode
// alphabet of byte-level BPE, and Unicode normalization forms (through ICU).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace shard::tokenizer {

// Length in bytes of the UTF-8 sequence starting with lead byte `c` (1 for invalid leads).
inline int utf8SequenceLength(unsigned char c)
{
    if (c < 0x80)
        return 1;
    if ((c >> 5) == 0x6)
        return 2;
    if ((c >> 4) == 0xE)
        return 3;
    if ((c >> 3) == 0x1E)
        return 4;
    return 1;
}

// Returns the byte offset of the first invalid UTF-8 sequence, or -1 when `text` is valid.
int64_t findInvalidUtf8(std::string_view text);

// Decodes the code point at `pos` and advances `pos` past it (text must be valid UTF-8).
char32_t decodeUtf8(std::string_view text, size_t& pos);
void appendUtf8(std::string& out, char32_t cp);

// Replaces invalid UTF-8 sequences by U+FFFD (like TextDecoder / from_utf8_lossy).
std::string utf8Lossy(std::string_view bytes);

// The GPT-2 byte-level alphabet: byte b is written as code point byteToCodePoint()[b].
const std::array<char32_t, 256>& byteToCodePoint();
// UTF-8 form of byteToCodePoint()[b].
const std::array<std::string, 256>& byteToUtf8();
// Inverse: code point -> byte, or -1 for code points outside the alphabet.
int codePointToByte(char32_t cp);

enum class NormalForm { NFC, NFD, NFKC, NFKD };
// Normalizes UTF-8 text; ASCII input is returned unchanged without a copy through ICU.
std::string normalizeUnicode(std::string_view text, NormalForm form);

// Unicode lowercase (full case mapping, root locale).
std::string lowercaseUnicode(std::string_view text);

} // namespace shard::tokenizer
