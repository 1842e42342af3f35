#!/usr/bin/env bash
# One command for a newcomer on a fresh Debian 12 machine: installs every dependency, builds
# kvec, and runs the main job on the bundled default model.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"
KVEC=build/release/tools/kvec

# The main job: every policy x budget on the 2k-token synthetic suite, on the bundled model.
"$KVEC" eval -m models/kvec-tiny.gguf --suite synthetic-2k --out build/quickstart-eval --overwrite
