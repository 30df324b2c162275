// Bounded fuzzing of the safetensors header parser without libFuzzer: valid seed files mutated
// deterministically (bit flips, byte overwrites, insertions, deletions, digit edits). With
// --write-corpus DIR it writes the seeds for a libFuzzer run instead.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/safetensors/safetensors_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

using namespace shard::engine;

namespace {

std::vector<std::string> seeds()
{
    std::vector<std::string> out;
    auto make = [](std::vector<StTensorInfo> infos, std::map<std::string, std::string> meta) {
        uint64_t off = 0;
        for (auto& t : infos) {
            t.begin = off;
            off += t.numel() * stDtypeSize(t.dtype);
            t.end = off;
        }
        std::string file = serializeSafetensorsHeader(infos, meta);
        file.append(off, '\x3f');
        return file;
    };
    out.push_back(make({{"a", StDtype::F32, {2, 3}}}, {{"format", "pt"}}));
    out.push_back(make(
        {{"model.embed_tokens.weight", StDtype::BF16, {4, 2}},
            {"model.norm.weight", StDtype::F16, {2}}, {"lm_head.weight", StDtype::F32, {4, 2}}},
        {}));
    out.push_back(make({{"empty", StDtype::F32, {0, 5}}, {"s", StDtype::I64, {}}}, {{"k", "v"}}));
    out.push_back(make({}, {}));
    return out;
}

} // namespace

int main(int argc, char** argv)
{
    if (argc == 3 && std::string(argv[1]) == "--write-corpus") {
        std::filesystem::create_directories(argv[2]);
        int i = 0;
        for (const auto& s : seeds()) {
            std::ofstream out(
                std::string(argv[2]) + "/seed-" + std::to_string(i++), std::ios::binary);
            out.write(s.data(), static_cast<std::streamsize>(s.size()));
        }
        return 0;
    }
    const long iterations = argc > 1 ? std::atol(argv[1]) : 200000;
    std::mt19937_64 rng(20260101);
    const auto base = seeds();
    // Every seed must parse: otherwise the mutations would only exercise the error paths.
    for (const auto& s : base) {
        try {
            parseSafetensorsHeader(
                reinterpret_cast<const uint8_t*>(s.data()), s.size(), s.size(), "seed");
        } catch (const std::exception& e) {
            std::fprintf(stderr, "FAIL: seed does not parse: %s\n", e.what());
            return 1;
        }
    }
    long parsed = 0;
    for (long it = 0; it < iterations; ++it) {
        std::string s = base[rng() % base.size()];
        const int edits = 1 + static_cast<int>(rng() % 4);
        for (int e = 0; e < edits && !s.empty(); ++e) {
            const size_t pos = rng() % s.size();
            switch (rng() % 6) {
            case 0:
                s[pos] = static_cast<char>(s[pos] ^ (1 << (rng() % 8)));
                break;
            case 1:
                s[pos] = static_cast<char>(rng());
                break;
            case 2:
                s.insert(pos, 1, "[]{}\",:0123456789-e."[rng() % 20]);
                break;
            case 3:
                s.erase(pos, 1 + rng() % 8);
                break;
            case 4:
                s.resize(pos);
                break;
            default:
                if (s[pos] >= '0' && s[pos] <= '9')
                    s.insert(pos, std::to_string(rng() % 100000));
                break;
            }
        }
        try {
            parseSafetensorsHeader(
                reinterpret_cast<const uint8_t*>(s.data()), s.size(), s.size(), "m");
            ++parsed;
        } catch (const std::runtime_error&) {
        }
        LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
    }
    std::printf("%ld mutated inputs, %ld still valid, no crash\n", iterations, parsed);
    return 0;
}
