// Demo tasks: deterministic generation, correct answers, the scorer, and the written JSONL
// training on exactly the answer tokens through the DataLoader.
#include <regex>

#include <nlohmann/json.hpp>

#include "data/data_loader.h"
#include "data/demo_task.h"
#include "tokenizer/demo_tokenizer.h"
#include "tokenizer/text_test_util.h"
#include "tokenizer/tokenizer.h"

using namespace shard::testing;
using namespace shard::data;

int main()
{
    const auto a = generateDemoExamples(DemoTask::Arithmetic, 200, 5);
    const auto b = generateDemoExamples(DemoTask::Arithmetic, 200, 5);
    const auto c = generateDemoExamples(DemoTask::Arithmetic, 200, 6);
    CHECK_EQ(a.size(), size_t(200));
    bool same = true, differs = false;
    const std::regex question(R"(What is (\d+) \+ (\d+)\?)");
    for (size_t i = 0; i < a.size(); ++i) {
        same = same && a[i].prompt == b[i].prompt && a[i].answer == b[i].answer;
        differs = differs || a[i].prompt != c[i].prompt;
        std::smatch m;
        if (!std::regex_match(a[i].prompt, m, question)) {
            ++failures();
            continue;
        }
        CHECK_EQ(a[i].answer, std::to_string(std::stoi(m[1]) + std::stoi(m[2])));
        CHECK(scoreDemoAnswer(DemoTask::Arithmetic, a[i].answer, a[i].answer));
    }
    CHECK(same);
    CHECK(differs);
    for (const auto& ex : generateDemoExamples(DemoTask::Copy, 50, 1)) {
        CHECK_EQ(ex.prompt, "Repeat: " + ex.answer);
        CHECK(scoreDemoAnswer(DemoTask::Copy, ex.answer, " " + ex.answer + "\n"));
        CHECK(!scoreDemoAnswer(DemoTask::Copy, ex.answer, ex.answer + " extra"));
    }
    CHECK(scoreDemoAnswer(DemoTask::Arithmetic, "85", "The answer is 85."));
    CHECK(!scoreDemoAnswer(DemoTask::Arithmetic, "85", "58"));
    CHECK(!scoreDemoAnswer(DemoTask::Arithmetic, "85", "855"));
    CHECK(!scoreDemoAnswer(DemoTask::Arithmetic, "85", ""));
    CHECK(scoreDemoAnswer(DemoTask::Arithmetic, "-3", "-3"));
    CHECK_EQ(demoAccuracy(DemoTask::Arithmetic, {"1", "2", "3", "4"}, {"1", "x", "3", "5"}), 0.5);
    CHECK_THROWS(parseDemoTask("sorting"), "unknown demo task 'sorting'");
    CHECK_THROWS(generateDemoExamples(DemoTask::Copy, 0, 1), "--count must be positive");
    CHECK_THROWS(demoRecord(a[0], DataFormat::Text), "format must be chat, alpaca or preference");
    // Preference pairs: a wrong answer of the same kind, never the right one, the same each time.
    for (const auto task : {DemoTask::Arithmetic, DemoTask::Copy})
        for (const auto& ex : generateDemoExamples(task, 100, 2)) {
            const std::string wrong = demoWrongAnswer(task, ex);
            CHECK(!wrong.empty() && wrong != ex.answer);
            CHECK(!scoreDemoAnswer(task, ex.answer, wrong));
            CHECK_EQ(wrong, demoWrongAnswer(task, ex));
        }

    // Written as chat and Alpaca JSONL, the loader trains exactly on the answers.
    const auto dir = tempDir("tst_demo_task");
    shard::tokenizer::writeDemoTokenizer((dir / "model").string(), 512);
    auto tok = std::make_shared<const shard::tokenizer::Tokenizer>(
        shard::tokenizer::Tokenizer::fromFolder((dir / "model").string()));
    {
        // Written as pairs, the loader makes (chosen, rejected) rows whose answers decode to the
        // right and the wrong answer after the same chat prompt.
        const auto path = (dir / "demo-preference.jsonl").string();
        writeDemoData(path, DemoTask::Arithmetic, 10, 3, DataFormat::Preference);
        DataConfig cfg;
        cfg.files = {path};
        cfg.seqLen = 64;
        cfg.shuffle = false;
        DataLoader loader(cfg, tok);
        CHECK(loader.preference());
        const auto rows = loader.nextGlobalBatch(20);
        const auto examples = generateDemoExamples(DemoTask::Arithmetic, 10, 3);
        for (size_t i = 0; i < examples.size(); ++i) {
            for (int side = 0; side < 2; ++side) {
                std::vector<int32_t> labelled;
                for (int32_t l : rows[2 * i + side].labels)
                    if (l != kIgnoreLabel)
                        labelled.push_back(l);
                const std::string want = side == 0
                    ? examples[i].answer
                    : demoWrongAnswer(DemoTask::Arithmetic, examples[i]);
                CHECK_EQ(tok->decode(labelled), want + "<|eot_id|>");
            }
            const auto prompt = demoPromptIds(*tok, examples[i], DataFormat::Preference);
            CHECK(std::equal(prompt.begin(), prompt.end(), rows[2 * i].inputIds.begin()));
            CHECK(std::equal(prompt.begin(), prompt.end(), rows[2 * i + 1].inputIds.begin()));
        }
    }
    for (const auto format : {DataFormat::Chat, DataFormat::Alpaca}) {
        const auto path = (dir / ("demo-" + dataFormatName(format) + ".jsonl")).string();
        writeDemoData(path, DemoTask::Arithmetic, 20, 3, format);
        DataConfig cfg;
        cfg.files = {path};
        cfg.seqLen = 128;
        cfg.shuffle = false;
        DataLoader loader(cfg, tok);
        CHECK_EQ(loader.trainRecords(), 20);
        const auto rows = loader.nextGlobalBatch(20);
        const auto examples = generateDemoExamples(DemoTask::Arithmetic, 20, 3);
        for (size_t i = 0; i < rows.size(); ++i) {
            std::vector<int32_t> labelled;
            for (int32_t l : rows[i].labels)
                if (l != kIgnoreLabel)
                    labelled.push_back(l);
            const std::string end
                = format == DataFormat::Chat ? std::string("<|eot_id|>") : tok->eosToken();
            CHECK_EQ(tok->decode(labelled), examples[i].answer + end);
            // The generation prompt is exactly the tokens before the answer.
            const auto prompt = demoPromptIds(*tok, examples[i], format);
            CHECK(prompt.size() < rows[i].inputIds.size());
            CHECK(std::equal(prompt.begin(), prompt.end(), rows[i].inputIds.begin()));
            CHECK(rows[i].labels[prompt.size()] != kIgnoreLabel);
            if (format == DataFormat::Chat)
                CHECK_EQ(tok->decode(prompt),
                    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n"
                        + examples[i].prompt
                        + "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
        }
    }
    CHECK_THROWS(writeDemoData((dir / "no/such/dir/x.jsonl").string(), DemoTask::Copy, 3, 1,
                     DataFormat::Chat),
        "cannot write");
    std::filesystem::remove_all(dir);
    return finish("tst_demo_task");
}
