#!/usr/bin/env python3
"""Copies a GGUF file with a chat template added (tokenizer.chat_template), so that a model
without one (the bundled kvec-tiny.gguf) can serve /v1/chat/completions in a test.

    add_chat_template.py IN.gguf OUT.gguf
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
from kvec_ref.gguf import GGUFReader, GGUFWriter  # noqa: E402

# Llama 2's chat template (one of the families kvec renders: tokenizer/chat_template).
TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
    "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif "
    "%}{% for message in loop_messages %}{% if loop.index0 == 0 and system_message != false %}{% set content = "
    "'<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = "
    "message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + "
    "' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif "
    "%}{% endfor %}")


def main():
    src, dst = sys.argv[1], sys.argv[2]
    r = GGUFReader(src)
    w = GGUFWriter(dst, alignment=r.alignment)
    for key, value in r.typed_metadata().items():
        if key in ("general.alignment", "tokenizer.chat_template"):
            continue
        w.add(key, value.value, value.type, value.elem_type)
    w.add("tokenizer.chat_template", TEMPLATE)
    for t in r.tensors.values():
        w.add_raw_tensor(t.name, t.ne, t.ggml_type, r.tensor_bytes(t.name))
    w.write()
    r.close()


if __name__ == "__main__":
    main()
