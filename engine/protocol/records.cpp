// JSON encoding of metric and event records; the field names are the on-disk contract.
#include "records.h"

#include "protocol/memory_categories.h"

#include <stdexcept>

namespace shard::protocol {

namespace {

template<typename T> T required(const nlohmann::json& j, const char* key, const char* what)
{
    auto it = j.find(key);
    if (it == j.end() || it->is_null())
        throw std::runtime_error(std::string(what) + " record: missing field '" + key + "'");
    try {
        return it->get<T>();
    } catch (const nlohmann::json::exception&) {
        throw std::runtime_error(std::string(what) + " record: field '" + key
            + "' has the wrong type (" + it->type_name() + ")");
    }
}

template<typename T> T optional(const nlohmann::json& j, const char* key, T fallback)
{
    auto it = j.find(key);
    if (it == j.end() || it->is_null())
        return fallback;
    try {
        return it->get<T>();
    } catch (const nlohmann::json::exception&) {
        throw std::runtime_error(std::string("record: field '") + key + "' has the wrong type ("
            + it->type_name() + ")");
    }
}

// Absent when the field is missing or null.
std::optional<double> maybeNumber(const nlohmann::json& j, const char* key)
{
    auto it = j.find(key);
    if (it == j.end() || it->is_null())
        return std::nullopt;
    return optional<double>(j, key, 0.0);
}

void checkVersion(const nlohmann::json& j, const char* what)
{
    if (!j.is_object())
        throw std::runtime_error(std::string(what) + " record: not a JSON object");
    const int v = optional<int>(j, "v", kSchemaVersion);
    if (v > kSchemaVersion)
        throw std::runtime_error(std::string(what) + " record: schema version " + std::to_string(v)
            + " is newer than this build understands (" + std::to_string(kSchemaVersion)
            + "); update Shard Studio");
}

} // namespace

nlohmann::json toJson(const RankMemory& m)
{
    nlohmann::json j = {{"rank", m.rank}, {"current", m.currentBytes}, {"peak", m.peakBytes}};
    // frozen_params: LoRA runs only, full fine-tuning records are unchanged.
    for (const MemoryCategory& c : memoryCategories())
        if (c.writtenWhenZero || m.*c.bytes > 0)
            j[c.key] = m.*c.bytes;
    if (m.offloadedBytes > 0) // offloading runs only
        j["offloaded"] = m.offloadedBytes;
    if (m.cuda) // GPU ranks only: CPU records are unchanged
        j["cuda"]
            = {{"allocated", m.cudaAllocatedBytes}, {"allocated_peak", m.cudaAllocatedPeakBytes},
                {"reserved", m.cudaReservedBytes}, {"reserved_peak", m.cudaReservedPeakBytes},
                {"alloc_retries", m.cudaAllocRetries}, {"ooms", m.cudaOoms}};
    return j;
}

RankMemory rankMemoryFromJson(const nlohmann::json& j)
{
    RankMemory m;
    m.rank = optional<int>(j, "rank", 0);
    for (const MemoryCategory& c : memoryCategories())
        m.*c.bytes = optional<int64_t>(j, c.key, 0);
    m.currentBytes = optional<int64_t>(j, "current", 0);
    m.peakBytes = optional<int64_t>(j, "peak", 0);
    m.offloadedBytes = optional<int64_t>(j, "offloaded", 0);
    if (auto it = j.find("cuda"); it != j.end() && it->is_object()) {
        m.cuda = true;
        m.cudaAllocatedBytes = optional<int64_t>(*it, "allocated", 0);
        m.cudaAllocatedPeakBytes = optional<int64_t>(*it, "allocated_peak", 0);
        m.cudaReservedBytes = optional<int64_t>(*it, "reserved", 0);
        m.cudaReservedPeakBytes = optional<int64_t>(*it, "reserved_peak", 0);
        m.cudaAllocRetries = optional<int64_t>(*it, "alloc_retries", 0);
        m.cudaOoms = optional<int64_t>(*it, "ooms", 0);
    }
    return m;
}

nlohmann::json toJson(const MetricRecord& r)
{
    nlohmann::json j = {{"v", kSchemaVersion}, {"type", "metric"}, {"step", r.step},
        {"tokens", r.tokens}, {"loss", r.loss}, {"step_time", r.stepTimeSec},
        {"wall_time", r.wallTimeSec}, {"comm_bytes", r.commBytes}};
    if (r.lr)
        j["lr"] = *r.lr;
    if (r.gradNorm)
        j["grad_norm"] = *r.gradNorm;
    if (r.tokensPerSec)
        j["tokens_per_sec"] = *r.tokensPerSec;
    if (r.evalLoss)
        j["eval_loss"] = *r.evalLoss;
    if (r.hostReads >= 0)
        j["host_reads"] = r.hostReads;
    if (r.cpuTimeSec >= 0)
        j["cpu_time"] = r.cpuTimeSec;
    auto mem = nlohmann::json::array();
    for (const auto& m : r.memory)
        mem.push_back(toJson(m));
    j["memory"] = std::move(mem);
    if (!r.scalars.empty())
        j["scalars"] = r.scalars;
    return j;
}

MetricRecord metricFromJson(const nlohmann::json& j)
{
    checkVersion(j, "metric");
    MetricRecord r;
    r.step = required<int64_t>(j, "step", "metric");
    r.loss = required<double>(j, "loss", "metric");
    r.tokens = optional<int64_t>(j, "tokens", 0);
    r.stepTimeSec = optional<double>(j, "step_time", 0.0);
    r.wallTimeSec = optional<double>(j, "wall_time", 0.0);
    r.commBytes = optional<int64_t>(j, "comm_bytes", 0);
    r.hostReads = optional<int64_t>(j, "host_reads", -1);
    r.cpuTimeSec = optional<double>(j, "cpu_time", -1.0);
    r.lr = maybeNumber(j, "lr");
    r.gradNorm = maybeNumber(j, "grad_norm");
    r.tokensPerSec = maybeNumber(j, "tokens_per_sec");
    if (auto it = j.find("eval_loss"); it != j.end() && it->is_number())
        r.evalLoss = it->get<double>();
    if (auto it = j.find("memory"); it != j.end() && it->is_array())
        for (const auto& m : *it)
            r.memory.push_back(rankMemoryFromJson(m));
    if (auto it = j.find("scalars"); it != j.end() && it->is_object())
        for (auto s = it->begin(); s != it->end(); ++s)
            if (s.value().is_number())
                r.scalars[s.key()] = s.value().get<double>();
    return r;
}

nlohmann::json toJson(const EventRecord& e)
{
    nlohmann::json j = {{"v", kSchemaVersion}, {"type", "event"}, {"kind", e.kind},
        {"wall_time", e.wallTimeSec}, {"message", e.message}, {"data", e.data}};
    if (e.step >= 0) // no step known (a launcher before any rank reported one): none written
        j["step"] = e.step;
    return j;
}

EventRecord eventFromJson(const nlohmann::json& j)
{
    checkVersion(j, "event");
    EventRecord e;
    e.kind = required<std::string>(j, "kind", "event");
    e.wallTimeSec = optional<double>(j, "wall_time", 0.0);
    e.step = optional<int64_t>(j, "step", -1);
    e.message = optional<std::string>(j, "message", "");
    if (auto it = j.find("data"); it != j.end() && it->is_object())
        e.data = *it;
    return e;
}

nlohmann::json toJson(const GenModelRecord& r)
{
    return {{"v", kSchemaVersion}, {"type", "model"}, {"model", r.model}, {"params", r.params},
        {"dtype", r.dtype}, {"device", r.device}, {"load_sec", r.loadSec}};
}

nlohmann::json toJson(const GenTokenRecord& r)
{
    return {{"v", kSchemaVersion}, {"type", "token"}, {"index", r.index}, {"id", r.id},
        {"text", r.text}};
}

nlohmann::json toJson(const GenSummaryRecord& r)
{
    return {{"v", kSchemaVersion}, {"type", "summary"}, {"tokens", r.tokens},
        {"prompt_tokens", r.promptTokens}, {"prefill_sec", r.prefillSec},
        {"decode_sec", r.decodeSec}, {"prefill_tokens_per_sec", r.prefillTokensPerSec},
        {"decode_tokens_per_sec", r.decodeTokensPerSec}, {"stop_reason", r.stopReason},
        {"text", r.text}, {"tail", r.tail}};
}

GenModelRecord genModelFromJson(const nlohmann::json& j)
{
    checkVersion(j, "model");
    GenModelRecord r;
    r.model = required<std::string>(j, "model", "model");
    r.params = optional<int64_t>(j, "params", 0);
    r.dtype = optional<std::string>(j, "dtype", "");
    r.device = optional<std::string>(j, "device", "");
    r.loadSec = optional<double>(j, "load_sec", 0.0);
    return r;
}

GenTokenRecord genTokenFromJson(const nlohmann::json& j)
{
    checkVersion(j, "token");
    GenTokenRecord r;
    r.index = required<int64_t>(j, "index", "token");
    r.id = required<int32_t>(j, "id", "token");
    r.text = required<std::string>(j, "text", "token");
    return r;
}

GenSummaryRecord genSummaryFromJson(const nlohmann::json& j)
{
    checkVersion(j, "summary");
    GenSummaryRecord r;
    r.tokens = required<int64_t>(j, "tokens", "summary");
    r.promptTokens = required<int64_t>(j, "prompt_tokens", "summary");
    r.stopReason = required<std::string>(j, "stop_reason", "summary");
    r.prefillSec = optional<double>(j, "prefill_sec", 0.0);
    r.decodeSec = optional<double>(j, "decode_sec", 0.0);
    r.prefillTokensPerSec = optional<double>(j, "prefill_tokens_per_sec", 0.0);
    r.decodeTokensPerSec = optional<double>(j, "decode_tokens_per_sec", 0.0);
    r.text = optional<std::string>(j, "text", "");
    r.tail = optional<std::string>(j, "tail", "");
    return r;
}

EventRecord toEvent(const SampleEvent& s, double wallTimeSec)
{
    EventRecord e;
    e.kind = kSampleEventKind;
    e.step = s.step;
    e.wallTimeSec = wallTimeSec;
    e.message = "sample at step " + std::to_string(s.step);
    e.data = {{"prompt", s.prompt}, {"completion", s.completion}};
    return e;
}

std::optional<SampleEvent> sampleFromEvent(const EventRecord& e)
{
    if (e.kind != kSampleEventKind)
        return std::nullopt;
    SampleEvent s;
    s.step = e.step;
    s.prompt = optional<std::string>(e.data, "prompt", "");
    s.completion = optional<std::string>(e.data, "completion", "");
    return s;
}

std::string encodeLine(const nlohmann::json& j)
{
    // Replace invalid UTF-8 instead of throwing: a log message must never stop a run.
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

} // namespace shard::protocol
