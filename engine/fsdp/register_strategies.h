// Registers ddp, zero1, zero2, zero3 and hybrid with the training loop's strategy registry.
#pragma once

namespace shard::fsdp {

void registerStrategies();

} // namespace shard::fsdp
