#!/usr/bin/env bash
# Usage: reliability_test.sh /path/to/kvec SOURCE_DIR [--update]
# What each class of bad input gets: runs one command per case, checks the exit status, that a
# failure is one "error: ..." line (no crash, no sanitizer report, no raw control character), and
# writes the table of docs/reliability.md ("What bad input gets"). The table in the doc must be
# the one generated here (--update rewrites it).
set -u
KVEC="$1"
SRC="$(cd "$2" && pwd)"  # absolute: shown as SRC in the table, wherever the checkout is
UPDATE="${3:-}"
source "$(dirname "$0")/cli_lib.sh"
# Debian's python3 (python3-numpy), as the other Python tests use.
CRAFT="/usr/bin/python3 $SRC/tests/tools/craft_gguf.py"
export LC_ALL=C

M="$DIR/m.gguf"
"$KVEC" gen-model --layers 1 --embd 64 --heads 2 --kv-heads 1 --ff 128 --ctx 4096 -o "$M" 2>/dev/null || { echo "gen-model failed"; exit 1; }
TABLE="$DIR/table.md"
printf '| class | input | exit | what kvec says |\n|---|---|---:|---|\n' >"$TABLE"

# row CODE CLASS INPUT SHOW -- command...
#   CODE: the expected exit status; SHOW: a grep pattern for the line shown in the table (the
#   "error:" line for failures).
row() {
    local want="$1" class="$2" input="$3" show="$4"
    shift 5
    timeout 300 "$@" >"$DIR/out" 2>"$DIR/err" </dev/null
    local got=$?
    local what="$class: $input"
    if [ "$got" -ne "$want" ]; then fail "$what: exit status $got, expected $want"; return 1; fi
    if grep -qE 'AddressSanitizer|LeakSanitizer|runtime error:|Segmentation fault|terminate called|internal error' "$DIR/err"; then
        fail "$what: crash or sanitizer report"; return 1
    fi
    if LC_ALL=C grep -q $'\x1b' "$DIR/out" "$DIR/err"; then fail "$what: a raw escape character reached the terminal"; return 1; fi
    if [ "$want" -ne 0 ]; then
        local n
        n=$(grep -c '^error: ' "$DIR/err")
        if [ "$n" -ne 1 ]; then fail "$what: $n 'error:' lines, expected 1"; return 1; fi
    fi
    local line
    line=$(cat "$DIR/err" "$DIR/out" | grep -m1 -E -- "$show")
    if [ -z "$line" ]; then fail "$what: no line matches '$show'"; return 1; fi
    # Machine-dependent parts: temporary paths, memory sizes, lock holders.
    line=$(printf '%s' "$line" | sed -e "s|$DIR|DIR|g" -e "s|$SRC|SRC|g" -e 's/[0-9.]* GiB of memory available/N GiB of memory available/' \
        -e 's/pid [0-9]* on host [^,]*, started [^)]*/pid P on host H, started T/' -e 's/|/\\|/g')
    printf '| %s | %s | %s | `%s` |\n' "$class" "$input" "$got" "$line" >>"$TABLE"
    echo "ok: $what"
}

