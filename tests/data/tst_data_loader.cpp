// DataLoader and SampleBuilder: each JSONL format, loss masking, padding, packing boundaries,
// validation split, seeded shuffling, exact resume from a position, and each bad input.
#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "data/data_loader.h"
#include "tokenizer/demo_tokenizer.h"
#include "tokenizer/text_test_util.h"
#include "tokenizer/tokenizer.h"

using namespace shard::testing;
using namespace shard::data;
using shard::tokenizer::Tokenizer;

namespace {

std::filesystem::path g_dir;
std::shared_ptr<const Tokenizer> g_tok;

std::string writeJsonl(const std::string& name, const std::vector<nlohmann::json>& records)
{
    std::string text;
    for (const auto& r : records)
        text += r.dump() + "\n";
    const auto path = g_dir / name;
    writeFile(path, text);
    return path.string();
}

DataConfig config(std::vector<std::string> files, int64_t seqLen)
{
    DataConfig c;
    c.files = std::move(files);
    c.seqLen = seqLen;
    c.shuffle = false;
    return c;
}

// The labelled (unmasked) ids of a row, decoded.
std::string labelledText(const Sample& s)
{
    std::vector<int32_t> ids;
    for (int32_t l : s.labels)
        if (l != kIgnoreLabel)
            ids.push_back(l);
    return g_tok->decode(ids);
}

size_t realLength(const Sample& s, int32_t pad)
{
    size_t n = s.inputIds.size();
    while (n > 0 && s.inputIds[n - 1] == pad && s.labels[n - 1] == kIgnoreLabel)
        --n;
    return n;
}

void testTokenized()
{
    const auto f = writeJsonl("tok.jsonl",
        {{{"input_ids", {5, 6, 7}}}, {{"input_ids", {8, 9}}, {"labels", {-100, 9}}},
            {{"input_ids", {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}}});
    DataConfig c = config({f}, 6);
    c.padId = 0;
    DataLoader loader(c); // no tokenizer needed
    CHECK_EQ(loader.trainRecords(), 3);
    const auto batch = loader.nextGlobalBatch(3);
    CHECK_EQ(batch.size(), size_t(3));
    CHECK_EQ(batch[0].inputIds, (std::vector<int32_t> {5, 6, 7, 0, 0, 0}));
    CHECK_EQ(batch[0].labels, (std::vector<int32_t> {5, 6, 7, -100, -100, -100}));
    CHECK_EQ(batch[1].labels, (std::vector<int32_t> {-100, 9, -100, -100, -100, -100}));
    CHECK_EQ(batch[2].inputIds, (std::vector<int32_t> {1, 2, 3, 4, 5, 6})); // truncated
    CHECK_EQ(loader.truncatedRecords(), 1);
    // Wraps to the next epoch.
    CHECK((loader.position() == Position {1, 0}));
    CHECK_EQ(loader.nextGlobalBatch(1)[0].inputIds, batch[0].inputIds);
    // Without a tokenizer, text data is refused with the reason.
    const auto t = writeJsonl("text_only.jsonl", {{{"text", "hello"}}});
    CHECK_THROWS(DataLoader(config({t}, 8)), "needs a tokenizer");
}

void testText()
{
    const auto f = writeJsonl("text.jsonl", {{{"text", "The answer is 42."}}});
    DataLoader loader(config({f}, 32), g_tok);
    CHECK_EQ(loader.padId(), g_tok->padId());
    const Sample s = loader.nextGlobalBatch(1)[0];
    CHECK_EQ(s.inputIds.size(), size_t(32));
    CHECK_EQ(s.labels.size(), size_t(32));
    const size_t n = realLength(s, g_tok->padId());
    std::vector<int32_t> expected = g_tok->encode("The answer is 42.", true);
    expected.push_back(g_tok->eosId());
    CHECK_EQ(std::vector<int32_t>(s.inputIds.begin(), s.inputIds.begin() + n), expected);
    CHECK_EQ(std::vector<int32_t>(s.labels.begin(), s.labels.begin() + n), expected);
    CHECK_EQ(s.inputIds[0], g_tok->bosId());
}

void testAlpaca()
{
    const nlohmann::json rec
        = {{"instruction", "Add the numbers."}, {"input", "12 and 30"}, {"output", "42"}};
    const auto f = writeJsonl("alpaca.jsonl", {rec});
    DataLoader loader(config({f}, 128), g_tok);
    const Sample s = loader.nextGlobalBatch(1)[0];
    CHECK_EQ(labelledText(s), std::string("42") + g_tok->eosToken());
    const size_t n = realLength(s, g_tok->padId());
    const std::string all
        = g_tok->decode(std::vector<int32_t>(s.inputIds.begin(), s.inputIds.begin() + n));
    CHECK(all.find("### Instruction:\nAdd the numbers.\n\n### Input:\n12 and 30\n\n### "
                   "Response:\n42")
        != std::string::npos);
    DataConfig c = config({f}, 128);
    c.trainOnPrompt = true;
    DataLoader all2(c, g_tok);
    const Sample s2 = all2.nextGlobalBatch(1)[0];
    CHECK_EQ(
        std::count(s2.labels.begin(), s2.labels.end(), kIgnoreLabel), static_cast<long>(128 - n));
}

void testChat()
{
    const nlohmann::json rec = {{"messages",
        {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}},
            {{"role", "assistant"}, {"content", "Hello!"}},
            {{"role", "user"}, {"content", "What is 2 + 2?"}},
            {{"role", "assistant"}, {"content", "4"}}}}};
    const auto f = writeJsonl("chat.jsonl", {rec});
    DataLoader loader(config({f}, 256), g_tok);
    const Sample s = loader.nextGlobalBatch(1)[0];
    CHECK_EQ(labelledText(s), std::string("Hello!<|eot_id|>4<|eot_id|>"));
    const size_t n = realLength(s, g_tok->padId());
    CHECK_EQ(g_tok->decode(std::vector<int32_t>(s.inputIds.begin(), s.inputIds.begin() + n)),
        std::string("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe "
                    "brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|"
                    "start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|><|start_"
                    "header_id|>user<|end_header_id|>\n\nWhat is 2 + "
                    "2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|>"));
    // The whole text encodes to the same ids (masking did not change tokenization).
    CHECK_EQ(std::vector<int32_t>(s.inputIds.begin() + 1, s.inputIds.begin() + n),
        g_tok->encode(
            g_tok->decode(std::vector<int32_t>(s.inputIds.begin(), s.inputIds.begin() + n))
                .substr(std::string("<|begin_of_text|>").size()),
            false));
    // Forced template by name.
    DataConfig c = config({f}, 256);
    c.chatTemplate = "chatml";
    DataLoader chatml(c, g_tok);
    const Sample m = chatml.nextGlobalBatch(1)[0];
    CHECK(g_tok->decode(m.inputIds, true).find("assistant\nHello!") != std::string::npos);
    c.chatTemplate = "vicuna";
    CHECK_THROWS(DataLoader(c, g_tok), "unknown chat template 'vicuna'");
    // A tokenizer whose chat template is not recognised: the error names the fix.
    auto files = shard::tokenizer::makeDemoTokenizer(512);
    files.tokenizerConfig["chat_template"] = "{% for m in messages %}{{ m.content }}{% endfor %}";
    auto odd = std::make_shared<const Tokenizer>(
        Tokenizer::fromJson(files.tokenizerJson, files.tokenizerConfig));
    CHECK_THROWS(DataLoader(config({f}, 64), odd), "--chat-template");
}

