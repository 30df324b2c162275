// Chunk arithmetic, read plans, the manifest JSON round trip and its validation errors.
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>

#include "ckpt/manifest.h"
#include "ckpt/shard_layout.h"

using namespace shard::ckpt;

static int g_failures = 0;
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);          \
            ++g_failures;                                                                          \
        }                                                                                          \
    } while (0)

static std::string errorOf(const std::function<void()>& fn)
{
    try {
        fn();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "";
}

static void testChunkRows()
{
    // 7 rows over 4 ranks: c = 2 -> [0,2) [2,4) [4,6) [6,7)+1 padding row.
    CHECK((chunkRows(7, 0, 4) == RowRange {0, 2, 2}));
    CHECK((chunkRows(7, 3, 4) == RowRange {6, 7, 2}));
    CHECK(chunkRows(7, 3, 4).padding() == 1);
    // 2 rows over 4 ranks: c = 1; ranks 2 and 3 hold only padding.
    CHECK((chunkRows(2, 2, 4) == RowRange {2, 2, 1}));
    CHECK((chunkRows(2, 3, 4) == RowRange {2, 2, 1}));
    // 5 rows over 3: c = 2 -> [0,2) [2,4) [4,5)+1.
    CHECK((chunkRows(5, 2, 3) == RowRange {4, 5, 2}));
    CHECK((chunkRows(9, 0, 1) == RowRange {0, 9, 9}));
    // Every row is covered exactly once and padded sizes are equal.
    for (int64_t d0 : {1, 2, 3, 7, 16, 17, 100})
        for (int w : {1, 2, 3, 4, 5, 8}) {
            const int64_t c = (d0 + w - 1) / w;
            int64_t covered = 0;
            for (int i = 0; i < w; ++i) {
                RowRange r = chunkRows(d0, i, w);
                CHECK(r.begin == std::min<int64_t>(i * c, d0));
                CHECK(r.padded == c);
                covered += r.rows();
            }
            CHECK(covered == d0);
        }
    CHECK(!errorOf([] { chunkRows(4, 4, 4); }).empty());
}

static void testPlacements()
{
    auto p = placementFor("zero3", 2, 4);
    CHECK(p.index == 2 && p.count == 4 && p.replica == 0 && p.replicas == 1);
    p = placementFor("ddp", 3, 4);
    CHECK(p.index == 0 && p.count == 1 && p.replica == 3 && p.replicas == 4);
    p = placementFor("hybrid", 3, 4, 2);
    CHECK(p.index == 1 && p.count == 2 && p.replica == 1 && p.replicas == 2);
    p = placementFor("zero1", 1, 2);
    CHECK(p.index == 1 && p.count == 2);
    CHECK(errorOf([] { placementFor("hybrid", 0, 4, 3); }).find("divide") != std::string::npos);
    CHECK(errorOf([] { placementFor("fsdp", 0, 2); }).find("unknown strategy 'fsdp'")
        != std::string::npos);
    CHECK(!errorOf([] { placementFor("zero3", 4, 4); }).empty());
}

static void testRowCopies()
{
    // Saved at 4 ranks (7 rows), wanted rows [2, 6) of a 2-rank layout... any range.
    std::vector<RowRange> stored {
        chunkRows(7, 0, 4), chunkRows(7, 1, 4), chunkRows(7, 2, 4), chunkRows(7, 3, 4)};
    auto plan = planRowCopies(stored, RowRange {3, 7, 4});
    CHECK(plan.size() == 3);
    CHECK(plan[0].chunk == 1 && plan[0].srcRow == 1 && plan[0].dstRow == 0 && plan[0].rows == 1);
    CHECK(plan[1].chunk == 2 && plan[1].srcRow == 0 && plan[1].dstRow == 1 && plan[1].rows == 2);
    CHECK(plan[2].chunk == 3 && plan[2].srcRow == 0 && plan[2].dstRow == 3 && plan[2].rows == 1);
    // Overlapping replicas: each row is read once.
    std::vector<RowRange> replicas {RowRange {0, 7, 7}, RowRange {0, 7, 7}};
    plan = planRowCopies(replicas, RowRange {0, 7, 7});
    CHECK(plan.size() == 1 && plan[0].rows == 7);
    // A hole is an error.
    std::vector<RowRange> holey {RowRange {0, 2, 2}, RowRange {4, 7, 3}};
    CHECK(errorOf([&] {
        planRowCopies(holey, RowRange {0, 7, 7});
    }).find("row 2")
        != std::string::npos);
}

static Manifest sampleManifest()
{
    Manifest m;
    m.runId = "run-1";
    m.step = 20;
    m.worldSize = 4;
    m.strategy = "hybrid";
    m.shardGroup = 2;
    m.modelConfig = {{"hidden_size", 16}, {"num_hidden_layers", 2}};
    m.modelConfigHash = configHash(m.modelConfig);
    m.modelSource = "/models/tiny";
    m.data = {{"files", {"a.jsonl"}}, {"seq_len", 32}};
    m.trainState = {{"step", 20}, {"data_position", {{"epoch", 1}, {"index", 3}}}};
    for (int r = 0; r < 4; ++r)
        m.rankFiles.push_back(rankFileName(r));
    m.tensors = layoutTensors({{"w", {5, 3}, true}, {"b", {1}, false}}, "hybrid", 4, 2);
    return m;
}

// Tensor parallel: every stored chunk is rows of the whole tensor; a Rows part's chunk is offset
// by the part's first row; TP rank 0 alone stores a Whole or Columns tensor's rows; together
// the chunks hold every row once.
static void testTensorParallelChunks()
{
    // 4 ranks: TP groups {0, 1} and {2, 3}, zero3 over data-parallel copies {0, 2} and {1, 3}.
    const auto [dp3, tp3] = placementWithTp("zero3", 3, 4, 0, 2);
    CHECK(dp3.index == 1 && dp3.count == 2 && tp3.rank == 1 && tp3.size == 2);
    const auto table
        = layoutTensors({{"q", {8, 3}, true, TpSplit::Rows}, {"o", {4, 6}, true, TpSplit::Columns},
                            {"norm", {5}, false, TpSplit::Whole}},
            "zero3", 4, 0, 2);
    CHECK(table.size() == 3);
    auto rowsAt = [](const TensorEntry& e) {
        std::vector<std::pair<int, std::pair<int64_t, int64_t>>> out;
        for (const auto& c : e.chunks)
            out.push_back({c.rank, {c.rows.begin, c.rows.end}});
        return out;
    };
    using Rows = std::vector<std::pair<int, std::pair<int64_t, int64_t>>>;
    // q: part 0 is rows 0-3 (rank 0 rows 0-1, rank 2 rows 2-3), part 1 rows 4-7.
    CHECK(rowsAt(table[0]) == (Rows {{0, {0, 2}}, {1, {4, 6}}, {2, {2, 4}}, {3, {6, 8}}}));
    CHECK(rowsAt(table[1]) == (Rows {{0, {0, 2}}, {2, {2, 4}}}));
    CHECK(rowsAt(table[2]) == (Rows {{0, {0, 3}}, {2, {3, 5}}}));
    for (const auto& e : table) {
        std::vector<RowRange> stored;
        for (const auto& c : e.chunks)
            stored.push_back(c.rows);
        int64_t copied = 0;
        for (const auto& c : planRowCopies(stored, RowRange {0, e.shape[0], e.shape[0]}))
            copied += c.rows;
        CHECK(copied == e.shape[0]);
    }
    // Without tensor parallel the table is the data-parallel one.
    const auto flat = layoutTensors({{"q", {8, 3}, true, TpSplit::Rows}}, "zero3", 2, 0);
    CHECK(rowsAt(flat[0]) == (Rows {{0, {0, 4}}, {1, {4, 8}}}));
    CHECK(heldRows(8, dp3, TpSplit::Rows, tp3).begin == 6
        && !storesRows(dp3, TpSplit::Columns, tp3, heldRows(4, dp3, TpSplit::Columns, tp3)));
}

static void testManifestRoundTrip()
{
    const Manifest m = sampleManifest();
    // Hybrid at 4 ranks, groups of 2: ranks 0 and 1 (replica 0) store; rows of 5 -> [0,3) [3,5).
    CHECK(m.tensors[0].chunks.size() == 2);
    CHECK(m.tensors[0].chunks[0].rank == 0 && (m.tensors[0].chunks[0].rows == RowRange {0, 3, 3}));
    CHECK(m.tensors[0].chunks[1].rank == 1 && (m.tensors[0].chunks[1].rows == RowRange {3, 5, 3}));
    CHECK(m.tensors[1].chunks.size() == 1); // 1 row: rank 1's chunk is empty
    const nlohmann::json j = toJson(m);
    const Manifest back = manifestFromJson(nlohmann::json::parse(j.dump()), "manifest.json");
    CHECK(toJson(back) == j);
    CHECK(back.runId == "run-1" && back.step == 20 && back.worldSize == 4);
    CHECK(back.strategy == "hybrid" && back.shardGroup == 2);
    CHECK(back.tensors.size() == 2 && back.tensors[0].shape == std::vector<int64_t>({5, 3}));
    CHECK(back.tensors[1].decay == false);
    CHECK(back.trainState["data_position"]["epoch"] == 1);
    CHECK(rankFileName(3) == "rank-00003.safetensors");
    CHECK(configHash(m.modelConfig).rfind("fnv1a64:", 0) == 0);
    CHECK(configHash({{"a", 1}}) != configHash({{"a", 2}}));
    CHECK(configHash(nlohmann::json::parse(R"({"b":1,"a":2})"))
        == configHash(nlohmann::json::parse(R"({"a":2,"b":1})")));
}

static void testManifestErrors()
{
    auto bad = [](const std::function<void(nlohmann::json&)>& edit) {
        nlohmann::json j = toJson(sampleManifest());
        edit(j);
        return errorOf([&] { manifestFromJson(j, "m.json"); });
    };
    CHECK(bad([](auto& j) { j.erase("run_id"); }).find("missing field 'run_id'")
        != std::string::npos);
    CHECK(bad([](auto& j) { j["version"] = 99; }).find("version 99") != std::string::npos);
    CHECK(bad([](auto& j) { j["model_config"]["hidden_size"] = 32; }).find("model_config_hash")
        != std::string::npos);
    CHECK(bad([](auto& j) { j["tensors"][0]["chunks"].erase(1); }).find("tensor 'w'")
        != std::string::npos);
    CHECK(bad([](auto& j) { j["rank_files"].erase(3); }).find("world size 4") != std::string::npos);
    CHECK(bad([](auto& j) { j["rank_files"][0] = "../x"; }).find("not a file name")
        != std::string::npos);
    CHECK(bad([](auto& j) {
        j["tensors"][0]["chunks"][0]["rows"] = {0, 9};
    }).find("impossible rows")
        != std::string::npos);
    CHECK(bad([](auto& j) { j["format"] = "other"; }).find("not a shard-ckpt manifest")
        != std::string::npos);
}

static void testJsonDifferences()
{
    auto d = jsonDifferences({{"a", 1}, {"b", 2}}, {{"a", 1}, {"b", 3}, {"c", 4}});
    CHECK(d.size() == 2);
    CHECK(d[0] == "b: 2 in the checkpoint, 3 in this run");
    CHECK(d[1] == "c: (absent) in the checkpoint, 4 in this run");
}

int main()
{
    testChunkRows();
    testPlacements();
    testRowCopies();
    testTensorParallelChunks();
    testManifestRoundTrip();
    testManifestErrors();
    testJsonDifferences();
    if (g_failures)
        std::fprintf(stderr, "%d check(s) failed\n", g_failures);
    else
        std::printf("all manifest checks passed\n");
    return g_failures ? 1 : 0;
}
