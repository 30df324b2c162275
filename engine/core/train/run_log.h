#pragma once
// A rank's human-readable log: stderr (checked writes when stderr is the rank's log file under
// the launcher), plus <run>/logs/rank-<r>.log when the rank writes it itself.
//
// The trainer formats its lines printf-style and hands them here, so trainer.cpp includes
// neither spdlog nor {fmt}: a PyTorch wheel's LibTorch carries its own {fmt} headers, and a TU
// that sees both them and the system's {fmt} (through spdlog) mixes two versions
// (docs/ARCHITECTURE.md, "Building against a PyTorch wheel").

#include <memory>
#include <string>

namespace spdlog {
class logger;
}

namespace shard::engine {

class RunLog {
public:
    // underLauncher: stderr is this rank's log file (every write checked); otherwise stderr is a
    // terminal or a pipe (coloured where it is a terminal). file: a log file to append to, or
    // empty.
    RunLog(bool underLauncher, const std::string& file);
    ~RunLog();
    RunLog(const RunLog&) = delete;
    RunLog& operator=(const RunLog&) = delete;

    void info(const std::string& line);
    void warn(const std::string& line);
    void error(const std::string& line);
    // The first write that failed (a full disk, a closed stderr), or empty.
    const std::string& failure() const { return m_failure; }

private:
    std::shared_ptr<spdlog::logger> m_logger;
    std::string m_failure;
};

// printf into a std::string (the compiler checks the arguments against the format).
std::string strprintf(const char* format, ...) __attribute__((format(printf, 1, 2)));

} // namespace shard::engine
