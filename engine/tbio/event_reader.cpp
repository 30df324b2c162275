#include "tbio/event_reader.h"

#include <cmath>
#include <cstring>
#include <stdexcept>

#include "tbio/tfrecord.h"
#include "tensorboard_event.pb.h"

namespace shard::tbio {

namespace {

// TF2 writes a scalar as a rank-0 tensor; float, double, half and bfloat16 are read.
bool tensorScalar(const pb::TensorProto& t, double& out)
{
    if (t.tensor_shape().dim_size() != 0) {
        int64_t n = 1;
        for (const auto& d : t.tensor_shape().dim())
            n *= d.size();
        if (n != 1)
            return false;
    }
    const std::string& raw = t.tensor_content();
    switch (t.dtype()) {
    case pb::DT_FLOAT:
        if (t.float_val_size() > 0) {
            out = t.float_val(0);
            return true;
        }
        if (raw.size() == 4) {
            float f;
            std::memcpy(&f, raw.data(), 4);
            out = f;
            return true;
        }
        return false;
    case pb::DT_DOUBLE:
        if (t.double_val_size() > 0) {
            out = t.double_val(0);
            return true;
        }
        if (raw.size() == 8) {
            std::memcpy(&out, raw.data(), 8);
            return true;
        }
        return false;
    case pb::DT_HALF:
    case pb::DT_BFLOAT16: {
        uint16_t bits = 0;
        if (t.half_val_size() > 0)
            bits = static_cast<uint16_t>(t.half_val(0));
        else if (raw.size() == 2)
            std::memcpy(&bits, raw.data(), 2);
        else
            return false;
        out = t.dtype() == pb::DT_HALF ? halfToFloat(bits) : bfloat16ToFloat(bits);
        return true;
    }
    default:
        return false;
    }
}

// Where a non-scalar value goes in EventFileScan::skipped.
std::string kindOfPlugin(const std::string& plugin)
{
    if (plugin == "histograms" || plugin == "distributions")
        return "histograms";
    if (plugin == "images" || plugin == "audio" || plugin == "text" || plugin == "hparams"
        || plugin == "pr_curves" || plugin == "mesh" || plugin == "graphs")
        return plugin;
    return "tensors";
}

} // namespace

float halfToFloat(uint16_t h)
{
    const int sign = (h >> 15) & 1, exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF;
    float v;
    if (exponent == 0)
        v = std::ldexp(static_cast<float>(mantissa), -24);
    else if (exponent == 31)
        v = mantissa ? NAN : INFINITY;
    else
        v = std::ldexp(static_cast<float>(mantissa | 0x400), exponent - 25);
    return sign ? -v : v;
}

float bfloat16ToFloat(uint16_t bits)
{
    const uint32_t u = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

bool isEventFileName(const std::string& fileName)
{
    const auto slash = fileName.find_last_of('/');
    const std::string base = slash == std::string::npos ? fileName : fileName.substr(slash + 1);
    return base.rfind("events.out.tfevents.", 0) == 0;
}

EventFileScan readEventFile(const std::string& path, int64_t offset)
{
    std::vector<ScalarPoint> scalars;
    EventFileScan scan
        = readEventFile(path, offset, [&](const ScalarPoint& p) { scalars.push_back(p); });
    scan.scalars = std::move(scalars);
    return scan;
}

EventFileScan readEventFile(const std::string& path, int64_t offset,
    const std::function<void(const ScalarPoint&)>& onScalar)
{
    EventFileScan scan;
    // Scalars' metadata comes with a tag's first value only; later values of the tag carry none.
    std::map<std::string, std::string> pluginOfTag;
    bool first = offset == 0;
    std::string notEvents;
    pb::Event event;
    const RecordScan rs = readRecords(path, offset, [&](std::string_view data, int64_t) {
        event.Clear();
        const bool parsed = event.ParseFromArray(data.data(), static_cast<int>(data.size()));
        if (first) {
            first = false;
            if (!parsed || event.what_case() != pb::Event::kFileVersion
                || event.file_version().rfind("brain.Event:", 0) != 0) {
                notEvents = "its first record is not an event file's version record";
                return false;
            }
        }
        if (!parsed) {
            ++scan.skipped["undecodable"];
            return true;
        }
        if (event.has_source_metadata() && scan.writer.empty())
            scan.writer = event.source_metadata().writer();
        switch (event.what_case()) {
        case pb::Event::kFileVersion:
            scan.fileVersion = event.file_version();
            return true;
        case pb::Event::kGraphDef:
        case pb::Event::kMetaGraphDef:
            ++scan.skipped["graphs"];
            return true;
        case pb::Event::kTaggedRunMetadata:
            ++scan.skipped["run_metadata"];
            return true;
        case pb::Event::kSessionLog:
            ++scan.skipped["session_log"];
            return true;
        case pb::Event::kLogMessage:
            ++scan.skipped["log_message"];
            return true;
        case pb::Event::kSummary:
            break;
        default:
            return true;
        }
        for (const auto& v : event.summary().value()) {
            std::string plugin;
            if (v.has_metadata() && v.metadata().has_plugin_data()) {
                plugin = v.metadata().plugin_data().plugin_name();
                pluginOfTag[v.tag()] = plugin;
            } else if (auto it = pluginOfTag.find(v.tag()); it != pluginOfTag.end()) {
                plugin = it->second;
            }
            double value = 0.0;
            switch (v.value_case()) {
            case pb::Summary::Value::kSimpleValue:
                onScalar({v.tag(), event.step(), event.wall_time(), v.simple_value()});
                break;
            case pb::Summary::Value::kTensor:
                if ((plugin.empty() || plugin == "scalars") && tensorScalar(v.tensor(), value))
                    onScalar({v.tag(), event.step(), event.wall_time(), value});
                else
                    ++scan.skipped[kindOfPlugin(plugin)];
                break;
            case pb::Summary::Value::kHisto:
            case pb::Summary::Value::kObsoleteOldStyleHistogram:
                ++scan.skipped["histograms"];
                break;
            case pb::Summary::Value::kImage:
                ++scan.skipped["images"];
                break;
            case pb::Summary::Value::kAudio:
                ++scan.skipped["audio"];
                break;
            default:
                // No value: hparams and other plugins put everything in the metadata.
                ++scan.skipped[plugin.empty() ? "tensors" : kindOfPlugin(plugin)];
                break;
            }
        }
        return true;
    });
    if (!notEvents.empty())
        throw std::runtime_error(path + " is not a TensorBoard event file: " + notEvents);
    if (offset == 0 && rs.records == 0 && rs.crcFailures == 0 && !rs.error.empty())
        throw std::runtime_error(path + " is not a TensorBoard event file: " + rs.error);
    scan.endOffset = rs.endOffset;
    scan.records = rs.records;
    scan.crcFailures = rs.crcFailures;
    scan.truncatedTail = rs.truncatedTail;
    if (!rs.error.empty())
        scan.error = path + ": " + rs.error;
    return scan;
}

} // namespace shard::tbio
