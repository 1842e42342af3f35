"""Command line of the reference: `PYTHONPATH=python /usr/bin/python3 -m kvec_ref.cli <cmd> ...`

Commands:
  logits     --model M.gguf --tokens 1,2,3 [--kv-visible mask.i32] --out logits.f32
             raw little-endian float32 [T, n_vocab]. The mask file is raw little-endian int32
             [n_layer, n_head_kv, T]: key j of KV head h in layer l is visible to query i iff
             j <= i < mask[l, h, j].
  generate   --model M.gguf --tokens 1,2,3 -n N [--eos ID]
             greedy continuation; prints the N new ids separated by spaces.
  attn-stats --model M.gguf --tokens ... --window W --out stats.f32 [--kv-visible mask.i32]
             raw little-endian float32 [n_layer, n_head, 3, T]; for each layer and query head:
             [0] column sums of the causal attention probabilities over all queries (H2O),
             [1] mean of the probability rows of the last min(W, T) queries (SnapKV window),
             [2] the probability row of the last query (TOVA).
  policy-scores --model M.gguf --tokens ... --policy knorm|lagkv|expected-attention|kvzip --out s.f32
             [--sinks 4] [--lag 128] [--cross] [--queries 128] [--future 512] [--no-covariance]
             [--no-vnorm] [--chunk 2048] [--overlap 8] [--repeat-first IDS] [--repeat-later IDS]
             [--repeat-suffix IDS]: the policy's scores of the prompt's entries (kvec_ref.policies),
             raw little-endian float32 [n_layer, n_head_kv, T]; +inf for entries always kept.
  info       --model M.gguf [--json]: configuration and tensor summary.
  batch      --file cmds.txt (or - for stdin): runs one command per line (same syntax, without
             the program name; '#' starts a comment) in one process, loading each model once.

Common option: --precision f32|f64 (model arithmetic; output files are float32 either way).
Errors print `error: <message>` on stderr and exit with status 1.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import numpy as np

_models: dict = {}  # (path, precision) -> (model, config, metadata), shared by batch commands


def _parse_tokens(text: str) -> list:
    parts = [p for p in text.replace(",", " ").split() if p]
    if not parts:
        raise ValueError("--tokens is empty")
    try:
        ids = [int(p) for p in parts]
    except ValueError:
        raise ValueError(f"--tokens must be integers separated by commas, got '{text}'") from None
    return ids


def _load(path: str, precision: str):
    from .model import load_gguf

    key = (str(Path(path).resolve()) if Path(path).exists() else path, precision)
    if key not in _models:
        model, config, metadata = load_gguf(path)
        if precision == "f64":
            model = model.double()
        _models[key] = (model, config, metadata)
    return _models[key]


def _read_mask(path: str, config, n_tokens: int) -> np.ndarray:
    want = config.n_layer * config.n_head_kv * n_tokens
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{path}: no such file")
    data = np.fromfile(path, dtype="<i4")
    if data.size != want or p.stat().st_size != want * 4:
        raise ValueError(f"{path}: {p.stat().st_size} bytes; a kv-visible mask for this model and {n_tokens} "
                         f"tokens is int32 [{config.n_layer}, {config.n_head_kv}, {n_tokens}] = {want * 4} bytes")
    return data.reshape(config.n_layer, config.n_head_kv, n_tokens)


def _write_f32(path: str, a: np.ndarray) -> None:
    np.ascontiguousarray(a, dtype="<f4").tofile(path)


def cmd_logits(args) -> None:
    from .model import logits

    model, config, _ = _load(args.model, args.precision)
    toks = _parse_tokens(args.tokens)
    mask = _read_mask(args.kv_visible, config, len(toks)) if args.kv_visible else None
    _write_f32(args.out, logits(model, toks, kv_visible=mask))


def cmd_generate(args) -> None:
    from .model import generate

    model, _, _ = _load(args.model, args.precision)
    if args.n < 0:
        raise ValueError("-n must be >= 0")
    out = generate(model, _parse_tokens(args.tokens), args.n, eos_id=args.eos)
    print(" ".join(str(t) for t in out), flush=True)


def cmd_attn_stats(args) -> None:
    from .model import attention_stats

    model, config, _ = _load(args.model, args.precision)
    toks = _parse_tokens(args.tokens)
    if args.window <= 0:
        raise ValueError("--window must be positive")
    mask = _read_mask(args.kv_visible, config, len(toks)) if args.kv_visible else None
    st = attention_stats(model, toks, args.window, kv_visible=mask)
    out = np.stack([st["h2o"], st["window"], st["last"]], axis=2)  # [n_layer, n_head, 3, T]
    _write_f32(args.out, out)


def cmd_keydiff_scores(args) -> None:
    """KeyDiff's scores of a prompt's keys: per layer and KV head, minus the cosine similarity of
    each post-RoPE key to the mean key of its head, float32 [n_layer, n_head_kv, T]."""
    import torch

    from .model import KVCache

    model, config, _ = _load(args.model, args.precision)
    toks = _parse_tokens(args.tokens)
    cache = KVCache(config.n_layer)
    with torch.no_grad():
        model(torch.tensor([toks], dtype=torch.long), cache=cache)
    out = []
    for l in range(config.n_layer):
        k = cache.k[l][0].double()  # [n_head_kv, T, head_dim], post-RoPE
        mean = k.mean(dim=1, keepdim=True)  # [n_head_kv, 1, head_dim]
        cos = (k * mean).sum(-1) / (k.norm(dim=-1) * mean.norm(dim=-1))  # [n_head_kv, T]
        out.append((-cos).numpy())
    _write_f32(args.out, np.stack(out))  # [n_layer, n_head_kv, T]


def _id_list(text: str) -> list:
    return [] if not text else _parse_tokens(text)


def cmd_policy_scores(args) -> None:
    from . import policies

    model, _, _ = _load(args.model, args.precision)
    toks = _parse_tokens(args.tokens)
    if args.policy == "knorm":
        out = policies.knorm_scores(model, toks)
    elif args.policy == "lagkv":
        out = policies.lagkv_scores(model, toks, sinks=args.sinks, lag=args.lag, cross=args.cross)
    elif args.policy == "expected-attention":
        out = policies.expected_attention_scores(model, toks, sinks=args.sinks, n_queries=args.queries,
                                                 n_future=args.future, covariance=not args.no_covariance,
                                                 vnorm=not args.no_vnorm)
    else:
        out = policies.kvzip_scores(model, toks, _id_list(args.repeat_first), _id_list(args.repeat_later),
                                    _id_list(args.repeat_suffix), overlap=args.overlap, chunk=args.chunk,
                                    sinks=args.sinks)
    _write_f32(args.out, out)


def cmd_info(args) -> None:
    from .gguf import GGUFReader
    from .config import config_from_gguf

    r = GGUFReader(args.model)
    config = config_from_gguf(r)
    tensors = [{"name": t.name, "type": t.type_name, "ne": list(t.ne), "bytes": t.n_bytes}
               for t in r.tensors.values()]
    if args.json:
        print(json.dumps({"version": r.version, "alignment": r.alignment, "config": config.to_dict(),
                          "tensors": tensors}, indent=1))
        return
    print(f"file: {args.model} (GGUF v{r.version}, alignment {r.alignment}, {len(r.fields)} metadata keys)")
    for k, v in config.to_dict().items():
        if k in ("attn_chunk", "attn_checkpoint"):
            continue
        if k == "rope_freqs" and v is not None:
            v = f"[{len(v)} values, {min(v):.4g} .. {max(v):.4g}]"
        print(f"  {k:20s} {v}")
    print(f"  {'rope':20s} {'NEOX (i, i + n_rot/2)' if config.rope_neox else 'NORM (2i, 2i + 1)'}")
    n_params = sum(int(np.prod(t['ne'])) for t in tensors)
    by_type: dict = {}
    for t in tensors:
        by_type[t["type"]] = by_type.get(t["type"], 0) + 1
    print(f"tensors: {len(tensors)}, {n_params:,} values, "
          + ", ".join(f"{n} {ty}" for ty, n in sorted(by_type.items())))
    for t in tensors:
        print(f"  {t['name']:32s} {t['type']:6s} {t['ne']}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kvec_ref.cli", description="kvec's independent PyTorch reference",
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = p.add_subparsers(dest="cmd", metavar="command")
    sub.required = True

    def common(sp, tokens=True):
        sp.add_argument("--model", required=True, help="GGUF model file")
        if tokens:
            sp.add_argument("--tokens", required=True, help="token ids, comma separated")
        sp.add_argument("--precision", choices=("f32", "f64"), default="f32", help="model arithmetic")

    sp = sub.add_parser("logits", help="raw float32 logits [T, n_vocab]")
    common(sp)
    sp.add_argument("--kv-visible", help="int32 eviction mask [n_layer, n_head_kv, T]")
    sp.add_argument("--out", required=True)
    sp.set_defaults(fn=cmd_logits)

    sp = sub.add_parser("generate", help="greedy continuation")
    common(sp)
    sp.add_argument("-n", type=int, required=True, help="number of new tokens")
    sp.add_argument("--eos", type=int, default=None, help="stop after this token id")
    sp.set_defaults(fn=cmd_generate)

    sp = sub.add_parser("attn-stats", help="attention statistics float32 [n_layer, n_head, 3, T]")
    common(sp)
    sp.add_argument("--window", type=int, required=True)
    sp.add_argument("--kv-visible", help="int32 eviction mask [n_layer, n_head_kv, T]")
    sp.add_argument("--out", required=True)
    sp.set_defaults(fn=cmd_attn_stats)

    sp = sub.add_parser("keydiff-scores", help="KeyDiff scores float32 [n_layer, n_head_kv, T]")
    common(sp)
    sp.add_argument("--out", required=True)
    sp.set_defaults(fn=cmd_keydiff_scores)

    sp = sub.add_parser("policy-scores", help="query-agnostic policy scores float32 [n_layer, n_head_kv, T]")
    common(sp)
    sp.add_argument("--policy", required=True, choices=("knorm", "lagkv", "expected-attention", "kvzip"))
    sp.add_argument("--sinks", type=int, default=4)
    sp.add_argument("--lag", type=int, default=128)
    sp.add_argument("--cross", action="store_true")
    sp.add_argument("--queries", type=int, default=128)
    sp.add_argument("--future", type=int, default=512)
    sp.add_argument("--no-covariance", action="store_true")
    sp.add_argument("--no-vnorm", action="store_true")
    sp.add_argument("--chunk", type=int, default=2048)
    sp.add_argument("--overlap", type=int, default=8)
    sp.add_argument("--repeat-first", default="", help="token ids of the first chunk's repeat prompt")
    sp.add_argument("--repeat-later", default="", help="token ids of the later chunks' repeat prompt")
    sp.add_argument("--repeat-suffix", default="", help="token ids after the repeat prompt")
    sp.add_argument("--out", required=True)
    sp.set_defaults(fn=cmd_policy_scores)

    sp = sub.add_parser("info", help="configuration and tensors")
    sp.add_argument("--model", required=True)
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(fn=cmd_info)

    sp = sub.add_parser("batch", help="run many commands in one process")
    sp.add_argument("--file", required=True, help="one command per line, '-' for stdin")
    sp.set_defaults(fn=cmd_batch)
    return p


class _UsageError(Exception):
    pass


def _parse(argv):
    parser = build_parser()
    # argparse exits on bad usage; turn that into an error we can report per batch line
    try:
        return parser.parse_args(argv)
    except SystemExit as e:
        if e.code == 0:
            raise
        raise _UsageError("invalid arguments (see the usage above)") from None


def cmd_batch(args) -> None:
    text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            sub = _parse(shlex.split(line))
        except (_UsageError, ValueError) as e:
            raise _UsageError(f"line {n}: {e}") from None
        if sub.cmd == "batch":
            raise ValueError(f"line {n}: batch cannot be nested")
        try:
            sub.fn(sub)
        except (ValueError, OSError) as e:
            raise ValueError(f"line {n}: {e}") from None


def main(argv=None) -> int:
    try:
        args = _parse(sys.argv[1:] if argv is None else argv)
        args.fn(args)
    except _UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except (ValueError, OSError, KeyError) as e:
        msg = str(e) if not isinstance(e, KeyError) else f"missing {e}"
        print(f"error: {msg}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
