"""Hugging Face transformers as a third oracle: the same GGUF file loaded by transformers (its GGUF
loader dequantises every weight to float32), run by scripts/peer/hf-oracle.sh in the peer
virtual environment (torch, transformers and gguf from PyPI).

    hf_oracle.py logits MODEL.gguf TOKENS.txt OUT.f32
        float32 [positions, vocab] of the ids in TOKENS.txt (one forward pass, eager attention,
        float32), row i the logits after token i: the input of compare_logits.py.
    hf_oracle.py tokenize MODEL.gguf TEXT.txt SEPARATOR OUT.txt
        The ids of each piece of TEXT.txt between SEPARATORs by the tokenizer transformers builds
        from the file, one line per piece, without BOS/EOS (add_special_tokens=False: transformers'
        GGUF tokenizer adds BOS to SmolLM2 although the file says add_bos_token = false) and with
        special-token text parsed, as transformers always does (kvec tokenize --no-bos
        --parse-special is the same request).
    hf_oracle.py template MODEL.gguf CONVERSATIONS.json OUT_DIR
        Each conversation through the tokenizer's apply_chat_template (add_generation_prompt),
        into OUT_DIR/K.txt (a leading BOS removed where the file's tokenizer.ggml.add_bos_token
        asks for BOS, as kvec renders); status 3 without a template.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
from kvec_ref.gguf import GGUFReader  # noqa: E402  (numpy only)


def load_tokenizer(model: str):
    p = Path(model).resolve()
    return AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name)


def logits(model: str, tokens: str, out: str) -> None:
    p = Path(model).resolve()
    m = AutoModelForCausalLM.from_pretrained(str(p.parent), gguf_file=p.name, dtype=torch.float32,
                                             attn_implementation="eager")
    m.eval()
    ids = torch.tensor([[int(t) for t in Path(tokens).read_text().split()]])
    torch.set_num_threads(max(1, torch.get_num_threads()))
    with torch.no_grad():
        y = m(input_ids=ids, use_cache=False).logits[0].to(torch.float32).numpy()
    np.ascontiguousarray(y, dtype=np.float32).tofile(out)


def tokenize(model: str, text: str, separator: str, out: str) -> None:
    tok = load_tokenizer(model)
    pieces = Path(text).read_text(encoding="utf-8").split(separator)
    if pieces and pieces[-1] == "":
        pieces.pop()
    lines = [" ".join(str(i) for i in tok(piece, add_special_tokens=False)["input_ids"]) for piece in pieces]
    Path(out).write_text("".join(ln + "\n" for ln in lines))


def template(model: str, conversations: str, out_dir: str) -> int:
    tok = load_tokenizer(model)
    if not tok.chat_template:
        return 3
    meta = GGUFReader(model).metadata
    adds_bos = tok.bos_token is not None and meta.get("tokenizer.ggml.add_bos_token",
                                                      meta["tokenizer.ggml.model"] == "llama")
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    for k, messages in enumerate(json.loads(Path(conversations).read_text(encoding="utf-8"))):
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        if adds_bos and text.startswith(tok.bos_token):
            text = text[len(tok.bos_token):]  # the tokenizer adds it (kvec leaves it out the same way)
        Path(out_dir, f"{k}.txt").write_text(text, encoding="utf-8")
    return 0


def main() -> int:
    a = sys.argv[1:]
    if len(a) == 4 and a[0] == "logits":
        logits(a[1], a[2], a[3])
        return 0
    if len(a) == 5 and a[0] == "tokenize":
        tokenize(a[1], a[2], a[3], a[4])
        return 0
    if len(a) == 4 and a[0] == "template":
        return template(a[1], a[2], a[3])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
