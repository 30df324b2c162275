// TensorBoard event files out: what the engine writes beside metrics.jsonl, so a run of Shard
// Studio opens in TensorBoard and in every tool that reads its files. The few messages it
// writes (a file_version event, then one event per logged step with a simple_value per scalar)
// are encoded here directly in protobuf's wire format, so the engine and the GPU worker need no
// protobuf library; tst_event_writer reads them back with the protobuf reader and with
// Python's protobuf.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace shard::tbio {

// The protobuf bytes of Event{wall_time, step, summary{value{tag, simple_value}...}}.
std::string scalarEventBytes(
    double wallTime, int64_t step, const std::vector<std::pair<std::string, float>>& scalars);
// The protobuf bytes of Event{wall_time, file_version: "brain.Event:2", source_metadata}.
std::string fileVersionEventBytes(double wallTime, const std::string& writer);

class EventFileWriter {
public:
    // Creates `dir`/events.out.tfevents.<seconds>.<host>.<pid>.<n> (TensorBoard's name, so its
    // loader and the studio's importer find it) and writes the version record. Throws
    // std::runtime_error naming the file when it cannot be created or written.
    explicit EventFileWriter(const std::string& dir);
    ~EventFileWriter();
    EventFileWriter(const EventFileWriter&) = delete;
    EventFileWriter& operator=(const EventFileWriter&) = delete;

    // One logged step; every write is one write(2) of whole records, so a reader following the
    // file never sees half of one for long. Throws on a failed write (a full disk).
    void write(
        double wallTime, int64_t step, const std::vector<std::pair<std::string, float>>& scalars);
    const std::string& path() const { return m_path; }

private:
    void append(const std::string& bytes);
    std::string m_path;
    int m_fd = -1;
};

} // namespace shard::tbio
