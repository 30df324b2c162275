// Counting wrapper around the default CPU allocator (sizes kept in a header before each block),
// with a cache of large freed blocks by exact size (docs/ARCHITECTURE.md, "Engine speed on the
// CPU"): glibc serves blocks over its mmap threshold with a fresh mmap each time, and the kernel
// zeroes every page of it again on first touch; a training step allocates the same sizes every
// step, so reusing them removes that system time.
#include "counting_allocator.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include "core/torch_compat.h"

namespace shard::engine {

namespace {

std::atomic<int64_t> g_current {0};
std::atomic<int64_t> g_peak {0};
std::atomic<int64_t> g_allocations {0};
std::atomic<bool> g_installed {false};
std::atomic<int64_t> g_limit {0};

int64_t parseLimit(const char* v)
{
    char* end = nullptr;
    const long long n = std::strtoll(v, &end, 10);
    int64_t scale = 1;
    if (*end == 'K' || *end == 'k')
        scale = int64_t(1) << 10;
    else if (*end == 'M' || *end == 'm')
        scale = int64_t(1) << 20;
    else if (*end == 'G' || *end == 'g')
        scale = int64_t(1) << 30;
    if (scale > 1)
        ++end;
    if (end == v || *end != '\0' || n < 0)
        throw std::runtime_error(std::string(kMemoryLimitEnv) + "='" + v
            + "' is not a byte count (e.g. 2147483648 or 2G; 0 = no limit)");
    return static_cast<int64_t>(n) * scale;
}

// Every block is allocated from the wrapped allocator with a 64-byte header in front that
// holds its size, so the data pointer is also the deleter's context: raw_allocate() (used inside
// ATen, e.g. by matmul workspaces) requires that.
constexpr size_t kHeader = 64;
c10::DeleterFnPtr g_innerRawDelete = nullptr;

// Freed blocks of at least kCacheMinBytes, by exact size, up to a cap on their total
// (SHARD_ALLOC_CACHE_MB, default 1024; 0 turns the cache off). Never destroyed: tensors may be
// freed during static destruction.
constexpr size_t kCacheMinBytes = size_t(1) << 20;

struct BlockCache {
    std::mutex mutex;
    std::unordered_map<size_t, std::vector<void*>> free;
    size_t cachedBytes = 0;
    size_t capBytes = 0;

    BlockCache()
    {
        size_t mb = 1024;
        if (const char* v = std::getenv("SHARD_ALLOC_CACHE_MB"); v && *v)
            mb = static_cast<size_t>(std::strtoull(v, nullptr, 10));
        capBytes = mb << 20;
    }
    void* take(size_t size)
    {
        if (size < kCacheMinBytes || capBytes == 0)
            return nullptr;
        std::lock_guard<std::mutex> lock(mutex);
        auto it = free.find(size);
        if (it == free.end() || it->second.empty())
            return nullptr;
        void* p = it->second.back();
        it->second.pop_back();
        cachedBytes -= size;
        return p;
    }
    bool put(void* base, size_t size)
    {
        if (size < kCacheMinBytes || capBytes == 0)
            return false;
        std::lock_guard<std::mutex> lock(mutex);
        if (cachedBytes + size > capBytes)
            return false;
        free[size].push_back(base);
        cachedBytes += size;
        return true;
    }
};

BlockCache& blockCache()
{
    static BlockCache* cache = new BlockCache();
    return *cache;
}

void countedDelete(void* data)
{
    if (!data)
        return;
    auto* base = static_cast<uint8_t*>(data) - kHeader;
    int64_t bytes = 0;
    std::memcpy(&bytes, base, sizeof bytes);
    g_current.fetch_sub(bytes, std::memory_order_relaxed);
    if (!blockCache().put(base, static_cast<size_t>(bytes) + kHeader))
        g_innerRawDelete(base);
}

class Counting final : public c10::Allocator {
public:
    explicit Counting(c10::Allocator* inner)
        : m_inner(inner)
    {
    }

    c10::DataPtr allocate(size_t n) SHARD_ALLOCATOR_CONST override
    {
        const int64_t limit = g_limit.load(std::memory_order_relaxed);
        if (limit > 0) {
            const int64_t live = g_current.load(std::memory_order_relaxed);
            if (live + static_cast<int64_t>(n) > limit)
                TORCH_CHECK_WITH(OutOfMemoryError, false, "out of memory: tried to allocate ", n,
                    " bytes with ", live, " bytes in use and a limit of ", limit, " bytes (",
                    kMemoryLimitEnv, ")");
        }
        auto* base = static_cast<uint8_t*>(blockCache().take(n + kHeader));
        if (!base)
            base = static_cast<uint8_t*>(m_inner->raw_allocate(n + kHeader));
        const int64_t bytes = static_cast<int64_t>(n);
        std::memcpy(base, &bytes, sizeof bytes);
        const int64_t now = g_current.fetch_add(bytes, std::memory_order_relaxed) + bytes;
        int64_t peak = g_peak.load(std::memory_order_relaxed);
        while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
        }
        g_allocations.fetch_add(1, std::memory_order_relaxed);
        void* data = base + kHeader;
        return {data, data, &countedDelete, c10::Device(c10::DeviceType::CPU)};
    }

    c10::DeleterFnPtr raw_deleter() const override { return &countedDelete; }

    SHARD_ALLOCATOR_COPY_DATA

private:
    c10::Allocator* m_inner;
};

} // namespace

CountingAllocator& CountingAllocator::install()
{
    static CountingAllocator handle;
    static std::once_flag limitOnce;
    std::call_once(limitOnce, [] {
        if (const char* v = std::getenv(kMemoryLimitEnv); v && *v)
            g_limit = parseLimit(v);
    });
    static std::once_flag once;
    std::call_once(once, [] {
        c10::Allocator* inner = c10::GetCPUAllocator();
        g_innerRawDelete = inner->raw_deleter();
        if (!g_innerRawDelete)
            return; // an allocator without raw allocation cannot be wrapped; counts stay zero
        static Counting counting(inner);
        // Priority above the default registration so later registrations cannot replace it.
        c10::SetCPUAllocator(&counting, /*priority=*/100);
        g_installed = true;
    });
    return handle;
}

bool CountingAllocator::installed()
{
    return g_installed;
}

int64_t CountingAllocator::currentBytes() const
{
    return g_current.load();
}

int64_t CountingAllocator::peakBytes() const
{
    return g_peak.load();
}

void CountingAllocator::resetPeak()
{
    g_peak.store(g_current.load());
}

int64_t CountingAllocator::allocations() const
{
    return g_allocations.load();
}

int64_t CountingAllocator::limitBytes() const
{
    return g_limit.load();
}

void CountingAllocator::setLimitBytes(int64_t bytes)
{
    g_limit.store(std::max<int64_t>(0, bytes));
}

} // namespace shard::engine
