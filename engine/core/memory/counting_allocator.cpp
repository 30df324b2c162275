// Each allocation carries a small context holding the wrapped allocator's DataPtr and its size,
// so the deleter can uncount it and free through the original deleter.
#include "counting_allocator.h"

#include <atomic>
#include <mutex>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

namespace shard::engine {

namespace {

std::atomic<int64_t> g_current {0};
std::atomic<int64_t> g_peak {0};
std::atomic<int64_t> g_allocations {0};
std::atomic<bool> g_installed {false};

struct Allocation {
    c10::DataPtr inner;
    int64_t bytes;
};

void countedDelete(void* ctx)
{
    auto* a = static_cast<Allocation*>(ctx);
    g_current.fetch_sub(a->bytes, std::memory_order_relaxed);
    delete a; // frees through the wrapped allocator's deleter
}

class Counting final : public c10::Allocator {
public:
    explicit Counting(c10::Allocator* inner)
        : m_inner(inner)
    {
    }

    c10::DataPtr allocate(size_t n) const override
    {
        c10::DataPtr inner = m_inner->allocate(n);
        void* data = inner.get();
        const auto device = inner.device();
        auto* a = new Allocation {std::move(inner), static_cast<int64_t>(n)};
        const int64_t now = g_current.fetch_add(a->bytes, std::memory_order_relaxed) + a->bytes;
        int64_t peak = g_peak.load(std::memory_order_relaxed);
        while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
        }
        g_allocations.fetch_add(1, std::memory_order_relaxed);
        return {data, a, &countedDelete, device};
    }

    c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

private:
    c10::Allocator* m_inner;
};

} // namespace

CountingAllocator& CountingAllocator::install()
{
    static CountingAllocator handle;
    static std::once_flag once;
    std::call_once(once, [] {
        static Counting counting(c10::GetCPUAllocator());
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

} // namespace shard::engine
