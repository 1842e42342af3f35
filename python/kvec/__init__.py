"""kvec from Python: long-context generation on CPU with the KV cache held to a budget.

    import kvec
    m = kvec.Model("models/SmolLM2-135M-Instruct.Q4_1.gguf", threads=2)
    g = m.generate("Summarise: ...", policy="kvec", budget=256, max_new_tokens=64)
    a = m.answer(document, questions=["Who?", "When?"], policy="snapkv", compression_ratio=0.5)
    r = kvec.eval(m, suite="synthetic-1k", policies="full,snapkv,kvec", budgets=[64, 256])

The engine is the C++ library behind the `kvec` command (module kvec._core); every call that
computes releases the GIL, and Ctrl-C stops it at the next forward step (generate) or the next
answer (answer, eval). Engine errors raise kvec.Error (a ValueError) with the engine's message.
docs/python.md has the whole API and a worked example.
"""
from __future__ import annotations

import json
import queue
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Sequence, Union

import numpy as np

from . import _core
from ._core import Error, __version__

__all__ = ["Model", "Generation", "Stream", "CacheFigures", "Coverage", "Answers", "EvalResult", "PolicyInfo",
           "Error", "policies", "eval", "__version__"]


@dataclass(frozen=True)
class PolicyInfo:
    """One eviction policy of the registry: name, one-line summary, options (dicts with name,
    default, help, choices) and the text `kvec policies NAME` prints."""
    name: str
    summary: str
    options: list
    doc: str


def policies() -> list[PolicyInfo]:
    """Every eviction policy kvec has, with its options and their defaults."""
    return [PolicyInfo(**p) for p in _core.policies()]


@dataclass
class Coverage:
    """What the kept entries cover after the prompt (docs/coverage.md): per layer the cross-head
    coverage c_head [n_layer] (positions; c_head_tokens in distinct token ids) and the redundancy
    [n_layer], the cross-layer coverage c_layer, over the prefix of the prompt's first
    prefix_positions positions (all but the last `window`)."""
    window: int
    prefix_positions: int
    prefix_tokens: int
    c_head: np.ndarray
    c_head_tokens: np.ndarray
    redundancy: np.ndarray
    c_layer: float
    c_layer_tokens: float
    kept_tenths: np.ndarray


@dataclass
class CacheFigures:
    """The KV cache of one generation: entries [n_layer, n_head_kv] kept at the end, bytes and
    entries of the prompt uncompressed (full_*), after its eviction (prompt_*), at the end (end_*),
    the peaks, the budget B per (layer, KV head) of a budgeted policy, and the coverage."""
    entries: np.ndarray
    entry_bytes: int
    full_entries: int
    full_bytes: int
    prompt_entries: int
    prompt_bytes: int
    end_entries: int
    end_bytes: int
    peak_bytes: int
    prompt_peak_bytes: int
    budget: Optional[int]
    coverage: Optional[Coverage]


@dataclass
class Generation:
    """The result of Model.generate: the text, the tokens, why it stopped ("end of generation",
    "stop string", "token limit", "context full", "cancelled"), the policy's canonical spec, the seed,
    the times (stats) and the cache's figures."""
    text: str
    tokens: list
    prompt_tokens: list
    stop_reason: str
    policy: str
    seed: int
    stats: dict
    cache: CacheFigures


def _generation(d: dict) -> Generation:
    cache = dict(d["cache"])
    if cache["coverage"] is not None:
        cache["coverage"] = Coverage(**cache["coverage"])
    return Generation(**{**d, "cache": CacheFigures(**cache)})


class Stream:
    """Model.generate(..., stream=True): iterate for the text as it becomes final; afterwards
    `result` holds the Generation. close() (or leaving the loop early, or Ctrl-C) stops the
    generation at its next step."""

    _END = object()

    def __init__(self, start: Callable[..., dict]):
        self.result: Optional[Generation] = None
        self._queue: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._error: Optional[BaseException] = None

        def work():
            try:
                self.result = _generation(start(on_text=self._queue.put, cancel=self._stop.is_set))
            except BaseException as e:  # handed to the reading thread
                self._error = e
            finally:
                self._queue.put(Stream._END)

        self._thread = threading.Thread(target=work, name="kvec-generate", daemon=True)
        self._thread.start()

    def __iter__(self) -> Iterator[str]:
        try:
            if not self._thread.is_alive() and self._queue.empty():
                return  # iterated before: nothing more comes
            while True:
                piece = self._queue.get()
                if piece is Stream._END:
                    break
                yield piece
        finally:
            self.close()
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class Answers:
    """The result of Model.answer: one answer per question, each question's record (kept entries
    and bytes after compression, coverage, tokens, the score when references were given: the same
    fields as kvec eval's predictions.jsonl), the policy's spec, the protocol and the times."""
    answers: list
    records: list
    policy: str
    protocol: str
    chat: bool
    stats: dict

    @property
    def kv_entries(self) -> int:
        """KV entries (all layers and heads) after the context's compression, first question."""
        return self.records[0]["kv_entries"]

    @property
    def kv_bytes(self) -> int:
        return self.records[0]["kv_bytes"]


