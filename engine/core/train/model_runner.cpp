// Custom autograd functions for unit hooks and activation checkpointing (docs/ARCHITECTURE.md,
// "Measured on Debian's LibTorch 1.13": nested torch::autograd::grad in backward works).
#include "model_runner.h"

#include <mutex>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include "core/model/fused_ops.h"
#include "core/model/lora.h"
#include "core/model/tensor_parallel.h"
#include "plan/run_spec_bridge.h"

namespace shard::engine {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The block's forward: whole, or this rank's part of it over the tensor-parallel group.
at::Tensor runBlock(const LlamaModel& model, const std::vector<at::Tensor>& w, const at::Tensor& x,
    const RopeTables& rope, dist::Communicator* tensorParallel, bool sequenceParallel)
{
    return tensorParallel ? tp::block(model, w, x, rope, *tensorParallel, sequenceParallel)
                          : model.block(w, x, rope);
}

struct BlockCall : torch::CustomClassHolder {
    const LlamaModel* model = nullptr;
    const RopeTables* rope = nullptr;
    dist::Communicator* tensorParallel = nullptr;
    bool sequenceParallel = false;
    at::ScalarType dtype = at::kFloat;
    lora::Adapters::Context dropout; // the forward's LoRA dropout context, again in a recompute

    at::Tensor run(const at::Tensor& x, const std::vector<at::Tensor>& weights) const
    {
        const lora::Adapters* adapters = model->adapters();
        if (adapters)
            adapters->setContext(dropout);
        std::vector<at::Tensor> w;
        w.reserve(weights.size());
        for (const auto& t : weights)
            w.push_back(fused::cast(t, dtype));
        at::Tensor y = runBlock(*model, w, x, *rope, tensorParallel, sequenceParallel);
        if (adapters)
            adapters->setContext({});
        return y;
    }
};

struct HookCall : torch::CustomClassHolder {
    Strategy* strategy = nullptr;
    int unit = 0;
};

// Saves only the block input (and references to the weights, which the strategy keeps or
// refills); recomputes the block with grad enabled in backward.
struct CheckpointedBlock : torch::autograd::Function<CheckpointedBlock> {
    static at::Tensor forward(AutogradContext* ctx, at::Tensor x, at::TensorList weights,
        c10::intrusive_ptr<BlockCall> call)
    {
        variable_list saved {x};
        for (const auto& w : weights)
            saved.push_back(w);
        ctx->save_for_backward(saved);
        ctx->saved_data["call"] = c10::IValue::make_capsule(call);
        at::NoGradGuard noGrad;
        return call->run(x, weights.vec());
    }

    static variable_list backward(AutogradContext* ctx, variable_list gradOutputs)
    {
        auto saved = ctx->get_saved_variables();
        auto call
            = c10::static_intrusive_pointer_cast<BlockCall>(ctx->saved_data["call"].toCapsule());
        std::vector<at::Tensor> inputs;
        inputs.reserve(saved.size());
        for (const auto& t : saved)
            inputs.push_back(t.detach().requires_grad_(t.requires_grad()));
        at::Tensor y;
        {
            at::AutoGradMode enable(true);
            y = call->run(inputs[0], std::vector<at::Tensor>(inputs.begin() + 1, inputs.end()));
        }
        variable_list wrt;
        std::vector<int> slot;
        for (size_t i = 0; i < inputs.size(); ++i)
            if (inputs[i].requires_grad()) {
                wrt.push_back(inputs[i]);
                slot.push_back(static_cast<int>(i));
            }
        variable_list out(inputs.size() + 1); // + the non-tensor `call` argument
        if (wrt.empty())
            return out;
        auto grads = torch::autograd::grad({y}, wrt, {gradOutputs[0]}, /*retain_graph=*/false,
            /*create_graph=*/false, /*allow_unused=*/true);
        for (size_t i = 0; i < slot.size(); ++i)
            out[slot[i]] = grads[i];
        return out;
    }
};

// Identity whose backward announces that the unit's backward is about to run.
struct PreBackwardMarker : torch::autograd::Function<PreBackwardMarker> {
    static at::Tensor forward(AutogradContext* ctx, at::Tensor x, c10::intrusive_ptr<HookCall> call)
    {
        ctx->saved_data["call"] = c10::IValue::make_capsule(call);
        return x.view_as(x);
    }
    static variable_list backward(AutogradContext* ctx, variable_list g)
    {
        auto call
            = c10::static_intrusive_pointer_cast<HookCall>(ctx->saved_data["call"].toCapsule());
        call->strategy->preBackward(call->unit);
        return {g[0], at::Tensor()};
    }
};

// Identity on the block input whose backward runs once the block's backward is done.
struct PostBackwardMarker : torch::autograd::Function<PostBackwardMarker> {
    static at::Tensor forward(
        AutogradContext* ctx, at::Tensor x, at::Tensor dummy, c10::intrusive_ptr<HookCall> call)
    {
        ctx->saved_data["call"] = c10::IValue::make_capsule(call);
        (void)dummy;
        return x.view_as(x);
    }
    static variable_list backward(AutogradContext* ctx, variable_list g)
    {
        auto call
            = c10::static_intrusive_pointer_cast<HookCall>(ctx->saved_data["call"].toCapsule());
        call->strategy->postBackward(call->unit);
        return {g[0], at::Tensor(), at::Tensor()};
    }
};

c10::intrusive_ptr<HookCall> hookCall(Strategy& s, int unit)
{
    auto c = c10::make_intrusive<HookCall>();
    c->strategy = &s;
    c->unit = unit;
    return c;
}

std::vector<at::Tensor> cast(std::vector<at::Tensor> w, at::ScalarType dtype)
{
    for (auto& t : w)
        if (t.defined()) // undefined: another pipeline stage's
            t = fused::cast(t, dtype);
    return w;
}

} // namespace

