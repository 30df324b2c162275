// Float64 gradient check of every layer type (embedding, RMSNorm, attention with RoPE / GQA /
// q-k-v bias / q-k norm / llama3 rope scaling / sliding window, SwiGLU MLP, block, head, loss)
// against central finite differences; checkpointed blocks against plain ones; and the order of
// the strategy's unit hooks.
#include <cmath>
#include <functional>
#include <random>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "core/model/chunked_loss.h"
#include "core/model/llama_model.h"
#include "core/train/model_runner.h"
#include "core/train/single_strategy.h"
#include "engine_test_util.h"

using namespace shard;
using namespace shard::engine;

namespace {

plan::ModelSpec tinySpec(const std::string& variant)
{
    plan::ModelSpec s;
    s.name = "grad-" + variant;
    s.modelType = "llama";
    s.vocabSize = 11;
    s.hiddenSize = 8;
    s.intermediateSize = 12;
    s.numLayers = 2;
    s.numHeads = 4;
    s.numKvHeads = 2; // GQA
    s.headDim = 2;
    s.maxPositionEmbeddings = 64;
    s.rmsNormEps = 1e-6;
    s.ropeTheta = 10000.0;
    if (variant == "qwen2") {
        s.modelType = "qwen2";
        s.attentionBias = true;
        s.tieWordEmbeddings = true;
        s.slidingWindow = 3;
    } else if (variant == "llama31") {
        s.headDim = 4;
        s.numHeads = 2;
        s.numKvHeads = 1;
        s.ropeScaling = {"llama3", 8.0, 1.0, 4.0, 8};
        s.ropeTheta = 500.0;
    } else if (variant == "qwen3") {
        s.modelType = "qwen3";
        s.qkNorm = true;
        s.outputBias = true;
        s.attentionBias = true;
    }
    return s;
}

// Checks d(sum(f() * R))/d(input) for a sample of elements of each input against central
// differences. Inputs are double leaves with requires_grad.
void gradcheck(const std::string& what, std::vector<at::Tensor> inputs,
    const std::function<at::Tensor(const std::vector<at::Tensor>&)>& f)
{
    at::Tensor out = f(inputs);
    at::Tensor R = at::randn_like(out);
    at::Tensor scalar = (out * R).sum();
    std::vector<at::Tensor> wrt;
    for (auto& t : inputs)
        if (t.requires_grad())
            wrt.push_back(t);
    scalar.backward();
    std::mt19937 rng(1);
    const double eps = 1e-6;
    at::NoGradGuard noGrad;
    for (size_t i = 0; i < wrt.size(); ++i) {
        at::Tensor t = wrt[i];
        // An input the function does not use has no gradient: it must then be zero numerically.
        at::Tensor g = t.grad().defined() ? t.grad() : at::zeros_like(t);
        auto flat = t.view({-1});
        const int64_t n = flat.numel();
        for (int s = 0; s < std::min<int64_t>(n, 12); ++s) {
            const int64_t k = n <= 12 ? s : static_cast<int64_t>(rng() % n);
            const double orig = flat[k].item<double>();
            flat[k].fill_(orig + eps);
            const double up = (f(inputs) * R).sum().item<double>();
            flat[k].fill_(orig - eps);
            const double down = (f(inputs) * R).sum().item<double>();
            flat[k].fill_(orig);
            const double numeric = (up - down) / (2 * eps);
            const double analytic = g.view({-1})[k].item<double>();
            const double err = std::abs(numeric - analytic) / std::max(1.0, std::abs(numeric));
            T_CHECK_MSG(err < 1e-6,
                what + ": input " + std::to_string(i) + " element " + std::to_string(k)
                    + " analytic " + std::to_string(analytic) + " numeric "
                    + std::to_string(numeric));
        }
    }
}

std::vector<at::Tensor> leaves(const std::vector<at::Tensor>& ts)
{
    std::vector<at::Tensor> out;
    for (const auto& t : ts)
        out.push_back(t.detach().clone().requires_grad_(true));
    return out;
}

// A strategy that records the hook order (what shard_fsdp relies on).
class RecordingStrategy : public SingleStrategy {
public:
    using SingleStrategy::SingleStrategy;
    bool wantsUnitHooks() const override { return true; }
    void preForward(int u) override { log.push_back("F+" + std::to_string(u)); }
    void postForward(int u) override { log.push_back("F-" + std::to_string(u)); }
    void preBackward(int u) override { log.push_back("B+" + std::to_string(u)); }
    void postBackward(int u) override
    {
        log.push_back("B-" + std::to_string(u));
        // The post-backward point must see the unit's parameter gradients complete.
        for (const auto& p : model->unit(u).params)
            if (!p.value.grad().defined())
                log.push_back("missing grad " + p.info.name);
    }
    std::vector<std::string> log;
    LlamaModel* model = nullptr;
};

} // namespace

