#include "tbio/tfrecord.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "tbio/crc32c.h"

namespace shard::tbio {

namespace {

void putU32(std::string& out, uint32_t v)
{
    for (int i = 0; i < 4; ++i)
        out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

uint32_t getU32(const unsigned char* p)
{
    return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
};

} // namespace

std::string frameRecord(std::string_view data)
{
    std::string out;
    out.reserve(data.size() + 16);
    const uint64_t n = data.size();
    for (int i = 0; i < 8; ++i)
        out.push_back(static_cast<char>((n >> (8 * i)) & 0xFF));
    putU32(out, maskedCrc32c(out.data(), 8));
    out.append(data);
    putU32(out, maskedCrc32c(data.data(), data.size()));
    return out;
}

RecordScan readRecords(const std::string& path, int64_t offset,
    const std::function<bool(std::string_view data, int64_t offset)>& onRecord)
{
    std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
    if (!f)
        throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
    RecordScan scan;
    scan.endOffset = offset;
    if (offset > 0 && std::fseek(f.get(), offset, SEEK_SET) != 0)
        throw std::runtime_error("cannot seek in " + path + ": " + std::strerror(errno));
    std::vector<char> data;
    while (true) {
        unsigned char header[12];
        const size_t got = std::fread(header, 1, sizeof header, f.get());
        if (got < sizeof header) {
            if (std::ferror(f.get()))
                throw std::runtime_error("cannot read " + path + ": " + std::strerror(errno));
            scan.truncatedTail = got > 0;
            return scan;
        }
        uint64_t length = 0;
        for (int i = 0; i < 8; ++i)
            length |= uint64_t(header[i]) << (8 * i);
        if (maskedCrc32c(header, 8) != getU32(header + 8)) {
            scan.error = "the length of the record at byte " + std::to_string(scan.endOffset)
                + " fails its CRC: the file is corrupt or not a TFRecord file";
            return scan;
        }
        if (length > kMaxRecordBytes) {
            scan.error = "the record at byte " + std::to_string(scan.endOffset) + " claims "
                + std::to_string(length) + " bytes, more than the "
                + std::to_string(kMaxRecordBytes >> 20) + " MiB a record may have";
            return scan;
        }
        data.resize(length + 4);
        const size_t body = std::fread(data.data(), 1, data.size(), f.get());
        if (body < data.size()) {
            if (std::ferror(f.get()))
                throw std::runtime_error("cannot read " + path + ": " + std::strerror(errno));
            scan.truncatedTail = true; // the writer has not finished it: read it next time
            return scan;
        }
        const int64_t at = scan.endOffset;
        scan.endOffset += static_cast<int64_t>(12 + length + 4);
        if (maskedCrc32c(data.data(), length)
            != getU32(reinterpret_cast<const unsigned char*>(data.data()) + length)) {
            ++scan.crcFailures;
            continue;
        }
        ++scan.records;
        if (!onRecord(std::string_view(data.data(), length), at))
            return scan;
    }
}

} // namespace shard::tbio
