// llama.cpp's own ggml quantisers and dequantisers, loaded from the prebuilt libggml-base.so
// that node-llama-cpp brings (scripts/fetch-fixtures.sh fetches it): the outside reference the
// engine's GGUF quantisation is compared with byte for byte. Absent (not fetched), `ok()` is
// false and the tests that need it say SKIP.
#pragma once

#include <cstdint>
#include <dlfcn.h>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "ckpt/ggml_quants.h"

namespace ckpt_test {

class LlamaCppGgml {
public:
    using Quantize = void (*)(const float*, void*, int64_t);
    using Dequantize = void (*)(const void*, float*, int64_t);

    explicit LlamaCppGgml(const std::string& npmDir)
    {
        path = npmDir + "/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-base.so";
        if (!std::filesystem::exists(path))
            return;
        m_lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!m_lib)
            return;
        for (auto& [type, name] : kNames) {
            m_quantize[type] = reinterpret_cast<Quantize>(
                dlsym(m_lib, ("quantize_row_" + name + "_ref").c_str()));
            m_dequantize[type]
                = reinterpret_cast<Dequantize>(dlsym(m_lib, ("dequantize_row_" + name).c_str()));
        }
    }
    ~LlamaCppGgml()
    {
        if (m_lib)
            dlclose(m_lib);
    }
    LlamaCppGgml(const LlamaCppGgml&) = delete;
    LlamaCppGgml& operator=(const LlamaCppGgml&) = delete;

    bool ok() const
    {
        if (!m_lib)
            return false;
        for (auto& [type, name] : kNames)
            if (!m_quantize.at(type) || !m_dequantize.at(type))
                return false;
        return true;
    }

    // llama.cpp's bytes for n values (n a multiple of the type's block).
    std::vector<char> quantize(shard::ckpt::ggml::Type t, const float* x, int64_t n) const
    {
        std::vector<char> out(shard::ckpt::ggml::bytesOf(t, n));
        m_quantize.at(t)(x, out.data(), n);
        return out;
    }
    std::vector<float> dequantize(shard::ckpt::ggml::Type t, const char* data, int64_t n) const
    {
        std::vector<float> out(size_t(n), 0.0f);
        m_dequantize.at(t)(data, out.data(), n);
        return out;
    }

    std::string path;

private:
    inline static const std::vector<std::pair<shard::ckpt::ggml::Type, std::string>> kNames
        = {{shard::ckpt::ggml::Q8_0, "q8_0"}, {shard::ckpt::ggml::Q5_0, "q5_0"},
            {shard::ckpt::ggml::Q4_K, "q4_K"}, {shard::ckpt::ggml::Q6_K, "q6_K"}};
    void* m_lib = nullptr;
    std::map<shard::ckpt::ggml::Type, Quantize> m_quantize;
    std::map<shard::ckpt::ggml::Type, Dequantize> m_dequantize;
};

} // namespace ckpt_test
