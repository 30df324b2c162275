// Resharding exactness: a checkpoint saved by W1 ranks under S1 (several threads running the real
// save protocol) is read back as the shards of W2 ranks under S2; every shard equals the slice of
// the original global tensors bit for bit, padding is zero, and only the needed bytes are read.
// Also the validation errors of a damaged or foreign checkpoint.
#include <filesystem>
#include <fstream>

#include "ckpt/checkpoint_reader.h"
#include "ckpt/checkpoint_store.h"
#include "ckpt_test_util.h"

using namespace shard::ckpt;
using namespace ckpt_test;
namespace fs = std::filesystem;

static const std::vector<std::pair<std::string, std::vector<int64_t>>> kShapes {
    {"model.embed_tokens.weight", {7, 3}}, {"model.norm.weight", {5}},
    {"model.layers.0.mlp.up_proj.weight", {2, 4}}, {"lm_head.weight", {16, 2}},
    {"model.layers.0.self_attn.q_proj.bias", {1}}};

struct Case {
    std::string s1;
    int w1;
    int g1;
    std::string s2;
    int w2;
    int g2;
};

static void checkReshard(const Case& c)
{
    TempDir tmp;
    const Synthetic s = makeSynthetic(kShapes, 7);
    const std::string ckpts = tmp.path + "/checkpoints";
    auto res = saveSynthetic(s, ckpts, 3, c.s1, c.w1, c.g1);
    CHECK(res.dir == ckpts + "/step-3");
    CheckpointReader reader(res.dir);
    CHECK(reader.manifest().worldSize == c.w1 && reader.manifest().strategy == c.s1);
    const char* kinds[] = {kParam, kExpAvg, kExpAvgSq};
    for (int r = 0; r < c.w2; ++r) {
        const ShardPlacement p = placementFor(c.s2, r, c.w2, c.g2);
        int64_t expectBytes = 0;
        const int64_t before = reader.bytesRead();
        for (size_t i = 0; i < s.specs.size(); ++i) {
            const at::Tensor* globals[] = {&s.param[i], &s.m[i], &s.v[i]};
            for (int k = 0; k < 3; ++k) {
                const at::Tensor got = reader.readShard(kinds[k], s.specs[i].name, p);
                const at::Tensor want = localBuffer(*globals[k], p);
                if (!bitEqual(got, want)) {
                    std::fprintf(stderr, "%s@%d -> %s@%d rank %d: %s %s differs\n", c.s1.c_str(),
                        c.w1, c.s2.c_str(), c.w2, r, kinds[k], s.specs[i].name.c_str());
                    ++failures();
                }
                const RowRange rows = rowsOf(s.specs[i].shape[0], p);
                expectBytes += rows.rows() * (globals[k]->numel() / globals[k]->size(0)) * 4;
            }
        }
        // Exactly this rank's rows were read, nothing more.
        CHECK(reader.bytesRead() - before == expectBytes);
    }
    // Per-rank state of the saving ranks.
    for (int r = 0; r < c.w1; ++r) {
        CHECK(reader.rankState(r)["rank"] == r);
        CHECK(bitEqual(reader.rngState(r), at::full({8}, r, at::kByte)));
    }
    CHECK(reader.manifest().trainState["data_position"]["index"] == 4);
}

static void testResharding()
{
    const std::vector<Case> cases {
        {"zero3", 4, 0, "zero3", 2, 0},  // 4 -> 2
        {"zero3", 2, 0, "zero3", 4, 0},  // 2 -> 4
        {"zero3", 3, 0, "zero3", 2, 0},  // 3 -> 2 with padding
        {"zero3", 4, 0, "ddp", 2, 0},    // sharded -> full copies
        {"ddp", 3, 0, "zero3", 4, 0},    // replicated (rank 0 stores) -> sharded
        {"zero3", 4, 0, "zero2", 4, 0},  // same layout, other strategy
        {"zero2", 2, 0, "zero1", 3, 0},  //
        {"hybrid", 4, 2, "zero3", 3, 0}, // hybrid: shard group 0 stores
        {"zero3", 2, 0, "hybrid", 6, 3}, //
        {"single", 1, 0, "zero3", 5, 0}, // 5 ranks: some hold only padding
        {"zero3", 5, 0, "single", 1, 0}, //
    };
    for (const auto& c : cases)
        checkReshard(c);
}

static void testReadFull()
{
    TempDir tmp;
    const Synthetic s = makeSynthetic(kShapes, 3);
    auto res = saveSynthetic(s, tmp.path + "/checkpoints", 1, "zero3", 4);
    CheckpointReader reader(res.dir);
    for (size_t i = 0; i < s.specs.size(); ++i) {
        CHECK(bitEqual(reader.readFull(kParam, s.specs[i].name), s.param[i]));
        CHECK(bitEqual(reader.readFull(kExpAvgSq, s.specs[i].name), s.v[i]));
    }
    // Only replica 0 stores: under DDP at 3 ranks, ranks 1 and 2 hold no tensors.
    auto ddp = saveSynthetic(s, tmp.path + "/ddp", 1, "ddp", 3);
    const auto size0 = fs::file_size(ddp.dir + "/" + rankFileName(0));
    const auto size1 = fs::file_size(ddp.dir + "/" + rankFileName(1));
    CHECK(size0 > 3 * 4 * 21 && size1 < 512);
}

