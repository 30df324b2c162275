// The config values that differ between runs, compared on resolved run specs: a field one run
// spec omits takes its default first, so defaults are never differences. Used by the run store
// (`shard runs compare`) and the studio's Compare page.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace shard::protocol {

struct ConfigDifference {
    std::string key;                 // dotted path, e.g. "lr" or "data"
    std::vector<std::string> values; // one per config; "" where a config lacks the key
};

// A run spec with every field present (runSpecFromJson + toJson); a config that is not a valid
// run spec (an old or foreign run.json) is returned as it is.
nlohmann::json resolvedConfig(const nlohmann::json& config);

// Keys whose values are not all equal across the resolved configs, sorted by key. The run's
// identity and location ("name", "out") differ by construction and are left out.
std::vector<ConfigDifference> differingConfigValues(const std::vector<nlohmann::json>& configs);

} // namespace shard::protocol
