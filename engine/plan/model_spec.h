// Model architecture description shared by the planner and the engine: parsed from a Hugging
// Face config.json or taken from a built-in preset. No Qt, no Torch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace shard::plan {

// QLoRA's NF4 format (engine/core/model/nf4.h, whose sizes these are): values quantised in blocks
// of kNf4Block along a row, each block's fp32 absmax, double-quantised in blocks of
// kNf4NestedBlock absmax. The planner's bytes and the engine's refusals count with them.
inline constexpr int64_t kNf4Block = 64;
inline constexpr int64_t kNf4NestedBlock = 256;

struct RopeScaling {
    std::string type; // "" (none), "llama3", "linear", "dynamic", "yarn"
    double factor = 1.0;
    double lowFreqFactor = 1.0;
    double highFreqFactor = 4.0;
    int64_t originalMaxPositionEmbeddings = 0;
};

// Mixture-of-experts fields (DeepSeek-V3 style); planning only, the engine refuses MoE.
struct MoeSpec {
    int64_t routedExperts = 0;
    int64_t expertsPerToken = 0;
    int64_t sharedExperts = 0;
    int64_t moeIntermediateSize = 0;
    int64_t firstDenseLayers = 0; // first_k_dense_replace
    // Multi-head latent attention (MLA)
    int64_t qLoraRank = 0;
    int64_t kvLoraRank = 0;
    int64_t qkNopeHeadDim = 0;
    int64_t qkRopeHeadDim = 0;
    int64_t vHeadDim = 0;
    int64_t mtpLayers = 0; // num_nextn_predict_layers (not counted in the trained model)
};

struct ModelSpec {
    std::string name;      // preset name or folder name
    std::string modelType; // HF model_type: llama, mistral, qwen2, qwen3, deepseek_v3
    int64_t vocabSize = 0;
    int64_t hiddenSize = 0;
    int64_t intermediateSize = 0;
    int64_t numLayers = 0;
    int64_t numHeads = 0;
    int64_t numKvHeads = 0;
    int64_t headDim = 0; // hidden/heads unless config says otherwise
    int64_t maxPositionEmbeddings = 0;
    double rmsNormEps = 1e-5;
    double ropeTheta = 10000.0;
    RopeScaling ropeScaling;
    bool tieWordEmbeddings = false;
    bool attentionBias = false; // q/k/v bias (Qwen2; Llama/Qwen3 attention_bias=true)
    bool outputBias = false;    // o_proj bias (Llama/Qwen3 attention_bias=true; never Qwen2)
    bool qkNorm = false;        // per-head RMSNorm on q and k (Qwen3)
    int64_t slidingWindow = 0;  // Mistral/Qwen2 sliding_window when in use; 0 = full attention
    std::string torchDtype = "bfloat16"; // config.json "torch_dtype" of the stored weights
    int64_t bosTokenId = -1;
    int64_t eosTokenId = -1;
    std::optional<MoeSpec> moe;

    bool isMoe() const { return moe.has_value(); }
    int64_t qDim() const { return numHeads * headDim; }    // q_proj rows
    int64_t kvDim() const { return numKvHeads * headDim; } // k_proj / v_proj rows
};

// One parameter tensor exactly as Hugging Face names and shapes it.
struct ParamInfo {
    std::string name;           // e.g. "model.layers.0.self_attn.q_proj.weight"
    std::vector<int64_t> shape; // e.g. {4096, 4096}
    int64_t layer = -1;         // transformer block index, -1 for root (embeddings, norm, head)
    bool isNormOrBias = false;  // excluded from weight decay
    int64_t numel() const;
};

// Throws std::runtime_error naming the offending field ("config.json: 'hidden_size' must be ...").
ModelSpec parseHfConfig(const nlohmann::json& config, const std::string& name = {});
ModelSpec loadHfConfig(const std::string& folderOrFile);
nlohmann::json toHfConfig(const ModelSpec& spec);

const std::vector<ModelSpec>& presets();
std::optional<ModelSpec> findPreset(const std::string& name);
// Preset names closest to `name` (edit distance), for "did you mean" messages.
std::vector<std::string> closePresetNames(const std::string& name, size_t max = 3);
// A preset name or a path to a folder holding config.json.
ModelSpec resolveModel(const std::string& presetOrPath);

// Every parameter in Hugging Face state-dict order: embed_tokens, then per block self_attn
// (q, k, v, o [+ bias], q_norm, k_norm), mlp (gate, up, down), input_layernorm,
// post_attention_layernorm; then model.norm and lm_head (absent when tied).
std::vector<ParamInfo> parameterTable(const ModelSpec& spec);
int64_t parameterCount(const ModelSpec& spec);
// Parameters that touch one token (MoE: shared + routed experts per token); = count when dense.
int64_t activeParameterCount(const ModelSpec& spec);
// Human-readable count, e.g. "6.74B", "15.7M".
std::string formatParamCount(int64_t count);

} // namespace shard::plan
