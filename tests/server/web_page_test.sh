#!/usr/bin/env bash
# Usage: web_page_test.sh /path/to/kvec /path/to/source
# kvec serve's web page (src/server/web/index.html) in headless Chromium: the page, opened with a
# prompt in its address (?prompt=...&send=1, the API key in ?key=), sends one chat request and
# draws the conversation and the KV picture. The DOM Chromium dumps must hold the user's and the
# assistant's messages, no error, one strip per (layer, KV head) whose kept counts equal what the
# same request returns to curl, and the summary; the screenshot must be a PNG of the window's size
# that is not blank. Skipped (77) without chromium (scripts/install-deps.sh installs it).
set -u
KVEC="$1"
SRC="$2"
source "$SRC/tests/tools/cli_lib.sh"
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROMIUM" ]; then
    echo "skipped: no chromium (scripts/install-deps.sh)"
    exit 77
fi

M="$DIR/chat.gguf"
/usr/bin/python3 "$SRC/tests/server/add_chat_template.py" "$SRC/models/kvec-tiny.gguf" "$M" || { echo "FAIL: chat model"; exit 1; }
start_serve -m "$M" -t 1 --parallel 1 --api-key sesame
# KEEP_SCREENSHOT=FILE keeps the screenshot.
trap 'kill "$PID" 2>/dev/null; [ -n "${KEEP_SCREENSHOT:-}" ] && cp "$DIR/page.png" "$KEEP_SCREENSHOT"; rm -rf "$DIR"' EXIT
[ -n "$PORT" ] || { echo "FAIL: the server did not start"; cat "$DIR/serve.err"; exit 1; }

PROMPT="The old lighthouse keeper climbed the stairs every evening at dusk, counting each step aloud, and when he reached the lamp room he wiped the glass"
QUERY=$(/usr/bin/python3 -c 'import sys, urllib.parse; print(urllib.parse.urlencode({"mode": "chat", "policy": "kvec", "budget": 40, "max_tokens": 8, "key": "sesame", "prompt": sys.argv[1], "send": 1}))' "$PROMPT")
URL="http://127.0.0.1:$PORT/?$QUERY"
# A fresh profile each run; --virtual-time-budget lets the page's fetches finish before the dump.
chrome() { timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir="$DIR/profile" \
                 --virtual-time-budget=30000 "$@" 2>>"$DIR/chromium.err"; }

# The same request as the page sends, for the expected picture.
BODY=$(/usr/bin/python3 -c 'import json, sys; print(json.dumps({"messages": [{"role": "user", "content": sys.argv[1]}], "max_tokens": 8, "temperature": 0, "kv": {"policy": "kvec", "budget": 40, "reuse": True, "map": True}}))' "$PROMPT")
curl -s -H "Authorization: Bearer sesame" -H "Content-Type: application/json" "http://127.0.0.1:$PORT/v1/chat/completions" -d "$BODY" >"$DIR/expected.json"
curl -s -H "Authorization: Bearer sesame" -H "Content-Type: application/json" "http://127.0.0.1:$PORT/slots/0?action=erase" -d '{}' >/dev/null

if chrome --dump-dom "$URL" >"$DIR/dom.html"; then echo "ok: chromium loaded the page"; else
    echo "FAIL: chromium --dump-dom"; tail -20 "$DIR/chromium.err"; failures=$((failures + 1)); fi
if /usr/bin/python3 - "$DIR/dom.html" "$DIR/expected.json" <<'PY'
import json, re, sys
dom = open(sys.argv[1], encoding="utf-8").read()
want = json.load(open(sys.argv[2]))
problems = []
if re.search(r'class="msg error"', dom):
    problems.append("the page shows an error: " + re.search(r'class="msg error">([^<]*)', dom).group(1))
if not re.search(r'class="msg user">The old lighthouse keeper', dom):
    problems.append("no user message")
answer = re.search(r'class="msg assistant">([^<]*)<', dom)
if not answer or answer.group(1) != want["choices"][0]["message"]["content"].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"):
    problems.append(f"assistant message {answer.group(1) if answer else None!r} != {want['choices'][0]['message']['content']!r}")
strips = re.findall(r'<svg class="strip"[^>]*data-layer="(\d+)" data-head="(\d+)" data-kept="(\d+)"', dom)
runs = want["kv"]["map"]["runs"]
expected = [(str(l), str(h), str(sum(r[1::2]))) for l, heads in enumerate(runs) for h, r in enumerate(heads)]
if strips != expected:
    problems.append(f"strips {strips} != {expected}")
n_prompt = want["kv"]["map"]["n_prompt"]
if any(int(k) <= 0 or int(k) > n_prompt for _, _, k in strips):
    problems.append("a kept count outside (0, n_prompt]")
if dom.count("<rect ") < len(expected):
    problems.append("strips without kept runs drawn")
if "coverage: " not in dom or "KV bytes after the prompt" not in dom:
    problems.append("no summary")
if problems:
    print("\n".join(problems))
    sys.exit(1)
print(f"{len(strips)} strips (layers x KV heads), {dom.count('<rect ')} runs drawn, kept counts = the API's")
PY
then echo "ok: the DOM holds the conversation and the KV picture"; else
    echo "FAIL: the page's DOM"; failures=$((failures + 1)); fi

curl -s -H "Authorization: Bearer sesame" -H "Content-Type: application/json" "http://127.0.0.1:$PORT/slots/0?action=erase" -d '{}' >/dev/null
if chrome --screenshot="$DIR/page.png" --window-size=1280,900 "$URL" >/dev/null && /usr/bin/python3 - "$DIR/page.png" <<'PY'
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
width, height = struct.unpack(">II", data[16:24])
assert (width, height) == (1280, 900), (width, height)
idat, pos = b"", 8
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    if kind == b"IDAT":
        idat += data[pos + 8:pos + 8 + n]
    pos += 12 + n
raw = zlib.decompress(idat)
nonzero = sum(1 for b in raw[::7] if b) / len(raw[::7])  # filtered rows: a blank page is nearly all zeros
assert nonzero > 0.01, f"blank screenshot ({nonzero:.4f} of sampled bytes non-zero)"
print(f"screenshot {width}x{height}, {len(data)} bytes, {nonzero:.3f} of sampled filtered bytes non-zero")
PY
then echo "ok: the screenshot is not blank"; else echo "FAIL: screenshot"; failures=$((failures + 1)); fi

if [ "$failures" -ne 0 ]; then
    echo "$failures check(s) failed"
    exit 1
fi
echo "all web page checks passed"
