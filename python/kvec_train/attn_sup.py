"""Supervised attention for variable tracking: an auxiliary loss that tells chosen heads where the
backward hop has to look, so that training learns the hop's weights instead of searching for them.

Variable tracking ("which variables are assigned the value V?" over statements `VAR X = 12345.`
and `VAR Y = VAR X.`) needs a two-step circuit that no amount of answer loss taught the bundled
model's layers (docs/training-log.md, sessions 3-12): each answer name is the left-hand side of a
statement found by its right-hand side, and in a causal model the right-hand side comes last. The
steps ("roles") and the heads that take them (recipe option `attn_supervision`, layer and query
head per role):

- **gather** (default layer 2, query head 2): at each statement's "." attend to its left-hand
  side's first token (what the answer will have to name);
- **mover** (layer 2, query head 3): at the answer cue's ":" ("... the value 12345, they are:")
  attend to the "," right after the asked value (whose recent tokens are the value);
- **first** (layer 3, query head 3): at that ":" attend to the "." of the statement that assigns
  the asked value (`VAR X = 12345.`): the first answer name was gathered there;
- **hop** (layer 3, query head 2): at each "," after an answer name attend to the "." of the
  statement whose right-hand side is that name (`VAR Y = VAR X.`): the next answer name;
- **copy** (layer 3, query head 0): at each token of an answer name but its last, attend to the
  next token of the same name where a statement assigns it (its left-hand side): an induction
  head that needs only the current token, for the name's second token, where the four-token
  circuit has one token of context to match (session 13: 51 % right there, 93-100 % after).

The loss is the mean negative log attention probability of the target, per role, summed over the
roles and scaled by `weight`. Attention alone is not enough (session 13 of docs/training-log.md:
the heads found their targets within 900 steps, the answers did not follow), because what they
carry has to pass through four products of matrices learnt from small values (gather's value and
output, then the hop's). So `content_weight` adds, for gather, first, hop and copy, the cross-entropy of
the token the role must deliver, read from the head's output through the output norm and matrix
(its direction): gather's output at "." must name its left-hand side's first token, first's, hop's
and copy's output the answer's next token. For those three, whose output is the answer, a second
term reads the head's own share of the logits (its output scaled as the output norm scales the
whole residual there), so that it is also large enough to count.
Targets come from the token stream itself (`vt_targets`), so every sequence with statements in
the suite's form contributes, whichever generator wrote it.
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

ROLES = ("gather", "mover", "first", "hop", "copy")
DEFAULT_HEADS = {"gather": (2, 2), "mover": (2, 3), "first": (3, 3), "hop": (3, 2), "copy": (3, 0)}
ANSWER_ROLES = ("first", "hop", "copy")  # whose output is the answer's next token

Pairs = Dict[str, List[Tuple[int, int]]]  # role -> [(query position, target position)]
# The token each role's output must carry, as a position of the sequence given (query, target):
# the gathered left-hand side's first token, and the answer's next token (the next name's first).
CONTENT = {"gather": lambda q, t: t, "first": lambda q, t: q + 1, "hop": lambda q, t: q + 1,
           "copy": lambda q, t: q + 1}


def _upper(s: str) -> bool:
    return s.isalpha() and s.isupper()


def _name_end(pieces: Sequence[str], s: int) -> int:
    """End (exclusive) of the capital-letter name that starts at token s with its leading space
    (" Q" "P" ..., or " " "X" ... where the space has no merge with the letter); s if none."""
    j = s
    if j + 1 < len(pieces) and pieces[j] == " " and _upper(pieces[j + 1]):
        j += 1
    elif j < len(pieces) and pieces[j].startswith(" ") and _upper(pieces[j][1:]):
        pass
    else:
        return s
    j += 1
    while j < len(pieces) and _upper(pieces[j]):
        j += 1
    return j


def _is_digits(piece: str) -> bool:
    s = piece.strip()
    return s.isdigit() or (piece == " ")


def vt_targets(pieces: Sequence[str]) -> Pairs:
    """Query/target positions of every role in one token sequence, given each token's text
    (`pieces[i]` = the decoded token i). Statements: " V" "AR" NAME "=" (" V" "AR" NAME | VALUE)
    "."; cues: VALUE "," " they" " are" ":" followed, in training sequences, by the answer
    NAME "," NAME ... ."""
    T = len(pieces)
    out: Pairs = {r: [] for r in ROLES}
    by_rhs: Dict[Tuple[str, str], List[int]] = {}  # ("var" | "val", text) -> "." positions
    by_lhs: Dict[str, int] = {}  # name -> its first left-hand side's first token
    i = 1
    while i + 2 < T:
        if not (pieces[i] == " V" and pieces[i + 1] == "AR") or pieces[i - 1].strip() == "=":
            i += 1
            continue
        lhs = i + 2
        j = lhs_end = _name_end(pieces, lhs)
        if j == lhs:
            i += 1
            continue
        while j < T and pieces[j] == " ":
            j += 1
        if j >= T or pieces[j].strip() != "=":
            i = j
            continue
        j += 1
        if j + 1 < T and pieces[j] == " V" and pieces[j + 1] == "AR":
            k = _name_end(pieces, j + 2)
            kind, text = "var", "".join(pieces[j + 2:k]).strip()
        else:
            k = j
            while k < T and _is_digits(pieces[k]):
                k += 1
            kind, text = "val", "".join(pieces[j:k]).strip()
        if text and k < T and pieces[k].startswith("."):
            out["gather"].append((k, lhs))
            by_rhs.setdefault((kind, text), []).append(k)
            by_lhs.setdefault("".join(pieces[lhs:lhs_end]).strip(), lhs)
        i = k
    for c in range(4, T):
        if not (pieces[c].startswith(":") and pieces[c - 1] == " are" and pieces[c - 2] == " they"
                and pieces[c - 3] == ","):
            continue
        k = c - 4
        while k >= 0 and pieces[k].strip().isdigit():
            k -= 1
        value = "".join(pieces[k + 1:c - 3]).strip()
        dots = [d for d in by_rhs.get(("val", value), []) if d < c]
        if not value or not dots:
            continue
        out["mover"].append((c, c - 3))
        out["first"].append((c, dots[-1]))
        # The answer, where the sequence has it: NAME ("," NAME)* "."
        j = c + 1
        while j < T:
            s = j
            j = _name_end(pieces, s)
            if j == s:
                break
            name = "".join(pieces[s:j]).strip()
            lhs = by_lhs.get(name, c)
            if lhs < c and pieces[lhs:lhs + j - s] == pieces[s:j]:
                out["copy"] += [(s + t, lhs + t + 1) for t in range(j - s - 1)]
            if j >= T or pieces[j] != ",":
                break
            dots = [d for d in by_rhs.get(("var", name), []) if d < j]
            if dots:
                out["hop"].append((j, dots[-1]))
            j += 1
    return out


# A statement pair, a cue and its answer, in the suite's form: every role has a target in it.
SAMPLE = ("VAR QPRSJ = 12345. VAR BDKLM = VAR QPRSJ.\n\nAnswer: 2 variables are assigned the value "
          "12345, they are: QPRSJ, BDKLM.")


def check_tokenizer(tok) -> None:
    """vt_targets reads the statements as the bundled tokenizer splits them (" V" "AR", names from
    a leading-space letter, ...): refuse, rather than train silently without targets, a
    tokenizer with which the sample has no target for some role."""
    pieces = [tok.decode([i]) for i in tok.encode(" " + SAMPLE)]
    found = vt_targets(["<bos>"] + pieces)
    missing = [r for r in ROLES if not found[r]]
    if missing:
        raise SystemExit(f"error: attn_supervision: this tokenizer splits the variable-tracking statements as "
                         f"{pieces[:12]}..., where vt_targets finds no {missing[0]} target (it reads them as "
                         "' V' 'AR' NAME '=' ...)")


def from_config(cfg: dict, model, tok) -> Optional["AttentionSupervision"]:
    """The recipe's `attn_supervision` on `model` (its tokenizer checked first), or None."""
    if not cfg.get("attn_supervision"):
        return None
    check_tokenizer(tok)
    return AttentionSupervision(model, tok, cfg["attn_supervision"])