void testPacking()
{
    // Records of 3, 4 and 5 tokens into rows of 8: [3 + 4, pad 1], [5, pad 3].
    const auto f = writeJsonl("pack.jsonl",
        {{{"input_ids", {1, 2, 3}}}, {{"input_ids", {4, 5, 6, 7}}},
            {{"input_ids", {8, 9, 10, 11, 12}}}});
    DataConfig c = config({f}, 8);
    c.packing = true;
    c.padId = 0;
    DataLoader loader(c);
    const auto rows = loader.nextGlobalBatch(2);
    CHECK_EQ(rows[0].inputIds, (std::vector<int32_t> {1, 2, 3, 4, 5, 6, 7, 0}));
    // The first token of the second record is not a target of the first record's last token.
    CHECK_EQ(rows[0].labels, (std::vector<int32_t> {1, 2, 3, -100, 5, 6, 7, -100}));
    // Packing continues across the epoch boundary: epoch 1's first record fills the row.
    CHECK_EQ(rows[1].inputIds, (std::vector<int32_t> {8, 9, 10, 11, 12, 1, 2, 3}));
    CHECK_EQ(rows[1].labels, (std::vector<int32_t> {8, 9, 10, 11, 12, -100, 2, 3}));
    CHECK((loader.position() == Position {1, 1}));
    const auto next = loader.nextGlobalBatch(1);
    CHECK_EQ(next[0].inputIds, (std::vector<int32_t> {4, 5, 6, 7, 0, 0, 0, 0}));
    // A record longer than the row is truncated into a row of its own.
    const auto g = writeJsonl("pack_long.jsonl",
        {{{"input_ids", {1, 2}}}, {{"input_ids", {3, 4, 5, 6, 7, 8, 9, 10, 11, 12}}}});
    DataConfig c2 = config({g}, 8);
    c2.packing = true;
    c2.padId = 0;
    DataLoader l2(c2);
    const auto r2 = l2.nextGlobalBatch(2);
    CHECK_EQ(r2[0].inputIds, (std::vector<int32_t> {1, 2, 0, 0, 0, 0, 0, 0}));
    CHECK_EQ(r2[1].inputIds, (std::vector<int32_t> {3, 4, 5, 6, 7, 8, 9, 10}));
}

