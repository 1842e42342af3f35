#!/usr/bin/env bash
# Batched decode throughput, kvec against llama.cpp on this machine, side by side: the aggregate
# tokens/s of P sequences generating together, each after a prompt of its own.
#
#   kvec:      kvec bench -p 0 -n G -d D --parallel P        (Session::decode_batch, as the slots
#              of kvec serve run; the depth prompt prefilled once and restored into each sequence)
#   llama.cpp: llama-batched-bench -npp D -ntg G -npl P      (its S_TG: P x G tokens / decode time)
#
#   scripts/bench-batched.sh -m MODEL.gguf [-t 2] [-d 128] [-n 64] [--parallel 1,4,8,16]
#                            [--policy full] [--rounds 1] [--isa avx2]
#
# Per P (and round), kvec runs first, then llama.cpp, so both see the same load. Prints a table:
# kvec t/s, llama.cpp t/s, their ratio, and kvec's speed-up over its own single stream. Builds
# llama-batched-bench from the llama.cpp source npm's node-llama-cpp ships (scripts/llama-cpp.sh)
# on first use. --policy (a kvec policy spec; its budget option included) applies to kvec only.
# --isa avx2: both engines limited to AVX2 + FMA + F16C, as in scripts/bench-vs-llama-cpp.sh.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
model="" threads=2 depth=128 n_gen=64 parallel="1,4,8,16" policy=full rounds=1 isa=native
KVEC=${KVEC:-$root/build/release/tools/kvec}

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
    case "$1" in
        -m) model="$2"; shift 2 ;;
        -t) threads="$2"; shift 2 ;;
        -d) depth="$2"; shift 2 ;;
        -n) n_gen="$2"; shift 2 ;;
        --parallel) parallel="$2"; shift 2 ;;
        --policy) policy="$2"; shift 2 ;;
        --rounds) rounds="$2"; shift 2 ;;
        --isa) isa="$2"; shift 2 ;;
        -h|--help) usage 0 ;;
        *) echo "unknown argument: $1" >&2; usage 2 >&2 ;;
    esac
done
[ -n "$model" ] || { echo "error: -m MODEL is required" >&2; exit 2; }
[ -f "$model" ] || { echo "error: model file '$model' not found" >&2; exit 2; }
for v in "$threads" "$depth" "$n_gen" "$rounds"; do
    [[ "$v" =~ ^[0-9]+$ ]] || { echo "error: -t/-d/-n/--rounds take one whole number, got '$v'" >&2; exit 2; }
done
[[ "$parallel" =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "error: --parallel takes a comma list of numbers" >&2; exit 2; }
source "$root/scripts/llama-cpp.sh"
llama_cpp_isa "$isa"
[ -x "$llama_cpp_bin/llama-batched-bench" ] || llama_cpp_build llama-batched-bench
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "| streams | kvec t/s | llama.cpp t/s | kvec / llama.cpp | kvec / kvec 1 stream |"
echo "|---:|---:|---:|---:|---:|"
single=""
IFS=, read -r -a plist <<< "$parallel"
for p in "${plist[@]}"; do
    for ((round = 1; round <= rounds; ++round)); do
        env "${kvec_env[@]}" "$KVEC" bench -m "$model" -t "$threads" -p 0 -n "$n_gen" -d "$depth" --parallel "$p" --policy "$policy" \
            -r 1 --no-bandwidth -o csv > "$tmp/kvec.csv" 2> "$tmp/err" ||
            { echo "bench-batched.sh: kvec bench failed:" >&2; cat "$tmp/err" >&2; exit 1; }
        "$llama_cpp_bin/llama-batched-bench" -m "$model" -t "$threads" -c $(((depth + n_gen) * p + 16)) \
            -npp "$depth" -ntg "$n_gen" -npl "$p" --output-format jsonl > "$tmp/llama.jsonl" 2> "$tmp/err" ||
            { echo "bench-batched.sh: llama-batched-bench failed:" >&2; cat "$tmp/err" >&2; exit 1; }
        # kvec csv: the tps_mean column (14); llama-batched-bench jsonl: speed_tg.
        k=$(awk -F, 'NR == 2 {print $14}' "$tmp/kvec.csv")
        l=$(grep -o '"speed_tg": [0-9.]*' "$tmp/llama.jsonl" | tail -1 | grep -o '[0-9.]*$')
        [ "$p" = "${plist[0]}" ] && [ "$round" = 1 ] && single=$k
        echo "| $p | $k | $l | $(awk -v a="$k" -v b="$l" 'BEGIN{printf "%.2f", a/b}') |" \
             "$(awk -v a="$k" -v b="$single" 'BEGIN{printf "%.2f", a/b}') |"
    done
done