@dataclass
class EvalResult:
    """The result of kvec.eval: `metrics` is kvec eval's metrics.json (scores per task, averages
    with bootstrap intervals, paired comparisons), `records` its predictions.jsonl, `stats` the
    sweep's times. rows() gives one flat dict per (policy, budget), ready for a DataFrame."""
    metrics: dict
    records: list
    stats: dict

    def rows(self) -> list[dict]:
        out = []
        for r in self.metrics["results"]:
            b = r["budget"]
            row = {"policy": r["policy"],
                   "budget": b if b > 0 else None,
                   "compression_ratio": -b / 1000 if b < 0 else None,
                   "average": r["average"],
                   "average_lo": r["average_ci"]["lo"],
                   "average_hi": r["average_ci"]["hi"],
                   "n": r["average_ci"]["n"]}
            row.update({f"score_{task}": s for task, s in r["scores"].items()})
            out.append(row)
        return out


def _optional_int(value, name: str) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    return int(value)


def _optional_float(value, name: str) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    return float(value)


def _text(value, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    return value


class Model:
    """A GGUF model loaded for generation.

    threads: 0 = every hardware thread; kv_type: the cache's element type for keys and values
    ("f16", "bf16", "f32", "q8_0", "q4_0", ...), kv_type_k / kv_type_v for one of them; n_ctx: the
    context in tokens (0 = the model's training context); n_batch: tokens per prefill step;
    mmap: True maps the file, False copies it, None lets kvec choose (as `kvec run`)."""

    def __init__(self, path: str, threads: int = 0, kv_type: str = "f16", kv_type_k: Optional[str] = None,
                 kv_type_v: Optional[str] = None, n_ctx: int = 0, n_batch: int = 512,
                 mmap: Optional[bool] = None):
        self._m = _core.Model(str(path), threads, kv_type, kv_type_k, kv_type_v, n_ctx, n_batch, mmap)
        self._info = self._m.info()

    # -- what it is --
    @property
    def info(self) -> dict:
        """Architecture, name, layer and head counts, vocabulary, context, threads, cache types."""
        return dict(self._info)

    def __repr__(self) -> str:
        return f"kvec.Model({self._info['path']!r}: {self._info['summary']})"

    def __getattr__(self, name: str) -> Any:
        info = self.__dict__.get("_info")
        if info is not None and name in info:
            return info[name]
        raise AttributeError(name)

    def _handle(self) -> "_core.Model":
        if self._m is None:
            raise Error("the model is closed")
        return self._m

    def close(self) -> None:
        """Frees the weights and the cache now (also when the object is collected)."""
        self._m = None

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        return self._handle().tokenize(_text(text, "text"), add_special, parse_special)

    def detokenize(self, ids: Sequence[int], skip_special: bool = False) -> str:
        return self._handle().detokenize([int(i) for i in ids], skip_special)

    # -- generation --
    def generate(self, prompt: str, policy: Optional[str] = None, budget: Optional[int] = None,
                 ratio: Optional[float] = None, max_new_tokens: int = 128, *, stream: bool = False,
                 chat: bool = False, system: str = "", temperature: float = 0.0, top_k: int = 40,
                 top_p: float = 0.95, min_p: float = 0.05, repeat_penalty: float = 1.0, repeat_last_n: int = 64,
                 seed: Optional[int] = None, stop: Sequence[str] = (), decode_evict: int = 0,
                 chunk: Optional[int] = None, coverage_window: int = 32,
                 on_text: Optional[Callable[[str], None]] = None) -> Union[Generation, Stream]:
        """Generates from `prompt` as `kvec run` does, greedy unless temperature > 0.

        policy: an eviction policy "name[:key=value,...]" (kvec.policies()), None for the full
        cache; budget: entries kept per KV head and layer, or ratio: the budget as a fraction of
        the prompt; decode_evict K > 0 keeps the budget while decoding (re-selecting every K
        steps); chunk C: prefill C tokens per step, evicting after each. max_new_tokens -1: until
        end of generation or a full context. stream=True returns a Stream of text pieces; on_text
        receives them otherwise."""
        core = self._handle()
        args = dict(prompt=_text(prompt, "prompt"), policy=policy, budget=_optional_int(budget, "budget"),
                    ratio=_optional_float(ratio, "ratio"), decode_evict=decode_evict,
                    chunk=_optional_int(chunk, "chunk"), max_new_tokens=max_new_tokens, chat=chat, system=system,
                    temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                    repeat_penalty=repeat_penalty, repeat_last_n=repeat_last_n,
                    seed=_optional_int(seed, "seed"), stop=list(stop), coverage_window=coverage_window)
        if seed is not None and seed < 0:
            raise Error(f"seed must be >= 0, got {seed}")
        if stream:
            if on_text is not None:
                raise Error("give on_text or stream=True, not both")
            return Stream(lambda **cb: core.generate(**args, **cb))
        return _generation(core.generate(**args, on_text=on_text, cancel=None))

    def answer(self, context: str, questions: Sequence[str], policy: Optional[str] = None,
               budget: Optional[int] = None, compression_ratio: Optional[float] = None, *,
               query_aware: bool = False, max_new_tokens: int = 64, chat: Optional[bool] = None,
               references: Optional[Sequence[Sequence[str]]] = None) -> Answers:
        """kvpress's pipeline shape: the context compressed once by `policy` (to `budget` entries
        per KV head and layer, or by `compression_ratio`, kvpress's fraction removed), then each
        question appended to the compressed cache and answered greedily (query_aware=True
        compresses context and question together, once per question, as LongBench's protocol).
        chat: wrap context + question in the model's chat template (None: when it has one).
        The same code as `kvec eval`'s protocols (docs/evaluation.md, "Protocols")."""
        if isinstance(questions, str):
            raise TypeError("questions must be a list of str, not a str")
        qs = [_text(q, "each question") for q in questions]
        refs = [[_text(r, "each reference") for r in rs] for rs in references] if references is not None else []
        d = self._handle().answer(_text(context, "context"), qs, policy, _optional_int(budget, "budget"),
                                _optional_float(compression_ratio, "compression_ratio"), query_aware, max_new_tokens,
                                chat, refs)
        records = [json.loads(r) for r in d["records"]]
        return Answers(answers=[r["prediction"] for r in records], records=records, policy=d["spec"],
                       protocol="query-aware" if query_aware else "query-agnostic", chat=d["chat"], stats=d["stats"])


def eval(model: Model, suite: Optional[str] = None, policies: Union[str, Sequence[str]] = "full,snapkv,kvec",
         budgets: Sequence[Union[int, float]] = (64, 256), *, data_files: Sequence[str] = (),
         protocol: str = "query-aware", samples: int = 0, tasks: Optional[Sequence[str]] = None,
         seed: Optional[int] = None, split: str = "all", chat: Optional[bool] = None, max_new_tokens: int = 0,
         max_length: int = 0, text_dir: str = "",
         on_progress: Optional[Callable[[int, int], None]] = None) -> EvalResult:
    """One `kvec eval` sweep: every policy at every budget, scored; the same items, records and
    metrics as the command. The items: a synthetic suite (synthetic-1k, -2k, -4k, ...; the default
    is synthetic-1k) or LongBench JSONL files (data_files, named <dataset>.jsonl; max_length: the
    middle truncation, 0 for the context's). budgets: integers are entries per KV head and layer,
    floats in (0, 1) compression ratios (--compression)."""
    files = [str(f) for f in data_files]
    if suite is not None and files:
        raise Error("give a synthetic suite or LongBench data files, not both")
    suite = "" if files else _text(suite or "synthetic-1k", "suite")
    if isinstance(policies, str):
        policy_list = policies
    else:
        policy_list = ",".join(_text(p, "each policy") for p in policies)
    ints, ratios = [], []
    for b in budgets:
        if isinstance(b, bool):
            raise TypeError("budgets must be ints (entries) or floats (compression ratios), got a bool")
        if isinstance(b, (int, np.integer)):
            ints.append(int(b))
        elif isinstance(b, (float, np.floating)):
            ratios.append(float(b))
        else:
            raise TypeError(f"budgets must be ints (entries) or floats (compression ratios), got {type(b).__name__}")
    d = model._handle().evaluate(suite, files, max_length, policy_list, ints, ratios, protocol, samples,
                               list(tasks or []), _optional_int(seed, "seed"), split, chat, max_new_tokens,
                               text_dir, on_progress)
    return EvalResult(metrics=json.loads(d["metrics"]),
                      records=[json.loads(r) for r in d["records"]], stats=d["stats"])
