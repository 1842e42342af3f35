#!/usr/bin/env bash
# Usage: eval_test.sh /path/to/kvec /path/to/source
# End-to-end test of `kvec eval` and `kvec perplexity` on a tiny random model: the LongBench
# fixture through --data (table, CSV, metrics, plots, config provenance), resuming an interrupted
# sweep (same results), shared vs separate prefill (same results), a synthetic suite, fidelity,
# perplexity, and the error paths.
set -u
KVEC="$1"
SRC="$2"
source "$(dirname "$0")/cli_lib.sh"

M="$DIR/tiny.gguf"
expect 0 "gen-model" -- "$KVEC" gen-model --layers 2 --embd 64 --heads 4 --kv-heads 2 --ff 128 --vocab 512 --ctx 2048 -o "$M"
DATA=$(ls "$SRC"/data/longbench/fixture/*.jsonl | paste -sd, -)
POL="full,streamingllm,h2o,snapkv,pyramidkv,adakv,kvec"
COMMON=(-m "$M" --data "$DATA" --policies "$POL" --budgets 64,128 --max-new-tokens 8 --max-length 1000 -t 2)

# 1. The fixture end to end.
A="$DIR/a"
expect 0 "eval --data runs the LongBench fixture" -- "$KVEC" eval "${COMMON[@]}" --out "$A"
for f in config.json predictions.jsonl metrics.json summary.md summary.csv score_vs_budget.png coverage_vs_budget.png; do
    [ -s "$A/$f" ] || fail "missing output $f"
done
for f in score_vs_budget.png coverage_vs_budget.png; do
    head -c 4 "$A/$f" | grep -q PNG || fail "$f is not a PNG"
done
n=$(wc -l <"$A/predictions.jsonl")
ns=$(cat "$SRC"/data/longbench/fixture/*.jsonl | grep -c .)
[ "$n" -eq $((ns * 13)) ] || fail "predictions: $n lines, expected $((ns * 13)) (samples x 13 combinations)"
contains "$A/summary.md" "| full (no eviction) |" "summary table"
contains "$A/summary.md" "passage_retrieval_en" "every task in the table"
contains "$A/summary.md" "prefill shared" "mode stated"
contains "$A/summary.csv" "policy,budget,2wikimqa" "csv header"
contains "$A/config.json" "\"git_commit\"" "config provenance"
contains "$A/config.json" "\"sha256\"" "model hash"
contains "$A/metrics.json" "\"complete\": true" "metrics complete"
sha=$(sha256sum "$M" | cut -d' ' -f1)
contains "$A/config.json" "$sha" "model hash equals sha256sum"

# 2. Resume: cut the predictions (leaving a torn line), rerun, same table.
B="$DIR/b"
mkdir -p "$B"
cp "$A/config.json" "$B/"
head -n 100 "$A/predictions.jsonl" >"$B/predictions.jsonl"
sed -n 101p "$A/predictions.jsonl" | head -c 40 >>"$B/predictions.jsonl"
expect 0 "eval resumes an interrupted sweep" -- "$KVEC" eval "${COMMON[@]}" --out "$B"
contains "$DIR/err" "resuming: 100 predictions" "resume message"
contains "$DIR/err" "incomplete last line" "torn line dropped"
[ "$(wc -l <"$B/predictions.jsonl")" -eq "$n" ] || fail "resumed predictions: $(wc -l <"$B/predictions.jsonl") lines, expected $n"
cmp -s "$A/summary.csv" "$B/summary.csv" || fail "resumed sweep gives a different summary.csv"
expect 0 "rerun of a finished sweep does nothing new" -- "$KVEC" eval "${COMMON[@]}" --out "$B"
[ "$(wc -l <"$B/predictions.jsonl")" -eq "$n" ] || fail "finished sweep grew"
expect 1 "a different run in the same directory is refused" -- "$KVEC" eval "${COMMON[@]}" --samples 1 --out "$B"
contains "$DIR/err" "different run" "mismatch message"

# 3. Separate prefill per combination gives the same results.
C="$DIR/c"
expect 0 "eval --no-share-prefill" -- "$KVEC" eval "${COMMON[@]}" --no-share-prefill --out "$C"
cmp -s "$A/summary.csv" "$C/summary.csv" || fail "separate prefills give a different summary.csv"
contains "$C/summary.md" "separate prefill" "separate mode stated"

# 4. A synthetic suite (one sample per task, short generations).
S="$DIR/s"
expect 0 "eval --suite synthetic-1k" -- "$KVEC" eval -m "$M" --suite synthetic-1k --samples 1 --policies full,snapkv,kvec --budgets 64 --max-new-tokens 4 -t 2 --out "$S"
contains "$S/summary.md" "niah_single" "synthetic tasks in the table"
[ "$(wc -l <"$S/predictions.jsonl")" -eq 36 ] || fail "synthetic predictions: expected 12 items (8 tasks + niah_askmany's 4 questions) x 3 combinations"
contains "$S/summary.md" "Paired: kvec against each policy" "paired comparisons in the summary"
contains "$S/summary.csv" "average_lo,average_hi" "intervals in the csv"
[ -s "$S/paired.csv" ] || fail "missing paired.csv"

# 4b. The query-agnostic protocol on the dev split, compression ratios, a task subset.
Q="$DIR/q"
expect 0 "eval --protocol query-agnostic --compression" -- "$KVEC" eval -m "$M" --suite synthetic-1k --split dev --tasks niah_askmany,qa --samples 1 --protocol query-agnostic --policies full,snapkv,kvec --compression 0.5,0.875 --max-new-tokens 4 -t 2 --out "$Q"
contains "$Q/summary.md" "protocol query-agnostic, split dev (seed 2)" "protocol and split stated"
contains "$Q/summary.md" "| c=0.5 | c=0.875 |" "compression columns"
contains "$Q/predictions.jsonl" "\"compression\":0.875" "compression in the records"
contains "$Q/config.json" "\"protocol\": \"query-agnostic\"" "protocol in the run configuration"
[ "$(wc -l <"$Q/predictions.jsonl")" -eq 25 ] || fail "query-agnostic predictions: expected 5 items x 5 combinations"
expect 1 "decode-time eviction is refused in the query-agnostic protocol" -- "$KVEC" eval -m "$M" --suite synthetic-1k --samples 1 --tasks qa --protocol query-agnostic --policies h2o:decode=1 --budgets 64 -t 2 --out "$DIR/q2"
contains "$DIR/err" "decode-time eviction does not apply" "decode-time refusal message"
expect 0 "--budgets and --compression together: both kinds of column" -- "$KVEC" eval -m "$M" --suite synthetic-1k --tasks qa --samples 1 --policies full,snapkv --budgets 64 --compression 0.5 --max-new-tokens 4 -t 2 --out "$DIR/q3"
contains "$DIR/q3/summary.md" "| B=64 | c=0.5 |" "budget and compression columns"
[ "$(wc -l <"$DIR/q3/predictions.jsonl")" -eq 3 ] || fail "budgets and compression: expected 1 item x 3 combinations"
grep -q '"prefills": 1,' "$DIR/q3/metrics.json" || fail "budgets and compression: one prefill for the item"
expect 1 "a compression ratio of 1" -- "$KVEC" eval -m "$M" --suite synthetic-1k --compression 1 --out "$DIR/q4"
expect 1 "--tasks with an unknown task" -- "$KVEC" eval -m "$M" --suite synthetic-1k --tasks nosuch --out "$DIR/q5"
contains "$DIR/err" "not a task of synthetic-1k" "unknown task message"

# 5. Fidelity and perplexity.
T="$DIR/text.txt"
cat "$SRC"/data/text/sotu/*.txt 2>/dev/null | head -c 60000 >"$T"
[ -s "$T" ] || for i in $(seq 1 800); do echo "The committee met on day $i and discussed the budget of the year." >>"$T"; done
F="$DIR/f"
expect 0 "eval --fidelity" -- "$KVEC" eval -m "$M" --fidelity "$T" --policies full,streamingllm,snapkv:kernel=7,window=16 --budgets 64,128 -c 512 --continuation 16 -t 2 --out "$F"
for f in fidelity.json fidelity.md fidelity.csv fidelity_kl.png fidelity_top1.png; do [ -s "$F/$f" ] || fail "missing $f"; done
contains "$F/fidelity.md" "| full | - | 0.00000 |" "full cache has zero KL"
contains "$F/fidelity.md" "NLL - full NLL" "continuation NLL against the full cache"
[ -s "$F/fidelity_paired.csv" ] || fail "missing fidelity_paired.csv"
# A label with a comma is one quoted CSV field.
contains "$F/fidelity_paired.csv" "streamingllm,\"snapkv:kernel=7,window=16\",64," "paired CSV quotes a label with a comma"
contains "$F/fidelity.csv" "\"snapkv:kernel=7,window=16\",128," "fidelity CSV quotes a label with a comma"
expect 0 "eval --fidelity heldout:test" -- "$KVEC" eval -m "$M" --fidelity heldout:test --policies full,snapkv --budgets 64 -c 512 --continuation 16 -t 2 --out "$DIR/f2"
contains "$DIR/f2/config.json" "\"heldout\": \"test\"" "held-out split recorded"
expect 0 "perplexity" -- "$KVEC" perplexity -m "$M" -f "$T" -c 128 --chunks 3 -t 2
contains "$DIR/out" "Final estimate: PPL = " "perplexity output"
contains "$DIR/out" "[3]" "per-chunk output"
expect 0 "perplexity with a policy" -- "$KVEC" perplexity -m "$M" -f "$T" -c 128 --chunks 2 --policy snapkv --budget 40 -t 2
contains "$DIR/err" "policy snapkv:budget=40" "policy stated"

# 6. Errors.
expect 1 "unknown policy" -- "$KVEC" eval -m "$M" --data "$DATA" --policies nosuch --out "$DIR/e1"
contains "$DIR/err" "unknown eviction policy" "unknown policy message"
expect 1 "budget below the window" -- "$KVEC" eval -m "$M" --data "$DATA" --policies snapkv --budgets 8 --out "$DIR/e2"
expect 1 "no data source" -- "$KVEC" eval -m "$M" --out "$DIR/e3"
expect 1 "missing data file" -- "$KVEC" eval -m "$M" --data "$DIR/absent.jsonl" --out "$DIR/e4"
printf '{"input": "x"}\n' >"$DIR/qasper.jsonl"
expect 1 "malformed LongBench file" -- "$KVEC" eval -m "$M" --data "$DIR/qasper.jsonl" --out "$DIR/e5"
contains "$DIR/err" "qasper.jsonl:1" "malformed file message names the line"
expect 1 "--chat without a template" -- "$KVEC" eval -m "$M" --data "$DATA" --chat --out "$DIR/e6"
expect 1 "perplexity: text too short" -- "$KVEC" perplexity -m "$M" -f "$DIR/qasper.jsonl" -c 128
contains "$DIR/err" "you need at least" "short text message"
expect 1 "perplexity: budget without policy" -- "$KVEC" perplexity -m "$M" -f "$T" --budget 64

if [ "$failures" -ne 0 ]; then
    echo "$failures check(s) failed"
    exit 1
fi
echo "all eval checks passed"
