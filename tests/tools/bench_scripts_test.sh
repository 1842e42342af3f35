#!/usr/bin/env bash
# Usage: bench_scripts_test.sh KVEC SOURCE_DIR
# The benchmark scripts on the tiny model (their figures are not checked, only what they compute
# from `kvec bench`): scripts/bench-depth-share.py alternates the depths' order and gives the bound
# the bytes set as the ratio of bench's bytes per token; scripts/bench-ab.py gives a ratio per
# test. And their refusals.
set -u
KVEC="$1"
SRC="$2"
source "$(dirname "$0")/cli_lib.sh"
MODEL="$SRC/models/kvec-tiny.gguf"
SHARE="$SRC/scripts/bench-depth-share.py"

expect 0 "bench-depth-share.py, two invocations" -- python3 "$SHARE" "$KVEC" "$MODEL" 32 2 -n 4 -r 1
contains out "invocation 1 (-d 0,32)" "first invocation: depth 0 first"
contains out "invocation 2 (-d 32,0)" "second invocation: the order swapped"
contains out "over 2 invocations" "summary line"
# The bound is bench's bytes per token at depth 0 over those at depth 32 (full cache: fixed bytes).
"$KVEC" bench -m "$MODEL" -t 2 -p 0 -n 4 -d 0,32 -r 1 --no-bandwidth -o csv >"$DIR/bench.csv" 2>/dev/null ||
    fail "kvec bench for the bytes"
want=$(python3 - "$DIR/bench.csv" <<'PY'
import csv, sys
rows = {int(r["depth"]): float(r["bytes_per_token"]) for r in csv.DictReader(open(sys.argv[1]))}
print(f"bound the bytes set: {rows[0] / rows[32]:.3f}")
PY
)
contains out "$want" "the bound is the ratio of the bytes per token"
grep -q "bound the bytes set: 0\.9[0-9][0-9]" "$DIR/out" || fail "a bound below 1 for the 32 entries added"

expect 1 "a depth of 0 is refused" -- python3 "$SHARE" "$KVEC" "$MODEL" 0 2
contains err "DEPTH must be above 0" "depth message"
expect 1 "two tests at a depth are refused" -- python3 "$SHARE" "$KVEC" "$MODEL" 32 1 -n 4,8 -r 1
contains err "expected one generation test per depth" "two -n message"

expect 0 "bench-ab.py, one binary against itself" -- python3 "$SRC/scripts/bench-ab.py" "$KVEC" "$KVEC" "$MODEL" 2 -p 16 -n 4
contains out "pp16: after / before" "prefill ratio"
contains out "tg4: after / before" "decode ratio"
finish
