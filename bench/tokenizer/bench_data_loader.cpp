// DataLoader on a large JSONL file: the one-pass index (MB/s), the memory it keeps (peak RSS
// against the file size: the file is never held in memory), and tokenized rows per second.
// usage: bench_data_loader [--mb N] [--rows R]
#include <sys/resource.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "data/data_loader.h"
#include "tokenizer/demo_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace {

double peakRssMb()
{
    rusage u {};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_maxrss) / 1024.0;
}

double since(std::chrono::steady_clock::time_point t0)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

} // namespace

int main(int argc, char** argv)
{
    double mb = 200;
    int64_t rows = 2000;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i];
        if (a == "--mb")
            mb = std::atof(argv[i + 1]);
        else if (a == "--rows")
            rows = std::atoll(argv[i + 1]);
    }
    const auto dir = std::filesystem::temp_directory_path() / "bench_data_loader";
    std::filesystem::create_directories(dir);
    const auto path = dir / "big.jsonl";
    {
        std::ofstream out(path, std::ios::binary);
        const std::string para = "The model reads the question, thinks about the answer, and "
                                 "writes it down. What is 12 + 30? The answer is 42. ";
        size_t bytes = 0;
        for (int64_t i = 0; bytes < static_cast<size_t>(mb * 1e6); ++i) {
            const std::string line
                = nlohmann::json {{"text", std::to_string(i) + " " + para + para}}.dump() + "\n";
            out << line;
            bytes += line.size();
        }
    }
    const double fileMb = static_cast<double>(std::filesystem::file_size(path)) / 1e6;
    shard::tokenizer::writeDemoTokenizer((dir / "model").string(), 4096);
    auto tok = std::make_shared<const shard::tokenizer::Tokenizer>(
        shard::tokenizer::Tokenizer::fromFolder((dir / "model").string()));
    const double rssBefore = peakRssMb();

    shard::data::DataConfig cfg;
    cfg.files = {path.string()};
    cfg.seqLen = 256;
    cfg.packing = true;
    cfg.seed = 1;
    auto t0 = std::chrono::steady_clock::now();
    shard::data::DataLoader loader(cfg, tok);
    const double indexSeconds = since(t0);
    t0 = std::chrono::steady_clock::now();
    const auto batch = loader.nextGlobalBatch(rows);
    const double rowSeconds = since(t0);
    std::printf("file %.0f MB, %lld records: index %.1f s (%.0f MB/s); %lld packed rows of %lld "
                "tokens in %.2f s (%.0f rows/s, shuffled reads); peak RSS %.0f MB (%.0f MB "
                "before the loader)\n",
        fileMb, static_cast<long long>(loader.trainRecords()), indexSeconds, fileMb / indexSeconds,
        static_cast<long long>(rows), static_cast<long long>(cfg.seqLen), rowSeconds,
        static_cast<double>(rows) / rowSeconds, peakRssMb(), rssBefore);
    std::filesystem::remove_all(dir);
    return batch.size() == static_cast<size_t>(rows) ? 0 : 1;
}
