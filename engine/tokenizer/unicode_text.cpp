// UTF-8 helpers and ICU-backed normalization for the tokenizer.
#include "tokenizer/unicode_text.h"

#include <stdexcept>

#include <unicode/bytestream.h>
#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

namespace shard::tokenizer {

int64_t findInvalidUtf8(std::string_view text)
{
    const auto* s = reinterpret_cast<const unsigned char*>(text.data());
    const size_t n = text.size();
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) {
            ++i;
            continue;
        }
        int len = 0;
        char32_t cp = 0;
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
            cp = c & 0x1F;
        } else if ((c >> 4) == 0xE) {
            len = 3;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            cp = c & 0x07;
        } else {
            return static_cast<int64_t>(i);
        }
        if (i + len > n)
            return static_cast<int64_t>(i);
        for (int k = 1; k < len; ++k) {
            if ((s[i + k] & 0xC0) != 0x80)
                return static_cast<int64_t>(i);
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF)))
            || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
            return static_cast<int64_t>(i);
        i += len;
    }
    return -1;
}

char32_t decodeUtf8(std::string_view text, size_t& pos)
{
    const auto c = static_cast<unsigned char>(text[pos]);
    const int len = utf8SequenceLength(c);
    if (len == 1 || pos + len > text.size()) {
        ++pos;
        return c;
    }
    char32_t cp = c & (0x7F >> len);
    for (int k = 1; k < len; ++k)
        cp = (cp << 6) | (static_cast<unsigned char>(text[pos + k]) & 0x3F);
    pos += len;
    return cp;
}

void appendUtf8(std::string& out, char32_t cp)
{
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

std::string utf8Lossy(std::string_view bytes)
{
    std::string out;
    out.reserve(bytes.size());
    while (!bytes.empty()) {
        const int64_t bad = findInvalidUtf8(bytes);
        if (bad < 0) {
            out.append(bytes);
            break;
        }
        out.append(bytes.substr(0, static_cast<size_t>(bad)));
        out.append("\xEF\xBF\xBD");
        // Skip the maximal invalid subpart: the lead byte plus any continuation bytes that
        // could still belong to it (one U+FFFD per maximal subpart, as TextDecoder does).
        size_t skip = 1;
        const auto lead = static_cast<unsigned char>(bytes[bad]);
        const int len = utf8SequenceLength(lead);
        if (len > 1) {
            while (skip < static_cast<size_t>(len) && bad + skip < bytes.size()
                && (static_cast<unsigned char>(bytes[bad + skip]) & 0xC0) == 0x80) {
                // Stop where the prefix itself is already impossible (overlong / surrogate).
                const auto b = static_cast<unsigned char>(bytes[bad + skip]);
                if (skip == 1
                    && ((lead == 0xE0 && b < 0xA0) || (lead == 0xED && b > 0x9F)
                        || (lead == 0xF0 && b < 0x90) || (lead == 0xF4 && b > 0x8F) || lead == 0xC0
                        || lead == 0xC1 || lead > 0xF4))
                    break;
                ++skip;
            }
        }
        bytes.remove_prefix(static_cast<size_t>(bad) + skip);
    }
    return out;
}

namespace {

struct ByteTables {
    std::array<char32_t, 256> toCp {};
    std::array<std::string, 256> toUtf8 {};
    std::array<int16_t, 324> fromCp {};
    ByteTables()
    {
        fromCp.fill(-1);
        int extra = 0;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
            toCp[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
            fromCp[toCp[b]] = static_cast<int16_t>(b);
            appendUtf8(toUtf8[b], toCp[b]);
        }
    }
};

const ByteTables& byteTables()
{
    static const ByteTables tables;
    return tables;
}

} // namespace

const std::array<char32_t, 256>& byteToCodePoint()
{
    return byteTables().toCp;
}
const std::array<std::string, 256>& byteToUtf8()
{
    return byteTables().toUtf8;
}

int codePointToByte(char32_t cp)
{
    const auto& t = byteTables();
    return cp < t.fromCp.size() ? t.fromCp[cp] : -1;
}

static bool isAscii(std::string_view text)
{
    for (char c : text)
        if (static_cast<unsigned char>(c) >= 0x80)
            return false;
    return true;
}

std::string normalizeUnicode(std::string_view text, NormalForm form)
{
    if (isAscii(text))
        return std::string(text);
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* norm = nullptr;
    switch (form) {
    case NormalForm::NFC:
        norm = icu::Normalizer2::getNFCInstance(status);
        break;
    case NormalForm::NFD:
        norm = icu::Normalizer2::getNFDInstance(status);
        break;
    case NormalForm::NFKC:
        norm = icu::Normalizer2::getNFKCInstance(status);
        break;
    case NormalForm::NFKD:
        norm = icu::Normalizer2::getNFKDInstance(status);
        break;
    }
    if (U_FAILURE(status) || !norm)
        throw std::runtime_error("tokenizer: ICU normalizer unavailable");
    const icu::StringPiece piece(text.data(), static_cast<int32_t>(text.size()));
    if (norm->isNormalizedUTF8(piece, status) && U_SUCCESS(status))
        return std::string(text);
    status = U_ZERO_ERROR;
    std::string out;
    icu::StringByteSink<std::string> sink(&out, static_cast<int32_t>(text.size()));
    norm->normalizeUTF8(0, piece, sink, nullptr, status);
    if (U_FAILURE(status))
        throw std::runtime_error("tokenizer: Unicode normalization failed");
    return out;
}

std::string lowercaseUnicode(std::string_view text)
{
    if (isAscii(text)) {
        std::string out(text);
        for (char& c : out)
            if (c >= 'A' && c <= 'Z')
                c = static_cast<char>(c - 'A' + 'a');
        return out;
    }
    icu::UnicodeString u = icu::UnicodeString::fromUTF8(
        icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
    u.toLower(icu::Locale::getRoot());
    std::string out;
    u.toUTF8String(out);
    return out;
}

} // namespace shard::tokenizer
