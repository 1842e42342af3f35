#!/usr/bin/env bash
# Starts (or resumes) a training run in the background, niced, surviving the shell that started
# it; the trainer's output goes to RUN/train.out and its process id to RUN/pid.
#   python/kvec_train/start.sh [RUN_DIR] [CONFIG]
# Defaults: train_runs/kvec-tiny-r4 and python/kvec_train/configs/kvec-tiny.json; threads from
# KVEC_TRAIN_THREADS (2), train --autocast from KVEC_TRAIN_AUTOCAST (auto). Stop it with
#   kill -- -"$(cat RUN_DIR/pid)"
set -euo pipefail
cd "$(dirname "$0")/../.."
run="${1:-train_runs/kvec-tiny-r4}"
config="${2:-python/kvec_train/configs/kvec-tiny.json}"
mkdir -p "$run"
if [ -f "$run/pid" ] && kill -0 "$(cat "$run/pid")" 2>/dev/null; then
    echo "error: $run is already being trained by process $(cat "$run/pid")" >&2
    exit 1
fi
PYTHONPATH=python OMP_WAIT_POLICY=PASSIVE setsid nohup /usr/bin/python3 -m kvec_train.train \
    train --config "$config" --run "$run" --resume --threads "${KVEC_TRAIN_THREADS:-2}" \
    --autocast "${KVEC_TRAIN_AUTOCAST:-auto}" >> "$run/train.out" 2>&1 < /dev/null &
echo $! > "$run/pid"
echo "training $run in the background: process $(cat "$run/pid"), log $run/train.out"
