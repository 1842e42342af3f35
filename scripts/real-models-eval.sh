#!/usr/bin/env bash
# The real-model evaluation of docs/results.md: full-cache accuracy per model x task x length,
# then every policy on the real models in both protocols, then fidelity (KL and perplexity against
# the full cache) on held-out text. Each step is one `kvec eval` into build/real-models-eval/
# (resumable: run the script again to continue an interrupted step; a finished step is skipped).
#
#   scripts/real-models-eval.sh [-t THREADS] [STEP...]
#
# Steps (default: full smollm2 qwen05 fidelity, in this order; the design steps by name; 2 samples
# per task unless said):
#   full         full cache only, test split: SmolLM2, Gemma 3 and Qwen2.5-Coder 0.5B at 1k-4k,
#                and at 8k with 1 sample per task
#   smollm2      every policy on SmolLM2, synthetic-2k, both protocols, budgets 64-1024, the four
#                tasks it does with the full cache, 6 samples each
#   qwen05       every policy on Qwen2.5-Coder 0.5B (a 32k-context model), synthetic-4k, kvpress's
#                protocol (query-agnostic, compression ratios 0.25-0.875), 1 sample per task
#   fidelity     KL / top-1 / NLL against the full cache on the held-out test addresses (4 segments of
#                2048 prompt + 128 continuation tokens), SmolLM2
#   designs-dev  K-VEC's designs (issue 41) on the development split: the pool design and the focus
#                design's variants, SmolLM2 query-agnostic at 64-256 (6 samples per task) and
#                Qwen2.5-Coder 0.5B in kvpress's protocol at ratios 0.5-0.875 (3 per task)
#   importance   HeadKV's head importance of SmolLM2 and Qwen2.5-Coder 0.5B (kvec head-scores, dev split)
#   designs      the test split: every policy, the paper's baselines (ada-pyramidkv, headkv, gemfilter), both
#                K-VEC designs and the focus design's head-ranking controls; SmolLM2 in both protocols
#                (6 samples per task), Qwen2.5-Coder 0.5B in kvpress's protocol (2 per task)
#   designs-qwen05-aware  the same designs and baselines on Qwen2.5-Coder 0.5B, query-aware (not
#                in the default list; about 31 minutes on 2 threads)
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
        designs-dev)
            f="kvec:design=focus"
            sweep designs-dev/smollm2-query-agnostic -m "$smol" --suite synthetic-2k --split dev --samples "$(n 6)" \
                --tasks niah_single,niah_multikey,niah_multiquery,qa --protocol query-agnostic --budgets 64,128,256 \
                --policies "full,kvec,$f,$f,focus-window=128,$f,focus-window=128,focus-gamma=3,$f,focus-window=128,cross=1,$f,focus-window=128,focus-share=0.5,$f,focus-gamma=0,cross=1" \
                --task-floor 50
            sweep designs-dev/qwen05-query-agnostic -m "$qwen05" --suite synthetic-4k --split dev --samples "$(n 3)" \
                --tasks niah_single,niah_multikey,niah_multivalue,niah_multiquery,niah_askmany,fwe,qa \
                --protocol query-agnostic --compression 0.5,0.75,0.875 --task-floor 50 \
                --policies "full,kvec,$f,$f,focus-window=128,$f,focus-window=512,$f,focus-window=128,focus-gamma=3,$f,focus-window=128,focus-share=0.5,$f,focus-window=128,cross=1,$f,focus-gamma=0,cross=1" ;;
        importance)
            mkdir -p "$out/importance"
            for m in smollm2:"$smol" qwen05:"$qwen05"; do
                [ -f "$out/importance/${m%%:*}.json" ] && continue
                "$kvec" head-scores -m "${m#*:}" --out "$out/importance/${m%%:*}.json" -t "$threads"
            done ;;
        designs)
            cd "$root"  # headkv's scores=FILE paths below are relative to the checkout
            # The focus design with its defaults (O' = O, no cross-layer term), as the reviews describe it
            # (O' = 4 O, cross-layer priority on), and that description with the control rankings.
            described="kvec:design=focus,focus-window=128,cross=1"
            designs() {
                echo "$all_policies,ada-pyramidkv,headkv:scores=build/real-models-eval/importance/$1.json${2:-},kvec:design=focus,$described,$described,focus-rank=high-std,$described,focus-rank=entropy,$described,focus-rank=random"
            }
            smollm2_2k=(-m "$smol" --suite synthetic-2k --split test --samples "$(n 6)" --budgets 64,128,256,512,1024
                        --tasks niah_single,niah_multikey,niah_multiquery,qa --task-floor 50)
            # (GemFilter came after the query-agnostic run: its own run on the same items, beside K-VEC.)
            sweep designs/smollm2-query-agnostic "${smollm2_2k[@]}" --protocol query-agnostic --policies "$(designs smollm2)"
            sweep designs/smollm2-query-agnostic-gemfilter "${smollm2_2k[@]}" --protocol query-agnostic \
                --policies "full,gemfilter,kvec,$described,headkv:scores=build/real-models-eval/importance/smollm2.json,kvzip"
            sweep designs/smollm2-query-aware "${smollm2_2k[@]}" --protocol query-aware \
                --policies "$(designs smollm2 ,gemfilter)"
            sweep designs/qwen05-query-agnostic -m "$qwen05" --suite synthetic-4k --split test --samples "$(n 2)" \
                --tasks niah_single,niah_multikey,niah_multivalue,niah_multiquery,niah_askmany,fwe,qa \
                --protocol query-agnostic --policies "$(designs qwen05 ,gemfilter)" --compression 0.25,0.5,0.75,0.875 \
                --task-floor 50 ;;
        designs-qwen05-aware)
            cd "$root"
            described="kvec:design=focus,focus-window=128,cross=1"
            sweep designs/qwen05-query-aware -m "$qwen05" --suite synthetic-4k --split test --samples "$(n 2)" \
                --tasks niah_single,niah_multikey,niah_multivalue,niah_multiquery,niah_askmany,fwe,qa \
                --protocol query-aware --compression 0.25,0.5,0.75,0.875 --task-floor 50 \
                --policies "$all_policies,ada-pyramidkv,headkv:scores=build/real-models-eval/importance/qwen05.json,gemfilter,kvec:design=focus,$described,$described,focus-rank=high-std,$described,focus-rank=entropy,$described,focus-rank=random" ;;
        *) echo "unknown step: $step" >&2; exit 2 ;;
    esac
done
