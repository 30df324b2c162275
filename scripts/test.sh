#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine if needed, builds everything (Release, Ninja, ccache) and runs
# every test through CTest. Extra arguments go to ctest (e.g. -L unit, -R tst_planner).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/fetch-fixtures.sh
export CCACHE_BASEDIR="$PWD" CCACHE_MAXSIZE=5G
cmake --preset release >/dev/null
cmake --build --preset release
ctest --preset release "$@"
