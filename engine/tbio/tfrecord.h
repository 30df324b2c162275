// TFRecord framing, the container of TensorBoard event files: each record is
//   uint64 length (little-endian), uint32 masked CRC-32C of those 8 bytes,
//   `length` bytes of data, uint32 masked CRC-32C of the data.
// The reader goes from a byte offset to the end of what is complete, so a file that a job is
// still writing is read again later from where it stopped (a record cut off at the end is
// waited for, not an error). Memory is bounded by the record being read.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace shard::tbio {

// One framed record (what a writer appends).
std::string frameRecord(std::string_view data);

// Records larger than this are refused (a length field of 2^63 in a hostile or corrupt file;
// TensorBoard's largest usual records, images and graphs, are a few MB).
inline constexpr uint64_t kMaxRecordBytes = uint64_t(256) << 20;

struct RecordScan {
    int64_t endOffset = 0;      // where the next read starts: after the last complete record
    int64_t records = 0;        // complete records handed to the callback
    int64_t crcFailures = 0;    // records whose data CRC failed: skipped
    bool truncatedTail = false; // an incomplete record follows endOffset (waited for)
    // Set when the framing itself is broken (a length whose CRC fails, or a length over
    // kMaxRecordBytes): nothing after endOffset can be trusted, and it is not read.
    std::string error;
};

// Reads the complete records of `path` from byte `offset` on, calling `onRecord(data, offset)`
// for each (the callback may return false to stop after it). Throws std::runtime_error when the
// file cannot be opened or read.
RecordScan readRecords(const std::string& path, int64_t offset,
    const std::function<bool(std::string_view data, int64_t offset)>& onRecord);

} // namespace shard::tbio
