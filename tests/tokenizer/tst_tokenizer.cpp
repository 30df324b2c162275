// Tokenizer unit tests without external files: the demo tokenizer (exact vocabulary sizes,
// load back, round trip, special tokens), unsupported types and bad files, invalid UTF-8,
// and linear cost on long inputs.
#include <atomic>
#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include "text_test_util.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/demo_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_text.h"

using namespace shard::testing;
using namespace shard::tokenizer;

namespace {

void testDemoTokenizer()
{
    const auto dir = tempDir("tst_tokenizer_demo");
    for (int vocab : {262, 512, 4096, 16384}) {
        const auto folder = dir / std::to_string(vocab);
        writeDemoTokenizer(folder.string(), vocab);
        const Tokenizer tok = Tokenizer::fromFolder(folder.string());
        CHECK_EQ(tok.vocabSize(), vocab);
        // Every id decodes and the vocabulary has no holes.
        for (int32_t id = 0; id < vocab; ++id)
            if (tok.idToToken(id).empty()) {
                std::cerr << "demo tokenizer " << vocab << ": id " << id << " has no token\n";
                ++failures();
                break;
            }
        CHECK(tok.bosId() >= 0 && tok.eosId() >= 0 && tok.padId() >= 0);
        CHECK(tok.bosId() != tok.eosId() && tok.padId() != tok.eosId());
        CHECK(tok.isSpecial(tok.bosId()));
        for (const std::string text : {"What is 12 + 30? The answer is 42.",
                 "日本語 😀 and code: for (int i = 0; i < n; ++i) {}", "", "  \n\t x  "}) {
            const auto ids = tok.encode(text, true);
            CHECK(!ids.empty() && ids.front() == tok.bosId());
            CHECK_EQ(tok.decode(ids, true), text);
            CHECK_EQ(tok.decode(tok.encode(text, false)), text);
        }
        CHECK(detectChatTemplate(tok) == ChatTemplateKind::Llama3);
    }
    // Merges compress: common words become single tokens with 512 entries.
    const Tokenizer t512 = Tokenizer::fromFolder((dir / "512").string());
    CHECK(t512.encode(" the", false).size() == 1);
    CHECK(t512.encode("What is 12 + 30?", false).size() < 12);
    // Deterministic files.
    CHECK_EQ(
        makeDemoTokenizer(4096).tokenizerJson.dump(), makeDemoTokenizer(4096).tokenizerJson.dump());
    CHECK_THROWS(makeDemoTokenizer(100), "below the minimum");
    std::filesystem::remove_all(dir);
}

void testAddedTokens()
{
    const auto files = makeDemoTokenizer(512);
    const Tokenizer tok = Tokenizer::fromJson(files.tokenizerJson, files.tokenizerConfig);
    const int32_t eot = tok.tokenToId("<|eot_id|>");
    CHECK(eot >= 0);
    const auto ids = tok.encode("x<|eot_id|>y <|eot_id|><|eot_id|>", false);
    CHECK_EQ(std::count(ids.begin(), ids.end(), eot), 3);
    CHECK_EQ(tok.decode(ids), std::string("x<|eot_id|>y <|eot_id|><|eot_id|>"));
    CHECK_EQ(tok.decode(ids, true), std::string("xy "));
    const auto partial = tok.encode("<|eot_id", false);
    CHECK_EQ(std::count(partial.begin(), partial.end(), eot), 0);
    CHECK_THROWS(tok.decode({999999}), "not in the vocabulary");
}

nlohmann::json withField(nlohmann::json j, const std::string& key, nlohmann::json value)
{
    j[key] = std::move(value);
    return j;
}

void testBadFiles()
{
    const auto files = makeDemoTokenizer(300);
    const auto& tj = files.tokenizerJson;
    const auto& cfg = files.tokenizerConfig;
    nlohmann::json unigram = tj;
    unigram["model"]["type"] = "Unigram";
    CHECK_THROWS(Tokenizer::fromJson(unigram, cfg), "unsupported model type 'Unigram'");
    CHECK_THROWS(
        Tokenizer::fromJson(withField(tj, "normalizer", {{"type", "BertNormalizer"}}), cfg),
        "unsupported normalizer type 'BertNormalizer'");
    CHECK_THROWS(
        Tokenizer::fromJson(withField(tj, "pre_tokenizer", {{"type", "Punctuation"}}), cfg),
        "unsupported pre_tokenizer type 'Punctuation'");
    CHECK_THROWS(Tokenizer::fromJson(withField(tj, "decoder", {{"type", "WordPiece"}}), cfg),
        "unsupported decoder type 'WordPiece'");
    CHECK_THROWS(Tokenizer::fromJson(withField(tj, "post_processor", {{"type", "Foo"}}), cfg),
        "unsupported post_processor type 'Foo'");
    nlohmann::json badMerge = tj;
    badMerge["model"]["merges"] = nlohmann::json::array({nlohmann::json::array({"zz", "q"})});
    CHECK_THROWS(Tokenizer::fromJson(badMerge, cfg), "missing from the vocabulary");
    nlohmann::json badRegex = tj;
    badRegex["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
    CHECK_THROWS(Tokenizer::fromJson(badRegex, cfg), "does not compile");
    CHECK_THROWS(Tokenizer::fromJson(tj, withField(cfg, "eos_token", "<|nope|>")),
        "eos_token '<|nope|>' is not in the vocabulary");

    const auto dir = tempDir("tst_tokenizer_bad");
    CHECK_THROWS(Tokenizer::fromFolder((dir / "missing").string()), "cannot open");
    writeFile(dir / "tokenizer.json", "{ not json");
    CHECK_THROWS(Tokenizer::fromFolder(dir.string()), "malformed JSON");
    std::filesystem::remove_all(dir);

    const Tokenizer tok = Tokenizer::fromJson(tj, cfg);
    CHECK_THROWS(tok.encode(std::string("ok \xC3\x28 bad")), "not valid UTF-8 (byte offset 3)");
    CHECK_THROWS(tok.encode(std::string("\xED\xA0\x80")), "not valid UTF-8");
    const nlohmann::json named
        = nlohmann::json::array({{{"name", "tool_use"}, {"template", "{{ '<|im_start|>' }}"}},
            {{"name", "default"}, {"template", "[INST] <<SYS>> {{ x }}"}}});
    CHECK(detectChatTemplate(Tokenizer::fromJson(tj, withField(cfg, "chat_template", named)))
        == ChatTemplateKind::Llama2);
    CHECK_EQ(
        chooseChatTemplate(Tokenizer::fromJson(tj, withField(cfg, "chat_template", named))).source,
        std::string("the tokenizer's chat_template"));
    CHECK_THROWS(detectChatTemplate(Tokenizer::fromJson(
                     tj, withField(cfg, "chat_template", "{{ messages | custom }}"))),
        "--chat-template");
}

double secondsToEncode(const Tokenizer& tok, const std::string& text)
{
    const auto t0 = std::chrono::steady_clock::now();
    const auto ids = tok.encode(text, false);
    CHECK(!ids.empty());
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void testLinearCost()
{
    // One huge pre-token (a letter run) and one huge whitespace run (which merges): 8x the
    // input must cost well under 64x the time (quadratic). The larger run's merge heap outgrows
    // the caches the smaller one fits in, which costs up to ~12x here; the best of two runs damps
    // the noise of a shared machine.
    const auto files = makeDemoTokenizer(4096);
    const Tokenizer tok = Tokenizer::fromJson(files.tokenizerJson, files.tokenizerConfig);
    for (const char fill : {'e', ' '}) {
        const std::string small(125000, fill), large(1000000, fill);
        const double tSmall = std::min(secondsToEncode(tok, small), secondsToEncode(tok, small));
        const double tLarge = std::min(secondsToEncode(tok, large), secondsToEncode(tok, large));
        std::cout << "encode run of '" << fill << "': 125 kB " << tSmall * 1e3 << " ms, 1 MB "
                  << tLarge * 1e3 << " ms\n";
        CHECK(tLarge < 24 * tSmall + 0.05);
    }
}

// A byte-level vocabulary plus whole words, so ignore_merges exposes the pre-token splits.
nlohmann::json byteLevelModel(const std::vector<std::string>& words)
{
    nlohmann::json vocab = nlohmann::json::object();
    int id = 0;
    for (const auto& b : byteToUtf8())
        vocab[b] = id++;
    for (const auto& w : words)
        vocab[w] = id++;
    return {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()},
        {"ignore_merges", true}};
}

void testPreTokenizers()
{
    // GPT-2: ByteLevel with its own regex; a space run keeps its last space for the next word.
    const nlohmann::json gpt2 = {{"model", byteLevelModel({"Hello", "\xC4\xA0world", "'s"})},
        {"pre_tokenizer",
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
        {"decoder", {{"type", "ByteLevel"}}}};
    const Tokenizer g = Tokenizer::fromJson(gpt2, nullptr);
    const int32_t hello = g.tokenToId("Hello"), world = g.tokenToId("\xC4\xA0world");
    const int32_t space = g.tokenToId("\xC4\xA0");
    CHECK_EQ(g.encode("Hello world"), (std::vector<int32_t> {hello, world}));
    CHECK_EQ(g.encode("Hello  world"), (std::vector<int32_t> {hello, space, world}));
    CHECK_EQ(g.encode("Hello's"), (std::vector<int32_t> {hello, g.tokenToId("'s")}));
    CHECK_EQ(g.decode(g.encode("Hello  world's")), std::string("Hello  world's"));
    // add_prefix_space: "Hello" becomes " Hello".
    nlohmann::json prefixed = gpt2;
    prefixed["pre_tokenizer"]["add_prefix_space"] = true;
    prefixed["model"] = byteLevelModel({"\xC4\xA0Hello", "\xC4\xA0world"});
    const Tokenizer p = Tokenizer::fromJson(prefixed, nullptr);
    CHECK_EQ(p.encode("Hello world"),
        (std::vector<int32_t> {p.tokenToId("\xC4\xA0Hello"), p.tokenToId("\xC4\xA0world")}));

    // Metaspace (newer SentencePiece conversions): spaces become "\u2581", prepended once.
    nlohmann::json vocab
        = {{"<unk>", 0}, {"\u2581Hello", 1}, {"\u2581world", 2}, {"\u2581", 3}, {"H", 4}, {"i", 5}};
    const nlohmann::json meta
        = {{"model",
               {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()},
                   {"ignore_merges", true}, {"unk_token", "<unk>"}, {"fuse_unk", true}}},
            {"pre_tokenizer",
                {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"},
                    {"split", true}}},
            {"decoder",
                {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}}}};
    const Tokenizer m = Tokenizer::fromJson(meta, nullptr);
    CHECK_EQ(m.encode("Hello world"), (std::vector<int32_t> {1, 2}));
    CHECK_EQ(m.decode({1, 2}), std::string("Hello world"));
    // Unknown characters fuse into one <unk> (no byte fallback in this model).
    CHECK_EQ(m.encode("Hi \u00e9\u00e9"), (std::vector<int32_t> {3, 4, 5, 3, 0}));
}

void testModelTypeDetection()
{
    // No chat_template and no chat marker tokens: the folder's config.json model_type decides.
    nlohmann::json tj = {{"model", byteLevelModel({})},
        {"added_tokens",
            {{{"id", 300}, {"content", "<s>"}, {"special", true}},
                {{"id", 301}, {"content", "</s>"}, {"special", true}}}},
        {"pre_tokenizer", {{"type", "ByteLevel"}}}, {"decoder", {{"type", "ByteLevel"}}}};
    const auto dir = tempDir("tst_tokenizer_model_type");
    writeFile(dir / "tokenizer.json", tj.dump());
    writeFile(dir / "tokenizer_config.json", R"({"bos_token": "<s>", "eos_token": "</s>"})");
    auto detect = [&](const std::string& configJson) {
        writeFile(dir / "config.json", configJson);
        return detectChatTemplate(Tokenizer::fromFolder(dir.string()));
    };
    CHECK(detect(R"({"model_type": "llama"})") == ChatTemplateKind::Llama2);
    CHECK(detect(R"({"model_type": "qwen2"})") == ChatTemplateKind::ChatML);
    // The choice says where it came from (the Playground and `generate --chat` say it).
    {
        const Tokenizer qwen = Tokenizer::fromFolder(dir.string());
        const ChatTemplateChoice guessed = chooseChatTemplate(qwen);
        CHECK(guessed.kind == ChatTemplateKind::ChatML);
        CHECK_EQ(guessed.source,
            std::string("the tokenizer has no chat_template; guessed from the model type qwen2"));
        const ChatTemplateChoice chosen = chooseChatTemplate(qwen, "llama3");
        CHECK(chosen.kind == ChatTemplateKind::Llama3);
        CHECK_EQ(chosen.source, std::string("--chat-template llama3"));
        CHECK_EQ(chatTemplateTitle(ChatTemplateKind::Llama2), std::string("Llama 2 [INST]"));
    }
    CHECK_THROWS(detect(R"({"model_type": "gpt2"})"), "model type ('gpt2') is not recognised");
    CHECK_THROWS(detect("{ broken"), "model type ('unknown')");
    CHECK_EQ(Tokenizer::fromFolder(dir.string()).modelType(), std::string());
    std::filesystem::remove_all(dir);
}

void testSpecialTokenConfig()
{
    // Llama tokenizers take BOS/EOS from tokenizer_config.json (as transformers does).
    auto files = makeDemoTokenizer(300);
    auto cfg = files.tokenizerConfig;
    cfg["tokenizer_class"] = "LlamaTokenizerFast";
    cfg["add_bos_token"] = false;
    cfg["add_eos_token"] = true;
    const Tokenizer llama = Tokenizer::fromJson(files.tokenizerJson, cfg);
    const auto ids = llama.encode("hi", true);
    CHECK(!ids.empty() && ids.front() != llama.bosId() && ids.back() == llama.eosId());
    // Other classes follow tokenizer.json's post-processor (here: BOS only).
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast";
    const Tokenizer other = Tokenizer::fromJson(files.tokenizerJson, cfg);
    const auto ids2 = other.encode("hi", true);
    CHECK(ids2.front() == other.bosId() && ids2.back() != other.eosId());
    // Without a post-processor the config's flags apply.
    auto tj = files.tokenizerJson;
    tj["post_processor"] = nullptr;
    const Tokenizer bare = Tokenizer::fromJson(tj, cfg);
    const auto ids3 = bare.encode("hi", true);
    CHECK(ids3.front() != bare.bosId() && ids3.back() == bare.eosId());
}

void testThreads()
{
    // One Tokenizer shared by threads (the cache and regex stacks are per tokenizer / thread).
    const auto files = makeDemoTokenizer(4096);
    const Tokenizer tok = Tokenizer::fromJson(files.tokenizerJson, files.tokenizerConfig);
    std::vector<std::string> texts;
    for (int i = 0; i < 200; ++i)
        texts.push_back("sample " + std::to_string(i * 7919) + ": the answer is "
            + std::to_string(i) + std::string(i % 7, ' ') + "日本語 😀\n");
    std::vector<std::vector<int32_t>> expected;
    for (const auto& t : texts)
        expected.push_back(
            Tokenizer::fromJson(files.tokenizerJson, files.tokenizerConfig).encode(t));
    std::atomic<int> mismatches {0};
    std::vector<std::thread> threads;
    for (int k = 0; k < 4; ++k)
        threads.emplace_back([&, k] {
            for (int rep = 0; rep < 20; ++rep)
                for (size_t i = 0; i < texts.size(); ++i) {
                    const size_t j = (i * (k + 1) + rep) % texts.size();
                    if (tok.encode(texts[j]) != expected[j])
                        ++mismatches;
                }
        });
    for (auto& t : threads)
        t.join();
    CHECK_EQ(mismatches.load(), 0);
}

} // namespace

int main()
{
    testDemoTokenizer();
    testAddedTokens();
    testBadFiles();
    testPreTokenizers();
    testSpecialTokenConfig();
    testModelTypeDetection();
    testThreads();
    testLinearCost();
    return finish("tst_tokenizer");
}