# ---- model files -------------------------------------------------------------------------------
C="model file"
row 1 "$C" "missing" "^error:" -- "$KVEC" info "$DIR/absent.gguf"
row 1 "$C" "a directory" "^error:" -- "$KVEC" run -m "$DIR" -p x
: >"$DIR/empty.gguf"
row 1 "$C" "empty" "^error:" -- "$KVEC" info "$DIR/empty.gguf"
printf 'not a gguf file at all' >"$DIR/text.gguf"
row 1 "$C" "not GGUF" "^error:" -- "$KVEC" info "$DIR/text.gguf"
printf 'GGUF\x01\x00\x00\x00' >"$DIR/v1.gguf"; head -c 32 /dev/zero >>"$DIR/v1.gguf"
row 1 "$C" "GGUF version 1" "^error:" -- "$KVEC" info "$DIR/v1.gguf"
printf 'GGUF\x03\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x10' >"$DIR/count.gguf"; head -c 64 /dev/zero >>"$DIR/count.gguf"
row 1 "$C" "metadata count 2^60" "^error:" -- "$KVEC" info "$DIR/count.gguf"
head -c 3000 "$M" >"$DIR/trunc-meta.gguf"
row 1 "$C" "truncated in the metadata" "^error:" -- "$KVEC" info "$DIR/trunc-meta.gguf"
head -c $(( $(stat -c %s "$M") - 100 )) "$M" >"$DIR/trunc-data.gguf"
row 1 "$C" "truncated in the tensor data" "^error:" -- "$KVEC" run -m "$DIR/trunc-data.gguf" -p x
$CRAFT "$M" "$DIR/nanbase.gguf" --set llama.rope.freq_base=nan:f32
row 1 "$C" "RoPE base NaN" "^error:" -- "$KVEC" run -m "$DIR/nanbase.gguf" -p x
$CRAFT "$M" "$DIR/infbase.gguf" --set llama.rope.freq_base=inf:f32
row 1 "$C" "RoPE base +Inf" "^error:" -- "$KVEC" run -m "$DIR/infbase.gguf" -p x
$CRAFT "$M" "$DIR/inffactor.gguf" --set llama.rope.scaling.type=linear:str --set llama.rope.scaling.factor=inf:f32
row 1 "$C" "RoPE scaling factor +Inf" "^error:" -- "$KVEC" run -m "$DIR/inffactor.gguf" -p x
$CRAFT "$M" "$DIR/vocab.gguf" --set llama.vocab_size=999:u32
row 1 "$C" "vocab_size disagrees with token_embd" "^error:" -- "$KVEC" run -m "$DIR/vocab.gguf" -p x
$CRAFT "$M" "$DIR/nannorm.gguf" --nan-tensor output_norm.weight
row 1 "$C" "NaN in a norm weight" "^error:" -- "$KVEC" run -m "$DIR/nannorm.gguf" -p x
$CRAFT "$M" "$DIR/nanembd.gguf" --nan-tensor token_embd.weight
row 1 "$C" "NaN in the token embedding" "^error:" -- "$KVEC" run -m "$DIR/nanembd.gguf" -p "<unk> hello" -n 4
$CRAFT "$M" "$DIR/nanscore.gguf" --nan-score
row 1 "$C" "NaN tokenizer score" "^error:" -- "$KVEC" run -m "$DIR/nanscore.gguf" -p x
$CRAFT "$M" "$DIR/bert.gguf" --set tokenizer.ggml.model=bert:str
row 0 "$C" "unknown tokenizer (info)" "not runnable" -- "$KVEC" info "$DIR/bert.gguf" --no-tensors
row 1 "$C" "unknown tokenizer (run)" "^error:" -- "$KVEC" run -m "$DIR/bert.gguf" -p x
$CRAFT "$M" "$DIR/esc.gguf" --set $'general.name=\x1b]0;pwned\x07\x1b[31mred:str' --set $'evil\x1b[2Jkey=1:u32'
row 0 "terminal" "escape sequences in a key and a value (info)" "evil" -- "$KVEC" info "$DIR/esc.gguf" --no-tensors
cp "$M" "$DIR/sparse.gguf"
if truncate -s 1T "$DIR/sparse.gguf" 2>/dev/null; then
    row 0 "$C" "1 TiB unreferenced (sparse) tail, copied (--no-mmap)" "^weights:" -- "$KVEC" run -m "$DIR/sparse.gguf" -p x -n 2 --no-mmap
fi

