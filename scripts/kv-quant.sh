#!/usr/bin/env bash
# Quantised KV cache on a model (default: the bundled one): what each key/value type pair costs in
# fidelity and saves in bytes, alone and stacked with eviction. Prints markdown tables
# (docs/evaluation.md, "Quantised KV cache"; docs/performance.md):
#   ppl:      perplexity of held-out text (the State of the Union 2001-2005 addresses, data/text/sotu)
#             with -c 2048 --score-last 256, full cache and K-VEC at budget B, per type pair, with the
#             change against the f16 cache;
#   logits:   logits of one 256-token prefill (random ordinary token ids, fixed seed) against the
#             f16 cache's: mean KL(f16 || type) and top-1 agreement (scripts/peer/compare_logits.py);
#   fidelity: `kvec eval --fidelity` on the held-out test addresses (FIDELITY_TEXT, default
#             heldout:test; prompts of FIDELITY_PREFIX tokens, default 1919, then 128 teacher-forced
#             tokens, FIDELITY_SEGMENTS segments, default 6) with each type pair, the full cache
#             and K-VEC / SnapKV at B = 128 and 512, all against the full f16 cache
#             (--reference-kv-type f16): mean KL and top-1 agreement per step;
#   kld:      (only when named) KL divergence and top-1 agreement against the f16 cache, kvec and
#             llama.cpp on the same text (data/text/sotu/2001_george_w_bush_r.txt) and types: kvec
#             eval --fidelity with 13 segments of 256 prompt + 255 teacher-forced tokens,
#             llama-perplexity -c 512 --kl-divergence (13 chunks, the second half scored;
#             LLAMA_PERPLEXITY, default build/llama.cpp/build/bin/llama-perplexity);
#   memory:   KV bytes after a prompt of about 16k tokens (kvec run -n 1), full cache and K-VEC
#             B = 512, with the factor against the full f16 cache;
#   bench:    decode speed at depth D, f16 against q8_0 (one `kvec bench` run, so the rows share the
#             load);
#   speed:    decode (tg SPEED_N, default 32) at the depths SPEED_DEPTHS (default 0 4096 16384) of
#             SPEED_MODEL (required; e.g. a TinyLlama-shaped Q8_0 file) with f16, q8_0 and q4_0
#             caches (keys and values alike), full and K-VEC B = 512 (the depth prompt compressed
#             to 512 entries per head once it is prefilled), side by side with llama.cpp's
#             `llama-bench -fa 1 -ctk T -ctv T -d D` (LLAMA_BENCH, default build/llama.cpp/build/
#             bin/llama-bench); per depth and type kvec runs first, then llama.cpp, so both see
#             the same load; one repetition each. SPEED_TYPES (default "f16 q8_0 q4_0") and
#             SPEED_POLICIES (default full,kvec) narrow it. The model's context must hold the
#             depth + SPEED_N + 1 (a 16384-context file: depth 16320 with -n 32).
#   scripts/kv-quant.sh [MODEL.gguf] [BUDGET] [DEPTH]   (default: models/kvec-tiny.gguf, 256, 1536)
# SECTIONS="ppl logits fidelity memory bench" (the default; speed only when named) picks tables;
# THREADS (default 2).
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
SECTIONS=${SECTIONS:-ppl logits fidelity memory bench}
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

