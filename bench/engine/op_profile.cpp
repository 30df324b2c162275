// RecordFunction start/end callbacks keep a per-thread stack; a finished op adds its duration
// minus its children's to its own name.
#include "op_profile.h"

#include <chrono>
#include <cstring>
#include <mutex>
#include <vector>

#include <ATen/record_function.h>

namespace shard::bench {

namespace {

using Clock = std::chrono::steady_clock;

struct Frame {
    std::string name;
    Clock::time_point start;
    double childSec = 0.0;
    bool backward = false;
};

thread_local std::vector<Frame> t_stack;
std::mutex g_mutex;
std::map<std::string, double> g_self;
at::CallbackHandle g_handle = 0;

std::unique_ptr<at::ObserverContext> onStart(const at::RecordFunction& fn)
{
    const char* name = fn.name();
    const bool bwd = fn.scope() == at::RecordScope::BACKWARD_FUNCTION
        || std::strncmp(name, "autograd::", 10) == 0
        || (!t_stack.empty() && t_stack.back().backward);
    t_stack.push_back({name, Clock::now(), 0.0, bwd});
    return nullptr;
}

void onEnd(const at::RecordFunction&, at::ObserverContext*)
{
    if (t_stack.empty())
        return;
    Frame f = std::move(t_stack.back());
    t_stack.pop_back();
    const double sec = std::chrono::duration<double>(Clock::now() - f.start).count();
    if (!t_stack.empty())
        t_stack.back().childSec += sec;
    std::lock_guard<std::mutex> lock(g_mutex);
    g_self[(f.backward ? "bwd|" : "fwd|") + f.name] += sec - f.childSec;
}

} // namespace

void OpProfile::start()
{
    g_self.clear();
    g_handle = at::addGlobalCallback(
        at::RecordFunctionCallback(onStart, onEnd)
            .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION,
                at::RecordScope::USER_SCOPE}));
}

std::map<std::string, double> OpProfile::stop()
{
    at::removeCallback(g_handle);
    std::lock_guard<std::mutex> lock(g_mutex);
    return g_self;
}

} // namespace shard::bench