ModelRunner::ModelRunner(LlamaModel& model, Strategy& strategy, ForwardConfig config)
    : m_model(model)
    , m_strategy(strategy)
    , m_config(config)
{
    m_dummy = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(config.device))
                  .requires_grad_(true);
}

const RopeTables& ModelRunner::ropeFor(int64_t seqLen)
{
    if (seqLen > m_ropeLen || !m_rope.cos.defined()) {
        m_rope = m_model.rope(seqLen, m_config.computeDtype);
        m_rope.cos = m_rope.cos.to(m_config.device);
        m_rope.sin = m_rope.sin.to(m_config.device);
        m_ropeLen = seqLen;
    }
    return m_rope;
}

at::Tensor ModelRunner::trunk(const at::Tensor& hostIds, std::vector<at::Tensor>& root,
    const at::Tensor& input, std::pair<int64_t, int64_t> layers)
{
    const at::Tensor ids = hostIds.to(m_config.device);
    const bool hooks = m_strategy.wantsUnitHooks();
    const bool grad = at::GradMode::is_enabled();
    const RopeTables& rope = ropeFor(ids.size(1));
    if (hooks)
        m_strategy.preForward(0);
    // LoRA dropout: one seed per training forward from the default generator (which checkpoints
    // save), so a resumed run draws the masks the uninterrupted one drew.
    const lora::Adapters* adapters = m_model.adapters();
    lora::Adapters::Context dropout;
    dropout.training = grad;
    dropout.off = m_adaptersOff;
    if (adapters && grad && adapters->config().dropout > 0) {
        at::Generator gen = at::detail::getDefaultCPUGenerator();
        std::lock_guard<std::mutex> lock(gen.mutex());
        dropout.seed = at::check_generator<at::CPUGeneratorImpl>(gen)->random64();
    }
    root = cast(m_strategy.unitWeights(0), m_config.computeDtype);
    dist::Communicator* vocab = vocabularyGroup();
    const bool sp = sequenceParallel();
    at::Tensor x = input.defined() ? input
        : vocab                    ? tp::embed(m_model, root, ids, *vocab, sp)
                                   : m_model.embed(root, ids);
    const auto [first, end] = layers;
    const int endUnit = end < 0 ? m_model.numUnits() : static_cast<int>(end) + 1;
    for (int u = static_cast<int>(first) + 1; u < endUnit; ++u) {
        if (hooks && grad)
            x = PostBackwardMarker::apply(x, m_dummy, hookCall(m_strategy, u));
        if (hooks)
            m_strategy.preForward(u);
        std::vector<at::Tensor> w = m_strategy.unitWeights(u);
        dropout.layer = u - 1;
        if (adapters)
            adapters->setContext(dropout);
        if (m_config.checkpointing && grad) {
            auto call = c10::make_intrusive<BlockCall>();
            call->model = &m_model;
            call->rope = &m_rope;
            call->tensorParallel = m_strategy.tensorParallelGroup();
            call->sequenceParallel = sp;
            call->dtype = m_config.computeDtype;
            call->dropout = dropout;
            x = CheckpointedBlock::apply(x, at::TensorList(w), call);
        } else {
            x = runBlock(m_model, cast(std::move(w), m_config.computeDtype), x, rope,
                m_strategy.tensorParallelGroup(), sp);
        }
        if (hooks)
            m_strategy.postForward(u);
        if (hooks && grad)
            x = PreBackwardMarker::apply(x, hookCall(m_strategy, u));
    }
    if (adapters)
        adapters->setContext({}); // no dropout outside this forward (generation, evaluation)
    return x;
}

