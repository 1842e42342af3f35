#!/usr/bin/env bash
# Quantised KV cache on a model (default: the bundled one): what each key/value type pair costs in
# fidelity and saves in bytes, alone and stacked with K-VEC eviction. Prints four markdown tables
# (docs/evaluation.md, "Quantised KV cache"; docs/performance.md):
#   1. perplexity of held-out text (the State of the Union 2001-2005 addresses, data/text/sotu)
#      with -c 2048 --score-last 256, full cache and K-VEC at budget B, per type pair, with the
#      change against the f16 cache;
#   2. logits of one 256-token prefill (random ordinary token ids, fixed seed) against the f16
#      cache's: mean KL(f16 || type) and top-1 agreement (scripts/peer/compare_logits.py);
#   3. KV bytes after a prompt of about 8k tokens (kvec run -n 1), full cache and K-VEC B;
#   4. decode speed at depth D, f16 against q8_0 (one `kvec bench` run, so the rows share the load).
#   scripts/kv-quant.sh [MODEL.gguf] [BUDGET] [DEPTH]   (default: models/kvec-tiny.gguf, 256, 1536)
# SECTIONS="ppl logits memory bench" (the default: all four) picks tables; THREADS (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
KVEC=${KVEC:-build/release/tools/kvec}
PY=${PYTHON:-/usr/bin/python3}
M=${1:-models/kvec-tiny.gguf}
B=${2:-256}
D=${3:-1536}
T=${THREADS:-2}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
PAIRS="f16:f16 q8_0:q8_0 q8_0:q4_0 q4_0:q4_0"
SECTIONS=${SECTIONS:-ppl logits memory bench}
want() { case " $SECTIONS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

if want ppl; then
cat data/text/sotu/200[1-5]_*.txt >"$tmp/heldout.txt"
ppl() {  # ppl K V [policy flags...]
    local k="$1" v="$2"
    shift 2
    "$KVEC" perplexity -m "$M" -f "$tmp/heldout.txt" -c 2048 --score-last 256 -t "$T" -ctk "$k" -ctv "$v" "$@" \
        2>/dev/null | grep -o 'Final estimate: PPL = [0-9.]*' | grep -o '[0-9.]*$'
}
echo "| keys/values | PPL full cache | change | PPL K-VEC B=$B | change |"
echo "|---|---:|---:|---:|---:|"
base_full="" base_kvec=""
for pair in $PAIRS; do
    k=${pair%%:*} v=${pair#*:}
    full=$(ppl "$k" "$v")
    kv=$(ppl "$k" "$v" --policy kvec --budget "$B")
    [ -z "$base_full" ] && base_full=$full && base_kvec=$kv
    echo "| $k/$v | $full | $(awk -v a="$full" -v b="$base_full" 'BEGIN{printf "%+.3f %%", 100*(a/b-1)}') | $kv |" \
         "$(awk -v a="$kv" -v b="$base_kvec" 'BEGIN{printf "%+.3f %%", 100*(a/b-1)}') |"
done
echo
fi

if want logits; then
"$PY" scripts/peer/compare_logits.py tokens "$M" 256 7 "$tmp/tokens.txt"
"$KVEC" logits -m "$M" --tokens "$tmp/tokens.txt" -o "$tmp/f16.f32" -t "$T" 2>/dev/null
echo "| keys/values | max abs dlogit/std | mean KL vs f16 | top-1 agreement |"
echo "|---|---:|---:|---:|"
for pair in $PAIRS; do
    k=${pair%%:*} v=${pair#*:}
    [ "$pair" = f16:f16 ] && continue
    "$KVEC" logits -m "$M" --tokens "$tmp/tokens.txt" -o "$tmp/$k-$v.f32" -t "$T" -ctk "$k" -ctv "$v" 2>/dev/null
    echo "| $k/$v | $("$PY" scripts/peer/compare_logits.py compare "$tmp/tokens.txt" "$tmp/$k-$v.f32" "$tmp/f16.f32" \
        --max-kl 1 --min-top1 0) |"
done
echo
fi

if want memory; then
for _ in 1 2 3 4 5 6; do cat README.md docs/*.md; done >"$tmp/all.txt"
head -c 17000 "$tmp/all.txt" >"$tmp/prompt.txt"
echo "| run | keys/values | bytes per entry | prompt tokens | KV after the prompt |"
echo "|---|---|---:|---:|---:|"
for run in "full cache|" "kvec, budget 512|--policy kvec --budget 512"; do
    name=${run%%|*} flags=${run#*|}
    for pair in $PAIRS; do
        k=${pair%%:*} v=${pair#*:}
        # shellcheck disable=SC2086
        "$KVEC" run -m "$M" -f "$tmp/prompt.txt" -n 1 --temp 0 -c 20000 -t "$T" -ctk "$k" -ctv "$v" $flags \
            >/dev/null 2>"$tmp/err" || { echo "kv-quant.sh: kvec run failed:" >&2; cat "$tmp/err" >&2; exit 1; }
        tokens=$(grep -o 'prompt: *[0-9]* tokens' "$tmp/err" | grep -o '[0-9]*')
        entry=$(grep -o '[0-9]* bytes per entry' "$tmp/err" | grep -o '^[0-9]*')
        if [ -z "$flags" ]; then
            after=$(grep -o 'kv cache: *[0-9.]* [KMG]*i*B ([0-9]* bytes' "$tmp/err" | sed 's/kv cache: *//')
        else
            after=$(grep -o 'after  [0-9.]* [KMG]*i*B ([0-9]* bytes' "$tmp/err" | sed 's/after  //')
        fi
        echo "| $name | $k/$v | $entry | $tokens | $after) |"
    done
done
echo
fi

if want bench; then
    "$KVEC" bench -m "$M" -p 0 -n 64 -d "$D" -r 3 -t "$T" --kv-type f16,q8_0 --no-bandwidth 2>/dev/null
fi