std::vector<int32_t> firstIds(const std::vector<Sample>& rows)
{
    std::vector<int32_t> out;
    for (const auto& r : rows)
        out.push_back(r.inputIds[0]);
    return out;
}

void testShuffleAndResume()
{
    std::vector<nlohmann::json> recs;
    for (int i = 0; i < 50; ++i)
        recs.push_back({{"input_ids", {i + 1, i + 2}}});
    const auto f = writeJsonl("shuffle.jsonl", recs);
    DataConfig c = config({f}, 4);
    c.shuffle = true;
    c.seed = 7;
    DataLoader a(c), b(c);
    const auto epochA = firstIds(a.nextGlobalBatch(50));
    CHECK_EQ(epochA, firstIds(b.nextGlobalBatch(50)));
    std::set<int32_t> seen(epochA.begin(), epochA.end());
    CHECK_EQ(seen.size(), size_t(50)); // each record once per epoch
    std::vector<int32_t> inOrder(50);
    for (int i = 0; i < 50; ++i)
        inOrder[i] = i + 1;
    CHECK(epochA != inOrder);
    const auto epoch2 = firstIds(a.nextGlobalBatch(50));
    CHECK(epoch2 != epochA); // reshuffled per epoch
    c.seed = 8;
    DataLoader other(c);
    CHECK(firstIds(other.nextGlobalBatch(50)) != epochA);

    // Resume: a fresh loader restored to a position continues exactly (with packing too).
    for (bool packing : {false, true}) {
        DataConfig pc = config({f}, 7);
        pc.shuffle = true;
        pc.seed = 3;
        pc.packing = packing;
        DataLoader run(pc);
        run.nextGlobalBatch(37);
        const Position at = run.position();
        const auto expected = run.nextGlobalBatch(20);
        DataLoader resumed(pc);
        resumed.setPosition(at);
        const auto got = resumed.nextGlobalBatch(20);
        CHECK_EQ(got.size(), expected.size());
        for (size_t i = 0; i < got.size() && i < expected.size(); ++i) {
            CHECK_EQ(got[i].inputIds, expected[i].inputIds);
            CHECK_EQ(got[i].labels, expected[i].labels);
        }
        CHECK_THROWS(resumed.setPosition({0, 51}), "outside this dataset");
        CHECK((positionFromJson(positionToJson(at)) == at));
    }
    // The global batch is the same however it is later sliced: two batches of 4 == one of 8.
    DataLoader x(c), y(c);
    auto b1 = x.nextGlobalBatch(4);
    const auto b2 = x.nextGlobalBatch(4);
    b1.insert(b1.end(), b2.begin(), b2.end());
    CHECK_EQ(firstIds(b1), firstIds(y.nextGlobalBatch(8)));
}

