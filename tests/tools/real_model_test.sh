#!/usr/bin/env bash
# Usage: real_model_test.sh /path/to/kvec SOURCE_DIR
# The real default model, SmolLM2-135M-Instruct (scripts/fetch-models.sh), end to end: its
# tokenizer against llama.cpp's ids (tests/tokenizer/data/smollm2-llama-cpp.*.ids), its chat
# template against the file's own Jinja rendered by jinja2, a chat answer, and a small sweep.
# Exit status 77 (skipped) when the model is not fetched.
set -u
KVEC="$1"
SRC="$2"
source "$(dirname "$0")/cli_lib.sh"
M="$SRC/models/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -f "$M" ]; then
    echo "skipped: $M is not fetched (scripts/fetch-models.sh)"
    exit 77
fi
PY=/usr/bin/python3
SEP=$'\n__ggml_vocab_test__\n'

"$PY" "$SRC/scripts/peer/real_text.py" lines "$DIR/all-lines.txt" 200 && head -n 200 "$DIR/all-lines.txt" > "$DIR/lines.txt"
"$PY" "$SRC/scripts/peer/real_text.py" edge "$DIR/edge.txt"
expect 0 "tokenize 200 lines of real text" -- "$KVEC" tokenize -m "$M" -f "$DIR/lines.txt" --lines
cmp -s "$DIR/out" "$SRC/tests/tokenizer/data/smollm2-llama-cpp.lines.ids" || fail "ids differ from llama.cpp's on the real lines"
expect 0 "tokenize the edge cases" -- "$KVEC" tokenize -m "$M" -f "$DIR/edge.txt" --split "$SEP"
cmp -s "$DIR/out" "$SRC/tests/tokenizer/data/smollm2-llama-cpp.edge.ids" || fail "ids differ from llama.cpp's on the edge cases"

if "$PY" -c 'import jinja2' 2> /dev/null; then
    "$PY" "$SRC/scripts/peer/real_text.py" render "$M" "$SRC/scripts/peer/conversations.json" "$DIR/chat"
    for conv in "$DIR"/chat/*.json; do
        expect 0 "render $(basename "$conv")" -- "$KVEC" tokenize -m "$M" --messages "$conv" --render
        cmp -s "$DIR/out" "${conv%.json}.txt" || fail "$(basename "$conv"): kvec's rendering differs from the Jinja's"
    done
else
    fail "jinja2 for /usr/bin/python3 is missing (scripts/install-deps.sh installs python3-jinja2)"
fi

expect 0 "a chat answer" -- "$KVEC" run -m "$M" --chat -p "What is the capital of France? Answer in one word." --temp 0 -n 16 -t 2
contains out "Paris" "the answer"
contains err "stopped:    end of generation" "the answer ends with the end-of-turn token"

expect 0 "a small sweep on the real model" -- "$KVEC" eval -m "$M" --suite synthetic-1k --tasks niah_single --samples 2 \
    --policies full,snapkv --budgets 256 -t 2 --out "$DIR/eval" --overwrite
contains "$DIR/eval/summary.md" "format chat" "the instruct model gets the chat form"
"$PY" - "$DIR/eval/metrics.json" <<'PY' || fail "full cache below 100 on niah_single at 1k"
import json, sys
m = json.load(open(sys.argv[1]))
full = next(r for r in m["results"] if r["policy"] == "full")
sys.exit(0 if full["scores"]["niah_single"] == 100.0 else 1)
PY
finish
