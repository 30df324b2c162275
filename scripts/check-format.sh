#!/usr/bin/env bash
# Fails listing every tracked C++ file that clang-format would change. Fix with:
#   git ls-files '*.cpp' '*.h' | xargs clang-format -i
set -uo pipefail
cd "$(dirname "$0")/.."
cf=${1:-clang-format}
files=$(git ls-files '*.cpp' '*.h' 2>/dev/null ||
    find app engine jobs widgets tests bench -name '*.cpp' -o -name '*.h')
# clang-format prints "<file>:<line>:<col>: error: code should be clang-formatted" per hunk.
bad=$(printf '%s\n' $files | xargs -P 2 -n 25 "$cf" --dry-run --Werror 2>&1 |
    sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' | sort -u)
if [[ -n $bad ]]; then
    echo "format_check: $(wc -l <<<"$bad") file(s) need clang-format:"
    sed 's/^/  /' <<<"$bad"
    echo "fix: git ls-files '*.cpp' '*.h' | xargs $cf -i"
    exit 1
fi
echo "format_check: $(wc -w <<<"$files") files formatted"
