#!/usr/bin/env bash
# One command for a newcomer on a fresh Debian 12 machine: installs every dependency, builds
# kvec, and runs the main job on the bundled default model.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"
KVEC=build/release/tools/kvec

# Interim main job: until the bundled trained model lands in models/, run the engine on a small
# random-weight model the project generates itself (its text is meaningless; the point is the
# engine path: load, tokenize, prefill, decode, report speed and KV bytes).
MODEL=build/release/kvec-demo-random.gguf
if [ ! -f "$MODEL" ]; then
    "$KVEC" gen-model --arch llama --layers 4 --embd 256 --heads 8 --kv-heads 2 --ff 768 \
        --type q8_0 --seed 1 -o "$MODEL"
fi
"$KVEC" run -m "$MODEL" -f data/text/sotu/2001_george_w_bush_r.txt -c 8192 -n 32 --temp 0 \
    --policy kvec --budget 256
