"""Model.generate against `kvec run` on the same inputs, streaming, the cache's figures."""
import re
import threading

import numpy as np
import pytest

from conftest import SMOLLM2, TINY, run_cli

# (policy, budget, ratio, decode_evict, chunk): the engine's paths a policy can take.
CASES = [
    (None, None, None, 0, None),
    ("snapkv", 64, None, 0, None),
    ("kvec", None, 0.25, 0, None),
    ("h2o", 48, None, 2, None),
    ("snapkv", 64, None, 0, 128),
    ("streaming", 40, None, 0, None),
]


def cli_args(policy, budget, ratio, decode_evict, chunk):
    args = []
    if policy:
        args += ["--policy", policy]
    if budget:
        args += ["--budget", budget]
    if ratio:
        args += ["--ratio", ratio]
    if decode_evict:
        args += [f"--decode-evict={decode_evict}"]
    if chunk:
        args += ["--chunk", chunk]
    return args


def end_entries(stderr: str) -> int:
    return int(re.search(r"^kv cache: .*\(\d+ bytes, (\d+) entries\)", stderr, re.M).group(1))


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(str(x) for x in c))
def test_same_text_and_cache_as_kvec_run(tiny, speech, case):
    policy, budget, ratio, decode_evict, chunk = case
    g = tiny.generate(speech, policy=policy, budget=budget, ratio=ratio, decode_evict=decode_evict, chunk=chunk,
                      max_new_tokens=24)
    r = run_cli("run", "-m", TINY, "-t", 2, "--temp", 0, "-n", 24, "-p", speech, *cli_args(*case))
    assert g.text == r.stdout[:-1]  # kvec run ends the text with a newline
    assert g.cache.end_entries == end_entries(r.stderr) == int(g.cache.entries.sum())
    assert len(g.tokens) == g.stats["n_generated"] == 24
    assert g.stop_reason == "token limit"


def test_model_options_match_kvec_run(kvec, speech):
    m = kvec.Model(TINY, threads=2, n_batch=64, kv_type_k="q8_0", kv_type_v="q4_0", n_ctx=1024)
    assert (m.info["n_batch"], m.info["kv_type_k"], m.info["kv_type_v"], m.n_ctx) == (64, "q8_0", "q4_0", 1024)
    g = m.generate(speech, policy="kvec", budget=64, max_new_tokens=24)
    r = run_cli("run", "-m", TINY, "-t", 2, "--temp", 0, "-n", 24, "-p", speech, "-b", 64, "-ctk", "q8_0",
                "-ctv", "q4_0", "-c", 1024, "--policy", "kvec", "--budget", 64)
    assert g.text == r.stdout[:-1]
    assert g.cache.end_bytes < kvec.Model(TINY, threads=2).generate(speech, policy="kvec", budget=64,
                                                                      max_new_tokens=24).cache.end_bytes


def test_same_text_as_kvec_run_on_the_real_default_model(smollm2, speech):
    question = speech + "\n\nQuestion: What is this speech about? Answer in one sentence."
    g = smollm2.generate(question, policy="kvec", budget=128, max_new_tokens=32, chat=True)
    r = run_cli("run", "-m", SMOLLM2, "-t", 2, "--temp", 0, "-n", 32, "--chat", "-p", question,
                "--policy", "kvec", "--budget", 128)
    assert g.text == r.stdout[:-1]
    assert g.text.strip()


def test_sampling_with_a_seed_matches_kvec_run(tiny, speech):
    g = tiny.generate(speech, temperature=0.9, seed=7, max_new_tokens=16)
    r = run_cli("run", "-m", TINY, "-t", 2, "--temp", 0.9, "-s", 7, "-n", 16, "-p", speech)
    assert g.text == r.stdout[:-1]
    assert g.seed == 7


def test_budget_is_held_and_figures_agree(tiny, speech):
    g = tiny.generate(speech, policy="snapkv", budget=64, max_new_tokens=8)
    info = tiny.info
    heads = info["n_layer"] * info["n_head_kv"]
    assert g.cache.entries.shape == (info["n_layer"], info["n_head_kv"])
    assert g.cache.budget == 64
    assert g.cache.prompt_entries == heads * 64
    assert g.cache.full_entries == heads * g.stats["n_prompt"]
    assert g.cache.prompt_bytes < g.cache.full_bytes
    # Without decode-time eviction every head gains one entry per decode step.
    assert np.all(g.cache.entries == 64 + g.stats["n_decoded"])
    cov = g.cache.coverage
    assert cov.c_head.shape == (info["n_layer"],)
    assert np.all((cov.c_head > 0) & (cov.c_head <= 1))
    assert np.all(cov.redundancy >= 1)
    assert 0 < cov.c_layer <= 1
    assert g.policy.startswith("snapkv:budget=64")


def test_full_cache_has_no_budget_and_no_coverage(tiny, speech):
    g = tiny.generate(speech, max_new_tokens=4)
    assert g.cache.budget is None and g.cache.coverage is None
    assert g.cache.prompt_entries == g.cache.full_entries
    assert g.policy == ""


def test_stream_yields_the_same_text(tiny, speech):
    whole = tiny.generate(speech, policy="kvec", budget=64, max_new_tokens=20)
    s = tiny.generate(speech, policy="kvec", budget=64, max_new_tokens=20, stream=True)
    pieces = list(s)
    assert len(pieces) > 1
    assert "".join(pieces) == whole.text == s.result.text
    assert list(s) == []  # a second iteration: nothing more
    seen = []
    g = tiny.generate(speech, max_new_tokens=20, on_text=seen.append)
    assert "".join(seen) == g.text


def test_stream_closed_early_stops_the_generation(tiny, speech):
    s = tiny.generate(speech, max_new_tokens=2000, stream=True)
    for i, _ in enumerate(s):
        if i == 3:
            break
    s.close()
    assert s.result.stop_reason == "cancelled"
    assert s.result.stats["n_generated"] < 2000
    assert tiny.generate("Hello", max_new_tokens=2).stop_reason in ("token limit", "end of generation")


def test_stop_strings_and_chat(smollm2):
    g = smollm2.generate("Count from one to ten in words, separated by commas.", chat=True, max_new_tokens=40,
                         stop=["4."])
    assert g.stop_reason == "stop string"
    assert "4." not in g.text and "3." in g.text


def test_tokenize_round_trip(tiny, speech):
    ids = tiny.tokenize(speech[:200], add_special=False)
    assert tiny.detokenize(ids) == speech[:200]
    assert tiny.tokenize("x", add_special=True)[0] == tiny.tokenize("", add_special=True)[0]


def test_gil_is_released_while_computing(tiny, speech):
    ticks = 0
    done = threading.Event()

    def count():
        nonlocal ticks
        while not done.is_set():
            ticks += 1

    t = threading.Thread(target=count)
    t.start()
    try:
        before = ticks
        tiny.generate(speech, max_new_tokens=200)
        during = ticks - before
    finally:
        done.set()
        t.join()
    # With the GIL held for the whole call the counter could not move at all.
    assert during > 1000


def test_policies_list(kvec):
    ps = {p.name: p for p in kvec.policies()}
    assert {"kvec", "snapkv", "h2o", "full", "kvzip", "expected-attention"} <= set(ps)
    names = [o["name"] for o in ps["kvec"].options]
    assert "budget" in names and "ratio" in names
    assert "budget" in ps["kvec"].doc
