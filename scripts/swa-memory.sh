#!/usr/bin/env bash
# What a KV budget means on a model with sliding-window layers, measured: the KV bytes and entries
# of each layer kind after a prompt of held-out text, with the full cache and with policies at a
# budget (docs/policies.md, "Models with sliding-window layers"). Prints a Markdown table.
#
#   scripts/swa-memory.sh [-m MODEL] [-t THREADS] [--lengths 2048,8192] [--budgets 128,512]
#                         [--policies kvec,snapkv]
#
# L is about L tokens of the held-out State of the Union addresses (4 bytes a token; the table
# gives the count). Default model: Gemma 3 270M (scripts/fetch-models.sh gemma-3-270m --accept-gemma-terms).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
kvec="$root/build/release/tools/kvec"
model="$root/models/gemma-3-270m-q4_k_m.gguf" threads=2 lengths=2048,8192 budgets=128,512 policies=kvec,snapkv
while [ $# -gt 0 ]; do
    case "$1" in
        -m) model="$2"; shift 2 ;;
        -t) threads="$2"; shift 2 ;;
        --lengths) lengths="$2"; shift 2 ;;
        --budgets) budgets="$2"; shift 2 ;;
        --policies) policies="$2"; shift 2 ;;
        -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "swa-memory.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ -x "$kvec" ] || { echo "swa-memory.sh: build kvec first (cmake --build --preset release)" >&2; exit 1; }
[ -f "$model" ] || { echo "swa-memory.sh: no $model (scripts/fetch-models.sh --list)" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cat "$root"/data/text/sotu/*.txt > "$work/text.txt"

echo "| prompt tokens | policy | budget | sliding-window layers: bytes, entries | global layers: bytes, entries | all layers: bytes | vs full |"
echo "|---:|---|---:|---|---|---:|---:|"
IFS=, read -ra Ls <<< "$lengths"
IFS=, read -ra Bs <<< "$budgets"
IFS=, read -ra Ps <<< "$policies"
for L in "${Ls[@]}"; do
    # About L tokens of the text (4 bytes a token; the table gives the exact count).
    head -c $((L * 4)) "$work/text.txt" > "$work/prompt.txt"
    full_bytes=""
    runs=("none:0")
    for p in "${Ps[@]}"; do for b in "${Bs[@]}"; do runs+=("$p:$b"); done; done
    for r in "${runs[@]}"; do
        p="${r%%:*}" b="${r##*:}"
        args=(-m "$model" -f "$work/prompt.txt" -c "$((L * 2))" -n 4 --temp 0 -t "$threads")
        [ "$p" = none ] || args+=(--policy "$p" --budget "$b")
        "$kvec" run "${args[@]}" > /dev/null 2> "$work/err.txt" || { cat "$work/err.txt" >&2; exit 1; }
        line=$(grep '^kv layers:' "$work/err.txt") || { echo "swa-memory.sh: $model has no sliding-window layers" >&2; exit 1; }
        total=$(sed -n 's/^kv cache: *[^(]*(\([0-9]*\) bytes.*/\1/p' "$work/err.txt")
        prompt=$(sed -n 's/^prompt: *\([0-9]*\) tokens.*/\1/p' "$work/err.txt")
        swa=$(echo "$line" | sed -n 's/.*window [0-9]*): \([^;]*\);.*/\1/p')
        glob=$(echo "$line" | sed -n 's/.*global layers: \(.*\)$/\1/p')
        [ -n "$full_bytes" ] || full_bytes="$total"
        ratio=$(awk -v a="$total" -v b="$full_bytes" 'BEGIN { printf "%.3f", a / b }')
        label="$p"; [ "$p" = none ] && label="full" b="-"
        echo "| $prompt | $label | $b | $swa | $glob | $total | $ratio |"
    done
done
