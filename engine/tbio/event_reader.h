// Scalars out of TensorBoard event files (`events.out.tfevents.*`), as every tool that logs to
// TensorBoard writes them: `simple_value` (PyTorch's SummaryWriter, TF1, Keras, Lightning) and
// scalar tensors (TF2's tf.summary.scalar: float, double, half, bfloat16). Histograms, images,
// audio, text, graphs, hparams and run metadata are counted and skipped.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace shard::tbio {

struct ScalarPoint {
    std::string tag;
    int64_t step = 0;
    double wallTime = 0.0; // seconds since the epoch
    double value = 0.0;
};

struct EventFileScan {
    std::vector<ScalarPoint> scalars; // in file order (a repeated step appears twice); empty
                                      // when they were handed to a callback instead
    int64_t endOffset = 0;            // read again from here for what the job writes next
    int64_t records = 0;
    int64_t crcFailures = 0;    // records skipped because their data CRC failed
    bool truncatedTail = false; // an incomplete last record (still being written)
    std::string fileVersion;    // "brain.Event:2"
    std::string writer;         // source_metadata.writer ("pytorch",
                                // "tensorboard.summary.writer.event_file_writer", ...)
    // What was not a scalar, by kind: histograms, images, audio, text, graphs, hparams,
    // run_metadata, session_log, log_message, tensors (non-scalar or non-numeric), undecodable.
    std::map<std::string, int64_t> skipped;
    // Set when the rest of the file cannot be read (a broken frame, a record over the size
    // limit); what came before it is in `scalars`. Names the file.
    std::string error;
};

// Reads `path` from byte `offset` on (0: from the start, checking it is an event file). Throws
// std::runtime_error naming the file when it cannot be read, or when at offset 0 it is not an
// event file (its first record is not a framed `file_version` event).
EventFileScan readEventFile(const std::string& path, int64_t offset = 0);

// The same, streaming: each scalar goes to `onScalar` in file order as its record is read, and
// `scalars` stays empty, so memory is bounded by the record being read whatever the file's size.
EventFileScan readEventFile(const std::string& path, int64_t offset,
    const std::function<void(const ScalarPoint&)>& onScalar);

// "events.out.tfevents.*": the names TensorFlow, PyTorch and tensorboardX give event files.
bool isEventFileName(const std::string& fileName);

// IEEE half and bfloat16 bit patterns as floats.
float halfToFloat(uint16_t bits);
float bfloat16ToFloat(uint16_t bits);

} // namespace shard::tbio
