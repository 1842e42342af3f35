#!/usr/bin/env bash
# kvec against llama.cpp on this machine, side by side.
#
# Builds llama.cpp's own llama-bench from the llama.cpp source that the npm package
# node-llama-cpp ships (scripts/llama-cpp.sh, shared with scripts/parity-vs-llama-cpp.sh), then
# runs `kvec bench` and `llama-bench` alternately on the same GGUF files with the same threads,
# prompt and generation lengths, and prints kvec / llama.cpp per test. Alternating rounds spread a
# noisy machine's slow phases over both engines.
#
#   scripts/bench-vs-llama-cpp.sh -m build/tl-q8_0.gguf,build/tl-f16.gguf [-t 2] [-p 512]
#                                 [-n 128] [-d 0,4096] [-r 2] [--rounds 2] [--out DIR]
#                                 [--policy kvec --budget 512] [--llama-fa 0,1] [--isa avx2]
#
# -d: depths (tokens in the cache before each test; both engines). --policy P --budget B: kvec also
# runs its tests under policy P at budget B beside its full cache (llama.cpp has no eviction: its
# full cache is the reference of both rows). --llama-fa: llama.cpp's flash-attention settings
# (default 0,1: both, and each test's ratio is against the faster; its own default is auto, which
# on this CPU means on and decodes several times slower at depth than off). --isa avx2: both engines
# limited to AVX2 + FMA + F16C, as on an AVX2-only host (Zen 2/3) though this one has AVX-512:
# kvec with KVEC_AVX512=0, llama.cpp from a second build for those instruction sets only
# (build/llama.cpp/build-avx2, LLAMA_CPP_AVX2 in scripts/llama-cpp.sh). Default: native, each
# engine with every instruction set this CPU has.
#
# Needs: kvec built in build/release (cmake --preset release && cmake --build build/release),
# npm (installed by scripts/install-deps.sh), cmake, ninja, a C++ compiler. The first run builds
# llama-bench into build/llama.cpp/ (about 8 minutes on 2 cores); later runs reuse it.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
models="" threads=2 n_prompt=512 n_gen=128 depths=0 reps=2 rounds=2 out="" policy="" budget="" llama_fa=0,1 isa=native

usage() { sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
    case "$1" in
        -m) models="$2"; shift 2 ;;
        -t) threads="$2"; shift 2 ;;
        -p) n_prompt="$2"; shift 2 ;;
        -n) n_gen="$2"; shift 2 ;;
        -d) depths="$2"; shift 2 ;;
        --policy) policy="$2"; shift 2 ;;
        --budget) budget="$2"; shift 2 ;;
        --llama-fa) llama_fa="$2"; shift 2 ;;
        --isa) isa="$2"; shift 2 ;;
        -r) reps="$2"; shift 2 ;;
        --rounds) rounds="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        -h|--help) usage 0 ;;
        *) echo "unknown argument: $1" >&2; usage 2 >&2 ;;
    esac
done
[ -n "$models" ] || { echo "error: -m MODEL[,MODEL...] is required" >&2; exit 2; }
[[ "$depths" =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "error: -d takes whole numbers separated by commas, got '$depths'" >&2; exit 2; }
[[ "$llama_fa" =~ ^(0|1|on|off|auto)(,(0|1|on|off|auto))*$ ]] || { echo "error: --llama-fa takes 0, 1, on, off or auto, comma-separated, got '$llama_fa'" >&2; exit 2; }
source "$root/scripts/llama-cpp.sh"
llama_cpp_isa "$isa"
if [ -n "$policy" ] && [ -z "$budget" ]; then echo "error: --policy needs --budget" >&2; exit 2; fi
kvec_policy=()
[ -z "$policy" ] || kvec_policy=(--policy "full,$policy" --budget "$budget")
for v in "$threads" "$n_prompt" "$n_gen" "$reps" "$rounds"; do
    [[ "$v" =~ ^[0-9]+$ ]] || { echo "error: -t/-p/-n/-r/--rounds take one whole number, got '$v'" >&2; exit 2; }
done
IFS=, read -r -a model_list <<< "$models"
for m in "${model_list[@]}"; do [ -f "$m" ] || { echo "error: no model file '$m'" >&2; exit 2; }; done

kvec="$root/build/release/tools/kvec"
[ -x "$kvec" ] || { echo "error: $kvec not built (cmake --preset release && cmake --build build/release)" >&2; exit 2; }

# llama-bench, built once.
llama_bench="$llama_cpp_bin/llama-bench"
[ -x "$llama_bench" ] || llama_cpp_build llama-bench

out="${out:-$(mktemp -d)}"
mkdir -p "$out"
for ((round = 1; round <= rounds; ++round)); do
    for i in "${!model_list[@]}"; do
        m="${model_list[$i]}"
        echo "round $round/$rounds: $m: kvec" >&2
        env "${kvec_env[@]}" "$kvec" bench -m "$m" -t "$threads" -p "$n_prompt" -n "$n_gen" -d "$depths" -r "$reps" "${kvec_policy[@]}" \
            -o json > "$out/kvec-$round-$i.json"
        echo "round $round/$rounds: $m: llama.cpp" >&2
        "$llama_bench" -m "$m" -t "$threads" -p "$n_prompt" -n "$n_gen" -d "$depths" -r "$reps" -fa "$llama_fa" -o json \
            > "$out/llama-$round-$i.json" 2> "$out/llama-$round-$i.log"
    done
done
python3 "$root/scripts/bench_ratio.py" "$out" "$rounds" "${model_list[@]}"
