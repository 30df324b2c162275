#!/usr/bin/env bash
# Assembles BENCHMARKS.md from each area's bench/<area>/RESULTS.md (each names its own command).
set -euo pipefail
cd "$(dirname "$0")/.."
{
    echo "# Benchmarks"
    echo
    echo "Every figure below comes from a command in \`bench/\`, named in its section, run on the"
    echo "project's 2-core, 24 GiB CPU machine (no GPU), usually while other builds shared it: read the"
    echo "ratios measured side by side in one run, not absolute speeds. Regenerate this file with"
    echo "\`bash scripts/collect-benchmarks.sh\` after re-running a benchmark."
    for area in plan engine tokenizer dist ckpt jobs studio platform; do
        f=bench/$area/RESULTS.md
        [[ -f $f ]] || continue
        echo
        echo "<!-- from $f -->"
        sed 's/^# /## /' "$f"
    done
} > BENCHMARKS.md
echo "wrote BENCHMARKS.md"
