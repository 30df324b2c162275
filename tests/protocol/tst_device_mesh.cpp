// The device mesh, the one owner of placement: torchtitan's rank order (pp outermost, then
// dp_replicate, dp_shard, tp innermost), the groups along each dimension, the strategies'
// data-parallel split, pipeline stages' layer ranges, and the refusals with their fixes. The
// checkpoint placement and the hybrid groups are read from it (tst_ckpt_*, tst_collectives).
#include <QTest>

#include <set>

#include "protocol/device_mesh.h"

using namespace shard::protocol;

namespace {

using Ranks = std::vector<int64_t>;

template<class F> QString thrown(F&& f)
{
    try {
        f();
    } catch (const std::exception& e) {
        return QString::fromUtf8(e.what());
    }
    return {};
}

} // namespace

class TestDeviceMesh : public QObject {
    Q_OBJECT
private Q_SLOTS:
    // The seeds' 70B layout on 64 GPUs (8 nodes of 8): DP 8, TP 4, PP 2 with ZeRO-3 inside.
    void torchtitanOrder()
    {
        const auto m = DeviceMesh::of({Strategy::Zero3, 0, 8, 8, /*tp=*/4, /*pp=*/2});
        QCOMPARE(m.pp, int64_t(2));
        QCOMPARE(m.dpReplicate, int64_t(1));
        QCOMPARE(m.dpShard, int64_t(8));
        QCOMPARE(m.tp, int64_t(4));
        QCOMPARE(m.worldSize(), int64_t(64));
        // tp innermost: ranks 0-3 are one tensor-parallel group, inside node 0.
        QVERIFY(m.groupOf(MeshDim::Tp, 0) == (Ranks {0, 1, 2, 3}));
        QVERIFY(m.groupOf(MeshDim::Tp, 6) == (Ranks {4, 5, 6, 7}));
        // dp_shard next: stride tp.
        QVERIFY(m.groupOf(MeshDim::DpShard, 1) == (Ranks {1, 5, 9, 13, 17, 21, 25, 29}));
        // pp outermost: the second stage is the second half of the ranks.
        QVERIFY(m.groupOf(MeshDim::Pp, 3) == (Ranks {3, 35}));
        const MeshCoords c = m.coords(45); // 45 = 32 + 3*4 + 1
        QCOMPARE(c.pp, int64_t(1));
        QCOMPARE(c.dpShard, int64_t(3));
        QCOMPARE(c.tp, int64_t(1));
        for (int64_t r = 0; r < m.worldSize(); ++r)
            QCOMPARE(m.rankOf(m.coords(r)), r);
        // Every dimension's groups partition the ranks.
        for (MeshDim d : {MeshDim::Pp, MeshDim::DpReplicate, MeshDim::DpShard, MeshDim::Tp}) {
            std::set<int64_t> seen;
            for (const Ranks& g : m.groups(d)) {
                QCOMPARE(int64_t(g.size()), m.size(d));
                seen.insert(g.begin(), g.end());
            }
            QCOMPARE(int64_t(seen.size()), m.worldSize());
        }
        QCOMPARE(QString::fromStdString(m.describe()),
            QString("pp 2 x dp_replicate 1 x dp_shard 8 x tp 4"));
        m.validate(8); // tp 4 inside a node of 8
    }

    // The data-parallel strategies without TP/PP: what the engine trains today.
    void strategiesSplitTheDataParallelRanks()
    {
        const auto ddp = DeviceMesh::of({Strategy::Ddp, 0, 1, 4});
        QCOMPARE(ddp.dpReplicate, int64_t(4));
        QCOMPARE(ddp.dpShard, int64_t(1));
        for (Strategy s : {Strategy::Zero1, Strategy::Zero2, Strategy::Zero3}) {
            const auto z = DeviceMesh::of({s, 0, 2, 4});
            QCOMPARE(z.dpShard, int64_t(8));
            QCOMPARE(z.dpReplicate, int64_t(1));
        }
        // Hybrid: shard groups of G consecutive ranks, replicas across them (as
        // dist::makeHybridGroups and the checkpoint placement had them).
        const auto h = DeviceMesh::of({Strategy::Hybrid, 4, 2, 4});
        QCOMPARE(h.dpShard, int64_t(4));
        QCOMPARE(h.dpReplicate, int64_t(2));
        QVERIFY(h.groupOf(MeshDim::DpShard, 5) == (Ranks {4, 5, 6, 7}));
        QVERIFY(h.groupOf(MeshDim::DpReplicate, 5) == (Ranks {1, 5}));
        QCOMPARE(h.coords(6).dpShard, int64_t(2));
        QCOMPARE(h.coords(6).dpReplicate, int64_t(1));
        // The shard degree the planner and the strategies read is the mesh's.
        QCOMPARE((ParallelDims {Strategy::Hybrid, 4, 2, 4}.shardDegree()), int64_t(4));
        QCOMPARE((ParallelDims {Strategy::Zero2, 0, 2, 4}.shardDegree()), int64_t(8));
        QCOMPARE((ParallelDims {Strategy::Ddp, 0, 2, 4}.shardDegree()), int64_t(1));
    }

