// Config differences on resolved run specs (see config_diff.h).
#include "protocol/config_diff.h"

#include <algorithm>
#include <map>
#include <set>

#include "protocol/run_spec.h"

namespace shard::protocol {

namespace {

// Objects become dotted keys; arrays of plain values stay one value, arrays holding objects or
// arrays are split by index.
void flatten(
    const nlohmann::json& j, const std::string& prefix, std::map<std::string, std::string>& out)
{
    if (j.is_object() && !j.empty()) {
        for (auto it = j.begin(); it != j.end(); ++it)
            flatten(it.value(), prefix.empty() ? it.key() : prefix + "." + it.key(), out);
    } else if (j.is_array() && !j.empty()
        && std::any_of(
            j.begin(), j.end(), [](const nlohmann::json& e) { return e.is_structured(); })) {
        for (size_t i = 0; i < j.size(); ++i)
            flatten(j[i], prefix + "." + std::to_string(i), out);
    } else {
        out[prefix] = j.is_string() ? j.get<std::string>() : j.dump();
    }
}

} // namespace

nlohmann::json resolvedConfig(const nlohmann::json& config)
{
    try {
        return toJson(runSpecFromJson(config));
    } catch (const std::exception&) {
        return config;
    }
}

std::vector<ConfigDifference> differingConfigValues(const std::vector<nlohmann::json>& configs)
{
    std::vector<std::map<std::string, std::string>> flat(configs.size());
    std::set<std::string> keys;
    for (size_t i = 0; i < configs.size(); ++i) {
        if (configs[i].is_object())
            flatten(resolvedConfig(configs[i]), "", flat[i]);
        flat[i].erase("name");
        flat[i].erase("out");
        // How its last process started (a resumed or continued run says "auto"), not what the
        // run trains: Compare listed "resume — / auto".
        flat[i].erase("resume");
        for (const auto& [k, v] : flat[i])
            keys.insert(k);
    }
    std::vector<ConfigDifference> out;
    if (configs.size() < 2)
        return out;
    for (const std::string& key : keys) {
        ConfigDifference d;
        d.key = key;
        bool differs = false;
        for (size_t i = 0; i < flat.size(); ++i) {
            auto it = flat[i].find(key);
            d.values.push_back(it == flat[i].end() ? std::string() : it->second);
            if (i > 0 && d.values[i] != d.values[0])
                differs = true;
        }
        if (differs)
            out.push_back(std::move(d));
    }
    return out;
}

} // namespace shard::protocol
