#!/usr/bin/env bash
# Usage: cli_serve_test.sh /path/to/kvec /path/to/source
# `kvec serve` as a user starts it: flag errors exit 1 with a message before anything is served;
# a server on a free port (--port 0) answers /health and a completion over plain TCP (bash's
# /dev/tcp, no HTTP client needed), refuses a port already in use, and stops on SIGTERM with
# status 0. The endpoints themselves are tested in tests/server.
set -u
KVEC="$1"
SRC="$2"
source "$(dirname "$0")/cli_lib.sh"
M="$SRC/models/kvec-tiny.gguf"

expect 1 "serve: --budget without a policy" -- "$KVEC" serve -m "$M" --budget 64
contains err "need an eviction policy" "budget without policy message"
expect 1 "serve: unknown default policy" -- "$KVEC" serve -m "$M" --policy nosuch
contains err "unknown eviction policy 'nosuch'" "unknown policy message"
expect 1 "serve: default budget below the policy's minimum" -- "$KVEC" serve -m "$M" --policy snapkv --budget 4
contains err "budget 4" "minimum budget message"
expect 1 "serve: --budget and --ratio" -- "$KVEC" serve -m "$M" --policy kvec --budget 64 --ratio 0.5
contains err "either --budget or --ratio" "budget and ratio message"
expect 1 "serve: --budget with a policy that has none" -- "$KVEC" serve -m "$M" --policy full --budget 64
contains err "--budget does not apply to policy full" "budget with full message"
expect 1 "serve: --parallel 0" -- "$KVEC" serve -m "$M" --parallel 0
contains err "--parallel must be at least 1" "parallel message"
expect 1 "serve: --slot-save-path not a directory" -- "$KVEC" serve -m "$M" --slot-save-path "$DIR/no-such-dir"
contains err "--slot-save-path $DIR/no-such-dir: not a directory" "slot save path message"
expect 1 "serve: --queue-timeout 0" -- "$KVEC" serve -m "$M" --queue-timeout 0
contains err "--queue-timeout must be at least 1 second" "queue timeout message"
expect 1 "serve: --kv-memory not a size" -- "$KVEC" serve -m "$M" --kv-memory lots
contains err "--kv-memory" "kv memory message"
expect 1 "serve: missing model" -- "$KVEC" serve -m "$DIR/none.gguf"
contains err "does not exist" "missing model message"

# http METHOD PORT PATH [BODY]: the raw response (headers and body) on stdout.
http() {
    local method="$1" port="$2" path="$3" body="${4:-}"
    exec 3<>"/dev/tcp/127.0.0.1/$port" || return 1
    printf '%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s' \
        "$method" "$path" "${#body}" "$body" >&3
    timeout 30 cat <&3
    exec 3<&-
}

start_serve -m "$M" -t 1 --policy kvec --budget 64
if [ -z "$PORT" ]; then
    fail "serve: no 'listening on' line"
else
    echo "ok: serve listens on 127.0.0.1:$PORT"
    http GET "$PORT" /health >"$DIR/health"
    contains health "HTTP/1.1 200" "health status"
    contains health '"status":"ok"' "health body"
    http POST "$PORT" /v1/completions '{"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0}' >"$DIR/completion"
    contains completion "HTTP/1.1 200" "completion status"
    contains completion '"object":"text_completion"' "completion object"
    contains completion '"budget":64' "the server's default budget applies"
    http POST "$PORT" /v1/completions '{"prompt": 5}' >"$DIR/bad"
    contains bad "HTTP/1.1 400" "bad request status"
    contains bad "'prompt' must be a string" "bad request message"
    expect 1 "serve: a port in use" -- timeout 60 "$KVEC" serve -m "$M" --port "$PORT"
    contains err "cannot bind to 127.0.0.1:$PORT" "port in use message"
fi
kill -TERM "$PID"
wait "$PID"
status=$?
if [ "$status" -ne 0 ]; then fail "serve: exit status $status after SIGTERM"; else echo "ok: serve stops on SIGTERM"; fi
contains "$DIR/serve.err" "stopping" "stop message"

if [ "$failures" -ne 0 ]; then
    echo "$failures check(s) failed"
    exit 1
fi
echo "all serve CLI checks passed"
