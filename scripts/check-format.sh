#!/usr/bin/env bash
# Fails listing every tracked C++ file that clang-format would change. Fix with:
#   git ls-files '*.cpp' '*.h' | xargs clang-format -i
set -uo pipefail
cd "$(dirname "$0")/.."
cf=${1:-clang-format}
bad=()
while IFS= read -r f; do
    [[ -f $f ]] || continue
    if ! "$cf" --dry-run --Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done < <(git ls-files '*.cpp' '*.h' 2>/dev/null || find app engine jobs widgets tests bench -name '*.cpp' -o -name '*.h')
if ((${#bad[@]})); then
    echo "format_check: ${#bad[@]} file(s) need clang-format:"; printf '  %s\n' "${bad[@]}"
    echo "fix: git ls-files '*.cpp' '*.h' | xargs $cf -i"
    exit 1
fi
echo "format_check: all files formatted"
