// Calibration: the predictor's coefficients as data, read from and written to JSON.
#include "plan/calibration.h"

#include <cmath>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace shard::plan {

namespace {

// One table drives fromJson, toJson and entries so a new coefficient is one line here.
template<typename Cal, typename Fn> void forEachField(Cal& c, Fn&& fn)
{
    fn("act_per_hidden", c.actPerHidden);
    fn("act_per_q", c.actPerQ);
    fn("act_per_kv", c.actPerKv);
    fn("act_per_q_gqa", c.actPerQGqa);
    fn("act_per_qk_norm", c.actPerQkNorm);
    fn("act_per_intermediate", c.actPerIntermediate);
    fn("act_fp32_per_token", c.actFp32PerToken);
    fn("score_bytes_cpu_fp32_compute", c.scoreBytesCpuFp32Compute);
    fn("score_bytes_cpu_16_compute", c.scoreBytesCpu16Compute);
    fn("score_bytes_gpu", c.scoreBytesGpu);
    fn("lse_fp32_per_head_token_gpu", c.lseFp32PerHeadTokenGpu);
    fn("cpu_fused_attention", c.cpuFusedAttention);
    fn("fused_cpu_attention_drops_per_q", c.fusedCpuAttentionDropsPerQ);
    fn("fused_cpu_attention_tp_drops_per_q", c.fusedCpuAttentionTpDropsPerQ);
    fn("fused_cpu_attention_widened_bytes_per_q", c.fusedCpuAttentionWidenedBytesPerQ);
    fn("ckpt_saved_per_hidden", c.ckptSavedPerHidden);
    fn("bwd_transient_per_hidden", c.bwdTransientPerHidden);
    fn("bwd_transient_per_intermediate", c.bwdTransientPerIntermediate);
    fn("root_act_per_hidden", c.rootActPerHidden);
    fn("logits_fp32_copies", c.logitsFp32Copies);
    fn("logits_compute_copies", c.logitsComputeCopies);
    fn("gathered_units_in_flight", c.gatheredUnitsInFlight);
    fn("reduce_scatter_recv_cpu", c.reduceScatterRecvCpu);
    fn("gpu_overhead_bytes", c.gpuOverheadBytes);
    fn("gpu_fragmentation", c.gpuFragmentation);
    fn("cpu_overhead_bytes", c.cpuOverheadBytes);
    fn("cpu_fragmentation", c.cpuFragmentation);
    fn("compute_efficiency", c.computeEfficiency);
    fn("comm_efficiency", c.commEfficiency);
    fn("zero_paper_k", c.zeroPaperK);
}

} // namespace

Calibration Calibration::fromJson(const nlohmann::json& j)
{
    if (!j.is_object())
        throw std::runtime_error("calibration: expected a JSON object of coefficients");
    Calibration c;
    size_t known = 0;
    forEachField(c, [&](const char* key, double& value) {
        auto it = j.find(key);
        if (it == j.end())
            return;
        ++known;
        if (!it->is_number())
            throw std::runtime_error(std::string("calibration: '") + key
                + "' must be a number (got " + it->dump() + ")");
        double v = it->get<double>();
        if (!std::isfinite(v) || v < 0)
            throw std::runtime_error(
                std::string("calibration: '") + key + "' must be a non-negative number");
        value = v;
    });
    if (auto it = j.find("reduce_scatter_recv_gpu_is_shard"); it != j.end()) {
        ++known;
        if (!it->is_boolean())
            throw std::runtime_error(
                "calibration: 'reduce_scatter_recv_gpu_is_shard' must be true or false");
        c.reduceScatterRecvGpuIsShard = it->get<bool>();
    }
    if (known != j.size()) {
        for (auto it = j.begin(); it != j.end(); ++it) {
            bool found = it.key() == "reduce_scatter_recv_gpu_is_shard";
            forEachField(c, [&](const char* key, double&) { found = found || it.key() == key; });
            if (!found)
                throw std::runtime_error("calibration: unknown key '" + it.key()
                    + "' (see `shard plan --show-calibration` for the keys)");
        }
    }
    if (c.computeEfficiency <= 0 || c.commEfficiency <= 0)
        throw std::runtime_error("calibration: compute_efficiency and comm_efficiency must be > 0");
    return c;
}

nlohmann::json Calibration::toJson() const
{
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [k, v] : entries())
        j[k] = v;
    j["reduce_scatter_recv_gpu_is_shard"] = reduceScatterRecvGpuIsShard;
    return j;
}

Calibration Calibration::load(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw std::runtime_error(path + ": cannot be read");
    std::stringstream buf;
    buf << in.rdbuf();
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(buf.str());
    } catch (const nlohmann::json::parse_error& e) {
        throw std::runtime_error(path + ": not valid JSON (" + e.what() + ")");
    }
    try {
        return fromJson(j);
    } catch (const std::exception& e) {
        throw std::runtime_error(path + ": " + e.what());
    }
}

std::vector<std::pair<std::string, double>> Calibration::entries() const
{
    std::vector<std::pair<std::string, double>> out;
    Calibration copy = *this;
    forEachField(copy, [&](const char* key, double& v) { out.emplace_back(key, v); });
    return out;
}

bool engineUsesFusedCpuAttention()
{
#ifdef SHARD_PLAN_ENGINE_FUSED_CPU_ATTENTION
    return true;
#else
    return false;
#endif
}

} // namespace shard::plan
