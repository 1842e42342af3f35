#!/usr/bin/env python3
"""The Python binding's overhead: the same generation through kvec.Model.generate and through
`kvec run`, alternating, ROUNDS times (docs/python.md, "Overhead").

    PYTHONPATH=build/release/python /usr/bin/python3 scripts/python-overhead.py \
        [-m MODEL] [-t THREADS] [-n TOKENS] [--rounds N] [--policy P --budget B]

Per round: decode tokens/s as each reports it, and the time of the whole generation (prompt and
decode: the engine's own timers in `kvec run`, the wall time of the call in Python, model loading
excluded). Prints the per-round ratios Python / CLI with a 95 % t-interval over the rounds."""
import argparse
import pathlib
import re
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from bench_ratio import interval  # noqa: E402

import kvec  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", default=str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-n", "--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--policy")
    ap.add_argument("--budget", type=int)
    ap.add_argument("--cli", default=str(ROOT / "build" / "release" / "tools" / "kvec"))
    a = ap.parse_args()
    prompt = (ROOT / "data" / "text" / "sotu" / "2009_barack_obama_d.txt").read_text()[:6000]
    policy_args = ["--policy", a.policy, "--budget", str(a.budget)] if a.policy else []
    model = kvec.Model(a.model, threads=a.threads)
    decode, whole = [], []
    for r in range(a.rounds):
        out = subprocess.run([a.cli, "run", "-m", a.model, "-t", str(a.threads), "--temp", "0", "-n", str(a.tokens),
                              "-p", prompt, *policy_args], capture_output=True, text=True, check=True)
        p = re.search(r"^prompt: .* in ([\d.]+) s", out.stderr, re.M)
        d = re.search(r"^generation: (\d+) tokens, (\d+) decode steps in ([\d.]+) s \(([\d.]+) tokens/s\)", out.stderr, re.M)
        cli_decode, cli_whole = float(d.group(4)), float(p.group(1)) + float(d.group(3))
        t0 = time.perf_counter()
        g = model.generate(prompt, policy=a.policy, budget=a.budget, max_new_tokens=a.tokens)
        py_whole = time.perf_counter() - t0
        assert g.text == out.stdout[:-1], "the two generations differ"
        py_decode = g.stats["decode_tokens_per_second"]
        decode.append(py_decode / cli_decode)
        whole.append(cli_whole / py_whole)  # speed ratio: > 1 when Python is faster
        print(f"round {r + 1}: decode t/s python {py_decode:.1f} cli {cli_decode:.1f}; generation s python "
              f"{py_whole:.3f} cli {cli_whole:.3f}", flush=True)
    for name, xs in (("decode tokens/s", decode), ("whole generation speed", whole)):
        mean, ci = interval(xs)
        span = f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
        print(f"python / cli {name}: {mean:.3f}{span} over {len(xs)} rounds")


if __name__ == "__main__":
    main()
