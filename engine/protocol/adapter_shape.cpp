// adoptAdapterShape: adapter_config.json's r, lora_alpha, lora_dropout, use_rslora and
// target_modules (module names such as "q_proj" or "self_attn.q_proj" become the spec's "q").
#include "protocol/adapter_shape.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace shard::protocol {

namespace {

std::set<std::string> targetSet(const std::string& list)
{
    std::set<std::string> out;
    std::stringstream in(list);
    for (std::string t; std::getline(in, t, ',');)
        if (!t.empty())
            out.insert(t);
    return out;
}

std::string joinTargets(const std::set<std::string>& targets)
{
    // In the spec's order (q,k,v,o,gate,up,down).
    std::string out;
    for (const std::string& name : loraTargetNames())
        if (targets.count(name))
            out += (out.empty() ? "" : ",") + name;
    return out;
}

// "model.layers.0.self_attn.q_proj" or "q_proj" -> "q"; empty when not a known target.
std::string targetOf(std::string module)
{
    if (const auto dot = module.rfind('.'); dot != std::string::npos)
        module = module.substr(dot + 1);
    if (module.size() > 5 && module.compare(module.size() - 5, 5, "_proj") == 0)
        module.resize(module.size() - 5);
    const auto& names = loraTargetNames();
    return std::find(names.begin(), names.end(), module) != names.end() ? module : std::string();
}

std::string numberText(double v)
{
    std::ostringstream out;
    out << v;
    return out.str();
}

} // namespace

void adoptAdapterShape(RunSpec& spec, const std::set<std::string>& userSet)
{
    if (spec.loraInit.empty())
        return;
    std::ifstream in(spec.loraInit + "/adapter_config.json");
    if (!in)
        return;
    const auto j = nlohmann::json::parse(in, nullptr, false);
    if (!j.is_object())
        return;
    auto adopt = [&](const char* key, auto& field, const auto& adapterValue, const std::string& has,
                     const std::string& asked) {
        if (!userSet.count(key)) {
            field = adapterValue;
            return;
        }
        if (field == adapterValue)
            return;
        std::string flag = std::string("--") + key;
        std::replace(flag.begin(), flag.end(), '_', '-');
        throw std::runtime_error(spec.loraInit + ": the adapter has " + has + " but the run asks "
            + "for " + asked + " (" + flag + "); drop " + flag + " to continue the adapter as it "
            + "is (its adapter_config.json), or start a new adapter without --lora-init");
    };
    try {
        if (const auto r = j.find("r"); r != j.end() && r->is_number_integer()) {
            const int64_t rank = r->get<int64_t>();
            adopt("lora_rank", spec.loraRank, rank, "r " + std::to_string(rank),
                "r " + std::to_string(spec.loraRank));
        }
        if (const auto a = j.find("lora_alpha"); a != j.end() && a->is_number()) {
            const double alpha = a->get<double>();
            adopt("lora_alpha", spec.loraAlpha, alpha, "lora_alpha " + numberText(alpha),
                "lora_alpha " + numberText(spec.loraAlpha));
        }
        const double dropout = j.value("lora_dropout", 0.0);
        adopt("lora_dropout", spec.loraDropout, dropout, "lora_dropout " + numberText(dropout),
            "lora_dropout " + numberText(spec.loraDropout));
        const bool rslora = j.value("use_rslora", false);
        adopt("lora_rslora", spec.loraRslora, rslora,
            std::string("use_rslora ") + (rslora ? "true" : "false"),
            std::string("use_rslora ") + (spec.loraRslora ? "true" : "false"));
        if (const auto tm = j.find("target_modules"); tm != j.end()) {
            std::set<std::string> targets;
            bool known = true;
            auto addModule = [&](const std::string& m) {
                const std::string t = targetOf(m);
                known = known && !t.empty();
                targets.insert(t);
            };
            if (tm->is_string())
                for (const std::string& m : targetSet(tm->get<std::string>()))
                    addModule(m);
            else if (tm->is_array())
                for (const auto& m : *tm)
                    addModule(m.get<std::string>());
            // Modules this engine does not adapt: the engine's check names them.
            if (known && !targets.empty()) {
                const std::string adapterTargets = joinTargets(targets);
                const std::string asked = joinTargets(targetSet(spec.loraTargets));
                std::string field = asked;
                adopt("lora_targets", field, adapterTargets, "target_modules " + adapterTargets,
                    "targets " + asked);
                if (!userSet.count("lora_targets"))
                    spec.loraTargets = adapterTargets;
            }
        }
    } catch (const nlohmann::json::exception&) {
        // A malformed config: the engine's reading of it says what is wrong.
    }
}

} // namespace shard::protocol