    // The rows of a global micro-batch each rank computes come from the mesh: one share per
    // data-parallel copy, the same rows for the tensor and pipeline ranks of a copy; without TP
    // and PP each rank its own share, as the strategies split them by rank before.
    void dataRowsFollowTheDataParallelCopies()
    {
        const auto flat = DeviceMesh::of({Strategy::Hybrid, 2, 1, 4});
        for (int64_t r = 0; r < 4; ++r) {
            QCOMPARE(flat.dataParallelIndex(r), r);
            QVERIFY(flat.dataRows(r, 8) == std::make_pair(2 * r, 2 * r + 2));
        }
        const auto m = DeviceMesh::of({Strategy::Zero3, 0, 1, 8, /*tp=*/2, /*pp=*/2});
        QCOMPARE(m.dataParallel(), int64_t(2));
        std::vector<std::pair<int64_t, int64_t>> rows;
        for (int64_t r = 0; r < m.worldSize(); ++r)
            rows.push_back(m.dataRows(r, 6));
        // Ranks 0,1 (tp) and 4,5 (the second stage) are copy 0; 2,3 and 6,7 copy 1.
        for (int64_t r : {0, 1, 4, 5}) {
            QCOMPARE(m.dataParallelIndex(r), int64_t(0));
            QVERIFY(rows[size_t(r)] == std::make_pair(int64_t(0), int64_t(3)));
        }
        for (int64_t r : {2, 3, 6, 7})
            QVERIFY(rows[size_t(r)] == std::make_pair(int64_t(3), int64_t(6)));
        // Uneven: 5 rows over 2 copies split 2 + 3, every row once.
        QVERIFY(m.dataRows(0, 5) == std::make_pair(int64_t(0), int64_t(2)));
        QVERIFY(m.dataRows(2, 5) == std::make_pair(int64_t(2), int64_t(5)));
    }

    void refusalsSayTheFix()
    {
        QVERIFY2(thrown([] {
            DeviceMesh::of({Strategy::Zero3, 0, 1, 8, 3});
        })
                     .contains("tp 3 x pp 1 does not divide the 8 ranks; use degrees whose "
                               "product divides 8 (1, 2, 4, 8)"),
            "tp that does not divide");
        QVERIFY(thrown([] {
            DeviceMesh::of({Strategy::Hybrid, 3, 1, 8});
        }).contains("hybrid shard group 3 does not divide the 8 data-parallel ranks"));
        // With tp 2 the hybrid group divides the data-parallel ranks, not the world.
        QVERIFY(thrown([] {
            DeviceMesh::of({Strategy::Hybrid, 8, 1, 8, 2});
        }).contains("does not divide the 4 data-parallel ranks"));
        // Tensor parallel over whole nodes is allowed (the planner warns about the link); a
        // group that straddles nodes part-way is refused with both fixes.
        const auto wide = DeviceMesh::of({Strategy::Zero3, 0, 2, 4, 8});
        wide.validate(4, "GPUs");
        const auto straddling = DeviceMesh::of({Strategy::Zero3, 0, 3, 4, 6});
        const QString why = thrown([&] { straddling.validate(4, "GPUs"); });
        QVERIFY2(why.contains("tensor parallel degree 6 does not divide the 4 GPUs of a node, so "
                              "some of its groups would straddle node boundaries; use a divisor "
                              "of 4 (1, 2, 4) to keep each group inside a node, or a multiple "
                              "of 4 to span whole nodes"),
            qPrintable(why));
        QVERIFY(thrown([] {
            DeviceMesh::of({Strategy::Ddp, 0, 1, 2}).coords(2);
        }).contains("rank 2 is outside the 2 ranks"));
    }
};

QTEST_GUILESS_MAIN(TestDeviceMesh)
#include "tst_device_mesh.moc"
