#!/usr/bin/env bash
# Usage: data_safety_test.sh /path/to/kvec SOURCE_DIR
# No finished prediction of `kvec eval` is lost (docs/reliability.md, "Evaluation output"):
#   1. a sweep killed with SIGKILL at several points and resumed each time (no --overwrite) ends
#      with the same summary as an uninterrupted run, and its totals count the killed invocations;
#   2. a second run on the same --out while the first runs is refused naming the holder, and the
#      first run's results are intact;
#   3. a full disk (a small tmpfs where one can be mounted; otherwise a file-size limit, which
#      makes write(2) fail as a full disk does) stops the run with one clear error, the
#      predictions file holds only whole records equal to the uninterrupted run's, and the same
#      command afterwards completes the run.
set -u
KVEC="$1"
SRC="$2"
source "$(dirname "$0")/cli_lib.sh"
export LC_ALL=C

M="$DIR/m.gguf"
"$KVEC" gen-model --layers 4 --embd 256 --heads 4 --kv-heads 2 --ff 768 --ctx 4096 -o "$M" 2>/dev/null || { echo "gen-model failed"; exit 1; }
LB="$SRC/data/longbench/fixture"
EVAL=(eval -m "$M" --data "$LB/hotpotqa.jsonl,$LB/qasper.jsonl,$LB/trec.jsonl" --policies full,streamingllm,snapkv,kvec
      --budgets 64,128 --samples 2 --max-length 1500 --max-new-tokens 24 -t 1)
TOTAL=35  # 5 samples (the fixture has 1 hotpotqa, 2 qasper, 2 trec) x (full + 3 policies x 2 budgets)

lines() {  # records in $1/predictions.jsonl (0 when there is none; grep -c exits 1 on 0 lines)
    if [ -f "$1/predictions.jsonl" ]; then grep -c '' "$1/predictions.jsonl"; else echo 0; fi
}
same_file() { cmp -s "$1" "$2" || { fail "$3: $1 and $2 differ"; diff "$1" "$2" | head -20; }; }

# The reference: one uninterrupted run.
expect 0 "uninterrupted run" -- "$KVEC" "${EVAL[@]}" --out "$DIR/ref"
[ "$(lines "$DIR/ref")" -eq "$TOTAL" ] || fail "the reference run has $(lines "$DIR/ref") predictions, expected $TOTAL"

