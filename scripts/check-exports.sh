#!/bin/sh
# check-exports.sh LIBMAIZE_SO HEADER...: the shared library exports no
# internal mz__ symbol, and every mz_ call the public headers declare.
set -eu
so=$1; shift
command -v nm >/dev/null || { echo "nm not found: skipped"; exit 77; }
exp=$(mktemp); pub=$(mktemp); trap 'rm -f "$exp" "$pub"' EXIT
nm -D --defined-only "$so" | awk '{print $3}' | sort -u > "$exp"
internal=$(grep -c '^mz__' "$exp" || true)
if [ "$internal" -ne 0 ]; then
  echo "$internal internal mz__ symbols exported:"; grep '^mz__' "$exp"; exit 1
fi
grep -ho '\bmz_[a-z0-9_]*[[:space:]]*(' "$@" | tr -d ' (' | sort -u > "$pub"
missing=$(comm -23 "$pub" "$exp")
if [ -n "$missing" ]; then echo "public calls not exported:"; echo "$missing"; exit 1; fi
echo "ok: $(wc -l < "$exp") symbols exported, no mz__"
