// shard-worker tokenize: prints the ids of a text file's content (for tests and for users
// checking how their data tokenizes).
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "command.h"
#include "tokenizer/tokenizer.h"

namespace {

struct TokenizeOptions {
    std::string tokenizerDir;
    std::string textFile;
    bool json = false;
    bool noSpecial = false;
    bool decode = false;
};

void runTokenize(const TokenizeOptions& o)
{
    const auto tok = shard::tokenizer::Tokenizer::fromFolder(o.tokenizerDir);
    std::ifstream in(o.textFile, std::ios::binary);
    if (!in)
        throw std::runtime_error(o.textFile + ": cannot open text file");
    std::ostringstream buf;
    buf << in.rdbuf();
    const std::vector<int32_t> ids = tok.encode(buf.str(), !o.noSpecial);
    if (o.json) {
        nlohmann::json out = {{"ids", ids}, {"count", ids.size()}};
        if (o.decode)
            out["text"] = tok.decode(ids);
        std::cout << out.dump() << '\n';
        return;
    }
    for (size_t i = 0; i < ids.size(); ++i)
        std::cout << (i ? " " : "") << ids[i];
    std::cout << '\n';
    if (o.decode)
        std::cout << tok.decode(ids) << '\n';
}

shard::worker::CommandRegistration registration([](CLI::App& app) {
    auto opts = std::make_shared<TokenizeOptions>();
    CLI::App* cmd = app.add_subcommand(
        "tokenize", "Print the token ids of a text file (tokenizer.json of a model folder)");
    cmd->add_option("--tokenizer", opts->tokenizerDir,
           "Folder with tokenizer.json (and tokenizer_config.json)")
        ->required();
    cmd->add_option("--text-file", opts->textFile, "UTF-8 text file, encoded as one text")
        ->required();
    cmd->add_flag("--json", opts->json, "Print {\"ids\": [...], \"count\": n}");
    cmd->add_flag("--no-special", opts->noSpecial, "Do not add BOS/EOS as the tokenizer would");
    cmd->add_flag("--decode", opts->decode, "Also print the ids decoded back to text");
    cmd->callback([opts] { runTokenize(*opts); });
});

} // namespace