# 1. SIGKILL at several points, resume each time; each run is killed once it has written a
# prediction and its cost file (written after each record: killed between the two, a run's first
# record would leave no trace of the invocation in the totals, which the check below counts).
K="$DIR/killed"
kills=0
costs() { find "$1/invocations" -name '*.json' 2>/dev/null | wc -l; }
for at in 1 9 23; do
    before=$(costs "$K")
    "$KVEC" "${EVAL[@]}" --out "$K" >/dev/null 2>"$DIR/kill-$at.err" &
    pid=$!
    for _ in $(seq 1 3000); do
        [ "$(lines "$K")" -ge "$at" ] && [ "$(costs "$K")" -gt "$before" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    if kill -9 "$pid" 2>/dev/null; then kills=$((kills + 1)); fi
    wait "$pid" 2>/dev/null
    echo "ok: killed at $(lines "$K") predictions"
done
[ "$kills" -eq 3 ] || fail "only $kills of 3 runs were still running when killed"
expect 0 "resume after the kills (no --overwrite)" -- "$KVEC" "${EVAL[@]}" --out "$K"
[ "$(lines "$K")" -eq "$TOTAL" ] || fail "after resuming: $(lines "$K") predictions, expected $TOTAL"
same_file "$DIR/ref/summary.csv" "$K/summary.csv" "killed and resumed vs uninterrupted"
same_file "$DIR/ref/paired.csv" "$K/paired.csv" "killed and resumed vs uninterrupted (paired)"
python3 - "$DIR/ref/metrics.json" "$K/metrics.json" <<'EOF' || fail "totals of the killed invocations"
import json, sys
ref, k = (json.load(open(p)) for p in sys.argv[1:3])
t = k["total"]
assert t["invocations"] == 4, t            # 3 killed + 1 that finished
# The killed runs' generations are counted: the cost file is rewritten after each record, so a
# kill between a record and its cost loses at most that one record's cost.
assert t["generations"] >= 35 - 3, t
assert t["wall_seconds"] > k["timing"]["wall_seconds"], t
assert ref["results"] == k["results"] if "results" in ref else True
print("ok: totals keep the killed invocations:", t)
EOF

# 2. Two runs on one directory: the second is refused, the first completes intact.
C="$DIR/concurrent"
"$KVEC" "${EVAL[@]}" --out "$C" >/dev/null 2>"$DIR/first.err" &
first=$!
for _ in $(seq 1 3000); do [ "$(lines "$C")" -ge 1 ] && break; sleep 0.05; done
expect 1 "a second run on the same --out is refused" -- "$KVEC" "${EVAL[@]}" --out "$C"
contains err "is in use by another kvec eval (pid $first on host" "the refusal names the holder"
wait "$first" || fail "the first run failed after the second was refused"
[ "$(lines "$C")" -eq "$TOTAL" ] || fail "the first run has $(lines "$C") predictions, expected $TOTAL"
same_file "$DIR/ref/summary.csv" "$C/summary.csv" "the first run's results"

# 3. A full disk.
check_whole_records() {  # every line of $1 ends in a newline, is a record, and equals the reference's
    python3 - "$1" "$DIR/ref/predictions.jsonl" <<'EOF'
import json, sys
data = open(sys.argv[1], "rb").read()
assert data.endswith(b"\n") or not data, "the last record is incomplete"
ref = {}
for line in open(sys.argv[2]):
    r = json.loads(line)
    ref[(r["id"], r["policy"], r["budget"])] = r
n = 0
for line in data.decode().splitlines():
    r = json.loads(line)
    e = ref[(r["id"], r["policy"], r["budget"])]
    for k in ("prediction", "score", "kv_bytes", "coverage"):
        assert r[k] == e[k], (k, r, e)
    n += 1
print(f"ok: {n} whole records, equal to the uninterrupted run's")
EOF
}
F="$DIR/full"
mkdir -p "$F"
limit=$(head -n 12 "$DIR/ref/predictions.jsonl" | wc -c)
limit=$((limit + 200))
if mount -t tmpfs -o size=$((limit / 1024 + 8))k kvec-test "$F" 2>/dev/null; then
    mounted=1
    echo "ok: a small tmpfs is mounted at $F"
    "$KVEC" "${EVAL[@]}" --out "$F" >/dev/null 2>"$DIR/err"
    status=$?
else
    mounted=0
    echo "note: no tmpfs can be mounted here; a file-size limit of $limit bytes stands for the full disk"
    ( trap '' XFSZ; ulimit -f $(( (limit + 1023) / 1024 )); exec "$KVEC" "${EVAL[@]}" --out "$F" ) >/dev/null 2>"$DIR/err"
    status=$?
fi
[ "$status" -eq 1 ] || fail "the run on a full disk exited $status, expected 1"
grep -q '^error: cannot write' "$DIR/err" || fail "no clear error on a full disk: $(tail -n 3 "$DIR/err")"
kept=$(lines "$F")
[ "$kept" -ge 1 ] && [ "$kept" -lt "$TOTAL" ] || fail "$kept predictions kept on the full disk"
check_whole_records "$F/predictions.jsonl" || fail "the predictions on the full disk"
if [ "$mounted" -eq 1 ]; then
    cp -a "$F" "$DIR/full-copy"; umount "$F"; rm -rf "$F"; mv "$DIR/full-copy" "$F"
fi
expect 0 "the same command completes the run once there is room" -- "$KVEC" "${EVAL[@]}" --out "$F"
[ "$(lines "$F")" -eq "$TOTAL" ] || fail "after the full disk: $(lines "$F") predictions, expected $TOTAL"
same_file "$DIR/ref/summary.csv" "$F/summary.csv" "full disk then resumed vs uninterrupted"

if [ "$failures" -ne 0 ]; then
    echo "$failures check(s) failed"
    exit 1
fi
echo "all data-safety checks passed"
