// safetensors: bit-exact round trips (F32, BF16, F16; single and sharded) and one clear error,
// naming file and tensor, for each kind of malformed file.
#include <cmath>
#include <cstring>
#include <fstream>

#include <ATen/Functions.h>

#include "core/safetensors/safetensors_file.h"
#include "engine_test_util.h"

using namespace shard::engine;

namespace {

std::string readFile(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void writeFile(const std::string& path, const std::string& bytes)
{
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

bool bitEqual(const at::Tensor& a, const at::Tensor& b)
{
    if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes())
        return false;
    auto ca = a.contiguous();
    auto cb = b.contiguous();
    return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.numel() * ca.element_size()) == 0;
}

// A file with a hand-written header and `dataBytes` bytes of data.
std::string rawFile(const std::string& json, size_t dataBytes)
{
    std::string out(8, '\0');
    uint64_t n = json.size();
    for (int i = 0; i < 8; ++i)
        out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    return out + json + std::string(dataBytes, '\0');
}

} // namespace

int main()
{
    const std::string dir = shard::test::tempDir("tst_safetensors");
    at::manual_seed(7);

    // Round trip, one file: values including NaN, -0 and subnormals must come back bit for bit.
    at::Tensor f32 = at::randn({5, 7});
    f32.data_ptr<float>()[0] = std::nanf("");
    f32.data_ptr<float>()[1] = -0.0f;
    f32.data_ptr<float>()[2] = 1e-40f;
    at::Tensor bf16 = at::randn({3, 4}).to(at::kBFloat16);
    at::Tensor f16 = at::randn({6}).to(at::kHalf);
    at::Tensor scalar = at::full({}, 3.5);
    at::Tensor empty = at::empty({0, 3});
    NamedTensors tensors
        = {{"w.f32", f32}, {"w.bf16", bf16}, {"w.f16", f16}, {"s", scalar}, {"e", empty}};
    writeSafetensors(dir + "/one.safetensors", tensors);
    {
        SafetensorsReader r(dir + "/one.safetensors");
        T_CHECK(r.names().size() == 5);
        for (const auto& [name, t] : tensors)
            T_CHECK_MSG(bitEqual(r.tensor(name), t), "round trip of " + name);
        at::Tensor dst = at::zeros({3, 4}, at::kFloat);
        r.readInto("w.bf16", dst);
        T_CHECK(at::equal(dst, bf16.to(at::kFloat)));
        at::Tensor wrong = at::zeros({4, 3});
        EXPECT_THROW_WITH(r.readInto("w.bf16", wrong), "w.bf16", "shape");
        EXPECT_THROW_WITH(r.tensor("nope"), "one.safetensors", "nope");
        uint64_t n = 0;
        std::memcpy(&n, readFile(dir + "/one.safetensors").data(), 8);
        T_CHECK(n % 8 == 0);
    }

    // Sharded folder: small shard limit forces several files plus the index.
    {
        NamedTensors big;
        for (int i = 0; i < 5; ++i)
            big.push_back({"layer." + std::to_string(i) + ".weight", at::randn({16, 16})});
        const std::string folder = dir + "/sharded";
        auto files = writeSafetensorsFolder(folder, big, 2 * 16 * 16 * 4);
        T_CHECK(files.size() == 4); // 3 shards + index
        T_CHECK(std::filesystem::exists(folder + "/model.safetensors.index.json"));
        SafetensorsReader r(folder);
        T_CHECK(r.files().size() == 3);
        for (const auto& [name, t] : big)
            T_CHECK_MSG(bitEqual(r.tensor(name), t), "sharded round trip of " + name);
        // An index naming a missing shard.
        std::filesystem::remove(folder + "/model-00002-of-00003.safetensors");
        EXPECT_THROW_WITH(
            SafetensorsReader {folder}, "model-00002-of-00003.safetensors", "does not exist");
        const std::string single = dir + "/single";
        writeSafetensorsFolder(single, big);
        T_CHECK(std::filesystem::exists(single + "/model.safetensors"));
        T_CHECK(bitEqual(SafetensorsReader(single).tensor("layer.4.weight"), big[4].second));
    }

    // Malformed files: each gives one message naming the file (and the tensor where there is one).
    struct Bad {
        std::string bytes;
        std::vector<std::string> expect;
    };
    const std::vector<Bad> bad = {
        {"abc", {"bad0", "too short"}},
        {std::string("\x00\x01\x00\x00\x00\x00\x00\x00", 8) + "{}", {"bad1", "past the end"}},
        {rawFile("{\"a\":", 0), {"bad2", "not valid JSON"}},
        {rawFile("[1,2]", 0), {"bad3", "must be a JSON object"}},
        {rawFile("{\"a\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4),
            {"bad4", "'a'", "unknown dtype 'F33'"}},
        {rawFile("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4),
            {"bad5", "'a'", "past the data area"}},
        {rawFile("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4),
            {"bad6", "'a'", "needs 8"}},
        {rawFile("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
             8),
            {"bad7", "'b'", "overlaps", "'a'"}},
        {rawFile("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4),
            {"bad8", "'a'", "non-negative"}},
        {rawFile("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                 "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
             4),
            {"bad9", "'a'", "twice"}},
        {rawFile(std::string(40, '[') + std::string(40, ']'), 0), {"bad10", "nests deeper"}},
        {rawFile("{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],"
                 "\"data_offsets\":[0,4]}}",
             4),
            {"bad11", "'a'", "too large"}},
        {rawFile("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8),
            {"bad12", "'a'", "before begin"}},
        {rawFile("{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1),
            {"bad13", "'a'", "not supported"}},
        // The tensors must tile the data area: trailing bytes, a gap, a late start.
        {rawFile("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8),
            {"bad14", "4 bytes of the data area", "last tensor 'a'", "trailing"}},
        {rawFile("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
             12),
            {"bad15", "tensor 'b' starts at byte 8", "'a' ends at byte 4"}},
        {rawFile("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8),
            {"bad16", "tensor 'a' starts at byte 4", "starts at byte 0"}},
        {rawFile("{}", 4), {"bad17", "4 bytes of the data area", "empty header"}},
    };
    for (size_t i = 0; i < bad.size(); ++i) {
        const std::string path = dir + "/bad" + std::to_string(i) + ".safetensors";
        writeFile(path, bad[i].bytes);
        auto parts = bad[i].expect;
        if (i == 13) {
            // The header is valid; loading the tensor is what fails.
            EXPECT_THROW_WITH(SafetensorsReader(path).tensor("a"), parts[0], parts[1], parts[2]);
            continue;
        }
        try {
            SafetensorsReader r(path);
            T_CHECK_MSG(false, "bad file " + std::to_string(i) + " was accepted");
        } catch (const std::exception& e) {
            const std::string msg = e.what();
            for (const auto& p : parts)
                T_CHECK_MSG(msg.find(p) != std::string::npos,
                    "bad" + std::to_string(i) + ": '" + msg + "' lacks '" + p + "'");
        }
    }
    // A real file whose header length is shortened by 4 bytes (the JSON still parses: its
    // padding spaces move into the data area) would load every weight shifted by 4 bytes.
    {
        std::string bytes = readFile(dir + "/one.safetensors");
        uint64_t n = 0;
        std::memcpy(&n, bytes.data(), 8);
        // Widen the padding by 8 spaces so that 4 of them can be cut without touching the JSON.
        bytes.insert(8 + n, 8, ' ');
        n += 8;
        std::memcpy(bytes.data(), &n, 8);
        writeFile(dir + "/padded.safetensors", bytes);
        T_CHECK(SafetensorsReader(dir + "/padded.safetensors").names().size() == 5);
        n -= 4;
        std::memcpy(bytes.data(), &n, 8);
        writeFile(dir + "/shifted.safetensors", bytes);
        EXPECT_THROW_WITH(SafetensorsReader(dir + "/shifted.safetensors"), "shifted.safetensors",
            "4 bytes of the data area", "header length");
    }
    EXPECT_THROW_WITH(
        SafetensorsReader(dir + "/absent.safetensors"), "absent.safetensors", "cannot open");
    std::filesystem::create_directories(dir + "/emptyfolder");
    EXPECT_THROW_WITH(SafetensorsReader(dir + "/emptyfolder"), "no model.safetensors");

    std::filesystem::remove_all(dir);
    return shard::test::finish("tst_safetensors");
}