at::Tensor ModelRunner::endRoot(at::Tensor out)
{
    const bool hooks = m_strategy.wantsUnitHooks();
    if (hooks)
        m_strategy.postForward(0);
    if (hooks && at::GradMode::is_enabled())
        out = PreBackwardMarker::apply(out, hookCall(m_strategy, 0));
    return out;
}

dist::Communicator* ModelRunner::vocabularyGroup() const
{
    dist::Communicator* tp = m_strategy.tensorParallelGroup();
    return tp && plan::splitsVocabulary(m_model.spec(), tp->worldSize()) ? tp : nullptr;
}

bool ModelRunner::sequenceParallel() const
{
    // plan::tensorParallelRefusal keeps sequence parallel to a vocabulary split over the group.
    return m_config.sequenceParallel && vocabularyGroup();
}

at::Tensor ModelRunner::logits(const at::Tensor& ids)
{
    std::vector<at::Tensor> root;
    const at::Tensor x = trunk(ids, root);
    dist::Communicator* vocab = vocabularyGroup();
    return endRoot(
        vocab ? tp::logits(m_model, root, x, *vocab, sequenceParallel()) : m_model.head(root, x));
}

LossSum ModelRunner::lossSum(const at::Tensor& ids, const at::Tensor& labels, double gradScale)
{
    return stage(StagePart {}, ids, {}, labels, gradScale).loss;
}

StageOut ModelRunner::stage(const StagePart& part, const at::Tensor& ids, const at::Tensor& input,
    const at::Tensor& labels, double gradScale)
{
    StageOut out;
    std::vector<at::Tensor> root;
    const at::Tensor x = trunk(ids, root, part.first ? at::Tensor() : input, part.layers);
    if (!part.last) {
        out.hidden = endRoot(x);
        return out;
    }
    if (part.logProbs) {
        out.tokenLogProbs = headLogProbs(root, x, labels);
        return out;
    }
    // The token count comes from the labels where they are (the host, for the loop's batches):
    // no device read.
    const int64_t tokens = countLossTokens(labels);
    const at::Tensor onDevice = labels.to(m_config.device);
    dist::Communicator* vocab = vocabularyGroup();
    out.loss = vocab
        ? tp::headLossSum(m_model, root, x, onDevice, gradScale, *vocab, sequenceParallel())
        : m_model.headLossSum(root, x, onDevice, gradScale);
    out.loss.tokens = tokens;
    // Under zero3 the root is gathered again by this marker's backward, before the loss's.
    out.loss.sum = endRoot(out.loss.sum);
    return out;
}

at::Tensor ModelRunner::tokenLogProbs(const at::Tensor& ids, const at::Tensor& labels)
{
    std::vector<at::Tensor> root;
    const at::Tensor x = trunk(ids, root);
    return headLogProbs(root, x, labels);
}

at::Tensor ModelRunner::headLogProbs(
    std::vector<at::Tensor>& root, const at::Tensor& x, const at::Tensor& labels)
{
    const at::Tensor onDevice = labels.to(m_config.device);
    dist::Communicator* vocab = vocabularyGroup();
    return endRoot(vocab ? tp::tokenLogProbs(m_model, root, x, onDevice, *vocab, sequenceParallel())
                         : m_model.headTokenLogProbs(root, x, onDevice));
}

} // namespace shard::engine
