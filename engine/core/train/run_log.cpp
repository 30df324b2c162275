#include "core/train/run_log.h"

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include <unistd.h>

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace shard::engine {

namespace {

// A rank's stderr when it is the rank's log (under the launcher): every write checked, and a
// failure reported with its reason (stdio's stderr keeps only an error flag).
class CheckedStderrSink : public spdlog::sinks::base_sink<std::mutex> {
protected:
    void sink_it_(const spdlog::details::log_msg& msg) override
    {
        spdlog::memory_buf_t line;
        formatter_->format(msg, line);
        size_t done = 0;
        while (done < line.size()) {
            const ssize_t n = ::write(STDERR_FILENO, line.data() + done, line.size() - done);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                throw spdlog::spdlog_ex(std::string("write failed (")
                    + (n < 0 ? std::strerror(errno) : "nothing written") + ")");
            done += static_cast<size_t>(n);
        }
    }
    void flush_() override { }
};

} // namespace

RunLog::RunLog(bool underLauncher, const std::string& file)
{
    std::vector<spdlog::sink_ptr> sinks {underLauncher
            ? spdlog::sink_ptr(std::make_shared<CheckedStderrSink>())
            : spdlog::sink_ptr(std::make_shared<spdlog::sinks::stderr_color_sink_mt>())};
    if (!file.empty())
        sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(file));
    m_logger = std::make_shared<spdlog::logger>("engine.train", sinks.begin(), sinks.end());
    m_logger->set_level(spdlog::level::info);
    m_logger->flush_on(spdlog::level::info);
    m_logger->set_error_handler([this](const std::string& msg) {
        if (m_failure.empty())
            m_failure = msg;
    });
}

RunLog::~RunLog() = default;

void RunLog::info(const std::string& line)
{
    m_logger->log(spdlog::level::info, spdlog::string_view_t(line));
}

void RunLog::warn(const std::string& line)
{
    m_logger->log(spdlog::level::warn, spdlog::string_view_t(line));
}

void RunLog::error(const std::string& line)
{
    m_logger->log(spdlog::level::err, spdlog::string_view_t(line));
}

std::string strprintf(const char* format, ...)
{
    va_list args;
    va_start(args, format);
    va_list again;
    va_copy(again, args);
    const int n = std::vsnprintf(nullptr, 0, format, args);
    va_end(args);
    if (n < 0) {
        va_end(again);
        throw std::runtime_error(std::string("bad log format: ") + format);
    }
    std::string out(static_cast<size_t>(n) + 1, '\0');
    std::vsnprintf(out.data(), out.size(), format, again);
    va_end(again);
    out.resize(static_cast<size_t>(n));
    return out;
}

} // namespace shard::engine
