#!/usr/bin/env bash
# Usage: shard_test.sh /path/to/kvec SOURCE_DIR
# Sharded sweeps from the command line (docs/evaluation.md, "Sharding and merging"), on the
# bundled model and the synthetic suite:
#   1. 3 shards (--shard K/3), one of them killed with SIGKILL midway and run again (it resumes
#      from its finished predictions), merged with `kvec eval merge`: summary.csv and paired.csv
#      equal the unsharded run's, the predictions are the same records;
#   2. the query-agnostic protocol (niah_askmany's questions share one compressed context) in 2
#      shards merges to the unsharded result too;
#   3. the index contracts: --shard slurm reads the SLURM_ARRAY_* variables (a 1-based array
#      too), --shard k8s/N reads JOB_COMPLETION_INDEX; the Kubernetes manifest in deploy/k8s/ is
#      valid YAML whose --shard k8s/N names its own completion count;
#   4. errors: bad --shard values, a missing shard, a repeated shard, an unfinished shard, a shard
#      still running.
# Shards without items (more shards than items) are checked too.
set -u
KVEC="$1"
SRC="$(cd "$2" && pwd)"
source "$(dirname "$0")/cli_lib.sh"
export LC_ALL=C

EVAL=(eval -m "$SRC/models/kvec-tiny.gguf" --suite synthetic-1k --samples 2 --tasks niah_single,niah_multikey,vt,qa,cwe
      --policies full,snapkv,kvec --budgets 64,128 --max-new-tokens 8 -t 1)
lines() { if [ -f "$1/predictions.jsonl" ]; then grep -c '' "$1/predictions.jsonl"; else echo 0; fi; }
same_file() { cmp -s "$1" "$2" || { fail "$3: $1 and $2 differ"; diff "$1" "$2" | head -20; }; }
same_records() {  # the same prediction records, in any order
    cmp -s <(sort "$1/predictions.jsonl") <(sort "$2/predictions.jsonl") || fail "$3: the predictions differ"
}