static void testValidation()
{
    TempDir tmp;
    const Synthetic s = makeSynthetic(kShapes, 5);
    const std::string a = saveSynthetic(s, tmp.path + "/a", 2, "zero3", 2, 0, "run-a").dir;
    const std::string b = saveSynthetic(s, tmp.path + "/b", 2, "zero3", 2, 0, "run-b").dir;
    const std::string c = saveSynthetic(s, tmp.path + "/c", 4, "zero3", 2, 0, "run-a").dir;

    // Missing shard file.
    fs::copy(a, tmp.path + "/missing", fs::copy_options::recursive);
    fs::remove(tmp.path + "/missing/" + rankFileName(1));
    CHECK_THROWS_WITH([&] { CheckpointReader r(tmp.path + "/missing"); },
        "rank-00001.safetensors of rank 1 is missing", "2 ranks");

    // A shard file of another run / another step.
    fs::copy(a, tmp.path + "/mixed", fs::copy_options::recursive);
    fs::copy_file(b + "/" + rankFileName(1), tmp.path + "/mixed/" + rankFileName(1),
        fs::copy_options::overwrite_existing);
    CHECK_THROWS_WITH([&] { CheckpointReader r(tmp.path + "/mixed"); },
        "belongs to run 'run-b' step 2", "manifest is run 'run-a' step 2");
    fs::copy(a, tmp.path + "/mixed2", fs::copy_options::recursive);
    fs::copy_file(c + "/" + rankFileName(0), tmp.path + "/mixed2/" + rankFileName(0),
        fs::copy_options::overwrite_existing);
    CHECK_THROWS_WITH([&] { CheckpointReader r(tmp.path + "/mixed2"); }, "step 4",
        "manifest is run 'run-a' step 2");

    // No DONE marker.
    fs::copy(a, tmp.path + "/undone", fs::copy_options::recursive);
    fs::remove(tmp.path + "/undone/DONE");
    CHECK_THROWS_WITH([&] { CheckpointReader r(tmp.path + "/undone"); }, "incomplete", "DONE");

    // Compatibility with the resuming run.
    CheckpointReader reader(a);
    ResumeExpectation ok;
    ok.modelConfig = tinyModelConfig();
    ok.data = reader.manifest().data;
    ok.runId = "run-a";
    ok.tensors = s.specs;
    reader.checkCompatible(ok);

    ResumeExpectation otherModel = ok;
    otherModel.modelConfig = tinyModelConfig(4);
    CHECK_THROWS_WITH([&] { reader.checkCompatible(otherModel); }, "different model",
        "num_hidden_layers: 2 in the checkpoint, 4 in this run");

    ResumeExpectation otherRun = ok;
    otherRun.runId = "run-z";
    CHECK_THROWS_WITH(
        [&] { reader.checkCompatible(otherRun); }, "belongs to run 'run-a'", "'run-z'");

    ResumeExpectation otherData = ok;
    otherData.data["seq_len"] = 32;
    CHECK_THROWS_WITH([&] { reader.checkCompatible(otherData); }, "different data settings",
        "seq_len: 16 in the checkpoint, 32 in this run");

    ResumeExpectation otherShapes = ok;
    otherShapes.tensors[0].shape = {8, 3};
    otherShapes.tensors.pop_back();
    otherShapes.tensors.push_back({"extra.weight", {2}, true});
    CHECK_THROWS_WITH([&] { reader.checkCompatible(otherShapes); }, "incompatible shapes",
        "'model.embed_tokens.weight' is [7, 3] in the checkpoint, [8, 3] in the model",
        "'extra.weight' is missing from the checkpoint",
        "the checkpoint has tensor 'model.layers.0.self_attn.q_proj.bias' that the model lacks");

    // A rank holding a buffer that does not match the layout is refused at save time.
    TempDir t2;
    Agreement one(1);
    SaveRequest req;
    req.checkpointsDir = t2.path + "/checkpoints";
    req.step = 1;
    req.strategy = "zero3";
    req.worldSize = 1;
    auto tensors = localTensors(s, placementFor("zero3", 0, 1));
    tensors[0].param = at::zeros({4, 3});
    CHECK_THROWS_WITH([&] { saveCheckpoint(req, tensors); },
        "holds param of 'model.embed_tokens.weight' as Float[4, 3]", "places Float[7, 3]",
        "previous checkpoints are intact");
    CHECK(listCheckpoints(req.checkpointsDir).empty());
    CHECK(!fs::exists(tempDirFor(req.checkpointsDir, 1)));
}

int main()
{
    at::set_num_threads(1);
    testResharding();
    testReadFull();
    testValidation();
    return finish("resharding");
}
