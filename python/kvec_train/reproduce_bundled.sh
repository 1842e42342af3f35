#!/usr/bin/env bash
# Reproduces the bundled model (models/kvec-tiny.gguf, run 29; docs/model-card.md) from scratch,
# in one command: corpus, tokenizer and `kvec synth` training data, run 14 (configs/cpu-4gram.json,
# float32 as it was trained), then runs 27, 28 and 29 (configs/cpu-vt-sup.json, then
# configs/cpu-vt-sup-finish.json twice), each starting from the previous one's F16 export.
#   python/kvec_train/reproduce_bundled.sh [BASE] [OUT]
# BASE: run directories BASE-r14, BASE-r27, BASE-r28, BASE-r29 (default train_runs/kvec-tiny);
# OUT: the final GGUF file (default BASE-r29/r29.gguf). Stopped, it resumes where it left off
# when started again. About 2.7 h on 2 cores with bfloat16 hardware (run 14's 1.8 h in float32).
# KVEC: the built kvec binary (default build/release/tools/kvec); KVEC_TRAIN_THREADS (2);
# KVEC_REPRO_MAX_STEPS: stop every run after that many steps (a smoke test of the chain).
set -euo pipefail
cd "$(dirname "$0")/../.."
base="${1:-train_runs/kvec-tiny}"
out="${2:-$base-r29/r29.gguf}"
kvec="${KVEC:-build/release/tools/kvec}"
[ -x "$kvec" ] || { echo "error: $kvec not found: build kvec first (cmake --preset release && cmake --build --preset release)" >&2; exit 1; }
export PYTHONPATH=python OMP_WAIT_POLICY=PASSIVE
configs=python/kvec_train/configs
limit=()
[ -n "${KVEC_REPRO_MAX_STEPS:-}" ] && limit=(--max-steps "$KVEC_REPRO_MAX_STEPS")
trainer() { /usr/bin/python3 -m kvec_train.train "$@"; }
# train RUN CONFIG [train options]: train (or resume) RUN, then export RUN/rNN.gguf (`train`
# prepares the run directory itself: its config, and corpus, tokenizer and tokens where absent)
train() {
    local run="$1" config="$2"
    shift 2
    if [ "$run" != "$base-r14" ]; then  # the same corpus, tokenizer and token cache as run 14
        mkdir -p "$run"
        for f in corpus.jsonl tokenizer.json tokens.npz; do [ -e "$run/$f" ] || cp "$base-r14/$f" "$run/"; done
    fi
    trainer train --config "$config" --run "$run" --resume --threads "${KVEC_TRAIN_THREADS:-2}" "${limit[@]}" "$@"
    trainer export --run "$run" --out "$run/${run##*-}.gguf" --dtype f16
}

trainer prepare --config "$configs/cpu-4gram.json" --run "$base-r14"
trainer synth-data --run "$base-r14" --kvec "$kvec"
train "$base-r14" "$configs/cpu-4gram.json" --autocast off
train "$base-r27" "$configs/cpu-vt-sup.json" --init-from "$base-r14/r14.gguf"
train "$base-r28" "$configs/cpu-vt-sup-finish.json" --init-from "$base-r27/r27.gguf"
train "$base-r29" "$configs/cpu-vt-sup-finish.json" --init-from "$base-r28/r28.gguf"
if [ "$out" != "$base-r29/r29.gguf" ]; then cp "$base-r29/r29.gguf" "$out"; fi
echo "reproduced the bundled model: $out"