class AttentionSupervision:
    """Captures the normalised inputs of the supervised layers during the model's forward pass
    and computes the auxiliary loss from them (and hit rates, for evaluation).

    spec (recipe `attn_supervision`): {"weight": float, "content_weight": float, "roles": [role,
    ...], "heads": {role: [layer, query head]}} (roles default to all of ROLES; heads to
    DEFAULT_HEADS, role by role; content_weight 0, the default, supervises attention only)."""

    def __init__(self, model, tok, spec: dict):
        c = model.config
        self.model = model
        self.weight = float(spec.get("weight", 1.0))
        self.content_weight = float(spec.get("content_weight", 0.0))
        self.roles = tuple(spec.get("roles", ROLES))
        unknown = [r for r in self.roles if r not in ROLES]
        if unknown:
            raise SystemExit(f"error: attn_supervision: unknown role {unknown[0]} (roles: {', '.join(ROLES)})")
        self.heads = {r: tuple(spec.get("heads", {}).get(r, DEFAULT_HEADS[r])) for r in self.roles}
        for r, (layer, head) in self.heads.items():
            if not (0 <= layer < c.n_layer and 0 <= head < c.n_head):
                raise SystemExit(f"error: attn_supervision: {r} names layer {layer} head {head}, "
                                 f"outside the model's {c.n_layer} layers x {c.n_head} heads")
        self.pieces = [tok.decode([i]) for i in range(tok.n_vocab)]
        self.inputs: Dict[int, torch.Tensor] = {}  # layer -> [B, T, n_embd] normalised input; -1: final residual
        self.hooks = [model.layers[l].attn.register_forward_pre_hook(self._capture(l))
                      for l in sorted({l for l, _ in self.heads.values()})]
        self.hooks.append(model.output_norm.register_forward_pre_hook(self._capture(-1)))

    def _capture(self, layer: int):
        def hook(module, args):
            self.inputs[layer] = args[0]
        return hook

    def close(self) -> None:
        for h in self.hooks:
            h.remove()
        self.inputs.clear()

    def targets(self, tokens: torch.Tensor) -> List[Pairs]:
        """tokens [B, T] (the model's input) -> vt_targets of each row."""
        return [vt_targets([self.pieces[t] for t in row]) for row in tokens.tolist()]

    def _heads(self, role: str, items: List[Tuple[int, int, int]], with_output: bool = False):
        """For (row, query, target) items, from the inputs captured by the last forward pass: the
        log attention probability of each target [n], and with_output the head's output at each
        query, through its slice of the output projection [n, n_embd] (else None)."""
        from kvec_ref.model import apply_rope, rope_cos_sin
        c = self.model.config
        layer, head = self.heads[role]
        a = self.model.layers[layer].attn
        hd, group = c.head_dim, c.n_head // c.n_head_kv
        kv = head // group
        x = self.inputs[layer]  # [B, T, n_embd]
        T = x.shape[1]
        wq = a.wq.weight[head * hd:(head + 1) * hd]  # [hd, n_embd]
        wk = a.wk.weight[kv * hd:(kv + 1) * hd]      # [hd, n_embd]
        wv = a.wv.weight[kv * hd:(kv + 1) * hd]      # [hd, n_embd]
        wo = a.wo.weight[:, head * hd:(head + 1) * hd]  # [n_embd, hd]
        pos = torch.arange(T, device=x.device)
        cos, sin = rope_cos_sin(c, pos[None], torch.float32)  # [1, 1, T, rope_dim / 2]
        logp, outs = [], []
        for b in sorted({it[0] for it in items}):
            rows = [(q, t) for bb, q, t in items if bb == b]
            qpos = torch.tensor([q for q, _ in rows], device=x.device)
            tpos = torch.tensor([t for _, t in rows], device=x.device)
            k = apply_rope((x[b] @ wk.T).float()[None, None], cos, sin, c.rope_neox)[0, 0]  # [T, hd]
            q = (x[b, qpos] @ wq.T).float()[None, None]                                      # [1, 1, n, hd]
            q = apply_rope(q, cos[:, :, qpos], sin[:, :, qpos], c.rope_neox)[0, 0]           # [n, hd]
            s = (q @ k.T) / math.sqrt(hd)                                                    # [n, T]
            lp = F.log_softmax(s.masked_fill(pos[None] > qpos[:, None], float("-inf")), dim=-1)  # [n, T]
            logp.append(lp.gather(1, tpos[:, None])[:, 0])
            if with_output:
                v = (x[b] @ wv.T).float()                                                    # [T, hd]
                outs.append((lp.exp() @ v) @ wo.float().T)                                   # [n, n_embd]
        return torch.cat(logp), (torch.cat(outs) if with_output else None)

    def _items(self, targets: List[Pairs], role: str) -> List[Tuple[int, int, int]]:
        return [(b, q, t) for b, pairs in enumerate(targets) for q, t in pairs[role]]

    def loss(self, targets: List[Pairs], tokens: Optional[torch.Tensor] = None
             ) -> Tuple[Optional[torch.Tensor], Dict[str, float]]:
        """weight x sum over roles of the mean -log p(target), plus, when `content_weight` is set
        and tokens [B, T] are given, content_weight x the cross-entropy of the token each content
        role must deliver (CONTENT) read from the head's own output alone (through the output
        norm and matrix). Returns the total (None when no sequence of the batch has a target)
        and each part's mean."""
        total, parts = None, {}
        for role in self.roles:
            items = self._items(targets, role)
            if not items:
                continue
            content = self.content_weight > 0 and tokens is not None and role in CONTENT
            logp, out = self._heads(role, items, with_output=content)
            nll = -logp.mean()
            parts[role] = float(nll)
            term = self.weight * nll
            if content:
                want = torch.tensor([int(tokens[b, CONTENT[role](q, t)]) for b, q, t in items],
                                    device=out.device)
                ce = self._content_ce(role, items, out, want)
                parts[f"{role}_content"] = float(ce)
                term = term + self.content_weight * ce
            total = term if total is None else total + term
        return total, parts

    def _content_ce(self, role: str, items, out: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
        """Cross-entropy of the wanted tokens [n] read from the head's outputs [n, n_embd]: through
        the output norm applied to the output alone (its direction), and for the answer roles
        (first, hop, copy) also as its own share of the logits, the output scaled as the output norm
        scales the whole residual at that position (so it must be large enough to count)."""
        w_out = self.model.output_weight().float()                    # [n_vocab, n_embd]
        g = self.model.output_norm.weight.float()                      # [n_embd]
        eps = self.model.output_norm.eps
        rms = lambda v: torch.rsqrt(v.pow(2).mean(dim=-1, keepdim=True) + eps)  # [n, 1]
        ce = F.cross_entropy(F.linear(out * rms(out) * g, w_out), want)
        if role in ANSWER_ROLES:
            final = self.inputs[-1]  # [B, T, n_embd] residual before the output norm
            rows = torch.stack([final[b, q] for b, q, _ in items]).detach().float()  # [n, n_embd]
            ce = ce + F.cross_entropy(F.linear(out * rms(rows) * g, w_out), want)
        return ce

    @torch.no_grad()
    def hit_rates(self, targets: List[Pairs]) -> Dict[str, Tuple[int, int]]:
        """Per role, (queries whose target gets more than half the head's attention, queries)."""
        res = {}
        for role in self.roles:
            items = self._items(targets, role)
            if items:
                p = self._heads(role, items)[0].exp()
                res[role] = (int((p > 0.5).sum()), len(items))
        return res
