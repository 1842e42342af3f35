#!/usr/bin/env bash
# Usage: cli_policy_test.sh /path/to/kvec
# End-to-end checks of eviction from the command line: `kvec policies`, and `kvec run --policy`
# with --budget / --ratio / --chunk / --decode-evict printing the memory before and after eviction,
# the peak (within budget + chunk when chunked), coverage and policy time; the error paths.
set -u
KVEC="$1"
source "$(dirname "$0")/cli_lib.sh"

# number FILE REGEX: the first integer captured after REGEX (sed -E syntax, one group)
number() { sed -nE "s/.*$2.*/\1/p" "$DIR/$1" | head -1; }

expect 0 "policies lists every policy" -- "$KVEC" policies
for p in full random streaming h2o tova snapkv pyramidkv ada-snapkv keydiff kvec knorm lagkv expected-attention kvzip; do
    contains out "$p " "policy $p listed"
done
contains out "budget=128" "budget default"
contains out "gamma=0 " "kvec gamma default (coverage off)"
contains out "max | avg" "choices listed"
expect 0 "policies NAME shows one policy" -- "$KVEC" policies kvec
contains out "alpha=0.2" "kvec alpha default"
contains out "layers=global" "kvec cross-layer pool default"
expect 1 "policies: unknown name" -- "$KVEC" policies nope
contains err "unknown eviction policy 'nope'" "unknown policy message"

M="$DIR/tiny.gguf"
expect 0 "gen-model" -- "$KVEC" gen-model --layers 2 --embd 128 --heads 4 --kv-heads 2 --ff 256 --vocab 512 --ctx 512 -o "$M"
# A prompt of about 240 tokens (byte-level pieces of the SentencePiece slice).
PROMPT=$(for i in $(seq 1 20); do printf 'alpha beta %d ' "$i"; done)

# Entries of a 2-layer, 2-KV-head model: L x H_kv x B.
expect 0 "run with snapkv and a budget" -- "$KVEC" run -m "$M" -p "$PROMPT" -n 6 --temp 0 -t 1 --policy snapkv:window=8 --budget 40
contains err "policy: snapkv:budget=40" "canonical policy printed"
contains err "eviction:   before" "bytes before eviction"
contains err "after the prompt" "bytes after eviction"
contains err "met exactly" "budget met"
contains err "160 entries after the prompt" "L x H_kv x B entries"
contains err "cross-layer C_layer" "coverage printed"
contains err "redundancy R" "redundancy printed"
contains err "policy time" "policy time printed"
before=$(number err 'before [^(]*\(([0-9]+) bytes')
after=$(number err 'after  [^(]*\(([0-9]+) bytes')
if [ -z "$before" ] || [ -z "$after" ] || [ "$after" -ge "$before" ]; then fail "bytes did not drop: before '$before' after '$after'"; fi

expect 0 "chunked eviction keeps the peak within budget + chunk" -- "$KVEC" run -m "$M" -p "$PROMPT" -n 4 --temp 0 -t 1 --policy kvec:window=8 --budget 32 --chunk 16
contains err "after every prefill chunk of 16 tokens" "chunked mode printed"
contains err "bound budget + chunk" "peak bound printed"
contains err ": within" "peak within the bound"
contains err "met exactly" "chunked budget met"

expect 0 "decode-time eviction and ratio" -- "$KVEC" run -m "$M" -p "$PROMPT" -n 8 --temp 0 -t 1 --policy h2o:window=4 --ratio 0.25 --decode-evict
contains err "every 1 decode step" "decode mode printed"
contains err "met exactly" "ratio budget met"

expect 0 "streaming with re-rotation" -- "$KVEC" run -m "$M" -p "$PROMPT" -n 8 --temp 0 -t 1 --policy streaming:rerotate=true --budget 24 --decode-evict=2
contains err "re-rotations" "re-rotations counted"

# The query-agnostic baselines; KVzip's reconstruction pass is reported on its own.
expect 0 "kvzip" -- "$KVEC" run -m "$M" -p "$PROMPT" -n 4 --temp 0 -t 1 --policy kvzip:chunk=64 --budget 24
contains err "96 entries after the prompt" "kvzip meets L x H_kv x B"
contains err "context reconstruction" "reconstruction time printed"
for p in knorm:window=8 lagkv:lag=16 expected-attention; do
    expect 0 "run $p" -- "$KVEC" run -m "$M" -p "$PROMPT" -n 4 --temp 0 -t 1 --policy "$p" --budget 24 --decode-evict=2
    contains err "met exactly" "$p budget met"
done
expect 1 "kvzip is one-shot" -- "$KVEC" run -m "$M" -p "$PROMPT" -n 4 --policy kvzip --budget 24 --chunk 16
contains err "chunked=true is not supported" "kvzip chunked message"

expect 0 "full policy keeps everything" -- "$KVEC" run -m "$M" -p "$PROMPT" -n 2 --temp 0 -t 1 --policy full
contains err "100.0% of before" "full keeps 100%"

expect 1 "unknown policy" -- "$KVEC" run -m "$M" -p "x" --policy nope
contains err "unknown eviction policy" "unknown policy message"
expect 1 "unknown policy option" -- "$KVEC" run -m "$M" -p "x" --policy snapkv:wndow=3
contains err "wndow" "unknown option message"
expect 1 "budget without policy" -- "$KVEC" run -m "$M" -p "x" --budget 12
contains err "--policy" "budget needs a policy"
expect 1 "budget twice" -- "$KVEC" run -m "$M" -p "x" --policy snapkv:budget=64 --budget 32
contains err "given twice" "budget twice message"
expect 1 "budget and ratio" -- "$KVEC" run -m "$M" -p "x" --policy snapkv --budget 64 --ratio 0.5
contains err "either --budget or --ratio" "budget and ratio message"
expect 1 "budget below the window" -- "$KVEC" run -m "$M" -p "x" --policy snapkv --budget 8
contains err "smaller than the window 32" "budget below window message"
expect 1 "budget for full" -- "$KVEC" run -m "$M" -p "x" --policy full --budget 8
contains err "does not apply to policy full" "full has no budget"
expect 1 "chunk and batch size" -- "$KVEC" run -m "$M" -p "x" --policy snapkv --chunk 16 -b 32
contains err "give one" "chunk and batch message"
expect 1 "chunk zero" -- "$KVEC" run -m "$M" -p "x" --chunk 0
contains err "--chunk must be positive" "chunk message"
expect 1 "bad ratio" -- "$KVEC" run -m "$M" -p "x" --policy snapkv --ratio 2
contains err "ratio" "ratio message"

if [ "$failures" -ne 0 ]; then
    echo "$failures check(s) failed"
    exit 1
fi
echo "all policy CLI checks passed"
