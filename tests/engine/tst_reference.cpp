// The engine against an independent PyTorch implementation (tests/engine/reference_llama.py run
// by Debian's /usr/bin/python3 with python3-torch): same config.json, safetensors and tokens;
// logits, loss, and the loss after one AdamW step must agree to 1e-5 relative in fp32.
#include <cmath>
#include <cstdlib>
#include <fstream>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>

#include "core/model/hf_folder.h"
#include "core/model/llama_model.h"
#include "core/train/model_runner.h"
#include "core/train/single_strategy.h"
#include "core/train/trainer.h"
#include "engine_test_util.h"

using namespace shard;
using namespace shard::engine;
using nlohmann::json;

namespace {

json configFor(const std::string& variant)
{
    json c = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"vocab_size", 64},
        {"hidden_size", 32}, {"intermediate_size", 48}, {"num_hidden_layers", 2},
        {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"max_position_embeddings", 128},
        {"rms_norm_eps", 1e-5}, {"rope_theta", 10000.0}, {"tie_word_embeddings", false},
        {"hidden_act", "silu"}, {"torch_dtype", "float32"}};
    if (variant == "llama31") {
        c["rope_theta"] = 500000.0;
        c["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
            {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 16}};
    } else if (variant == "qwen2") {
        c["architectures"] = {"Qwen2ForCausalLM"};
        c["model_type"] = "qwen2";
        c["tie_word_embeddings"] = true;
        c["num_key_value_heads"] = 1;
        c["rope_theta"] = 1000000.0;
        c["rms_norm_eps"] = 1e-6;
    } else if (variant == "mistral") {
        c["architectures"] = {"MistralForCausalLM"};
        c["model_type"] = "mistral";
        c["sliding_window"] = 4;
    }
    return c;
}

double relErr(double a, double b)
{
    return std::abs(a - b) / std::max(1e-30, std::abs(b));
}

} // namespace

int main()
{
    const std::string dir = shard::test::tempDir("tst_reference");
    const std::string script = std::string(SHARD_SOURCE_DIR) + "/tests/engine/reference_llama.py";
    at::manual_seed(11);
    for (const std::string variant : {"llama31", "qwen2", "mistral"}) {
        const std::string model = dir + "/" + variant;
        std::filesystem::create_directories(model);
        std::ofstream(model + "/config.json") << configFor(variant).dump(2);
        // Weights: large enough that the logits are far from uniform.
        const plan::ModelSpec spec = plan::loadHfConfig(model);
        NamedTensors weights;
        for (const auto& p : plan::parameterTable(spec)) {
            at::Tensor t = at::randn(p.shape) * 0.3;
            if (p.isNormOrBias)
                t = (p.name.find("norm") != std::string::npos ? 1.0 : 0.0)
                    + at::randn(p.shape) * 0.1;
            weights.push_back({p.name, t});
        }
        writeSafetensors(model + "/model.safetensors", weights);

        // Tokens: two rows of 12, with masked prompt positions in the second.
        const int64_t rows = 2, len = 12;
        at::Tensor ids = at::randint(0, spec.vocabSize, {rows, len}, at::kLong);
        at::Tensor labels = ids.clone();
        for (int i = 0; i < 5; ++i)
            labels.index_put_({1, i}, -100);
        json caseJson
            = {{"lr", 1e-2}, {"beta1", 0.9}, {"beta2", 0.95}, {"eps", 1e-8}, {"weight_decay", 0.1}};
        std::vector<std::vector<int64_t>> idRows, labelRows;
        std::ofstream data(model + "/data.jsonl");
        for (int64_t r = 0; r < rows; ++r) {
            std::vector<int64_t> a(ids[r].data_ptr<int64_t>(), ids[r].data_ptr<int64_t>() + len);
            std::vector<int64_t> l(
                labels[r].data_ptr<int64_t>(), labels[r].data_ptr<int64_t>() + len);
            idRows.push_back(a);
            labelRows.push_back(l);
            data << json {{"input_ids", a}, {"labels", l}}.dump() << "\n";
        }
        data.close();
        caseJson["input_ids"] = idRows;
        caseJson["labels"] = labelRows;
        std::ofstream(model + "/case.json") << caseJson.dump();

        // Engine logits through the production path (folder -> strategy -> runner).
        HfModelFolder folder = openHfModelFolder(model);
        LlamaModel m(folder.spec);
        SingleStrategy single(StrategyOptions {});
        single.setup(m, [&](const Param& p) { return folder.weights->tensor(p.info.name); });
        ModelRunner runner(m, single, ForwardConfig {});
        at::Tensor logits;
        {
            at::NoGradGuard noGrad;
            logits = runner.logits(ids).contiguous();
        }

        // Engine loss and loss after one AdamW step: two steps of the training loop over the same
        // two rows (no shuffle, constant schedule, no clipping).
        protocol::RunSpec rs;
        rs.model = model;
        rs.data = {model + "/data.jsonl"};
        rs.steps = 2;
        rs.microBatch = rows;
        rs.seqLen = len;
        rs.lr = 1e-2;
        rs.schedule = "constant";
        rs.clip = 0;
        rs.weightDecay = 0.1;
        rs.shuffle = false;
        rs.threads = 1;
        Trainer trainer(rs, TrainerOptions {false, false, false});
        TrainResult result = trainer.run();

        const std::string out = model + "/reference.json";
        const std::string cmd
            = "/usr/bin/python3 " + script + " " + model + " " + model + "/case.json " + out;
        const int rc = std::system(cmd.c_str());
        T_CHECK_MSG(rc == 0, variant + ": reference script failed: " + cmd);
        if (rc != 0)
            continue;
        json ref = json::parse(std::ifstream(out));
        const auto refLogits = ref["logits"].get<std::vector<double>>();
        T_CHECK(static_cast<int64_t>(refLogits.size()) == logits.numel());
        const float* lp = logits.data_ptr<float>();
        double worst = 0.0, maxAbs = 0.0;
        for (size_t i = 0; i < refLogits.size(); ++i) {
            worst = std::max(worst, std::abs(lp[i] - refLogits[i]));
            maxAbs = std::max(maxAbs, std::abs(refLogits[i]));
        }
        std::printf("%s: max |logit diff| %.3g (max |logit| %.3g); loss %.9g vs %.9g; after AdamW "
                    "%.9g vs %.9g\n",
            variant.c_str(), worst, maxAbs, result.losses[0], ref["loss"].get<double>(),
            result.losses[1], ref["loss_after"].get<double>());
        T_CHECK_MSG(worst <= 1e-5 * maxAbs, variant + ": logits differ beyond 1e-5 relative");
        T_CHECK_MSG(
            relErr(result.losses[0], ref["loss"].get<double>()) < 1e-5, variant + ": loss differs");
        T_CHECK_MSG(relErr(result.losses[1], ref["loss_after"].get<double>()) < 1e-5,
            variant + ": loss after one AdamW step differs");
        // The step must have changed the loss by far more than the tolerance.
        T_CHECK(relErr(result.losses[1], result.losses[0]) > 1e-3);
    }
    std::filesystem::remove_all(dir);
    return shard::test::finish("tst_reference");
}
