#!/usr/bin/env bash
# Usage: cli_test.sh /path/to/kvec
# Checks the command line end to end; helpers in cli_lib.sh.
set -u
KVEC="$1"
source "$(dirname "$0")/cli_lib.sh"

M="$DIR/tiny.gguf"
expect 0 "gen-model writes a tiny model" -- "$KVEC" gen-model --layers 2 --embd 128 --heads 4 --kv-heads 2 --ff 256 --vocab 512 --ctx 256 -o "$M"
[ -s "$M" ] || fail "gen-model output missing"

expect 0 "run generates text and prints stats" -- "$KVEC" run -m "$M" -p "Hello world" -n 8 --temp 0 -t 2
contains err "prompt:" "run stats"
contains err "tokens/s" "run stats"
contains err "kv cache:" "run stats"
[ -s "$DIR/out" ] || fail "run printed no text"

expect 0 "seeded sampling run 1" -- "$KVEC" run -m "$M" -p "abc" -n 12 --temp 1 --seed 5
cp "$DIR/out" "$DIR/seed1"
expect 0 "seeded sampling run 2" -- "$KVEC" run -m "$M" -p "abc" -n 12 --temp 1 --seed 5
cmp -s "$DIR/out" "$DIR/seed1" || fail "the same seed gave different text"

printf 'A prompt from a file.' >"$DIR/prompt.txt"
expect 0 "run -f reads the prompt from a file" -- "$KVEC" run -m "$M" -f "$DIR/prompt.txt" -n 4 --kv-type f32 --chunk 3
expect 0 "stop strings accepted" -- "$KVEC" run -m "$M" -p "x" -n 4 --stop "zz" --stop "yy" --temp 0

expect 1 "unknown flag is rejected" -- "$KVEC" run -m "$M" -p "x" --no-such-flag
contains err "error:" "unknown flag message"
expect 1 "missing model file" -- "$KVEC" run -m "$DIR/absent.gguf" -p "x"
contains err "does not exist" "missing model message"
head -c 4000 "$M" >"$DIR/corrupt.gguf"
expect 1 "corrupt (truncated) model" -- "$KVEC" run -m "$DIR/corrupt.gguf" -p "x"
contains err "error:" "corrupt model message"
printf 'not a gguf file at all' >"$DIR/text.gguf"
expect 1 "not a GGUF file" -- "$KVEC" info "$DIR/text.gguf"
contains err "error:" "non-GGUF message"
expect 1 "prompt longer than the context" -- "$KVEC" run -m "$M" -p "one two three four five six seven" -c 4
contains err "context holds 4" "context message"
expect 1 "no prompt" -- "$KVEC" run -m "$M"
contains err "-p/--prompt" "no prompt message"
expect 1 "bad kv type" -- "$KVEC" run -m "$M" -p "x" --kv-type q4
contains err "f32, f16, bf16, q8_0" "bad kv type message lists the types"
expect 0 "run with q8_0 keys and q4_0 values" -- "$KVEC" run -m "$M" -p "Hello world" -n 4 --temp 0 -t 2 -ctk q8_0 -ctv q4_0
contains err "kv cache:   " "quantised run stats"
contains err "keys q8_0 (34 bytes per key), values q4_0 (18 bytes per value)" "quantised run bytes per entry"
expect 1 "bad value type" -- "$KVEC" run -m "$M" -p "x" --cache-type-v q3
contains err "--cache-type-v" "bad value type message"
expect 0 "gen-model head dim 16" -- "$KVEC" gen-model --layers 1 --embd 64 --heads 4 --kv-heads 2 --ff 128 --vocab 512 --ctx 64 -o "$DIR/hd16.gguf"
expect 1 "q8_0 cache on head dim 16" -- "$KVEC" run -m "$DIR/hd16.gguf" -p "x" -n 1 -ctk q8_0
contains err "q8_0 stores blocks of 32 elements; the model's head dim 16" "partial block message"
expect 1 "bad number" -- "$KVEC" run -m "$M" -p "x" -n many
expect 1 "bad top-p" -- "$KVEC" run -m "$M" -p "x" --top-p 0
contains err "top-p" "top-p message"
expect 1 "no subcommand" -- "$KVEC"
expect 0 "help" -- "$KVEC" run --help
contains out "--n-predict" "help text"

expect 0 "info prints metadata and tensors" -- "$KVEC" info "$M"
contains out "general.architecture" "info metadata"
contains out "blk.1.ffn_down.weight" "info tensors"
contains out "tokenizer.ggml.tokens" "info arrays"

printf '1 5 7\n9\n' >"$DIR/tokens.txt"
expect 0 "logits writes every position's logits" -- "$KVEC" logits -m "$M" --tokens "$DIR/tokens.txt" -o "$DIR/logits.f32" -t 2
[ "$(stat -c %s "$DIR/logits.f32")" = $((4 * 512 * 4)) ] || fail "logits: not 4 x 512 float32 values"
printf '1 5 x\n' >"$DIR/bad-tokens.txt"
expect 1 "logits refuses a token file with text" -- "$KVEC" logits -m "$M" --tokens "$DIR/bad-tokens.txt" -o "$DIR/x.f32"
contains err "other than whole numbers" "logits token file message"
printf '1 512\n' >"$DIR/big-tokens.txt"
expect 1 "logits refuses a token outside the vocabulary" -- "$KVEC" logits -m "$M" --tokens "$DIR/big-tokens.txt" -o "$DIR/x.f32"
contains err "outside the model's vocabulary" "logits vocabulary message"

