# Shared helpers of the command-line test scripts (sourced after KVEC is set). Each check prints
# what it tests; a failure prints the command's output and is counted in $failures, which the
# script turns into its exit status with `finish`.
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
failures=0

fail() {
    echo "FAIL: $1"
    echo "--- stdout:"; tail -n 40 "$DIR/out" 2>/dev/null
    echo "--- stderr:"; tail -n 40 "$DIR/err" 2>/dev/null
    failures=$((failures + 1))
}

# expect STATUS DESCRIPTION -- command...   (runs the command, checks the exit status)
expect() {
    local want="$1" what="$2"
    shift 3
    "$@" >"$DIR/out" 2>"$DIR/err"
    local got=$?
    if [ "$got" -ne "$want" ]; then fail "$what: exit status $got, expected $want"; return 1; fi
    echo "ok: $what"
}

# contains FILE TEXT DESCRIPTION   (FILE: a path, or a name inside $DIR such as out or err)
contains() {
    local file="$1"
    case "$file" in /*) ;; *) file="$DIR/$file" ;; esac
    if ! grep -qF -- "$2" "$file"; then fail "$3: '$2' not in $1"; return 1; fi
}

# start_serve ARGS...: starts `$KVEC serve --port 0 ARGS...` in the background (stdout and stderr
# in $DIR/serve.out, $DIR/serve.err) and waits for its "listening on" line: PID and PORT are set
# (PORT empty if it did not start within 20 s).
start_serve() {
    "$KVEC" serve --port 0 "$@" >"$DIR/serve.out" 2>"$DIR/serve.err" &
    PID=$!
    PORT=""
    for _ in $(seq 1 400); do
        PORT=$(sed -nE 's/^listening on http:\/\/127\.0\.0\.1:([0-9]+).*/\1/p' "$DIR/serve.err")
        [ -n "$PORT" ] && return 0
        kill -0 "$PID" 2>/dev/null || return 1
        sleep 0.05
    done
}

# finish: the exit status of the script (1 when a check failed).
finish() {
    if [ "$failures" -ne 0 ]; then
        echo "$failures check(s) failed"
        exit 1
    fi
    echo "all checks passed"
    exit 0
}
