#!/usr/bin/env bash
# KV-cache peak and resident memory of budgeted runs with the default flags (one-shot eviction),
# against the full cache and chunked compression (--chunk), at about 8k and 16k prompt tokens.
# Prints a markdown table (docs/reliability.md, "Memory of budgeted runs").
#   scripts/kv-memory.sh [MODEL.gguf] [BUDGET]     (default: models/kvec-tiny.gguf, 512)
set -euo pipefail
cd "$(dirname "$0")/.."
KVEC=${KVEC:-build/release/tools/kvec}
M=${1:-models/kvec-tiny.gguf}
B=${2:-512}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Prompt text: the project's docs, repeated as needed (the content does not matter for memory).
for _ in 1 2 3 4 5 6; do cat README.md docs/*.md; done >"$tmp/all.txt"
echo "| prompt tokens | run | KV after the prompt | KV peak | max RSS |"
echo "|---:|---|---:|---:|---:|"
for chars in 17000 34000; do  # about 8k and 16k tokens of this text (2.1 characters a token)
    head -c "$chars" "$tmp/all.txt" >"$tmp/prompt.txt"
    for run in "full cache|" "snapkv, budget $B (default: one-shot)|--policy snapkv --budget $B" \
               "kvec, budget $B (default: one-shot)|--policy kvec --budget $B" \
               "snapkv, budget $B, --chunk 512|--policy snapkv --budget $B --chunk 512"; do
        name=${run%%|*}
        flags=${run#*|}
        # shellcheck disable=SC2086
        /usr/bin/time -f "%M" -o "$tmp/rss" "$KVEC" run -m "$M" -f "$tmp/prompt.txt" -n 1 --temp 0 -c 20000 -t 2 \
            $flags >/dev/null 2>"$tmp/err" || { echo "kv-memory.sh: kvec run failed:" >&2; cat "$tmp/err" >&2; exit 1; }
        tokens=$(grep -o 'prompt: *[0-9]* tokens' "$tmp/err" | grep -o '[0-9]*')
        if [ -z "$flags" ]; then
            after=$(grep -o 'kv cache: *[0-9.]* [KMG]*i*B' "$tmp/err" | sed 's/kv cache: *//')
            peak=$(grep -o 'peak [0-9.]* [KMG]*i*B' "$tmp/err" | head -1 | sed 's/peak //')
        else
            after=$(grep -o 'after  [0-9.]* [KMG]*i*B' "$tmp/err" | sed 's/after  //')
            peak=$(grep -o 'prompt peak [0-9.]* [KMG]*i*B' "$tmp/err" | sed 's/prompt peak //')
        fi
        rss=$(awk '{printf "%.1f MiB", $1 / 1024}' "$tmp/rss")
        echo "| $tokens | $name | $after | $peak | $rss |"
    done
done
