// The worker's text commands as a user runs them: `shard-worker tokenize` and
// `shard-worker make-data`, including their error messages and exit codes.
#include <memory>

#include <nlohmann/json.hpp>

#include "../engine/engine_test_util.h"
#include "data/demo_task.h"
#include "tokenizer/demo_tokenizer.h"
#include "tokenizer/text_test_util.h"
#include "tokenizer/tokenizer.h"

using namespace shard::testing;

namespace {

using Result = shard::test::CommandOutput;

Result run(const std::string& args, bool withStderr = false)
{
    return shard::test::runCaptured(
        std::string(SHARD_WORKER) + " " + args + (withStderr ? " 2>&1" : " 2>/dev/null"));
}

std::string readFile(const std::filesystem::path& p)
{
    std::ifstream in(p, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

} // namespace

int main()
{
    const auto dir = tempDir("tst_worker_text");
    const auto model = dir / "model";
    shard::tokenizer::writeDemoTokenizer(model.string(), 512);
    const auto tok = shard::tokenizer::Tokenizer::fromFolder(model.string());

    // tokenize: ids as the library gives them, as JSON and as plain text.
    const std::string text = "What is 12 + 30?\nThe answer is 42. 日本語 😀<|eot_id|>";
    writeFile(dir / "in.txt", text);
    const std::string base
        = "tokenize --tokenizer " + model.string() + " --text-file " + (dir / "in.txt").string();
    Result r = run(base + " --json --decode");
    CHECK_EQ(r.code, 0);
    try {
        const auto j = nlohmann::json::parse(r.output);
        CHECK_EQ(j["ids"].get<std::vector<int32_t>>(), tok.encode(text, true));
        CHECK_EQ(j["count"].get<size_t>(), tok.encode(text, true).size());
        CHECK_EQ(j["text"].get<std::string>(), "<|begin_of_text|>" + text);
    } catch (const std::exception& e) {
        std::cerr << "tokenize --json output is not JSON: " << e.what() << "\n";
        ++failures();
    }
    r = run(base + " --no-special");
    CHECK_EQ(r.code, 0);
    std::string expected;
    for (int32_t id : tok.encode(text, false))
        expected += (expected.empty() ? "" : " ") + std::to_string(id);
    CHECK_EQ(r.output, expected + "\n");

    // tokenize: bad inputs give one line and exit 1.
    r = run("tokenize --tokenizer " + (dir / "nope").string() + " --text-file "
            + (dir / "in.txt").string(),
        true);
    CHECK_EQ(r.code, 1);
    CHECK(r.output.find("tokenizer.json: cannot open") != std::string::npos);
    writeFile(dir / "bad.txt", "abc \xFF\xFE");
    r = run("tokenize --tokenizer " + model.string() + " --text-file " + (dir / "bad.txt").string(),
        true);
    CHECK_EQ(r.code, 1);
    CHECK(r.output.find("not valid UTF-8 (byte offset 4)") != std::string::npos);
    r = run("tokenize --tokenizer " + model.string() + " --text-file " + (dir / "x.txt").string(),
        true);
    CHECK_EQ(r.code, 1);
    CHECK(r.output.find("cannot open text file") != std::string::npos);

    // make-data: deterministic by seed, the requested count, parseable records.
    const auto a = dir / "a.jsonl", b = dir / "b.jsonl", c = dir / "c.jsonl";
    CHECK_EQ(
        run("make-data --task arithmetic --out " + a.string() + " --count 25 --seed 4").code, 0);
    CHECK_EQ(
        run("make-data --task arithmetic --out " + b.string() + " --count 25 --seed 4").code, 0);
    CHECK_EQ(
        run("make-data --task arithmetic --out " + c.string() + " --count 25 --seed 5").code, 0);
    CHECK_EQ(readFile(a), readFile(b));
    CHECK(readFile(a) != readFile(c));
    std::istringstream lines(readFile(a));
    std::string line;
    int count = 0;
    const auto examples
        = shard::data::generateDemoExamples(shard::data::DemoTask::Arithmetic, 25, 4);
    while (std::getline(lines, line)) {
        const auto j = nlohmann::json::parse(line);
        CHECK_EQ(j["messages"][1]["content"].get<std::string>(), examples[count].answer);
        ++count;
    }
    CHECK_EQ(count, 25);
    CHECK_EQ(
        run("make-data --task copy --format alpaca --out " + a.string() + " --count 3").code, 0);
    CHECK(nlohmann::json::parse(readFile(a).substr(0, readFile(a).find('\n')))
              .contains("instruction"));
    r = run("make-data --task sort --out " + a.string() + " --count 3", true);
    CHECK_EQ(r.code, 1);
    CHECK(r.output.find("unknown demo task 'sort'") != std::string::npos);
    r = run("make-data --task copy --out " + a.string() + " --count 0", true);
    CHECK_EQ(r.code, 1);
    CHECK(r.output.find("--count must be positive") != std::string::npos);
    r = run("make-data --task copy --format text --out " + a.string() + " --count 2", true);
    CHECK_EQ(r.code, 1);
    CHECK(r.output.find("format must be chat, alpaca or preference") != std::string::npos);

    std::filesystem::remove_all(dir);
    return finish("tst_worker_text");
}