void testSplit()
{
    std::vector<nlohmann::json> recs;
    for (int i = 0; i < 40; ++i)
        recs.push_back({{"input_ids", {i + 1}}});
    const auto f = writeJsonl("split.jsonl", recs);
    DataConfig c = config({f}, 2);
    c.validationFraction = 0.25;
    c.seed = 11;
    DataLoader a(c);
    CHECK_EQ(a.trainRecords(), 30);
    CHECK_EQ(a.evalRecords(), 10);
    const auto eval = firstIds(a.evalSamples());
    const auto train = firstIds(a.nextGlobalBatch(30));
    std::set<int32_t> all(train.begin(), train.end());
    for (int32_t e : eval)
        CHECK(all.insert(e).second); // disjoint
    CHECK_EQ(all.size(), size_t(40));
    DataLoader b(c);
    CHECK_EQ(firstIds(b.evalSamples()), eval); // deterministic
    CHECK_EQ(firstIds(b.evalSamples(3)).size(), size_t(3));
    // Validation from a file.
    const auto v = writeJsonl("val.jsonl", {{{"input_ids", {99}}}, {{"input_ids", {98}}}});
    DataConfig fc = config({f}, 2);
    fc.validationFiles = {v};
    DataLoader byFile(fc);
    CHECK_EQ(byFile.trainRecords(), 40);
    CHECK_EQ(firstIds(byFile.evalSamples()), (std::vector<int32_t> {99, 98}));
    fc.validationFraction = 0.1;
    CHECK_THROWS(DataLoader(fc), "not both");
    c.validationFraction = 1.0;
    CHECK_THROWS(DataLoader(c), "validation fraction");
}

