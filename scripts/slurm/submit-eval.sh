#!/usr/bin/env bash
# Submits a sharded `kvec eval` sweep to Slurm: an array job of N shards (eval-shard.sbatch, one
# `kvec eval ... --shard slurm` per task), then a merge job (eval-merge.sbatch, `kvec eval merge`)
# that starts only when every shard has succeeded (--dependency=afterok). docs/evaluation.md,
# "Sharding and merging".
#
# Usage: scripts/slurm/submit-eval.sh --shards N --out DIR [--kvec PATH] [--cpus C]
#                                     [--sbatch "ARGS"] -- EVAL_ARGS...
#   --shards N    array tasks (shards), default 4
#   --out DIR     results: DIR/shard-<task id>/ per shard, DIR/merged/ the merged run, DIR/logs/
#                 (on a file system every node sees)
#   --kvec PATH   the kvec binary (default: build/release/tools/kvec of this checkout)
#   --cpus C      CPUs per shard (--cpus-per-task; kvec runs C threads), default 8
#   --sbatch ARGS more sbatch options for both jobs, e.g. "--partition=cpu --time=12:00:00"
#   EVAL_ARGS     the `kvec eval` arguments, without --shard, --out and -t
# Prints the two job ids. A shard that fails, is preempted or requeued resumes from its finished
# predictions when it runs again (resubmit it with `sbatch --array=K ...` or `scontrol requeue`);
# the merge refuses shards that are missing or unfinished.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
SHARDS=4
OUT=""
KVEC="$(cd "$HERE/../.." && pwd)/build/release/tools/kvec"
CPUS=8
EXTRA=""
while [ $# -gt 0 ]; do
    case "$1" in
        --shards) SHARDS="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --kvec) KVEC="$2"; shift 2 ;;
        --cpus) CPUS="$2"; shift 2 ;;
        --sbatch) EXTRA="$2"; shift 2 ;;
        --) shift; break ;;
        *) echo "submit-eval.sh: unknown option '$1' (see the top of $0)" >&2; exit 2 ;;
    esac
done
[ -n "$OUT" ] || { echo "submit-eval.sh: give --out DIR" >&2; exit 2; }
[[ "$SHARDS" =~ ^[1-9][0-9]*$ ]] || { echo "submit-eval.sh: --shards must be a positive number, got '$SHARDS'" >&2; exit 2; }
[ -x "$KVEC" ] || { echo "submit-eval.sh: '$KVEC' is not an executable kvec (--kvec PATH)" >&2; exit 2; }
[ $# -gt 0 ] || { echo "submit-eval.sh: give the kvec eval arguments after --" >&2; exit 2; }
mkdir -p "$OUT/logs"
OUT="$(cd "$OUT" && pwd)"
KVEC="$(cd "$(dirname "$KVEC")" && pwd)/$(basename "$KVEC")"
# shellcheck disable=SC2086  # EXTRA holds several sbatch options
shards=$(sbatch --parsable $EXTRA --job-name=kvec-eval --array="0-$((SHARDS - 1))" --cpus-per-task="$CPUS" \
    --requeue --open-mode=append --output="$OUT/logs/shard-%a.log" \
    "$HERE/eval-shard.sbatch" "$KVEC" "$OUT" "$@")
shards="${shards%%;*}"  # "id;cluster" on multi-cluster set-ups
# shellcheck disable=SC2086
merge=$(sbatch --parsable $EXTRA --job-name=kvec-eval-merge --dependency="afterok:$shards" --cpus-per-task=1 \
    --output="$OUT/logs/merge.log" "$HERE/eval-merge.sbatch" "$KVEC" "$OUT")
merge="${merge%%;*}"
echo "shards: job $shards (array 0-$((SHARDS - 1))), results in $OUT/shard-*/"
echo "merge:  job $merge (after every shard succeeded), results in $OUT/merged/"