# ---- flags -------------------------------------------------------------------------------------
C="flag"
row 1 "$C" "kvec frobnicate" "^error:" -- "$KVEC" frobnicate
row 1 "$C" "run -p ''" "^error:" -- "$KVEC" run -m "$M" -p ''
row 1 "$C" "run -n -2" "^error:" -- "$KVEC" run -m "$M" -p x -n -2
row 1 "$C" "run -n 1 -n 2 (repeated)" "^error:" -- "$KVEC" run -m "$M" -p x -n 1 -n 2
row 1 "$C" "run -t -1" "^error:" -- "$KVEC" run -m "$M" -p x -t -1
row 1 "$C" "run -s -2" "^error:" -- "$KVEC" run -m "$M" -p x -s -2
row 1 "$C" "run --top-p 1.5" "^error:" -- "$KVEC" run -m "$M" -p x --top-p 1.5
row 1 "$C" "run --min-p -1" "^error:" -- "$KVEC" run -m "$M" -p x --min-p -1
row 1 "$C" "run --temp nan" "^error:" -- "$KVEC" run -m "$M" -p x --temp nan
row 1 "$C" "run --policy ''" "^error:" -- "$KVEC" run -m "$M" -p x --policy ''
row 1 "$C" "run --policy kvec:" "^error:" -- "$KVEC" run -m "$M" -p x --policy kvec:
row 1 "$C" "random:seed=2^63" "^error:" -- "$KVEC" run -m "$M" -p x --policy random:seed=9223372036854775808
row 1 "$C" "run --policy headkv (no scores file)" "^error:" -- "$KVEC" run -m "$M" -p x --policy headkv
row 1 "$C" "headkv:scores=/dev/zero" "^error:" -- "$KVEC" run -m "$M" -p x --policy headkv:scores=/dev/zero
row 1 "$C" "head-scores --samples 0" "^error:" -- "$KVEC" head-scores -m "$M" --out "$DIR/importance.json" --samples 0
row 0 "$C" "run -n -1 with StreamingLLM re-rotation and decode eviction" "^stopped:" -- "$KVEC" run -m "$M" -p "a b c d e f g h" -n -1 -c 64 --temp 0 --policy streaming:budget=8,sinks=2,rerotate=true --decode-evict
row 1 "$C" "gen-model --vocab -1" "^error:" -- "$KVEC" gen-model --vocab -1 -o "$DIR/x.gguf"
row 1 "$C" "gen-model --embd 1073741824" "^error:" -- "$KVEC" gen-model --embd 1073741824 -o "$DIR/x.gguf"
row 1 "$C" "gen-model --rope-base nan" "^error:" -- "$KVEC" gen-model --rope-base nan -o "$DIR/x.gguf"
row 1 "$C" "bench -d 1000000" "^error:" -- "$KVEC" bench -m "$M" -d 1000000 -p 16 -n 0 --no-bandwidth
row 1 "$C" "perplexity --chunks 0" "^error:" -- "$KVEC" perplexity -m "$M" -f "$SRC/README.md" -c 64 --chunks 0
row 1 "$C" "quantize -t -1" "^error:" -- "$KVEC" quantize "$M" "$DIR/q.gguf" q8_0 -t -1
: >"$DIR/empty.txt"
row 1 "$C" "run -f an empty file" "^error:" -- "$KVEC" run -m "$M" -f "$DIR/empty.txt"
row 1 "$C" "run -ctk ''" "^error:" -- "$KVEC" run -m "$M" -p x -ctk ''
row 1 "$C" "bench -ctk 'q8_0,'" "^error:" -- "$KVEC" bench -m "$M" -p 8 -n 2 -ctk 'q8_0,' --no-bandwidth
row 1 "$C" "gen-model --head-dim 0" "^error:" -- "$KVEC" gen-model --head-dim 0 -o "$DIR/x.gguf"
mkfifo "$DIR/fifo.gguf"
row 1 "$C" "quantize to a FIFO" "^error:" -- "$KVEC" quantize "$M" "$DIR/fifo.gguf" q8_0
[ -p "$DIR/fifo.gguf" ] || fail "quantize replaced the FIFO"
ln -s "$M" "$DIR/link.gguf"
row 1 "$C" "gen-model -o a symbolic link" "^error:" -- "$KVEC" gen-model --vocab 64 -o "$DIR/link.gguf"
[ -L "$DIR/link.gguf" ] || fail "gen-model replaced the link"

# ---- evaluation inputs -------------------------------------------------------------------------
C="eval"
LB="$SRC/data/longbench/fixture"
row 1 "$C" "--max-length 1" "^error:" -- "$KVEC" eval -m "$M" --data "$LB/hotpotqa.jsonl" --max-length 1 --out "$DIR/e1"
row 1 "$C" "--max-new-tokens -1" "^error:" -- "$KVEC" eval -m "$M" --data "$LB/hotpotqa.jsonl" --max-new-tokens -1 --out "$DIR/e1"
row 1 "$C" "--segments 0" "^error:" -- "$KVEC" eval -m "$M" --fidelity "$SRC/README.md" --segments 0 --out "$DIR/e1"
row 1 "$C" "-t -1" "^error:" -- "$KVEC" eval -m "$M" --data "$LB/hotpotqa.jsonl" -t -1 --out "$DIR/e1"
row 1 "$C" "the same --data file twice" "^error:" -- "$KVEC" eval -m "$M" --data "$LB/hotpotqa.jsonl,$LB/../fixture/hotpotqa.jsonl" --policies full --samples 1 --out "$DIR/e2"
mkdir -p "$DIR/lb"
printf '{"input": "Q", "context": "C", "answers": ["City"], "all_classes": null}\n' >"$DIR/lb/trec.jsonl"
row 1 "$C" "trec sample without all_classes" "^error:" -- "$KVEC" eval -m "$M" --data "$DIR/lb/trec.jsonl" --policies full --max-length 100 --out "$DIR/e3"
printf '{"input": "Q", "context": "C", "answers": ["x"]}\n{"input": "Q", "context": \n' >"$DIR/lb/hotpotqa.jsonl"
row 1 "$C" "malformed JSONL line" "^error:" -- "$KVEC" eval -m "$M" --data "$DIR/lb/hotpotqa.jsonl" --policies full --out "$DIR/e4"
printf '{"input": "Q", "context": "C"}\n' >"$DIR/lb/qasper.jsonl"
row 1 "$C" "sample without answers" "^error:" -- "$KVEC" eval -m "$M" --data "$DIR/lb/qasper.jsonl" --policies full --out "$DIR/e5"

