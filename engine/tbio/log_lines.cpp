#include "tbio/log_lines.h"

#include <cctype>
#include <cstdlib>
#include <regex>

#include "tbio/known_tags.h"

namespace shard::tbio {

namespace {

std::string withoutEscapes(const std::string& s)
{
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\x1b' && i + 1 < s.size() && s[i + 1] == '[') {
            i += 2;
            while (i < s.size() && !std::isalpha(static_cast<unsigned char>(s[i])))
                ++i;
            continue;
        }
        out.push_back(s[i]);
    }
    return out;
}

bool parseNumber(const std::string& text, double& out)
{
    std::string t;
    for (char c : text)
        if (c != ',' && c != '_' && !std::isspace(static_cast<unsigned char>(c)))
            t.push_back(c);
    if (t.empty())
        return false;
    char* end = nullptr;
    out = std::strtod(t.c_str(), &end);
    return end && *end == '\0';
}

// {'loss': 1.2, 'grad_norm': 0.5, ...}: Python's dict repr of Trainer.log's numbers.
std::optional<LogLine> huggingFace(const std::string& line)
{
    const size_t open = line.rfind("{'");
    if (open == std::string::npos)
        return std::nullopt;
    const size_t close = line.find('}', open);
    if (close == std::string::npos)
        return std::nullopt;
    static const std::regex item(
        R"('([A-Za-z0-9_/.\-]+)'\s*:\s*([-+0-9.eEinfa]+|np\.float\d*\(([-+0-9.eE]+)\)))");
    LogLine out {LogLine::Kind::HuggingFaceTrain, std::nullopt, {}};
    const std::string body = line.substr(open, close - open + 1);
    bool train = false, eval = false, summary = false;
    for (std::sregex_iterator it(body.begin(), body.end(), item), end; it != end; ++it) {
        const std::string key = (*it)[1];
        double v = 0;
        if (!parseNumber((*it)[3].matched ? (*it)[3].str() : (*it)[2].str(), v))
            continue;
        train = train || key == "loss" || key == "learning_rate";
        eval = eval || key.rfind("eval_", 0) == 0;
        summary = summary || key == "train_runtime" || key == "train_loss";
        out.values.emplace_back(huggingFaceTag(key), v);
    }
    if (out.values.empty() || !(train || eval || summary))
        return std::nullopt;
    out.kind = train ? LogLine::Kind::HuggingFaceTrain
        : eval       ? LogLine::Kind::HuggingFaceEval
                     : LogLine::Kind::HuggingFaceSummary;
    return out;
}

// torchtitan's MetricsProcessor.log line (torchtitan/components/metrics.py).
std::optional<LogLine> torchtitan(const std::string& line)
{
    static const std::regex stepLoss(R"(step:\s*(\d+)\s+loss:\s*([-+0-9.eE]+))");
    std::smatch m;
    if (!std::regex_search(line, m, stepLoss))
        return std::nullopt;
    LogLine out {LogLine::Kind::Torchtitan, std::stoll(m[1]), {}};
    double v = 0;
    if (parseNumber(m[2], v))
        out.values.emplace_back("loss_metrics/global_avg_loss", v);
    const std::string rest = m.suffix();
    static const std::regex gradNorm(R"(grad_norm:\s*([-+0-9.eE]+))");
    static const std::regex memory(R"(memory:\s*([0-9.]+)\s*GiB\(([0-9.]+)%\))");
    static const std::regex tps(R"(tps:\s*([0-9,]+))");
    static const std::regex tflops(R"(tflops:\s*([0-9.,]+))");
    static const std::regex mfu(R"(mfu:\s*([0-9.]+)%)");
    if (std::regex_search(rest, m, gradNorm) && parseNumber(m[1], v))
        out.values.emplace_back("grad_norm", v);
    if (std::regex_search(rest, m, memory)) {
        if (parseNumber(m[1], v))
            out.values.emplace_back("memory/max_reserved(GiB)", v);
        if (parseNumber(m[2], v))
            out.values.emplace_back("memory/max_reserved(%)", v);
    }
    if (std::regex_search(rest, m, tps) && parseNumber(m[1], v))
        out.values.emplace_back("throughput(tps)", v);
    if (std::regex_search(rest, m, tflops) && parseNumber(m[1], v))
        out.values.emplace_back("tflops", v);
    if (std::regex_search(rest, m, mfu) && parseNumber(m[1], v))
        out.values.emplace_back("mfu(%)", v);
    return out;
}

} // namespace

std::optional<LogLine> parseLogLine(std::string line)
{
    if (const size_t cr = line.rfind('\r'); cr != std::string::npos && cr + 1 < line.size())
        line = line.substr(cr + 1);
    line = withoutEscapes(line);
    if (auto t = torchtitan(line))
        return t;
    return huggingFace(line);
}

} // namespace shard::tbio
