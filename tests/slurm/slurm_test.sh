#!/usr/bin/env bash
# Usage: slurm_test.sh /path/to/kvec SOURCE_DIR
# A sharded sweep on a real Slurm cluster: starts a single-node cluster (slurm_cluster.sh: munged,
# slurmctld, slurmd on loopback, everything in a temporary directory), submits the array job of 4
# shards and the merge job with scripts/slurm/submit-eval.sh (the bundled model on a small
# synthetic sweep), waits, checks that the merged summary.csv and paired.csv equal a local
# unsharded run's; then requeues one array task (it resumes) and merges again; shuts the cluster
# down. Exit 77 (skipped) when Slurm or munge is not
# installed (apt-get install slurm-wlm munge) or when not root.
set -u
KVEC="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
SRC="$(cd "$2" && pwd)"
for tool in munged slurmctld slurmd sbatch squeue sinfo; do
    command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed (apt-get install slurm-wlm munge)"; exit 77; }
done
[ "$(id -u)" -eq 0 ] || { echo "SKIP: the test cluster runs as root (SlurmUser=root)"; exit 77; }
source "$SRC/tests/tools/cli_lib.sh"
source "$SRC/tests/slurm/slurm_cluster.sh"
trap 'slurm_stop; rm -rf "$DIR"' EXIT
export LC_ALL=C

EVAL=(-m "$SRC/models/kvec-tiny.gguf" --suite synthetic-1k --samples 2 --tasks niah_single,niah_multikey,qa,vt
      --policies full,snapkv,kvec --budgets 64,128 --max-new-tokens 8)
start=$(date +%s)
slurm_start "$DIR/slurm" || { fail "the Slurm cluster did not start"; tail -n 20 "$DIR"/slurm/*.log; exit 1; }
echo "ok: single-node Slurm cluster up ($(sinfo -h -o '%N %c CPUs %t'), $(( $(date +%s) - start )) s)"

# The reference: the same sweep unsharded, here.
expect 0 "local unsharded run" -- "$KVEC" eval "${EVAL[@]}" -t 1 --out "$DIR/whole"

expect 0 "submit the array job (4 shards) and the merge job" -- \
    bash "$SRC/scripts/slurm/submit-eval.sh" --shards 4 --cpus 1 --kvec "$KVEC" --out "$DIR/run" -- "${EVAL[@]}"
cat "$DIR/out"
jobs=$(grep -oE 'job [0-9]+' "$DIR/out" | awk '{print $2}' | tr '\n' ' ')
[ "$(echo "$jobs" | wc -w)" -eq 2 ] || fail "submit-eval.sh did not print two job ids"
# shellcheck disable=SC2086
timeout 600 bash -c "source '$SRC/tests/slurm/slurm_cluster.sh'; slurm_wait $jobs" || fail "the jobs did not finish in 10 minutes"
for k in 0 1 2 3; do
    [ -f "$DIR/run/shard-$k/shard.json" ] || fail "shard $k did not run"
    contains "$DIR/run/logs/shard-$k.log" "shard $k/4 (slurm)" "shard $k took its index from the Slurm array"
done
contains "$DIR/run/logs/merge.log" "merged 4 shards" "the merge job ran after the shards"
cmp -s "$DIR/whole/summary.csv" "$DIR/run/merged/summary.csv" || { fail "merged summary.csv differs from the unsharded run's"; diff "$DIR/whole/summary.csv" "$DIR/run/merged/summary.csv" | head; }
cmp -s "$DIR/whole/paired.csv" "$DIR/run/merged/paired.csv" || fail "merged paired.csv differs from the unsharded run's"
[ "$failures" -eq 0 ] && echo "ok: merged results of the Slurm array job equal the unsharded run's"

# A shard run again by Slurm (requeued, as after a preemption or a node failure) keeps its array
# index and resumes from its finished predictions; merged again, the results are the same.
# (Slurm holds a requeued job for about 2 minutes; StartTime=now releases it.)
array=${jobs%% *}
expect 0 "scontrol requeue ${array}_1" -- scontrol requeue "${array}_1"
scontrol update JobId="${array}_1" StartTime=now >/dev/null 2>&1
timeout 300 bash -c "source '$SRC/tests/slurm/slurm_cluster.sh'; slurm_wait $array" || fail "the requeued task did not finish"
[ "$(grep -c 'shard 1/4 (slurm)' "$DIR/run/logs/shard-1.log")" -eq 2 ] || fail "the requeued task did not run again as shard 1/4"
contains "$DIR/run/logs/shard-1.log" "resuming:" "the requeued shard resumes from its finished predictions"
expect 0 "merge job again" -- sbatch --parsable --output="$DIR/run/logs/merge2.log" "$SRC/scripts/slurm/eval-merge.sbatch" "$KVEC" "$DIR/run"
timeout 300 bash -c "source '$SRC/tests/slurm/slurm_cluster.sh'; slurm_wait $(cat "$DIR/out")" || fail "the second merge did not finish"
cmp -s "$DIR/whole/summary.csv" "$DIR/run/merged/summary.csv" || fail "merged summary.csv after the requeue differs"
[ "$failures" -eq 0 ] && echo "ok: requeued shard resumed; merged again, still equal to the unsharded run"
slurm_stop
echo "slurm test: $(( $(date +%s) - start )) s"
if [ "$failures" -ne 0 ]; then
    tail -n 30 "$DIR"/slurm/slurmctld.log "$DIR"/run/logs/*.log 2>/dev/null
    echo "$failures check(s) failed"
    exit 1
fi
echo "all Slurm checks passed"