# ---- output directories ------------------------------------------------------------------------
C="eval --out"
mkdir -p "$DIR/busy"
echo "pid 1 on host h, started t" >"$DIR/busy/.kvec-eval.lock"
flock "$DIR/busy/.kvec-eval.lock" sleep 60 &
holder=$!
sleep 0.5
row 1 "$C" "directory in use by another run" "^error:" -- "$KVEC" eval -m "$M" --data "$LB/hotpotqa.jsonl" --policies full --samples 1 --max-length 200 --out "$DIR/busy"
kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null
EV=(eval -m "$M" --data "$LB/hotpotqa.jsonl" --policies full --samples 1 --max-length 200 --out "$DIR/run")
"$KVEC" "${EV[@]}" >/dev/null 2>&1 || fail "a first eval run failed"
row 1 "$C" "a different run in the same directory" "^error:" -- "$KVEC" eval -m "$M" --data "$LB/hotpotqa.jsonl" --policies full --samples 2 --max-length 200 --out "$DIR/run"
head -c 20 "$DIR/run/config.json" >"$DIR/torn"; mv "$DIR/torn" "$DIR/run/config.json"
row 0 "$C" "torn config.json (resumes, no --overwrite)" "not valid JSON" -- "$KVEC" "${EV[@]}"
printf '{"id": "torn' >>"$DIR/run/predictions.jsonl"
row 0 "$C" "torn last prediction line (dropped, resumes)" "incomplete last line" -- "$KVEC" "${EV[@]}"
printf '{"id": "x", "policy": 3}\n' >>"$DIR/run/predictions.jsonl"
row 0 "$C" "damaged prediction line (set aside, resumes)" "damaged line" -- "$KVEC" "${EV[@]}"