if want fidelity; then
FT=${FIDELITY_TEXT:-heldout:test}
FP=${FIDELITY_PREFIX:-1919}
FS=${FIDELITY_SEGMENTS:-6}
FPAIRS="f16:f16 bf16:bf16 q8_0:q8_0 q8_0:q5_0 q8_0:q4_0 q5_1:q5_1 q5_0:q5_0 q4_1:q4_1 iq4_nl:iq4_nl q4_0:q4_0"
echo "Fidelity against the full f16 cache: $FT, prompts of $FP tokens + 128 teacher-forced, $FS segments"
echo "(mean KL in nats / top-1 agreement per step)"
echo
echo "| keys/values | full cache | K-VEC B=128 | K-VEC B=512 | SnapKV B=128 | SnapKV B=512 |"
echo "|---|---:|---:|---:|---:|---:|"
for pair in $FPAIRS; do
    k=${pair%%:*} v=${pair#*:}
    "$KVEC" eval -m "$M" --fidelity "$FT" -c 2048 --prefix "$FP" --continuation 128 --segments "$FS" -t "$T" \
        -ctk "$k" -ctv "$v" --reference-kv-type f16 --policies full,kvec,snapkv --budgets 128,512 \
        --out "$tmp/fid-$k-$v" >/dev/null 2>"$tmp/err" || { echo "kv-quant.sh: kvec eval failed:" >&2; cat "$tmp/err" >&2; exit 1; }
    # fidelity.csv: policy,budget,kl_mean,kl_max,top1,...
    cell() { awk -F, -v p="$1" -v b="$2" '$1 == p && ($2 == b || p == "full") {printf "%.2e / %.1f %%", $3, 100 * $5; exit}' \
        "$tmp/fid-$k-$v/fidelity.csv"; }
    echo "| $k/$v | $(cell full 0) | $(cell kvec 128) | $(cell kvec 512) | $(cell snapkv 128) | $(cell snapkv 512) |"
done
echo
fi

if want kld; then
    LP=${LLAMA_PERPLEXITY:-build/llama.cpp/build/bin/llama-perplexity}
    KT=data/text/sotu/2001_george_w_bush_r.txt
    "$LP" -m "$M" -f "$KT" -c 512 -t "$T" -ctk f16 -ctv f16 -fa on --kl-divergence-base "$tmp/base.kld" \
        >"$tmp/err" 2>&1 || { echo "kv-quant.sh: llama-perplexity failed:" >&2; cat "$tmp/err" >&2; exit 1; }
    echo "| keys/values | kvec KL vs f16 | kvec top-1 | llama.cpp KL vs f16 | llama.cpp same top |"
    echo "|---|---:|---:|---:|---:|"
    for pair in q8_0:q8_0 q8_0:q4_0 q4_0:q4_0; do
        k=${pair%%:*} v=${pair#*:}
        "$KVEC" eval -m "$M" --fidelity "$KT" -c 512 --prefix 256 --continuation 255 --segments 13 -t "$T" \
            -ctk "$k" -ctv "$v" --reference-kv-type f16 --policies full --out "$tmp/kld-$k-$v" >/dev/null 2>"$tmp/err" ||
            { echo "kv-quant.sh: kvec eval failed:" >&2; cat "$tmp/err" >&2; exit 1; }
        "$LP" -m "$M" -f "$KT" -c 512 -t "$T" -ctk "$k" -ctv "$v" -fa on --kl-divergence-base "$tmp/base.kld" \
            --kl-divergence >"$tmp/lp.log" 2>&1 || { echo "kv-quant.sh: llama-perplexity failed:" >&2; exit 1; }
        kv=$(awk -F, '$1 == "full" {printf "%.2e | %.1f %%", $3, 100 * $5}' "$tmp/kld-$k-$v/fidelity.csv")
        lk=$(grep -o 'Mean    KLD: *[0-9.e-]*' "$tmp/lp.log" | awk '{printf "%.2e", $3}')
        lt=$(grep -o 'Same top p: *[0-9.]*' "$tmp/lp.log" | awk '{print $4}')
        echo "| $k/$v | $kv | $lk | $lt % |"
    done
    echo
fi

if want memory; then
MPAIRS="f16:f16 q8_0:q8_0 q8_0:q4_0 q4_0:q4_0"
for _ in 1 2 3 4 5 6 7 8 9 10 11 12; do cat README.md docs/*.md; done >"$tmp/all.txt"
head -c 34000 "$tmp/all.txt" >"$tmp/prompt.txt"
echo "| run | keys/values | bytes per entry | prompt tokens | KV after the prompt | against full f16 |"
echo "|---|---|---:|---:|---:|---:|"
base=""
for run in "full cache|" "kvec, budget 512|--policy kvec --budget 512"; do
    name=${run%%|*} flags=${run#*|}
    for pair in $MPAIRS; do
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
        bytes=$(echo "$after" | grep -o '([0-9]*' | tr -d '(')
        [ -z "$base" ] && base=$bytes
        echo "| $name | $k/$v | $entry | $tokens | $after) | $(awk -v a="$base" -v b="$bytes" 'BEGIN{printf "%.1fx smaller", a/b}') |"
    done
done
echo
fi

if want bench; then
    "$KVEC" bench -m "$M" -p 0 -n 64 -d "$D" -r 3 -t "$T" --kv-type f16,q8_0 --no-bandwidth 2>/dev/null
fi

if want speed; then
    SM=${SPEED_MODEL:?SPEED_MODEL: the model of the speed table, e.g. a TinyLlama-shaped Q8_0 file}
    LB=${LLAMA_BENCH:-build/llama.cpp/build/bin/llama-bench}
    SN=${SPEED_N:-32}
    echo "| depth | cache | kvec full t/s | kvec K-VEC B=512 t/s | llama.cpp t/s (-fa 1) | kvec full / llama.cpp | K-VEC / llama.cpp |"
    echo "|---:|---|---:|---:|---:|---:|---:|"
    for d in ${SPEED_DEPTHS:-0 4096 16384}; do
        for type in ${SPEED_TYPES:-f16 q8_0 q4_0}; do
            "$KVEC" bench -m "$SM" -p 0 -n "$SN" -d "$d" -r 1 -t "$T" --kv-type "$type" \
                --policy "${SPEED_POLICIES:-full,kvec}" --budget 512 --no-bandwidth -o csv >"$tmp/kvec.csv" 2>"$tmp/err" ||
                { echo "kv-quant.sh: kvec bench failed:" >&2; cat "$tmp/err" >&2; exit 1; }
            "$LB" -m "$SM" -t "$T" -p 0 -n "$SN" -ctk "$type" -ctv "$type" -fa 1 -d "$d" -r 1 -o csv \
                >"$tmp/llama.csv" 2>"$tmp/err" || { echo "kv-quant.sh: llama-bench failed:" >&2; cat "$tmp/err" >&2; exit 1; }
            # kvec csv: column 8 policy, 14 tps_mean; llama-bench csv: the avg_ts column.
            full=$(awk -F, 'NR > 1 && $8 == "full" {print $14}' "$tmp/kvec.csv")
            kv=$(awk -F, 'NR > 1 && $8 != "full" {print $14}' "$tmp/kvec.csv")
            ll=$(awk -F, 'NR == 1 {for (i = 1; i <= NF; ++i) if ($i == "avg_ts") c = i} NR == 2 {gsub(/"/, "", $c); print $c}' \
                "$tmp/llama.csv")
            echo "| $d | $type | $full | $kv | $ll | $(awk -v a="$full" -v b="$ll" 'BEGIN{printf "%.2f", a/b}') |" \
                 "$(awk -v a="$kv" -v b="$ll" 'BEGIN{printf "%.2f", a/b}') |"
        done
    done
    echo
fi
