"""Model.answer (kvpress's pipeline shape) and kvec.eval against `kvec eval` on the same items."""
import json

import pytest

from conftest import ROOT, TINY, run_cli

TASKS = "niah_askmany,niah_single,vt"


@pytest.fixture(scope="module")
def instances(tmp_path_factory):
    """The suite's instances as text (kvec synth, the bundled model's tokenizer, completion form
    as kvec eval builds them for a model without a chat template)."""
    path = tmp_path_factory.mktemp("synth") / "synthetic-1k.jsonl"
    run_cli("synth", "--suite", "synthetic-1k", "--tokenizer", TINY, "--format", "completion", "-o", path)
    out = [json.loads(line) for line in path.read_text().splitlines()]
    return [d for d in out if d["task"] in TASKS.split(",") and d["index"] == 0]


def cli_predictions(tmp_path, protocol, policies, budgets):
    out = tmp_path / protocol
    run_cli("eval", "-m", TINY, "-t", 2, "--suite", "synthetic-1k", "--tasks", TASKS, "--samples", 1,
            "--protocol", protocol, "--policies", policies, "--budgets", budgets, "--out", out)
    records = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    return {(r["id"], r["policy"], r["budget"]): r for r in records}, json.loads((out / "metrics.json").read_text())


def split(prompt: str, context: str):
    end = prompt.find(context) + len(context)
    return prompt[:end], prompt[end:]


@pytest.mark.parametrize("protocol", ["query-agnostic", "query-aware"])
def test_answers_equal_kvec_eval(tiny, instances, tmp_path, protocol):
    cli, _ = cli_predictions(tmp_path, protocol, "snapkv,kvec", "64")
    compared = 0
    for inst in instances:
        asks = inst.get("asks") or [inst]
        context, _ = split(inst["prompt"], inst["context"])
        questions = [split(a["prompt"], inst["context"])[1] for a in asks]
        ids = [f"{inst['_id']}/q{i}" for i in range(len(asks))] if inst.get("asks") else [inst["_id"]]
        for policy in ("snapkv", "kvec"):
            a = tiny.answer(context, questions, policy=policy, budget=64, query_aware=protocol == "query-aware",
                            max_new_tokens=inst["max_new_tokens"], chat=False,
                            references=[x["answers"] for x in asks])
            assert a.protocol == protocol
            # Compress once, ask many: one prefill of the context for every question.
            assert a.stats["prefills"] == (1 if protocol == "query-agnostic" else len(questions))
            for i, rec in zip(ids, a.records):
                expected = cli[(i, policy, 64)]
                assert rec["prediction"] == expected["prediction"], (i, policy)
                assert rec["score"] == expected["score"]
                assert rec["kv_entries"] == expected["kv_entries"]
                compared += 1
    assert compared == 2 * (4 + 2)  # niah_askmany asks 4 questions about one context


def test_eval_equals_kvec_eval(kvec, tiny, tmp_path):
    cli, metrics = cli_predictions(tmp_path, "query-agnostic", "full,snapkv,kvec", "64,128")
    r = kvec.eval(tiny, suite="synthetic-1k", policies=["full", "snapkv", "kvec"], budgets=[64, 128],
                  protocol="query-agnostic", samples=1, tasks=TASKS.split(","))
    assert {(x["id"], x["policy"], x["budget"]): x["prediction"] for x in r.records} == \
        {k: v["prediction"] for k, v in cli.items()}
    assert r.metrics["results"] == metrics["results"]
    rows = r.rows()
    assert [(x["policy"], x["budget"]) for x in rows] == [("full", None), ("snapkv", 64), ("snapkv", 128),
                                                          ("kvec", 64), ("kvec", 128)]
    assert all(set(x) >= {"average", "average_lo", "average_hi", "score_vt"} for x in rows)


def test_eval_on_longbench_files_equals_kvec_eval(kvec, tiny, tmp_path):
    files = [ROOT / "data" / "longbench" / "fixture" / f for f in ("2wikimqa.jsonl", "hotpotqa.jsonl")]
    out = tmp_path / "longbench"
    run_cli("eval", "-m", TINY, "-t", 2, "--data", ",".join(map(str, files)), "--policies", "full,kvec",
            "--budgets", 64, "--out", out)
    metrics = json.loads((out / "metrics.json").read_text())
    r = kvec.eval(tiny, data_files=files, policies="full,kvec", budgets=[64])
    assert r.metrics["results"] == metrics["results"]
    assert r.metrics["tasks"] == ["2wikimqa", "hotpotqa"]
    with pytest.raises(kvec.Error, match="not both"):
        kvec.eval(tiny, suite="synthetic-1k", data_files=files)


def test_eval_with_compression_ratios(kvec, tiny):
    seen = []
    r = kvec.eval(tiny, policies="snapkv", budgets=[0.5], samples=1, tasks=["niah_single"],
                  on_progress=lambda done, total: seen.append((done, total)))
    assert [x["compression_ratio"] for x in r.rows()] == [0.5]
    assert seen[-1] == (1, 1)


def test_answer_with_a_ratio_and_the_full_cache(tiny, instances):
    inst = next(i for i in instances if i["task"] == "niah_single")
    context, question = split(inst["prompt"], inst["context"])
    full = tiny.answer(context, [question], max_new_tokens=16)
    half = tiny.answer(context, [question], policy="snapkv", compression_ratio=0.5, max_new_tokens=16)
    assert full.policy == "full" and half.policy == "snapkv:ratio=0.5"
    assert half.kv_entries < full.kv_entries
    assert half.kv_bytes < full.kv_bytes
