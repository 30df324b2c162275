#!/bin/sh
# A small real workload with the `shard-worker launch` interface, for launcher tests while (or
# where) the real engine is not built: node 0 writes metric and event records to the run
# directory like rank 0 does; every node writes its pid and its arguments (one per line) so
# tests can check what arrived. TERM ends it with a "stopped" finish event. FAKE_HOLD_AT and
# FAKE_HOLD_FILE hold it before a step until a file exists.
set -u
nproc=1; nnodes=1; node_rank=0; run_dir=""; steps=""; config=""; out=""
args_file_lines=""
for a in "$@"; do
    args_file_lines="$args_file_lines$a
"
done
while [ $# -gt 0 ]; do
    case "$1" in
        launch) ;;
        --nproc-per-node) nproc=$2; shift ;;
        --nnodes) nnodes=$2; shift ;;
        --node-rank) node_rank=$2; shift ;;
        --master-addr|--master-port) shift ;;
        --run-dir) run_dir=$2; shift ;;
        --steps) steps=$2; shift ;;
        --config) config=$2; shift ;;
        --out) out=$2; shift ;;
    esac
    shift
done
[ -n "$run_dir" ] || run_dir=$out
mkdir -p "$run_dir/logs"
if [ "$node_rank" = 0 ]; then
    echo $$ > "$run_dir/launcher.pid"
else
    echo $$ > "$run_dir/launcher-node$node_rank.pid"
fi
printf '%s' "$args_file_lines" > "$run_dir/args-node-$node_rank.txt"
if [ -z "$steps" ] && [ -n "$config" ]; then
    steps=$(sed -n 's/.*"steps"[^0-9]*\([0-9][0-9]*\).*/\1/p' "$config" | head -n1)
fi
steps=${FAKE_STEPS:-${steps:-20}}
step_sec=${FAKE_STEP_SEC:-0.05}
world=$((nproc * nnodes))
[ -n "$out" ] || out=$run_dir
ev="$out/events.jsonl"; me="$out/metrics.jsonl"

if [ "$node_rank" != 0 ]; then
    trap 'exit 143' TERM
    i=0
    while [ $i -lt "$steps" ]; do sleep "$step_sec"; i=$((i + 1)); done
    exit 0
fi

stopped() {
    printf '{"v":1,"type":"event","kind":"finish","step":%s,"message":"stopped by signal","data":{"reason":"stopped"}}\n' "$step" >> "$ev"
    exit 143
}
step=0
trap stopped TERM
printf '{"v":1,"type":"event","kind":"start","step":0,"message":"fake run","data":{"world_size":%s}}\n' "$world" >> "$ev"
step=1
while [ $step -le "$steps" ]; do
    sleep "$step_sec"
    # FAKE_HOLD_AT=N FAKE_HOLD_FILE=F: before step N, wait until F exists (a test's cue).
    if [ "$step" = "${FAKE_HOLD_AT:-}" ]; then
        while [ ! -e "$FAKE_HOLD_FILE" ]; do sleep 0.05; done
    fi
    mem=""
    r=0
    while [ $r -lt "$world" ]; do
        [ -n "$mem" ] && mem="$mem,"
        mem="$mem{\"rank\":$r,\"sharded_params\":1000,\"current\":$((5000 + r)),\"peak\":$((6000 + step + r))}"
        r=$((r + 1))
    done
    loss=$(awk -v s=$step 'BEGIN { printf "%.6f", 4.0 / (1 + 0.1 * s) }')
    printf '{"v":1,"type":"metric","step":%s,"tokens":%s,"loss":%s,"lr":0.001,"grad_norm":1.0,"tokens_per_sec":1000,"step_time":%s,"wall_time":%s,"memory":[%s]}\n' \
        $step $((step * 256)) "$loss" "$step_sec" $step "$mem" >> "$me"
    step=$((step + 1))
done
printf '{"v":1,"type":"event","kind":"finish","step":%s,"message":"","data":{"reason":"completed"}}\n' "$steps" >> "$ev"
exit 0
