// One call to follow any recorded run, whatever its target: a LocalRunWatcher (local runs, with
// the launcher's pid), a RemoteRunWatcher (SSH runs, node 0's host) or a SlurmRunWatcher. The
// watcher is started; connect to its signals, then read the store.
#pragma once

#include <memory>

#include "jobs/run_watcher.h"
#include "jobs/ssh_client.h"

namespace shard::jobs {

// Fails for a target it does not know or an SSH run without a host.
Result<std::unique_ptr<RunWatcher>> watchRun(RunStore& store, const RunRecord& run,
    const SshOptions& sshOptions = SshOptions::fromEnvironment(), QObject* parent = nullptr);

} // namespace shard::jobs
