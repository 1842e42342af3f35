#!/usr/bin/env bash
# Usage: tokenize_test.sh /path/to/kvec SOURCE_DIR
# `kvec tokenize` against llama.cpp's tokenizer test vectors (data/tokenizer-vectors: the ids
# llama.cpp's test-tokenizer expects for each input, without BOS), and its errors.
set -u
KVEC="$1"
SRC="$2"
source "$(dirname "$0")/cli_lib.sh"
V="$SRC/data/tokenizer-vectors"
SEP=$'\n__ggml_vocab_test__\n'

for vocab in llama-spm gpt-2; do
    expect 0 "tokenize --split: the $vocab vectors" -- "$KVEC" tokenize -m "$V/ggml-vocab-$vocab.gguf" \
        -f "$V/ggml-vocab-$vocab.gguf.inp" --split "$SEP" --no-bos
    # llama.cpp's .out files put a space before each id; ours separate ids by one space.
    if ! diff -q <(sed 's/^ *//; s/ *$//' "$V/ggml-vocab-$vocab.gguf.out") "$DIR/out" > /dev/null; then
        fail "the $vocab ids differ from llama.cpp's: $(diff <(sed 's/^ *//; s/ *$//' "$V/ggml-vocab-$vocab.gguf.out") "$DIR/out" | head -n 4)"
    fi
done

M="$SRC/models/kvec-tiny.gguf"
expect 0 "one text, BOS as the vocabulary asks" -- "$KVEC" tokenize -m "$M" -p "Call me Ishmael."
with_bos=$(cat "$DIR/out")
expect 0 "the same without BOS" -- "$KVEC" tokenize -m "$M" -p "Call me Ishmael." --no-bos
[ -n "$(cat "$DIR/out")" ] && [[ "$with_bos" == *" $(cat "$DIR/out")" ]] || fail "--no-bos is not the ids after BOS: '$with_bos' / '$(cat "$DIR/out")'"
expect 0 "--pieces prints each token's text" -- "$KVEC" tokenize -m "$M" -p "Call me Ishmael." --no-bos --pieces
[ "$(tr -d '" ' < "$DIR/out")" = "CallmeIshmael." ] || fail "pieces do not spell the text: $(cat "$DIR/out")"
printf 'one\n\ntwo words\n' > "$DIR/lines.txt"
expect 0 "--lines: one line of ids per line" -- "$KVEC" tokenize -m "$M" -f "$DIR/lines.txt" --lines --no-bos
[ "$(wc -l < "$DIR/out")" = 3 ] || fail "--lines printed $(wc -l < "$DIR/out") lines for 3"
[ -z "$(sed -n 2p "$DIR/out")" ] || fail "an empty line gave ids"

expect 1 "no text" -- "$KVEC" tokenize -m "$M"
contains err "exactly one of -p, -f and --messages" "no text message"
expect 1 "two texts" -- "$KVEC" tokenize -m "$M" -p a -f "$DIR/lines.txt"
expect 1 "--lines with --split" -- "$KVEC" tokenize -m "$M" -f "$DIR/lines.txt" --lines --split x
expect 1 "--render without a conversation" -- "$KVEC" tokenize -m "$M" -p a --render
contains err "--render prints a chat template" "render message"
expect 1 "--chat on a model without a template" -- "$KVEC" tokenize -m "$M" -p a --chat --render
contains err "error:" "no template message"
printf '[{"role": "user"}]' > "$DIR/bad.json"
expect 1 "a message without content" -- "$KVEC" tokenize -m "$M" --messages "$DIR/bad.json" --render
contains err "each message needs string \"role\" and \"content\"" "bad messages message"
printf 'not json' > "$DIR/bad.json"
expect 1 "messages that are not JSON" -- "$KVEC" tokenize -m "$M" --messages "$DIR/bad.json"
contains err "not JSON" "not JSON message"
expect 1 "a missing model" -- "$KVEC" tokenize -m "$DIR/absent.gguf" -p a
finish
