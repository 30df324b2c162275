#include "tbio/event_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <stdexcept>

#include "tbio/tfrecord.h"

namespace shard::tbio {

namespace {

void varint(std::string& out, uint64_t v)
{
    while (v >= 0x80) {
        out.push_back(static_cast<char>((v & 0x7F) | 0x80));
        v >>= 7;
    }
    out.push_back(static_cast<char>(v));
}

void key(std::string& out, int field, int wireType)
{
    varint(out, static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wireType));
}

void lengthDelimited(std::string& out, int field, const std::string& bytes)
{
    key(out, field, 2);
    varint(out, bytes.size());
    out += bytes;
}

void fixed64(std::string& out, int field, double v)
{
    key(out, field, 1);
    char b[8];
    std::memcpy(b, &v, 8); // little-endian hosts (x86-64, aarch64), as protobuf's wire format
    out.append(b, 8);
}

void fixed32(std::string& out, int field, float v)
{
    key(out, field, 5);
    char b[4];
    std::memcpy(b, &v, 4);
    out.append(b, 4);
}

} // namespace

std::string scalarEventBytes(
    double wallTime, int64_t step, const std::vector<std::pair<std::string, float>>& scalars)
{
    std::string summary;
    for (const auto& [tag, value] : scalars) {
        std::string v;
        lengthDelimited(v, 1, tag); // Summary.Value.tag
        fixed32(v, 2, value);       // Summary.Value.simple_value
        lengthDelimited(summary, 1, v);
    }
    std::string e;
    fixed64(e, 1, wallTime); // Event.wall_time
    key(e, 2, 0);            // Event.step
    varint(e, static_cast<uint64_t>(step));
    lengthDelimited(e, 5, summary); // Event.summary
    return e;
}

std::string fileVersionEventBytes(double wallTime, const std::string& writer)
{
    std::string e;
    fixed64(e, 1, wallTime);
    lengthDelimited(e, 3, "brain.Event:2"); // Event.file_version
    std::string meta;
    lengthDelimited(meta, 1, writer); // SourceMetadata.writer
    lengthDelimited(e, 10, meta);     // Event.source_metadata
    return e;
}

EventFileWriter::EventFileWriter(const std::string& dir)
{
    char host[256] = "localhost";
    ::gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    const std::string stem = dir + "/events.out.tfevents." + std::to_string(std::time(nullptr))
        + "." + host + "." + std::to_string(::getpid()) + ".";
    for (int n = 0; m_fd < 0; ++n) {
        m_path = stem + std::to_string(n);
        m_fd = ::open(m_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
        if (m_fd < 0 && (errno != EEXIST || n > 1000))
            throw std::runtime_error(
                "cannot create the TensorBoard file " + m_path + ": " + std::strerror(errno));
    }
    timespec now {};
    ::clock_gettime(CLOCK_REALTIME, &now);
    append(frameRecord(fileVersionEventBytes(
        static_cast<double>(now.tv_sec) + now.tv_nsec * 1e-9, "shard-studio")));
}

EventFileWriter::~EventFileWriter()
{
    if (m_fd >= 0)
        ::close(m_fd);
}

void EventFileWriter::write(
    double wallTime, int64_t step, const std::vector<std::pair<std::string, float>>& scalars)
{
    append(frameRecord(scalarEventBytes(wallTime, step, scalars)));
}

void EventFileWriter::append(const std::string& bytes)
{
    size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t n = ::write(m_fd, bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            const int err = n < 0 ? errno : ENOSPC;
            // A part of a record would leave the file unreadable from there: cut it off again.
            if (done > 0) {
                const off_t end = ::lseek(m_fd, 0, SEEK_END);
                if (end >= static_cast<off_t>(done)
                    && ::ftruncate(m_fd, end - static_cast<off_t>(done)) != 0) {
                    // Nothing more to do: the error below names the file.
                }
            }
            throw std::runtime_error(
                "cannot write the TensorBoard file " + m_path + ": " + std::strerror(err));
        }
        done += static_cast<size_t>(n);
    }
}

} // namespace shard::tbio
