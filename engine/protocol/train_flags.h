// The `shard-worker train` flags, listed once: each names the run-spec field it sets. The
// worker's `train` registers them with its command line and `shard run -- <train flags>` turns
// them into a RunSpec with applyTrainFlags, so both read the same flags the same way (beside
// run_spec.cpp's forEachField, which names the run.json keys).
#pragma once

#include <string>
#include <vector>

#include "protocol/run_spec.h"

namespace shard::protocol {

struct TrainFlag {
    enum class Kind {
        Value,         // --flag V
        Switch,        // --flag (no value)
        OptionalValue, // --flag, or --flag V
    };
    const char* name;
    const char* help;
    Kind kind;
    // Sets the field from the value ("" for a switch, or an optional value not given); throws
    // std::runtime_error ("--steps: 'x' is not an integer").
    void (*apply)(RunSpec&, const std::string& value);
};

// Every `train` flag that sets a spec field, in the order `train --help` lists them (--config,
// the spec file itself, is the worker's own).
const std::vector<TrainFlag>& trainFlags();

// Applies "--flag V", "--flag=V" and switches in order (the last one wins); then, with
// --lora-init, the adapter's shape where no flag set it (adoptAdapterShape). Throws
// std::runtime_error naming an unknown flag or a bad value.
void applyTrainFlags(RunSpec& spec, const std::vector<std::string>& args);

// The run-spec key a flag sets: "--lora-rank" -> "lora_rank".
std::string flagKey(const std::string& flagName);

} // namespace shard::protocol
