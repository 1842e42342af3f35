"""kvec_train: the training tool of kvec's bundled model (docs/model-card.md).

Modules: data (public-domain corpus), bpe (byte-level BPE tokenizer, tokenizer.ggml.* keys),
tasks (curriculum and synthetic long-context sequences with loss weights), train (command line:
prepare, synth-data, train, eval, export, status). The model is kvec_ref.model.Transformer.
"""
