#!/usr/bin/env bash
# Coverage-guided fuzzing of kvec's parsers and model path with libFuzzer (clang, ASan + UBSan).
#   scripts/fuzz.sh                       every harness, 30 minutes each, one after the other
#   scripts/fuzz.sh --seconds 600 gguf    one harness for 10 minutes
#   scripts/fuzz.sh --parallel            every harness at once (one process each)
#   scripts/fuzz.sh --ci --seconds 20 --build build/fuzz gguf   (what `ctest --preset fuzz` runs)
# Builds the `fuzz` preset first (unless --build names a built tree). Each harness starts from its
# seed corpus tests/fuzz/corpus/NAME (never written) and keeps what it finds in
# BUILD/fuzz-work/NAME; crashes, leaks, timeouts and out-of-memory inputs go to
# BUILD/fuzz-findings/NAME-* and make the script fail. A finding, once fixed, belongs in the seed
# corpus (docs/reliability.md). Figures per harness: BUILD/fuzz-summary.md.
set -euo pipefail
cd "$(dirname "$0")/.."
ALL=(gguf model forward tokenizer hf_import chat_template longbench policy)
seconds=1800
build=""
ci=0
parallel=0
names=()
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) seconds="$2"; shift 2 ;;
        --build) build="$2"; shift 2 ;;
        --ci) ci=1; shift ;;
        --parallel) parallel=1; shift ;;
        -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
        -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
        *) names+=("$1"); shift ;;
    esac
done
[ ${#names[@]} -gt 0 ] || names=("${ALL[@]}")
if [ -z "$build" ]; then
    build=build/fuzz
    cmake --preset fuzz >/dev/null
    cmake --build --preset fuzz -j "$(nproc)"
fi
export KVEC_SOURCE_DIR="$PWD"
export OMP_NUM_THREADS=1
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
mkdir -p "$build/fuzz-findings"

run_one() {
    local name="$1" exe="$build/tests/fuzz/fuzz_$1"
    local seed="tests/fuzz/corpus/$name" work="$build/fuzz-work/$name" log="$build/fuzz-$name.log"
    [ -x "$exe" ] || { echo "fuzz.sh: $exe is not built" >&2; return 1; }
    mkdir -p "$work"
    local dict=()
    [ -f "tests/fuzz/dict/$name.dict" ] && dict=(-dict="tests/fuzz/dict/$name.dict")
    local status=0
    "$exe" "$work" "$seed" "${dict[@]}" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$build/fuzz-findings/$name-" -print_final_stats=1 >"$log" 2>&1 || status=$?
    # CPU seconds the harness used (user + system of this subshell's children): with --parallel,
    # or beside other work, it is less than the wall-clock seconds.
    local cpu
    times >"$log.times"  # (not in a pipe: a subshell has no children)
    cpu=$(tail -1 "$log.times" | awk '{ split($1, u, /[ms]/); split($2, s, /[ms]/); printf "%d", u[1]*60 + u[2] + s[1]*60 + s[2] }')
    local execs cov ft corp
    execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || echo "?")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || echo "?")
    ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || echo "?")
    corp=$(grep -o 'corp: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || echo "?")
    local line="| $name | $seconds | $cpu | $execs | $cov | $ft | $corp | $([ $status -eq 0 ] && echo none || echo "FOUND (exit $status, see $log)") |"
    echo "$line" >>"$build/fuzz-summary.md"
    echo "$line"
    if [ $status -ne 0 ]; then
        echo "--- $log (last 40 lines):"; tail -n 40 "$log"
    fi
    return $status
}

[ -f "$build/fuzz-summary.md" ] || printf '| harness | seconds | CPU seconds | executions | coverage (edges) | features | corpus | findings |\n|---|---:|---:|---:|---:|---:|---:|---|\n' >"$build/fuzz-summary.md"
failed=0
if [ $parallel -eq 1 ]; then
    pids=()
    for n in "${names[@]}"; do run_one "$n" & pids+=($!); done
    for p in "${pids[@]}"; do wait "$p" || failed=1; done
else
    for n in "${names[@]}"; do run_one "$n" || failed=1; done
fi
[ $ci -eq 1 ] || echo "summary: $build/fuzz-summary.md"
exit $failed
