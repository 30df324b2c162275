#!/usr/bin/env bash
# Regenerates the README's pictures from real runs: a tiny model fine-tuned twice (two ranks,
# ZeRO-3, two learning rates), one run that fails at start (an empty model folder), then every
# studio page rendered offscreen in the light and the dark theme into docs/screenshots/.
# Needs a build (build/release by default: BUILD=DIR to change it). About two minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build/release}
worker=$PWD/$build/engine/worker/shard-worker
shard=$PWD/$build/app/shard
studio=$PWD/$build/app/studio/shard-studio
for b in "$worker" "$shard" "$studio"; do
    [[ -x $b ]] || { echo "screenshots: $b is not built (cmake --build --preset release)" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export SHARD_STORE=$work/store.sqlite SHARD_WORKER=$worker QT_QPA_PLATFORM=offscreen
export XDG_CONFIG_HOME=$work/config # the studio's settings stay out of the user's
"$worker" init-model --preset tiny-1m --out "$work/model" --seed 1 >/dev/null
"$worker" make-data --task copy --count 2000 --out "$work/copy.jsonl" >/dev/null
for lr in 3e-3 1e-3; do
    "$shard" run --name "copy lr $lr" --run-dir "$work/runs/lr-$lr" -- --model "$work/model" \
        --data "$work/copy.jsonl" --steps 60 --micro-batch 8 --seq-len 64 --lr "$lr" \
        --warmup 5 --strategy zero3 --nproc-per-node 2 --checkpoint-every 30 >/dev/null
done
mkdir -p "$work/empty-model"
"$shard" run --no-preflight --name "fails at start" --run-dir "$work/runs/fails" -- --model "$work/empty-model" \
    --data "$work/copy.jsonl" --steps 10 >/dev/null 2>&1 || true
out=docs/screenshots
mkdir -p "$out"
shoot() { # name, then studio arguments
    local name=$1
    shift
    "$studio" --screenshot "$out/$name.png" --size 1440x900 "$@"
    "$studio" --screenshot "$out/$name-dark.png" --size 1440x900 --theme dark "$@"
}
shoot plan --page plan
shoot launch --page launch
shoot monitor --page monitor --run 1
shoot monitor-failed --page monitor --run "$work/runs/fails"
shoot runs --page runs
shoot compare --page compare --run 1,2
shoot hosts --page hosts
# playground.png is rendered from a real pretrained model (stories260k); see the README.
ls -l "$out"
