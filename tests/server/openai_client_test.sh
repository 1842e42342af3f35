#!/usr/bin/env bash
# Usage: openai_client_test.sh /path/to/kvec /path/to/source
# The official OpenAI Node client (openai_client.cjs) drives `kvec serve` on a free loopback port:
# valid objects, whole and streamed, the kv extension, typed errors; then its greedy texts must
# equal `kvec run`'s for the same prompt and policy. The model is the bundled one with a Llama 2
# chat template added (add_chat_template.py). Skipped (77) when node or the npm packages are
# missing (scripts/install-deps.sh installs them).
set -u
KVEC="$1"
SRC="$2"
source "$SRC/tests/tools/cli_lib.sh"
NODE_MODULES="$SRC/third_party/npm/node_modules"
if ! command -v node >/dev/null 2>&1 || [ ! -d "$NODE_MODULES/openai" ]; then
    echo "skipped: node or third_party/npm/node_modules/openai missing (scripts/install-deps.sh)"
    exit 77
fi

M="$DIR/chat.gguf"
/usr/bin/python3 "$SRC/tests/server/add_chat_template.py" "$SRC/models/kvec-tiny.gguf" "$M" || { echo "FAIL: chat model"; exit 1; }
printf '%s' "The old lighthouse keeper climbed the stairs every evening at dusk, counting each step aloud, and when he reached the lamp room he wiped the glass" >"$DIR/prompt.txt"

start_serve -m "$M" -t 1 --parallel 2 --api-key sesame
if [ -z "$PORT" ]; then
    echo "FAIL: the server did not start"; cat "$DIR/serve.err"; kill "$PID" 2>/dev/null; exit 1
fi

if NODE_PATH="$NODE_MODULES" node "$SRC/tests/server/openai_client.cjs" "$PORT" sesame "$DIR/prompt.txt" >"$DIR/client.json" 2>"$DIR/client.err"; then
    echo "ok: the openai client's chat and completion calls, whole and streamed, kv extension, errors"
else
    echo "FAIL: openai client"; cat "$DIR/client.err"; failures=$((failures + 1))
fi
kill -TERM "$PID"; wait "$PID"

if [ "$failures" -eq 0 ]; then
    text() { /usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$DIR/client.json" "$1"; }
    text chat >"$DIR/want-chat"
    text completion >"$DIR/want-completion"
    "$KVEC" run -m "$M" --chat --system "Be brief." -f "$DIR/prompt.txt" -n 12 --temp 0 -t 1 >"$DIR/run-chat" 2>/dev/null
    "$KVEC" run -m "$M" -f "$DIR/prompt.txt" -n 12 --temp 0 -t 1 --policy snapkv --budget 36 >"$DIR/run-completion" 2>/dev/null
    if cmp -s "$DIR/want-chat" "$DIR/run-chat"; then echo "ok: chat text = kvec run --chat"; else
        echo "FAIL: chat text differs from kvec run"; diff "$DIR/want-chat" "$DIR/run-chat"; failures=$((failures + 1)); fi
    if cmp -s "$DIR/want-completion" "$DIR/run-completion"; then echo "ok: completion text = kvec run --policy snapkv"; else
        echo "FAIL: completion text differs from kvec run"; diff "$DIR/want-completion" "$DIR/run-completion"; failures=$((failures + 1)); fi
fi
if [ "$failures" -ne 0 ]; then
    echo "$failures check(s) failed"
    exit 1
fi
echo "all openai client checks passed"