expect 0 "quantize to q8_0" -- "$KVEC" quantize "$M" "$DIR/q8.gguf" q8_0
expect 0 "run the quantised model" -- "$KVEC" run -m "$DIR/q8.gguf" -p "Hello" -n 4 --temp 0
expect 1 "quantize to an unknown type" -- "$KVEC" quantize "$M" "$DIR/x.gguf" q9_9
contains err "unknown quantisation type" "quantize message"

expect 0 "bench" -- "$KVEC" bench -m "$M" -p 16 -n 4 -r 2 -d 8 -t 2
contains out "pp16 @ d8" "bench pp row"
contains out "tg4 @ d8" "bench tg row"
contains out "±" "bench stddev"

expect 1 "gen-model: K-quant needs rows of 256" -- "$KVEC" gen-model --embd 128 --heads 4 --kv-heads 2 --ff 256 --vocab 512 --type q4_K -o "$DIR/k.gguf"
contains err "multiples of 256" "gen-model K-quant message"
expect 1 "gen-model: unknown type" -- "$KVEC" gen-model --vocab 512 --type q7 -o "$DIR/k.gguf"
expect 1 "gen-model: unknown preset" -- "$KVEC" gen-model --preset nope -o "$DIR/k.gguf"
expect 0 "gen-model qwen3 with tied output" -- "$KVEC" gen-model --arch qwen3 --layers 1 --embd 128 --heads 2 --kv-heads 1 --head-dim 64 --ff 256 --vocab 300 --tied --type q8_0 -o "$DIR/q3.gguf"
expect 0 "run qwen3" -- "$KVEC" run -m "$DIR/q3.gguf" -p "Hi" -n 3 --temp 0

# Mixture of experts: gen-model writes a qwen3moe model kvec runs; a file whose expert count
# disagrees with its tensors, or that lacks an expert tensor, gets one error line and exit 1.
CRAFT="/usr/bin/python3 $(cd "$(dirname "$0")" && pwd)/craft_gguf.py"
expect 0 "gen-model qwen3moe" -- "$KVEC" gen-model --arch qwen3moe --experts 4 --experts-used 2 --expert-ff 128 --layers 1 --embd 128 --heads 2 --kv-heads 1 --head-dim 64 --ff 256 --vocab 300 --type q8_0 -o "$DIR/moe.gguf"
expect 0 "run qwen3moe" -- "$KVEC" run -m "$DIR/moe.gguf" -p "Hi" -n 3 --temp 0
$CRAFT "$DIR/moe.gguf" "$DIR/moe-count.gguf" --set qwen3moe.expert_count=6:u32
expect 1 "qwen3moe: expert count disagrees with the tensors" -- "$KVEC" run -m "$DIR/moe-count.gguf" -p "Hi" -n 1
contains err "error: '$DIR/moe-count.gguf': qwen3moe.expert_count = 6 disagrees with tensor 'blk.0.ffn_gate_inp.weight', which holds 4 experts" "expert count error"
[ "$(wc -l < "$DIR/err")" -eq 1 ] || fail "expert count error: not one line"
$CRAFT "$DIR/moe.gguf" "$DIR/moe-drop.gguf" --drop-tensor blk.0.ffn_down_exps.weight
expect 1 "qwen3moe: missing expert tensor" -- "$KVEC" run -m "$DIR/moe-drop.gguf" -p "Hi" -n 1
contains err "is missing 1 tensor: blk.0.ffn_down_exps.weight" "missing expert tensor error"
expect 1 "gen-model: experts on qwen3" -- "$KVEC" gen-model --arch qwen3 --experts 4 --vocab 300 -o "$DIR/x.gguf"

# gpt-oss: gen-model writes one (MXFP4 experts, as the released files have them) kvec runs; a file
# without the attention sinks, or whose expert count disagrees with its tensors, gets one error
# line and exit 1.
expect 0 "gen-model gpt-oss" -- "$KVEC" gen-model --preset gpt-oss-test --layers 2 --vocab 300 --type q8_0 --expert-type mxfp4 -o "$DIR/oss.gguf"
expect 0 "run gpt-oss" -- "$KVEC" run -m "$DIR/oss.gguf" -p "Hi" -n 3 --temp 0
$CRAFT "$DIR/oss.gguf" "$DIR/oss-sinks.gguf" --drop-tensor blk.1.attn_sinks.weight
expect 1 "gpt-oss: missing sinks" -- "$KVEC" run -m "$DIR/oss-sinks.gguf" -p "Hi" -n 1
contains err "error: '$DIR/oss-sinks.gguf' (gpt-oss) is missing 1 tensor: blk.1.attn_sinks.weight" "missing sinks error"
[ "$(wc -l < "$DIR/err")" -eq 1 ] || fail "missing sinks error: not one line"
$CRAFT "$DIR/oss.gguf" "$DIR/oss-count.gguf" --set gpt-oss.expert_count=6:u32
expect 1 "gpt-oss: expert count disagrees with the tensors" -- "$KVEC" run -m "$DIR/oss-count.gguf" -p "Hi" -n 1
contains err "error: '$DIR/oss-count.gguf': gpt-oss.expert_count = 6 disagrees with tensor 'blk.0.ffn_gate_inp.weight', which holds 8 experts" "gpt-oss expert count error"
[ "$(wc -l < "$DIR/err")" -eq 1 ] || fail "gpt-oss expert count error: not one line"
expect 1 "gen-model: gpt-oss tied" -- "$KVEC" gen-model --preset gpt-oss-test --tied -o "$DIR/x.gguf"

if [ "$failures" -ne 0 ]; then
    echo "$failures check(s) failed"
    exit 1
fi
echo "all CLI checks passed"