void testBadInputs()
{
    const std::string good = R"({"text": "fine"})";
    auto file = [](const std::string& name, const std::string& content) {
        writeFile(g_dir / name, content);
        return (g_dir / name).string();
    };
    const auto malformed
        = file("bad_json.jsonl", good + "\n" + good + "\n{\"text\": \n" + good + "\n");
    CHECK_THROWS(DataLoader(config({malformed}, 16), g_tok), "bad_json.jsonl:3: malformed JSON");
    DataConfig skip = config({malformed}, 16);
    skip.skipBadLines = true;
    DataLoader skipped(skip, g_tok);
    CHECK_EQ(skipped.badLines(), 1);
    CHECK_EQ(skipped.trainRecords(), 3);
    CHECK(!skipped.badLineReports().empty()
        && skipped.badLineReports()[0].find("bad_json.jsonl:3") != std::string::npos);

    struct Case {
        std::string name, content, needle;
    };
    const std::vector<Case> cases = {
        {"not_string.jsonl", R"({"text": 5})", ":1: \"text\" is not a string"},
        {"unknown_keys.jsonl", R"({"prompt": "x"})", ":1: unknown record shape (keys: prompt)"},
        {"array.jsonl", R"([1, 2])", ":1: line is not a JSON object"},
        {"mixed.jsonl", good + "\n" + R"({"instruction": "a", "output": "b"})",
            ":2: missing \"text\" (text format)"},
        {"alpaca_no_output.jsonl", R"({"instruction": "a"})", ":1: missing \"output\""},
        {"chat_role.jsonl", R"({"messages": [{"role": "robot", "content": "x"}]})",
            "unknown role 'robot'"},
        {"chat_empty.jsonl", R"({"messages": []})", "non-empty array"},
        {"chat_content.jsonl", R"({"messages": [{"role": "user"}]})",
            "needs string \"role\" and \"content\""},
        {"ids_type.jsonl", R"({"input_ids": [1, "x"]})", "\"input_ids\"[1] is not an integer"},
        {"ids_range.jsonl", R"({"input_ids": [1, 999999]})", "outside the vocabulary [0, 512)"},
        {"ids_empty.jsonl", R"({"input_ids": []})", "\"input_ids\" is empty"},
        {"labels_len.jsonl", R"({"input_ids": [1, 2], "labels": [1]})",
            "\"labels\" has 1 entries but \"input_ids\" has 2"},
        {"labels_bad.jsonl", R"({"input_ids": [1, 2], "labels": [1, -5]})",
            "is outside the vocabulary [0, 512) and is not -100"},
        {"empty.jsonl", "", "no usable records (the file is empty)"},
        {"blank.jsonl", "\n  \n\n", "no usable records"},
    };
    for (const auto& k : cases)
        CHECK_THROWS(DataLoader(config({file(k.name, k.content)}, 16), g_tok), k.needle);
    DataConfig allBad = config({file("all_bad.jsonl", "nope\nnope\n")}, 16);
    allBad.skipBadLines = true;
    CHECK_THROWS(DataLoader(allBad, g_tok), "every line was bad");
    CHECK_THROWS(DataLoader(config({(g_dir / "missing.jsonl").string()}, 16), g_tok),
        "missing.jsonl: cannot open");
    // A folder given as the data path (it used to say only "read error").
    std::filesystem::create_directories(g_dir / "a_folder");
    CHECK_THROWS(DataLoader(config({(g_dir / "a_folder").string()}, 16), g_tok),
        "a_folder: is a folder, not a data file");
    CHECK_THROWS(DataLoader(config({}, 16), g_tok), "no training files");
    CHECK_THROWS(DataLoader(config({malformed}, 1), g_tok), "at least 2");
    DataConfig fmt = config({file("fmt.jsonl", good)}, 16);
    fmt.format = DataFormat::Chat;
    CHECK_THROWS(DataLoader(fmt, g_tok), "missing \"messages\" (chat format)");
    CHECK_THROWS(parseDataFormat("csv"), "unknown data format 'csv'");
    CHECK_THROWS(positionFromJson({{"epoch", 1}}), "\"index\" is missing");
    CHECK_THROWS(positionFromJson({{"epoch", -1}, {"index", 0}}), "\"epoch\" is missing or not a");
}

void testStreamingIndex()
{
    // 20,000 records are indexed by offset, and reading any of them seeks to it.
    std::string text;
    for (int i = 0; i < 20000; ++i)
        text += R"({"input_ids": [)" + std::to_string(i % 500) + "]}\n";
    writeFile(g_dir / "many.jsonl", text);
    DataConfig c = config({(g_dir / "many.jsonl").string()}, 2);
    c.shuffle = true;
    DataLoader loader(c);
    CHECK_EQ(loader.trainRecords(), 20000);
    loader.setPosition({0, 19999});
    CHECK_EQ(loader.nextGlobalBatch(1).size(), size_t(1));
    CHECK((loader.position() == Position {1, 0}));
}

} // namespace

int main()
{
    g_dir = tempDir("tst_data_loader");
    shard::tokenizer::writeDemoTokenizer((g_dir / "model").string(), 512);
    g_tok = std::make_shared<const Tokenizer>(Tokenizer::fromFolder((g_dir / "model").string()));
    testTokenized();
    testText();
    testAlpaca();
    testChat();
    testPacking();
    testShuffleAndResume();
    testSplit();
    testBadInputs();
    testStreamingIndex();
    std::filesystem::remove_all(g_dir);
    return finish("tst_data_loader");
}