# 1. Three shards, one killed midway and resumed.
expect 0 "unsharded run" -- "$KVEC" "${EVAL[@]}" --out "$DIR/whole"
TOTAL=$(lines "$DIR/whole")
expect 0 "shard 0/3" -- "$KVEC" "${EVAL[@]}" --shard 0/3 --out "$DIR/s0"
contains err "shard 0/3 (explicit):" "the shard names itself"
expect 0 "shard 2/3" -- "$KVEC" "${EVAL[@]}" --shard 2/3 --out "$DIR/s2"
# Shard 1, killed after its first predictions.
"$KVEC" "${EVAL[@]}" --shard 1/3 --out "$DIR/s1" >/dev/null 2>"$DIR/kill.err" &
pid=$!
for _ in $(seq 1 3000); do
    [ "$(lines "$DIR/s1")" -ge 2 ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.02
done
killed=0
kill -9 "$pid" 2>/dev/null && killed=1
wait "$pid" 2>/dev/null
[ "$killed" -eq 1 ] || fail "shard 1/3 finished before it could be killed"
echo "ok: shard 1/3 killed at $(lines "$DIR/s1") predictions"
expect 1 "merge refuses the unfinished shard" -- "$KVEC" eval merge "$DIR/merged" "$DIR/s0" "$DIR/s1" "$DIR/s2"
contains err "(shard 1/3) is not finished" "unfinished shard named"
expect 0 "shard 1/3 run again" -- "$KVEC" "${EVAL[@]}" --shard 1/3 --out "$DIR/s1"
contains err "resuming:" "the killed shard resumes from its finished predictions"
n=$(( $(lines "$DIR/s0") + $(lines "$DIR/s1") + $(lines "$DIR/s2") ))
[ "$n" -eq "$TOTAL" ] || fail "the shards hold $n predictions, the unsharded run $TOTAL"
expect 0 "merge 3 shards" -- "$KVEC" eval merge "$DIR/merged" "$DIR/s2" "$DIR/s0" "$DIR/s1"
contains out "Merged from 3 shards" "summary.md says it is a merge"
same_file "$DIR/whole/summary.csv" "$DIR/merged/summary.csv" "merged vs unsharded summary.csv"
same_file "$DIR/whole/paired.csv" "$DIR/merged/paired.csv" "merged vs unsharded paired.csv"
same_records "$DIR/whole" "$DIR/merged" "merged vs unsharded"
/usr/bin/python3 - "$DIR/whole/metrics.json" "$DIR/merged/metrics.json" <<'PY' || fail "merged metrics.json results and paired statistics"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for key in ("tasks", "budgets", "records", "expected_records", "complete", "results", "paired", "bootstrap"):
    assert a[key] == b[key], key
assert b["total"]["invocations"] == 4, b["total"]  # 3 shards + the killed invocation
PY
[ -f "$DIR/merged/score_vs_budget.png" ] || fail "the merge draws the plots"

# 2. Query-agnostic: niah_askmany's questions share a compressed context and stay in one shard.
QA=(eval -m "$SRC/models/kvec-tiny.gguf" --suite synthetic-1k --samples 1 --tasks niah_askmany,niah_single,qa
    --protocol query-agnostic --policies full,snapkv --compression 0.5 --max-new-tokens 8 -t 1)
expect 0 "query-agnostic unsharded" -- "$KVEC" "${QA[@]}" --out "$DIR/qa-whole"
expect 0 "query-agnostic shard 0/2" -- "$KVEC" "${QA[@]}" --shard 0/2 --out "$DIR/qa0"
expect 0 "query-agnostic shard 1/2" -- "$KVEC" "${QA[@]}" --shard 1/2 --out "$DIR/qa1"
expect 0 "query-agnostic merge" -- "$KVEC" eval merge "$DIR/qa-merged" "$DIR/qa0" "$DIR/qa1"
same_file "$DIR/qa-whole/summary.csv" "$DIR/qa-merged/summary.csv" "query-agnostic merged vs unsharded"
/usr/bin/python3 - "$DIR/qa0/shard.json" "$DIR/qa1/shard.json" <<'PY' || fail "niah_askmany's questions in one shard"
import json, sys
homes = {json.load(open(p))["shard"]["index"] for p in sys.argv[1:3]
         for it in json.load(open(p))["items"] if it["task"] == "niah_askmany"}
assert len(homes) == 1, homes
PY

# Shards without items (1 item, 3 shards) are finished runs too.
ONE=(eval -m "$SRC/models/kvec-tiny.gguf" --suite synthetic-1k --samples 1 --tasks niah_single --policies full,snapkv
     --budgets 64 --max-new-tokens 4 -t 1)
expect 0 "1 item unsharded" -- "$KVEC" "${ONE[@]}" --out "$DIR/one"
for k in 0 1 2; do expect 0 "1 item, shard $k/3" -- "$KVEC" "${ONE[@]}" --shard "$k/3" --out "$DIR/one$k"; done
[ "$(( $(lines "$DIR/one0") + $(lines "$DIR/one1") + $(lines "$DIR/one2") ))" -eq 2 ] || fail "1 item x 2 combinations over 3 shards"
expect 0 "merge with empty shards" -- "$KVEC" eval merge "$DIR/one-merged" "$DIR/one0" "$DIR/one1" "$DIR/one2"
same_file "$DIR/one/summary.csv" "$DIR/one-merged/summary.csv" "merged with empty shards vs unsharded"

# 3. Index contracts of the schedulers.
expect 0 "--shard slurm (array 1-3: task 2 is shard 1/3)" -- env SLURM_ARRAY_TASK_ID=2 SLURM_ARRAY_TASK_MIN=1 \
    SLURM_ARRAY_TASK_MAX=3 SLURM_ARRAY_TASK_COUNT=3 "$KVEC" "${EVAL[@]}" --shard slurm --out "$DIR/slurm1"
contains err "shard 1/3 (slurm):" "Slurm array task 2 of 1-3 is shard 1/3"
same_records "$DIR/s1" "$DIR/slurm1" "--shard slurm vs --shard 1/3"
# The manifest's command, run as Kubernetes would run it for completion index 2.
K8S="$SRC/deploy/k8s/kvec-eval-indexed-job.yaml"
N=$(/usr/bin/python3 - "$K8S" <<'PY'
import sys, yaml
job = yaml.safe_load(open(sys.argv[1]))
spec = job["spec"]
assert job["apiVersion"] == "batch/v1" and job["kind"] == "Job", "not a batch/v1 Job"
assert spec["completionMode"] == "Indexed", "not an Indexed Job"
c = spec["template"]["spec"]["containers"][0]
cmd = c["command"] + c.get("args", [])
shard = cmd[cmd.index("--shard") + 1]
assert shard == "k8s/%d" % spec["completions"], "--shard %s but %d completions" % (shard, spec["completions"])
assert "$(JOB_COMPLETION_INDEX)" in cmd[cmd.index("--out") + 1], "--out is not per shard"
assert any(e["name"] == "JOB_COMPLETION_INDEX" for e in c["env"]), "no JOB_COMPLETION_INDEX"
merge = yaml.safe_load(open(sys.argv[1].replace("indexed-job", "merge-job")))
assert "eval merge" in " ".join(merge["spec"]["template"]["spec"]["containers"][0]["args"])
print(spec["completions"])
PY
) || fail "the Kubernetes manifest $K8S"
echo "ok: $K8S is an Indexed Job of $N completions with --shard k8s/$N"
expect 0 "--shard k8s/3 with JOB_COMPLETION_INDEX=1" -- env JOB_COMPLETION_INDEX=1 "$KVEC" "${EVAL[@]}" --shard k8s/3 --out "$DIR/k8s1"
contains err "shard 1/3 (k8s):" "JOB_COMPLETION_INDEX=1 is shard 1/3"
same_records "$DIR/s1" "$DIR/k8s1" "--shard k8s/3 vs --shard 1/3"

# 4. Errors.
expect 1 "--shard 3/3" -- "$KVEC" "${EVAL[@]}" --shard 3/3 --out "$DIR/e1"
contains err "shard 3 does not exist among 3 shards" "K >= N"
expect 1 "--shard 0/0" -- "$KVEC" "${EVAL[@]}" --shard 0/0 --out "$DIR/e2"
contains err "at least 1" "N < 1"
expect 1 "--shard garbage" -- "$KVEC" "${EVAL[@]}" --shard half --out "$DIR/e3"
contains err "expected K/N" "garbage"
expect 1 "--shard slurm outside an array job" -- env -u SLURM_ARRAY_TASK_ID "$KVEC" "${EVAL[@]}" --shard slurm --out "$DIR/e4"
contains err "SLURM_ARRAY_TASK_ID is not set" "missing Slurm variable"
expect 1 "--shard k8s/3 outside an Indexed Job" -- env -u JOB_COMPLETION_INDEX "$KVEC" "${EVAL[@]}" --shard k8s/3 --out "$DIR/e5"
contains err "JOB_COMPLETION_INDEX is not set" "missing Kubernetes variable"
expect 1 "a shard's directory resumed as another shard" -- "$KVEC" "${EVAL[@]}" --shard 2/3 --out "$DIR/s1"
contains err "holds a different run" "another shard into a shard's directory"
expect 1 "merge without shard 1" -- "$KVEC" eval merge "$DIR/m2" "$DIR/s0" "$DIR/s2"
contains err "shard(s) 1/3 not given" "missing shard named"
contains err "in no shard:" "missing items named"
expect 1 "merge with shard 1 twice" -- "$KVEC" eval merge "$DIR/m3" "$DIR/s0" "$DIR/s1" "$DIR/s2" "$DIR/k8s1"
contains err "shard(s) given twice: 1/3" "repeated shard named"
# One process holds shard 0's lock as a running shard does (killed, it lets go).
/usr/bin/python3 -c 'import fcntl, sys, time; f = open(sys.argv[1], "a"); fcntl.flock(f, fcntl.LOCK_EX); time.sleep(60)' \
    "$DIR/s0/.kvec-eval.lock" &
holder=$!
sleep 0.5
expect 1 "merge while a shard runs" -- "$KVEC" eval merge "$DIR/m5" "$DIR/s0" "$DIR/s1" "$DIR/s2"
contains err "'$DIR/s0' is in use by another kvec eval" "running shard named"
kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null
expect 1 "merge of an unsharded run" -- "$KVEC" eval merge "$DIR/m4" "$DIR/whole"
contains err "not made with --shard" "unsharded directory"
expect 1 "merge into a run's directory" -- "$KVEC" eval merge "$DIR/whole" "$DIR/s0" "$DIR/s1" "$DIR/s2"
contains err "holds another run" "merge output refused"

if [ "$failures" -ne 0 ]; then
    echo "$failures check(s) failed"
    exit 1
fi
echo "all shard checks passed"
