"""Every error path: engine errors as kvec.Error (a ValueError) with the engine's message, wrong
Python types as TypeError, and the model still usable after each."""
import pytest

from conftest import ROOT, TINY

CONTEXT = "The key is 4711. " * 20
Q = ["What is the key?"]


def test_error_is_a_value_error(kvec):
    assert issubclass(kvec.Error, ValueError)


@pytest.mark.parametrize("kwargs, message", [
    (dict(path=ROOT / "no-such.gguf"), "cannot open .*no-such.gguf.*No such file"),
    (dict(path=ROOT / "models"), "not a regular file"),
    (dict(path=ROOT / "README.md"), "GGUF"),
    (dict(path=TINY, threads=-1), "threads must be >= 0"),
    (dict(path=TINY, kv_type="q9_9"), "kv_type"),
    (dict(path=TINY, kv_type_k="bogus"), "kv_type_k"),
    (dict(path=TINY, n_ctx=-5), "n_ctx must be >= 0"),
    (dict(path=TINY, n_batch=0), "n_batch must be positive"),
])
def test_model_errors(kvec, kwargs, message):
    with pytest.raises(kvec.Error, match=message):
        kvec.Model(**kwargs)


@pytest.mark.parametrize("kwargs, message", [
    (dict(prompt=""), "the prompt is empty"),
    (dict(policy="nonesuch", budget=64), "unknown eviction policy 'nonesuch'"),
    (dict(policy="snapkv:gamma=2", budget=64), "gamma"),
    (dict(policy="snapkv", budget=8), "smaller than the window"),
    (dict(policy="snapkv", budget=64, ratio=0.5), "either budget or ratio"),
    (dict(budget=64), "need an eviction policy"),
    (dict(policy=""), "policy is empty"),
    (dict(policy="snapkv:budget=64", budget=64), "budget"),
    (dict(max_new_tokens=-2), "max_new_tokens must be >= 0"),
    (dict(chunk=0), "chunk must be positive"),
    (dict(decode_evict=-1), "decode_evict must be >= 0"),
    (dict(temperature=float("nan")), "temperature must be a finite number"),
    (dict(repeat_penalty=0.0), "repeat penalty"),
    (dict(min_p=1.0), "min-p"),
    (dict(top_p=1.5), "top-p must be in"),
    (dict(seed=-3), "seed must be >= 0"),
    (dict(chat=True), "chat template"),
    (dict(on_text=42), "on_text must be callable"),
    (dict(stream=True, on_text=print), "not both"),
])
def test_generate_errors(kvec, tiny, kwargs, message):
    args = dict(prompt="Hello there", max_new_tokens=4)
    args.update(kwargs)
    with pytest.raises(kvec.Error, match=message):
        tiny.generate(**args)
    assert tiny.generate("Hello there", max_new_tokens=2).tokens


@pytest.mark.parametrize("kwargs, message", [
    (dict(questions=[]), "questions is empty"),
    (dict(context=""), "the context is empty"),
    (dict(questions=[""]), "question 'q0' is empty"),
    (dict(policy="snapkv"), "needs a budget or a compression_ratio"),
    (dict(policy="full", budget=64), "keeps every entry"),
    (dict(policy="snapkv", budget=64, compression_ratio=0.5), "either budget or compression_ratio"),
    (dict(policy="snapkv", compression_ratio=1.5), "compression"),
    (dict(policy="snapkv", budget=-1), "budget must be positive"),
    (dict(policy="snapkv,kvec", budget=64), "give one policy"),
    (dict(policy="snapkv", budget=64, max_new_tokens=0), "max_new_tokens must be >= 1"),
    (dict(references=[["a"], ["b"]]), "one list per question"),
    (dict(chat=True), "chat template"),
    (dict(context="word " * 5000), "does not fit|context holds"),
    (dict(policy="h2o:decode=1", budget=64), "decode-time eviction"),
])
def test_answer_errors(kvec, tiny, kwargs, message):
    args = dict(context=CONTEXT, questions=Q)
    args.update(kwargs)
    with pytest.raises(kvec.Error, match=message):
        tiny.answer(**args)
    assert tiny.answer(CONTEXT, Q, max_new_tokens=2).answers


@pytest.mark.parametrize("kwargs, message", [
    (dict(suite="synthetic-3k"), "synthetic-3k"),
    (dict(policies="nonesuch"), "nonesuch"),
    (dict(budgets=[]), "at least one budget"),
    (dict(budgets=[64, 64]), "listed twice"),
    (dict(budgets=[-4]), "not a positive integer"),
    (dict(budgets=[1.5]), "compression"),
    (dict(protocol="sideways"), "sideways"),
    (dict(split="nope"), "nope"),
    (dict(tasks=["no_task"]), "no_task"),
    (dict(samples=-1), "samples must be >= 0"),
    (dict(on_progress="x"), "on_progress must be callable"),
])
def test_eval_errors(kvec, tiny, kwargs, message):
    args = dict(policies="snapkv", budgets=[64], samples=1, tasks=["niah_single"])
    args.update(kwargs)
    with pytest.raises(kvec.Error, match=message):
        kvec.eval(tiny, **args)


@pytest.mark.parametrize("call", [
    lambda m: m.generate(42),
    lambda m: m.generate("x", budget="64", policy="snapkv"),
    lambda m: m.generate("x", budget=True, policy="snapkv"),
    lambda m: m.answer("context", "a question, not a list"),
    lambda m: m.answer("context", [3]),
    lambda m: m.tokenize(None),
])
def test_type_errors(tiny, call):
    with pytest.raises(TypeError):
        call(tiny)


def test_eval_budget_types(kvec, tiny):
    with pytest.raises(TypeError, match="bool"):
        kvec.eval(tiny, budgets=[True])
    with pytest.raises(TypeError, match="str"):
        kvec.eval(tiny, budgets=["64"])


def test_detokenize_outside_the_vocabulary(kvec, tiny):
    with pytest.raises(kvec.Error, match="outside the vocabulary"):
        tiny.detokenize([10 ** 6])


def test_closed_model(kvec):
    m = kvec.Model(TINY, threads=1)
    m.close()
    with pytest.raises(kvec.Error, match="closed"):
        m.generate("Hello")
    with kvec.Model(TINY, threads=1) as m2:
        assert m2.generate("Hello", max_new_tokens=1).tokens
    with pytest.raises(kvec.Error, match="closed"):
        m2.answer("a", ["b"])
