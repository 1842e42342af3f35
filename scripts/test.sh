#!/usr/bin/env bash
# Builds kvec and runs the whole test suite (C++ and Python reference tests through CTest).
#   scripts/test.sh            optimised build
#   scripts/test.sh --sanitize the same suite under AddressSanitizer + UndefinedBehaviorSanitizer (less the
#                              labels python, peer, slurm, parity and real-model: CMakePresets.json,
#                              and the fuzz corpora, which --fuzz replays under the same sanitizers)
#   scripts/test.sh --fuzz     libFuzzer harnesses (clang): corpus replay + a bounded run each
set -euo pipefail
cd "$(dirname "$0")/.."
preset=release
if [ "${1:-}" = "--sanitize" ]; then preset=asan; fi
if [ "${1:-}" = "--fuzz" ]; then preset=fuzz; fi
jobs=$(nproc)
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$jobs"
ctest --preset "$preset" -j "$jobs"