# ---- sharded sweeps ----------------------------------------------------------------------------
C="eval --shard"
SH=(eval -m "$M" --data "$LB/hotpotqa.jsonl,$LB/qasper.jsonl,$LB/trec.jsonl" --policies full --samples 2)
row 1 "$C" "K >= N" "^error:" -- "$KVEC" "${SH[@]}" --shard 2/2 --out "$DIR/sh"
row 1 "$C" "0 shards" "^error:" -- "$KVEC" "${SH[@]}" --shard 0/0 --out "$DIR/sh"
row 1 "$C" "not K/N" "^error:" -- "$KVEC" "${SH[@]}" --shard half --out "$DIR/sh"
row 1 "$C" "N past int64" "^error:" -- "$KVEC" "${SH[@]}" --shard 0/9223372036854775807 --out "$DIR/sh"
row 1 "$C" "empty" "^error:" -- "$KVEC" "${SH[@]}" --shard '' --out "$DIR/sh"
row 1 "$C" "slurm outside an array job" "^error:" -- env -u SLURM_ARRAY_TASK_ID "$KVEC" "${SH[@]}" --shard slurm --out "$DIR/sh"
row 1 "$C" "k8s/N outside an Indexed Job" "^error:" -- env -u JOB_COMPLETION_INDEX "$KVEC" "${SH[@]}" --shard k8s/2 --out "$DIR/sh"
C="eval merge"
"$KVEC" "${SH[@]}" --shard 0/2 --out "$DIR/sh0" >/dev/null 2>&1 || fail "shard 0/2 failed"
"$KVEC" "${SH[@]}" --shard 1/2 --out "$DIR/sh1" >/dev/null 2>&1 || fail "shard 1/2 failed"
"$KVEC" "${SH[@]}" --max-length 300 --shard 1/2 --out "$DIR/sh1b" >/dev/null 2>&1 || fail "shard 1/2 (--max-length 300) failed"
row 1 "$C" "a shard missing" "^error:" -- "$KVEC" eval merge "$DIR/merged" "$DIR/sh0"
row 1 "$C" "a shard given twice" "^error:" -- "$KVEC" eval merge "$DIR/merged" "$DIR/sh0" "$DIR/sh1" "$DIR/sh1"
row 1 "$C" "shards of different commands" "^error:" -- "$KVEC" eval merge "$DIR/merged" "$DIR/sh0" "$DIR/sh1b"
row 1 "$C" "an unsharded run" "^error:" -- "$KVEC" eval merge "$DIR/merged" "$DIR/run"
# Damaged shards (each on a copy of shard 1): one error naming the file and field, no abort, and
# the lock released (the next row merges again).
damaged() {  # damaged NAME PYTHON-EDIT: a copy of shard 1 as $DIR/dm-NAME, edited by the Python statement (d: its path)
    rm -rf "$DIR/dm-$1"; cp -r "$DIR/sh1" "$DIR/dm-$1"
    /usr/bin/python3 -c "import json, os, shutil; d='$DIR/dm-$1'; $2"
}
damaged items 'm = json.load(open(d + "/shard.json")); m["items"] = [1, 2]; json.dump(m, open(d + "/shard.json", "w"))'
row 1 "$C" "shard.json items are numbers" "^error:" -- "$KVEC" eval merge "$DIR/merged" "$DIR/sh0" "$DIR/dm-items"
damaged dir 'os.remove(d + "/shard.json"); os.mkdir(d + "/shard.json")'
row 1 "$C" "shard.json is a directory" "^error:" -- "$KVEC" eval merge "$DIR/merged" "$DIR/sh0" "$DIR/dm-dir"
damaged refs 'm = json.load(open(d + "/shard.json")); m["items"][0]["references"] = ["x"]; json.dump(m, open(d + "/shard.json", "w"))'
row 1 "$C" "references edited" "^error:" -- "$KVEC" eval merge "$DIR/merged" "$DIR/sh0" "$DIR/dm-refs"
damaged cost 'm = json.load(open(d + "/metrics.json")); m["total"]["wall_seconds"] = "long"; json.dump(m, open(d + "/metrics.json", "w"))'
row 1 "$C" "a cost in metrics.json is a string" "^error:" -- "$KVEC" eval merge "$DIR/merged" "$DIR/sh0" "$DIR/dm-cost"
damaged grid 'p = d + "/predictions.jsonl"; r = json.loads(open(p).readline()); r["budget"] = 999; open(p, "a").write(json.dumps(r) + "\n")'
row 1 "$C" "a prediction outside the grid" "^error:" -- "$KVEC" eval merge "$DIR/merged" "$DIR/sh0" "$DIR/dm-grid"
damaged repeat 'p = d + "/predictions.jsonl"; t = open(p).read(); r = json.loads(t.splitlines()[0]); r["prediction"] = "x"; open(p, "w").write(json.dumps(r) + "\n" + t)'
row 1 "$C" "a different repeat of a prediction" "^error:" -- "$KVEC" eval merge "$DIR/merged" "$DIR/sh0" "$DIR/dm-repeat"
row 0 "$C" "the undamaged shards" "^merged" -- "$KVEC" eval merge "$DIR/merged" "$DIR/sh0" "$DIR/sh1"

# ---- the table in the docs ---------------------------------------------------------------------
DOC="$SRC/docs/reliability.md"
begin='<!-- reliability-table:begin (generated by tests/tools/reliability_test.sh) -->'
end='<!-- reliability-table:end -->'
python3 - "$DOC" "$TABLE" "$begin" "$end" "$UPDATE" <<'EOF' || failures=$((failures + 1))
import sys
doc, table, begin, end, update = sys.argv[1:6]
text = open(doc).read()
new = open(table).read()
i, j = text.find(begin), text.find(end)
if i < 0 or j < 0:
    sys.exit(f"FAIL: {doc} has no generated table block")
current = text[i + len(begin):j].strip("\n") + "\n"
if current == new:
    print("ok: the table in docs/reliability.md is current")
elif update == "--update":
    open(doc, "w").write(text[:i + len(begin)] + "\n" + new + text[j:])
    print("updated the table in docs/reliability.md")
else:
    import difflib
    sys.stdout.writelines(difflib.unified_diff(current.splitlines(True), new.splitlines(True), "docs", "generated"))
    sys.exit("FAIL: docs/reliability.md's table differs from what kvec does now; run "
             "tests/tools/reliability_test.sh build/release/tools/kvec . --update")
EOF
if [ "$failures" -ne 0 ]; then
    echo "$failures check(s) failed"
    exit 1
fi
echo "all reliability checks passed"
