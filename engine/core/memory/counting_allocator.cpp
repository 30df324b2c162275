// Counting wrapper around the default CPU allocator (sizes kept in a header before each block),
// with a cache of large freed blocks by exact size and transparent huge pages for fresh large
// blocks (docs/ARCHITECTURE.md, "Engine speed on the CPU"): glibc serves blocks over its mmap
// threshold with a fresh mmap each time, and the kernel zeroes and maps every 4 KiB page of it
// again on first touch; a training step allocates the same sizes every step, so reusing them
// removes that system time, and a fresh block faults in 2 MiB at a time.
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

#if defined(__linux__)
#include <sys/mman.h>
#endif
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include "core/torch_compat.h"

namespace shard::engine {

namespace {

std::atomic<int64_t> g_current {0};
std::atomic<int64_t> g_peak {0};
std::atomic<int64_t> g_highWater {0}; // the process's largest live bytes (never reset)
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

// Freed blocks of at least kCacheMinBytes, by exact size, up to a cap on their total. The cap
// is SHARD_ALLOC_CACHE_MB when set (0 turns the cache off); by default it follows the process's
// high-water mark of live bytes, at least 1 GiB: a step frees and allocates blocks of different
// sizes in turn (activations freed while gradients and reduce buffers are allocated), so a fixed
// 1 GiB dropped the blocks freed last and every step faulted them in again (the 112M model under
// zero3 at 2 ranks: 0.2 M page faults per rank and step, 2.9 s of a 9 s step in the kernel; none
// with this cap). Cached bytes (counted without headers, as live bytes are) stay within the live
// peak, so the process holds at most twice the bytes it ever used; in a steady loop the same
// sizes come back each step and it holds about its peak (the 112M model's maximum resident size
// against the fixed cap: 2.90 GB against 2.89 at one rank, 2.86 against 2.70 per zero3 rank at
// two, whose live peak is 1.99 GB). Never destroyed: tensors may be freed during static
// destruction.
constexpr size_t kCacheMinBytes = size_t(1) << 20;
constexpr size_t kAutoCacheFloor = size_t(1) << 30;

struct BlockCache {
    std::mutex mutex;
    std::unordered_map<size_t, std::vector<void*>> free;
    size_t cachedBytes = 0;
    size_t fixedCap = 0;
    bool autoCap = true;

    BlockCache()
    {
        if (const char* v = std::getenv("SHARD_ALLOC_CACHE_MB"); v && *v) {
            fixedCap = static_cast<size_t>(std::strtoull(v, nullptr, 10)) << 20;
            autoCap = false;
        }
    }
    size_t cap() const
    {
        if (!autoCap)
            return fixedCap;
        return std::max(
            kAutoCacheFloor, static_cast<size_t>(g_highWater.load(std::memory_order_relaxed)));
    }
    void* take(size_t size)
    {
        if (size < kCacheMinBytes || (!autoCap && fixedCap == 0))
            return nullptr;
        std::lock_guard<std::mutex> lock(mutex);
        auto it = free.find(size);
        if (it == free.end() || it->second.empty())
            return nullptr;
        void* p = it->second.back();
        it->second.pop_back();
        cachedBytes -= size - kHeader;
        return p;
    }
    bool put(void* base, size_t size)
    {
        if (size < kCacheMinBytes)
            return false;
        const size_t capBytes = cap();
        if (capBytes == 0)
            return false;
        std::lock_guard<std::mutex> lock(mutex);
        if (cachedBytes + size - kHeader > capBytes)
            return false;
        free[size].push_back(base);
        cachedBytes += size - kHeader; // counted as live bytes are, without the header
        return true;
    }
    size_t cached()
    {
        std::lock_guard<std::mutex> lock(mutex);
        return cachedBytes;
    }
};

BlockCache& blockCache()
{
    static BlockCache* cache = new BlockCache();
    return *cache;
}

// Transparent huge pages for a fresh block of 4 MiB or more, so that at least one whole 2 MiB
// page lies inside it (SHARD_ALLOC_THP=0 turns it off), as PyTorch's CPU allocator does under
// THP_MEM_ALLOC_ENABLE: the kernel then maps and zeroes the block 2 MiB at a time on first touch,
// not 4 KiB: the 112M model's 2 zero3 ranks took 0.5 M page faults to load and run 3 steps
// instead of 1.6 M. Only the whole 2 MiB pages inside the block are advised; the system's THP
// setting (madvise or always) decides the rest.
constexpr size_t kHugePage = size_t(2) << 20;

bool hugePagesWanted()
{
    static const bool wanted = [] {
        const char* v = std::getenv("SHARD_ALLOC_THP");
        return !(v && std::string(v) == "0");
    }();
    return wanted;
}

void adviseHugePages([[maybe_unused]] void* base, [[maybe_unused]] size_t bytes)
{
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (bytes < 2 * kHugePage || !hugePagesWanted())
        return;
    const auto begin = reinterpret_cast<uintptr_t>(base);
    const uintptr_t first = (begin + kHugePage - 1) & ~(kHugePage - 1);
    const uintptr_t last = (begin + bytes) & ~(kHugePage - 1);
    if (last > first)
        madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE); // advice only
#endif
}

// glibc's heap for the blocks below the cache's minimum (a micro-batch's smaller activations and
// their gradients): by default glibc raises its mmap threshold as mmapped blocks are freed and
// returns the top of its heap to the kernel once more than twice that threshold is free there,
// so a step that frees its activations hands their pages back and the next faults them in again
// (zero3 at 2 ranks, 112M, bf16, 2 x 256 rows per rank: 23 k page faults per rank and step, a
// tenth of the step). The threshold is fixed at the cache's minimum (larger blocks: mmap, cached
// here, advised as huge pages) and the heap keeps what it freed, up to 1 GiB, as the block cache
// keeps larger blocks. A GLIBC_TUNABLES that sets malloc tunables is left to decide.
void tuneMalloc()
{
#if defined(__GLIBC__)
    if (const char* t = std::getenv("GLIBC_TUNABLES"); t && std::strstr(t, "glibc.malloc."))
        return;
    mallopt(M_MMAP_THRESHOLD, static_cast<int>(kCacheMinBytes));
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
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
        if (!base) {
            base = static_cast<uint8_t*>(m_inner->raw_allocate(n + kHeader));
            adviseHugePages(base, n + kHeader);
        }
        const int64_t bytes = static_cast<int64_t>(n);
        std::memcpy(base, &bytes, sizeof bytes);
        const int64_t now = g_current.fetch_add(bytes, std::memory_order_relaxed) + bytes;
        int64_t peak = g_peak.load(std::memory_order_relaxed);
        while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
        }
        int64_t high = g_highWater.load(std::memory_order_relaxed);
        while (now > high
            && !g_highWater.compare_exchange_weak(high, now, std::memory_order_relaxed)) { }
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
        tuneMalloc();
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

int64_t CountingAllocator::highWaterBytes() const
{
    return g_highWater.load();
}

int64_t CountingAllocator::cachedBytes() const
{
    return static_cast<int64_t>(blockCache().cached());
}

int64_t CountingAllocator::cacheCapBytes() const
{
    return static_cast<int64_t>(blockCache().cap());
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
