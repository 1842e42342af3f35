#!/usr/bin/env bash
# One command for a newcomer on a fresh Debian 12 machine: installs every dependency, builds
# kvec, and runs the main job on the bundled default model.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"
KVEC=build/release/tools/kvec

# The main job: every policy x budget on the 2k-token synthetic suite, on the bundled model, in both
# protocols: the question compressed with the context (query-aware, as the published LongBench
# tables) and the context compressed before the question is seen (query-agnostic, as kvpress).
for protocol in query-aware query-agnostic; do
    "$KVEC" eval -m models/kvec-tiny.gguf --suite synthetic-2k --protocol "$protocol" \
        --out "build/quickstart-eval/$protocol" --overwrite
done