int main()
{
    at::manual_seed(0);
    for (const std::string variant : {"llama", "qwen2", "llama31", "qwen3"}) {
        LlamaModel model(tinySpec(variant));
        model.materialize(at::kDouble);
        for (Param* p : model.params())
            p->value.normal_(0.0, 0.5);
        const auto& spec = model.spec();
        const int64_t b = 2, s = 5, h = spec.hiddenSize;
        RopeTables rope = model.rope(s, at::kDouble);
        auto block = leaves([&] {
            std::vector<at::Tensor> w;
            for (auto& p : model.unit(1).params)
                w.push_back(p.value);
            return w;
        }());
        auto root = leaves([&] {
            std::vector<at::Tensor> w;
            for (auto& p : model.unit(0).params)
                w.push_back(p.value);
            return w;
        }());
        at::Tensor x = at::randn({b, s, h}, at::kDouble).requires_grad_(true);
        auto withX = [&](std::vector<at::Tensor> w) {
            w.insert(w.begin(), x);
            return w;
        };
        auto rest = [](const std::vector<at::Tensor>& in) {
            return std::vector<at::Tensor>(in.begin() + 1, in.end());
        };
        const int normIdx = model.blockLayout().inputNorm;
        gradcheck(variant + " rmsnorm", {x, block[normIdx]},
            [&](const std::vector<at::Tensor>& in) { return model.rmsNorm(in[0], in[1]); });
        for (auto& t : block)
            t.mutable_grad() = at::Tensor();
        x.mutable_grad() = at::Tensor();
        gradcheck(variant + " attention", withX(block), [&](const std::vector<at::Tensor>& in) {
            return model.attention(rest(in), in[0], rope);
        });
        for (auto& t : block)
            t.mutable_grad() = at::Tensor();
        x.mutable_grad() = at::Tensor();
        gradcheck(variant + " mlp", withX(block),
            [&](const std::vector<at::Tensor>& in) { return model.mlp(rest(in), in[0]); });
        for (auto& t : block)
            t.mutable_grad() = at::Tensor();
        x.mutable_grad() = at::Tensor();
        gradcheck(variant + " block", withX(block),
            [&](const std::vector<at::Tensor>& in) { return model.block(rest(in), in[0], rope); });
        x.mutable_grad() = at::Tensor();
        gradcheck(variant + " head", withX(root),
            [&](const std::vector<at::Tensor>& in) { return model.head(rest(in), in[0]); });
        for (auto& t : root)
            t.mutable_grad() = at::Tensor();
        at::Tensor ids = at::randint(0, spec.vocabSize, {b, s}, at::kLong);
        gradcheck(variant + " embedding", root,
            [&](const std::vector<at::Tensor>& in) { return model.embed(in, ids); });
        at::Tensor logits = at::randn({b, s, spec.vocabSize}, at::kDouble).requires_grad_(true);
        at::Tensor labels = ids.clone();
        labels.index_put_({0, 2}, -100);
        gradcheck(variant + " loss", {logits},
            [&](const std::vector<at::Tensor>& in) { return nextTokenLossSum(in[0], labels).sum; });
        T_CHECK(nextTokenLossSum(logits, labels).tokens == b * (s - 1) - 1);

        // The fused head and loss, in chunks of 3 of the 8 rows (and in one): its gradients are
        // made in the forward and rescaled to the gradient the backward receives.
        const int64_t rows = b * (s - 1);
        at::Tensor hRows = at::randn({rows, h}, at::kDouble).requires_grad_(true);
        at::Tensor wHead = at::randn({spec.vocabSize, h}, at::kDouble).requires_grad_(true);
        at::Tensor targets = labels.narrow(1, 1, s - 1).reshape({-1}).clone();
        for (int64_t chunk : {int64_t(3), rows}) {
            gradcheck(variant + " fused head loss in chunks of " + std::to_string(chunk),
                {hRows, wHead}, [&](const std::vector<at::Tensor>& in) {
                    return linearCrossEntropySum(in[0], in[1], targets, 0.25, chunk);
                });
            hRows.mutable_grad() = at::Tensor();
            wHead.mutable_grad() = at::Tensor();
            // The same sum and gradients as the unfused head and loss.
            at::Tensor fused = linearCrossEntropySum(hRows, wHead, targets, 1.0 / 7, chunk);
            (fused / 7).backward();
            const at::Tensor fusedH = hRows.grad().clone(), fusedW = wHead.grad().clone();
            hRows.mutable_grad() = at::Tensor();
            wHead.mutable_grad() = at::Tensor();
            at::Tensor plain = at::cross_entropy_loss(
                at::linear(hRows, wHead), targets, {}, at::Reduction::Sum, -100);
            (plain / 7).backward();
            T_CHECK_MSG(std::fabs(fused.item<double>() - plain.item<double>()) < 1e-12,
                variant + ": fused loss differs from the unfused one");
            T_CHECK_MSG(at::allclose(fusedH, hRows.grad(), 1e-12, 1e-14)
                    && at::allclose(fusedW, wHead.grad(), 1e-12, 1e-14),
                variant + ": fused gradients differ from the unfused ones");
            hRows.mutable_grad() = at::Tensor();
            wHead.mutable_grad() = at::Tensor();
        }

        // Whole model through the runner: checkpointing gives the same gradients; hooks fire in
        // the documented order.
        auto runOnce = [&](bool checkpointing, bool recording, std::vector<std::string>* log) {
            StrategyOptions so;
            std::unique_ptr<SingleStrategy> strat = recording
                ? std::make_unique<RecordingStrategy>(so)
                : std::make_unique<SingleStrategy>(so);
            LlamaModel m(model.spec());
            strat->setup(m, [&](const Param& p) { return model.param(p.info.name).value; });
            if (recording)
                static_cast<RecordingStrategy*>(strat.get())->model = &m;
            for (Param* p : m.params())
                p->value = p->value.to(at::kDouble).detach().requires_grad_(true);
            ModelRunner runner(m, *strat, ForwardConfig {at::kDouble, checkpointing});
            LossSum ls = runner.lossSum(ids, labels);
            ls.sum.backward();
            if (recording)
                strat->postBackward(0);
            std::vector<at::Tensor> grads;
            for (Param* p : m.params())
                grads.push_back(p->value.grad().clone());
            if (log)
                *log = static_cast<RecordingStrategy*>(strat.get())->log;
            return std::make_pair(ls.sum.item<double>(), grads);
        };
        auto plain = runOnce(false, false, nullptr);
        auto ckpt = runOnce(true, false, nullptr);
        T_CHECK_MSG(plain.first == ckpt.first, variant + ": checkpointed loss differs");
        for (size_t i = 0; i < plain.second.size(); ++i)
            T_CHECK_MSG(at::allclose(plain.second[i], ckpt.second[i], 1e-12, 1e-14),
                variant + ": checkpointed gradient differs for parameter " + std::to_string(i));
        for (bool checkpointing : {false, true}) {
            std::vector<std::string> log;
            auto hooked = runOnce(checkpointing, true, &log);
            T_CHECK(hooked.first == plain.first);
            const std::vector<std::string> expected = {
                "F+0", "F+1", "F-1", "F+2", "F-2", "F-0", "B+0", "B+2", "B-2", "B+1", "B-1", "B-0"};
            std::string got;
            for (auto& e : log)
                got += e + " ";
            T_CHECK_MSG(log == expected, variant + ": hook order " + got);
            for (size_t i = 0; i < plain.second.size(); ++i)
                T_CHECK(at::allclose(plain.second[i], hooked.second[i], 1e-12, 1e-14));
        }
    }
    return shard::test::finish("tst_model_gradcheck");
}
