// LineIndex: one buffered pass to find line starts; reads seek to a stored offset.
#include "data/line_index.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace shard::data {

LineIndex::LineIndex(
    std::string path, const std::function<bool(const std::string&, int64_t)>& onLine)
    : m_path(std::move(path))
{
    std::error_code ec;
    if (std::filesystem::is_directory(m_path, ec))
        throw std::runtime_error(m_path
            + ": is a folder, not a data file; give a JSONL or text file (--data FILE.jsonl)");
    std::ifstream in(m_path, std::ios::binary);
    if (!in)
        throw std::runtime_error(m_path + ": cannot open data file ("
            + (std::filesystem::exists(m_path, ec) ? "permission denied?" : "no such file") + ")");
    std::string line;
    int64_t offset = 0;
    int64_t number = 0;
    while (std::getline(in, line)) {
        ++number;
        const int64_t start = offset;
        offset += static_cast<int64_t>(line.size()) + 1;
        if (!line.empty() && line.back() == '\r')
            line.pop_back();
        if (line.find_first_not_of(" \t") == std::string::npos)
            continue;
        if (onLine && !onLine(line, number))
            continue;
        m_lines.push_back({start, number});
    }
    if (in.bad())
        throw std::runtime_error(m_path + ": read error (" + std::strerror(errno) + ")");
    m_in.open(m_path, std::ios::binary);
    if (!m_in)
        throw std::runtime_error(m_path + ": cannot reopen data file");
}

std::string LineIndex::read(int64_t i)
{
    if (i < 0 || i >= size())
        throw std::out_of_range(m_path + ": line index out of range");
    m_in.clear();
    m_in.seekg(m_lines[static_cast<size_t>(i)].offset);
    std::string line;
    if (!std::getline(m_in, line))
        throw std::runtime_error(m_path + ":" + std::to_string(m_lines[i].number)
            + ": cannot read line (was the file changed during training?)");
    if (!line.empty() && line.back() == '\r')
        line.pop_back();
    return line;
}

} // namespace shard::data
