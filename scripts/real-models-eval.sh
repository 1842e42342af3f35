#!/usr/bin/env bash
# The real-model evaluation of docs/results.md: full-cache accuracy per model x task x length,
# then every policy on the real models in both protocols, then fidelity (KL and perplexity against
# the full cache) on held-out text. Each step is one `kvec eval` into build/real-models-eval/
# (resumable: run the script again to continue an interrupted step; a finished step is skipped).
#
#   scripts/real-models-eval.sh [-t THREADS] [STEP...]
#
# Steps (default: all, in this order; 2 samples per task unless said):
#   full         full cache only, test split: SmolLM2, Gemma 3 and Qwen2.5-Coder 0.5B at 1k-4k,
#                and at 8k with 1 sample per task
#   smollm2      every policy on SmolLM2, synthetic-2k, both protocols, budgets 64-1024, the four
#                tasks it does with the full cache, 6 samples each
#   qwen05       every policy on Qwen2.5-Coder 0.5B (a 32k-context model), synthetic-4k, kvpress's
#                protocol (query-agnostic, compression ratios 0.25-0.875), 1 sample per task
#   fidelity     KL / top-1 / NLL against the full cache on the held-out test addresses (4 segments of
#                2048 prompt + 128 continuation tokens), SmolLM2
# SAMPLES=N replaces every per-task sample count above (tighter intervals, proportionally longer).
# Gemma 3's sliding-window memory: scripts/swa-memory.sh.
# Needs the models (scripts/fetch-models.sh --all --accept-gemma-terms) and build/release.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
kvec="$root/build/release/tools/kvec" threads=2 out="$root/build/real-models-eval"
steps=()
while [ $# -gt 0 ]; do
    case "$1" in
        -t) threads="$2"; shift 2 ;;
        -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) steps+=("$1"); shift ;;
    esac
done
[ ${#steps[@]} -gt 0 ] || steps=(full smollm2 qwen05 fidelity)
smol="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
gemma="$root/models/gemma-3-270m-q4_k_m.gguf"
qwen05="$root/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
all_policies=full,random,streamingllm,h2o,tova,snapkv,pyramidkv,adakv,keydiff,knorm,lagkv,expected-attention,kvzip,kvec

# sweep DIR ARGS...: one kvec eval into $out/DIR, unless it finished before.
sweep() {
    local dir="$out/$1"
    shift
    if { [ -f "$dir/metrics.json" ] && grep -q '"complete": true' "$dir/metrics.json"; } || [ -f "$dir/fidelity.json" ]; then
        echo "[real-models-eval] $dir is complete" >&2
        return
    fi
    echo "[real-models-eval] $dir: kvec eval $*" >&2
    "$kvec" eval "$@" -t "$threads" --out "$dir"
}

n() { echo "${SAMPLES:-$1}"; }
for step in "${steps[@]}"; do
    case "$step" in
        full)
            for L in 1k 2k 4k 8k; do
                samples=$(n 2)
                [ "$L" = 8k ] && samples=$(n 1)
                for m in smollm2:"$smol" gemma:"$gemma" qwen05:"$qwen05"; do
                    sweep "full/${m%%:*}-$L" -m "${m#*:}" --suite "synthetic-$L" --split test --samples "$samples" \
                        --policies full
                done
            done ;;
        smollm2)
            # The four tasks SmolLM2 does with the full cache at 2k (step full: 50 % or more), 6
            # samples each, rather than 2 of each of the nine: the same time, three times the items
            # that can tell policies apart.
            for protocol in query-agnostic query-aware; do
                sweep "policies/smollm2-$protocol" -m "$smol" --suite synthetic-2k --split test --samples "$(n 6)" \
                    --tasks niah_single,niah_multikey,niah_multiquery,qa --protocol "$protocol" \
                    --policies "$all_policies" --budgets 64,128,256,512,1024 --task-floor 50
            done ;;
        qwen05)
            sweep policies/qwen05-query-agnostic -m "$qwen05" --suite synthetic-4k --split test --samples "$(n 1)" \
                --protocol query-agnostic --policies "$all_policies" --compression 0.25,0.5,0.75,0.875 --task-floor 50 ;;
        fidelity)
            sweep fidelity/smollm2 -m "$smol" --fidelity heldout:test --prefix 2048 --continuation 128 \
                --segments 4 --policies "$all_policies" --budgets 64,128,256,512,1024 ;;
        *) echo "unknown step: $step" >&2; exit 2 ;;
    esac
done
