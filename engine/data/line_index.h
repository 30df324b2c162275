// Streaming access to a JSONL file: one pass records the byte offset of every non-blank line,
// after which any line is read on demand. The file is never held in memory.
#pragma once

#include <cstdint>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

namespace shard::data {

class LineIndex {
public:
    struct Line {
        int64_t offset = 0; // byte offset of the line's first byte
        int64_t number = 0; // 1-based line number in the file
    };

    // Scans `path` once. onLine(lineText, lineNumber) is called for every non-blank line and
    // returns false to leave the line out of the index (a bad line being skipped). Throws when
    // the file cannot be read.
    LineIndex(
        std::string path, const std::function<bool(const std::string&, int64_t)>& onLine = {});

    const std::string& path() const { return m_path; }
    int64_t size() const { return static_cast<int64_t>(m_lines.size()); }
    const Line& line(int64_t i) const { return m_lines[static_cast<size_t>(i)]; }
    // Reads indexed line i (without its newline).
    std::string read(int64_t i);

private:
    std::string m_path;
    std::vector<Line> m_lines;
    std::ifstream m_in;
};

} // namespace shard::data
