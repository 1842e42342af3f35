#!/usr/bin/env python3
"""kvec serve under attack (docs/reliability.md, "The server under attack"): starts `kvec serve`
on a model with --parallel 2 and runs, one after another,

  malformed  N requests (default 2000) over raw sockets, each a valid request with one seeded
             mutation: the request line, a header, the framing (lengths, chunks), the JSON body,
             a field's type or range, bytes cut or inserted;
  flood      C connections at once (default 4) each sending 10^6 headers of 50 bytes without
             ending the header block (the issue's reproduction);
  slowloris  S clients (default 64) sending a request one byte per second, while /health is
             polled every 0.5 s;
  chunked    C connections each sending a 1.4 GB chunked body;

and prints, per phase, the statuses seen, 5xx answers, whether the server still lives, /health's
worst latency, and the server's resident memory (VmRSS sampled every 50 ms, and VmHWM).
Exit status 1 when a phase saw a 5xx other than 503, a crash, or /health failing.

    scripts/server-attack.py [--kvec build/release/tools/kvec] [--model models/kvec-tiny.gguf]
                             [--requests 2000] [--seed 1] [--phases malformed,flood,slowloris,chunked]
"""
import argparse
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Server:
    def __init__(self, kvec, model, extra):
        self.port = free_port()
        # stderr to a file: a pipe nobody reads would fill and stop the server at its next line.
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([kvec, "serve", "-m", model, "--port", str(self.port), "--parallel", "2",
                                      "-t", "1", "-c", "512"] + extra,
                                     stdout=subprocess.DEVNULL, stderr=self.log)
        for _ in range(600):
            if self.health(timeout=0.2) is not None:
                break
            time.sleep(0.05)
        else:
            sys.exit("kvec serve did not start")
        self.rss_peak = 0
        self.rss_now = 0
        self._stop = False
        self.rss_now = self._status("VmRSS:")
        threading.Thread(target=self._sample, daemon=True).start()

    def _status(self, key):
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith(key):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def _sample(self):
        while not self._stop:
            self.rss_now = self._status("VmRSS:")
            self.rss_peak = max(self.rss_peak, self.rss_now)
            time.sleep(0.05)

    def hwm(self):
        return self._status("VmHWM:")

    def alive(self):
        return self.proc.poll() is None

    def health(self, timeout=5.0):
        """Seconds /health took, or None when it failed."""
        t0 = time.monotonic()
        try:
            r = exchange(self.port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", timeout)
            return time.monotonic() - t0 if r.startswith(b"HTTP/1.1 200") else None
        except OSError:
            return None

    def stop(self):
        self._stop = True
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.seek(0)
        return self.log.read().decode(errors="replace")


def exchange(port, data, timeout=10.0):
    """Sends `data`, returns everything the server answers until it closes (or `timeout`)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server refused early and closed: read its answer
        out = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        return out
    finally:
        s.close()


def statuses(response):
    out = []
    at = response.find(b"HTTP/1.1 ")
    while at >= 0:
        try:
            out.append(int(response[at + 9:at + 12]))
        except ValueError:
            pass
        at = response.find(b"HTTP/1.1 ", at + 1)
    return out


# ---- malformed requests ---------------------------------------------------------------------

GOOD_BODIES = [
    {"prompt": "The lighthouse keeper", "max_tokens": 4, "temperature": 0},
    {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
    {"prompt": "x", "max_tokens": 2, "kv": {"policy": "snapkv", "budget": 16}},
    {"prompt": "y", "max_tokens": 2, "stream": True},
]
ODD_VALUES = [None, -1, 0, 1e308, -1e308, 2**63, "", "x" * 300, [], {}, True, "\u0000", "\ud7ff", [1, [2, [3]]]]
FIELDS = ["prompt", "messages", "max_tokens", "temperature", "top_p", "top_k", "min_p", "stop", "seed", "stream",
          "stream_options", "kv", "n", "logprobs", "id_slot", "model", "response_format", "logit_bias"]


def request(method, path, headers, body):
    head = f"{method} {path} HTTP/1.1\r\n".encode() + b"".join(k + b": " + v + b"\r\n" for k, v in headers)
    return head + b"\r\n" + body


def mutate(rng):
    body_obj = json.loads(json.dumps(rng.choice(GOOD_BODIES)))
    path = rng.choice(["/v1/completions", "/v1/chat/completions"])
    kind = rng.randrange(12)
    if kind == 0:  # a field of another type or out of range
        body_obj[rng.choice(FIELDS)] = rng.choice(ODD_VALUES)
    elif kind == 1:  # kv options
        body_obj["kv"] = {rng.choice(["policy", "budget", "ratio", "reuse", "map", "bogus"]): rng.choice(ODD_VALUES + ["kvec:x=1", "snapkv:window=-1"])}
    body = json.dumps(body_obj).encode()
    if kind == 2:  # JSON cut, or bytes inserted
        cut = rng.randrange(len(body))
        body = body[:cut] if rng.random() < 0.5 else body[:cut] + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 8))) + body[cut:]
    headers = [(b"Host", b"127.0.0.1"), (b"Content-Type", b"application/json"),
               (b"Content-Length", str(len(body)).encode())]
    method = "POST"
    if kind == 3:  # the request line
        method = rng.choice(["GET", "PUT", "DELETE", "P OST", "", "POST\x00", "OPTIONS", "X" * 100])
        path = rng.choice([path, "", "*", "http://evil/v1/completions", "/v1/../etc/passwd", "/%zz", "/" + "a" * 9000, path + "?a=%00"])
    elif kind == 4:  # lengths
        headers[2] = (b"Content-Length", rng.choice([b"-1", b"abc", b"99999999999999999999", str(len(body) + 5).encode(),
                                                     str(max(0, len(body) - 3)).encode(), b"1, 2", b""]))
    elif kind == 5:  # two lengths
        headers.append((b"Content-Length", str(len(body) + rng.choice([0, 1, -1])).encode()))
    elif kind == 6:  # chunked, sometimes malformed
        headers[2] = (b"Transfer-Encoding", rng.choice([b"chunked", b"gzip, chunked", b"chunked, gzip", b"identity"]))
        n = rng.randrange(1, 9)
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + n]), body[i:i + n]) for i in range(0, len(body), n))
        body = chunks + b"0\r\n\r\n"
        if rng.random() < 0.5:
            cut = rng.randrange(len(body))
            body = body[:cut] + rng.choice([b"zz\r\n", b"\r\n", b"-5\r\n", b"ffffffffffffffff\r\n"]) + body[cut:]
    elif kind == 7:  # control characters in a header
        headers.append((b"X-A", b"a" + bytes([rng.choice([0, 13, 10, 1, 127])]) + b"b"))
    elif kind == 8:  # cross-site
        headers.append((b"Origin", rng.choice([b"http://evil.example", b"null", b""])))
        if rng.random() < 0.5:
            headers[1] = (b"Content-Type", b"text/plain")
        if rng.random() < 0.5:
            headers[0] = (b"Host", b"evil.example")
    elif kind == 9:  # a header without a colon, an obs-fold, a huge header
        headers.append(rng.choice([(b"NoColon", b""), (b"X-Fold", b"a\r\n b"), (b"X-Big", b"v" * 40000)]))
    elif kind == 10:  # HTTP version
        data = request(method, path, headers, body)
        return data.replace(b"HTTP/1.1", rng.choice([b"HTTP/2.0", b"HTTP/0.9", b"HTTP/1.x", b"HTTP/11"]), 1)
    elif kind == 11:  # random bytes anywhere
        data = bytearray(request(method, path, headers, body))
        for _ in range(rng.randrange(1, 6)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data)
    return request(method, path, headers, body)


def phase_malformed(srv, n, seed):
    rng = random.Random(seed)
    seen, five = {}, []
    for i in range(n):
        data = mutate(rng)
        codes = statuses(exchange(srv.port, data, timeout=30))
        for c in codes or [0]:
            seen[c] = seen.get(c, 0) + 1
            if c >= 500 and c != 503:
                five.append((i, c, data[:120]))
        if not srv.alive():
            return seen, five + [(i, "crash", data[:120])]
    return seen, five


# ---- flood, slowloris, chunked flood --------------------------------------------------------

def flood(srv, connections, head, pieces):
    """`connections` clients at once, each sending `head` and then the byte strings `pieces`
    yields until the server closes; -> [(bytes sent, statuses of the answer)]."""
    results = []

    def one():
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
        sent = 0
        try:
            s.sendall(head)
            for piece in pieces():
                s.sendall(piece)
                sent += len(piece)
        except OSError:
            pass
        s.settimeout(2)
        try:
            answer = s.recv(65536)
        except OSError:
            answer = b""
        s.close()
        results.append((sent, statuses(answer)))

    threads = [threading.Thread(target=one) for _ in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def header_flood(srv, connections):
    """10^6 headers of 50 bytes (about 60 MB) per connection, never ending the header block."""
    block = b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 50) for i in range(100000))
    return flood(srv, connections, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n", lambda: (block for _ in range(10)))


def slowloris(srv, clients, seconds):
    req = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"s" * 200 + b"\r\n\r\n"
    socks = []
    for _ in range(clients):
        try:
            socks.append(socket.create_connection(("127.0.0.1", srv.port), timeout=5))
        except OSError:
            break
    worst, failed = 0.0, 0
    t_end = time.monotonic() + seconds
    at = 0
    next_byte = time.monotonic()
    while time.monotonic() < t_end:
        if time.monotonic() >= next_byte:
            for s in socks:
                try:
                    s.send(req[at:at + 1])
                except OSError:
                    pass
            at += 1
            next_byte += 1.0
        h = srv.health(timeout=5)
        if h is None:
            failed += 1
        else:
            worst = max(worst, h)
        time.sleep(0.5)
    answers = {}
    for s in socks:
        s.settimeout(0.5)
        try:
            codes = statuses(s.recv(65536)) or [0]
        except OSError:
            codes = [0]
        for c in codes:
            answers[c] = answers.get(c, 0) + 1
        s.close()
    return len(socks), worst, failed, answers


def chunked_flood(srv, connections, total):
    """A chunked body of `total` bytes per connection (64 KiB chunks of a JSON string)."""
    piece = b"a" * 65536
    chunk = b"%x\r\n%s\r\n" % (len(piece), piece)
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" + b"c\r\n{\"prompt\": \"\r\n")
    return flood(srv, connections, head, lambda: (chunk for _ in range(total // len(piece))))


def mib(b):
    return f"{b / 2**20:.0f} MiB"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvec", default=os.path.join(ROOT, "build/release/tools/kvec"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models/kvec-tiny.gguf"))
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--slow-clients", type=int, default=64)
    ap.add_argument("--slow-seconds", type=int, default=20)
    ap.add_argument("--phases", default="malformed,flood,slowloris,chunked")
    a = ap.parse_args()
    srv = Server(a.kvec, a.model, [])
    bad = False
    base = srv.rss_now
    print(f"kvec serve on port {srv.port}, pid {srv.proc.pid}; RSS at start {mib(base)}\n")
    print("| phase | what happened | 5xx (not 503) | /health after | RSS after | RSS peak so far |")
    print("|---|---|---:|---|---:|---:|")

    def row(phase, what, five):
        nonlocal bad
        h = srv.health()
        ok = srv.alive() and h is not None
        bad = bad or not ok or five > 0
        print(f"| {phase} | {what} | {five} | {'ok' if ok else 'FAILED'} | {mib(srv.rss_now)} | {mib(max(srv.rss_peak, srv.hwm()))} |",
              flush=True)

    for phase in a.phases.split(","):
        t0 = time.monotonic()
        if phase == "malformed":
            seen, five = phase_malformed(srv, a.requests, a.seed)
            what = f"{a.requests} requests in {time.monotonic() - t0:.0f} s; statuses " + \
                   ", ".join(f"{k}: {v}" for k, v in sorted(seen.items(), key=lambda kv: str(kv[0])))
            row("malformed", what, len(five))
            for f in five[:10]:
                print("    5xx:", f, file=sys.stderr)
        elif phase == "flood":
            r = header_flood(srv, a.connections)
            what = f"{a.connections} connections x 10^6 headers: " + \
                   "; ".join(f"sent {mib(s)} before the close, answer {c}" for s, c in r)
            row("header flood", what, sum(1 for _, c in r for x in c if x >= 500 and x != 503))
        elif phase == "slowloris":
            n, worst, failed, answers = slowloris(srv, a.slow_clients, a.slow_seconds)
            what = (f"{n} clients at 1 byte/s for {a.slow_seconds} s: /health worst {worst:.3f} s, {failed} failed; "
                    f"the slow clients got " + ", ".join(f"{k}: {v}" for k, v in sorted(answers.items())))
            bad = bad or failed > 0
            row("slowloris", what, sum(v for k, v in answers.items() if k >= 500 and k != 503))
        elif phase == "chunked":
            r = chunked_flood(srv, a.connections, 1400 * 2**20)
            what = f"{a.connections} connections x 1.4 GB chunked: " + \
                   "; ".join(f"sent {mib(s)} before the close, answer {c}" for s, c in r)
            row("chunked flood", what, sum(1 for _, c in r for x in c if x >= 500 and x != 503))
        else:
            sys.exit(f"unknown phase {phase}")
    log = srv.stop()
    print(f"\nRSS: start {mib(base)}, peak {mib(max(srv.rss_peak, srv.hwm()))} (VmHWM); "
          f"server stderr: {len(log.splitlines())} lines")
    if "terminate" in log or "Sanitizer" in log:
        print(log[-2000:], file=sys.stderr)
        bad = True
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
