#!/usr/bin/env bash
# Trains several recipes of the bundled model side by side on one GPU machine (the device of
# DEVELOPERS.md, 16 cores), each for about MINUTES, and writes each run's GGUF (F16) and logs.
#
#   python/kvec_train/train_gpu.sh DATA_DIR OUT_DIR MINUTES DEVICE RECIPE...
#
# DATA_DIR holds what a run needs from a run directory prepared on the CPU (`train prepare` and
# `train synth-data`, e.g. train_runs/kvec-tiny; see docs/model-card.md): corpus.jsonl.gz,
# tokens.npz, tokenizer.json, and the `kvec synth` training instances train-1k.jsonl.gz and
# train-2k.jsonl.gz (gzip: the device's working tree is limited to 64 MiB). RECIPE names python/kvec_train/configs/gpu-RECIPE.json. Files larger than
# 15 MiB are split into .partN pieces (the device returns files of at most 16 MiB): `cat` them.
# PYTHON (default python3) must have PyTorch with CUDA. Runs go to train_runs/gpu-RECIPE.
set -u
if [ $# -lt 5 ]; then
    echo "usage: $0 DATA_DIR OUT_DIR MINUTES DEVICE RECIPE..." >&2
    exit 2
fi
data=$1 out=$2 minutes=$3 device=$4
shift 4
py=${PYTHON:-python3}
cores=$(nproc)
workers=$(( (cores - $#) / $# ))
[ "$workers" -lt 1 ] && workers=1
mkdir -p "$out" train_runs/synth
for n in 1k 2k; do
    gunzip -c "$data/train-$n.jsonl.gz" > "train_runs/synth/train-$n.jsonl" || exit 1
done
limit=$(awk -v m="$minutes" 'BEGIN { printf "%d", m * 60 * 1.2 + 90 }')
for r in "$@"; do
    run=train_runs/gpu-$r
    mkdir -p "$run"
    gunzip -c "$data/corpus.jsonl.gz" > "$run/corpus.jsonl"
    cp "$data/tokens.npz" "$data/tokenizer.json" "$run/"
    (
        # The training stops itself at 1.1 x MINUTES; `timeout` is the backstop. The export
        # runs either way, from the last checkpoint.
        PYTHONPATH=python timeout "$limit" "$py" -m kvec_train.train train \
            --config "python/kvec_train/configs/gpu-$r.json" --run "$run" --device "$device" \
            --workers "$workers" --threads 1 --time-budget "$minutes" > "$run/train.out" 2>&1
        echo "train exit $?" >> "$run/train.out"
        PYTHONPATH=python "$py" -m kvec_train.train export --run "$run" --out "$run/$r.gguf" \
            --dtype f16 >> "$run/train.out" 2>&1 ||
        # should the export fail on this machine's packages, keep the weights (float16) instead
        PYTHONPATH=python "$py" -c 'import sys, torch; from pathlib import Path
from kvec_train.train import load_checkpoint
c = load_checkpoint(Path(sys.argv[1]))
torch.save({"model": {k: v.half() for k, v in c["model"].items()}, "config": c["config"],
            "step": c["step"], "tokens_seen": c["tokens_seen"], "elapsed": c["elapsed"]}, sys.argv[2])' \
            "$run" "$run/$r.pt" >> "$run/train.out" 2>&1
    ) &
done
wait
for r in "$@"; do
    run=train_runs/gpu-$r
    tail -n 4 "$run/train.out"
    for f in "$run/$r.gguf" "$run/$r.pt"; do
        [ -f "$f" ] || continue
        if [ "$(stat -c %s "$f")" -gt $((15 * 1024 * 1024)) ]; then
            split -b 15M -d -a 1 "$f" "$out/$(basename "$f").part"
        else
            cp "$f" "$out/"
        fi
        break
    done
done
tar czf "$out/logs.tgz" train_runs/gpu-*/config.json train_runs/gpu-*/log.jsonl \
    train_runs/gpu-*/train.out train_runs/gpu-*/status.md 2>/dev/null
ls -la "$out"
