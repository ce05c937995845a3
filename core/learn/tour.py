"""The guided tour: one prompt walked through every stage of a decoder-only LLM, as data.

Each stage names its deep pages and has one pure function that reads the cached ``Trace`` and
returns a ``StageView``: the numbers to show (as i18n label keys + formatted values), an optional
table and chart data, and the values the stage's explanation text is filled with. The page only
draws a StageView, so every number on the tour comes from here and is tested against the model.

Text → tokens → embeddings (+ positions) → blocks → hidden state → logits → sampling → KV cache →
next token, then the loop starts again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.common.numbers import entropy_bits, top_k
from core.engine.tokens import label, token_labels, visible
from core.engine.trace import Trace
from core.engine.types import kv_bytes

Decode = Callable[[Sequence[int]], list[str]]  # token ids → readable pieces (the page passes the tokenizer's)

TOP_N = 5  # next-token candidates shown
TEMPERATURES = (0.5, 1.0, 1.5)  # the sampling stage compares these


@dataclass(frozen=True)
class Stage:
    key: str  # i18n: tour.<key>.title / tour.<key>.body
    pages: tuple[str, ...]  # deep pages (app.PAGES stems), linked when their file exists
    concept: str  # core.learn.references concept for the "Sources" box


STAGES: tuple[Stage, ...] = (
    Stage("text", ("journey", "chat"), "decoder_only"),
    Stage("tokens", ("tokens",), "transformer"),
    Stage("embeddings", ("tokens", "positions"), "positions"),
    Stage("blocks", ("residual", "heads", "anatomy"), "attention"),
    Stage("hidden", ("residual", "context"), "transformer"),
    Stage("logits", ("logits",), "decoder_only"),
    Stage("sampling", ("logits", "generation"), "sampling"),
    Stage("kv_cache", ("kv_cache", "multihead"), "kv_cache"),
    Stage("next_token", ("generation",), "decoder_only"),
)


@dataclass
class StageView:
    """What one stage shows. Labels are i18n keys; values are already formatted strings."""

    metrics: list[tuple[str, str]] = field(default_factory=list)  # (label key, value)
    table: dict[str, list[Any]] | None = None  # column label key → values (a DataFrame for the page)
    chart: dict[str, Any] | None = None  # data for core.learn.figures.stage_figure
    fill: dict[str, Any] = field(default_factory=dict)  # placeholders of tour.<key>.body
    chips: list[str] | None = None  # token pieces shown inline (tokens stage, next-token stage)
    chips_start: int = 0  # the absolute position of the first chip (a long prompt shows its tail)
    chips_new: int = 0  # how many chips at the end are new (framed): the appended token
    uses_layer: bool = False  # the page shows a layer picker for this stage


def _norm(x: np.ndarray) -> float:
    return float(np.linalg.norm(x.astype(np.float64)))


def _fmt(x: float, nd: int = 4) -> str:
    return f"{x:,.{nd}f}"  # thousands separated, like every other number of the tour (1,121.32)


# ---------------------------------------------------------------------------------------------
# one pure function per stage


def _text(tr: Trace, decode: Decode, layer: int) -> StageView:
    return StageView(
        metrics=[("tour.m.chars", f"{len(tr.prompt):,}"), ("tour.m.chat", "✓" if tr.chat else "✗"),
                 ("tour.m.text_chars", f"{len(tr.text):,}")],
        fill={"chars": f"{len(tr.prompt):,}"},
    )


def _tokens(tr: Trace, decode: Decode, layer: int) -> StageView:
    ids = [int(i) for i in tr.token_ids]
    return StageView(
        metrics=[("tour.m.n_tokens", f"{tr.n_tokens:,}"), ("tour.m.vocab", f"{tr.vocab_size:,}")],
        table={"ui.position": list(range(len(ids))), "ui.token": token_labels(tr.tokens), "tour.col.id": ids},
        chips=[str(t) for t in tr.tokens],
        fill={"T": tr.n_tokens, "first_id": ids[0], "first": label(tr.tokens, 0)},
    )


def _embeddings(tr: Trace, decode: Decode, layer: int) -> StageView:
    facts = tr.meta.get("facts", {})
    row = tr.embeddings[-1]  # [d] the last token's row of the embedding matrix
    pos = tr.n_tokens - 1
    theta = facts.get("rope_theta")
    dh = tr.head_dim
    metrics = [("tour.m.d_model", str(tr.d_model)), ("tour.m.emb_norm", _fmt(_norm(row))),
               ("tour.m.position_type", str(facts.get("position_type", "?")))]
    if theta:
        # RoPE turns pair i of q and k by pos · θ^(−2i/dh): the fastest pair by pos radians,
        # the slowest by pos · θ^(−(dh−2)/dh) radians. Nothing is added to the embedding itself.
        # The unit (radians) sits in the translated label, so the value stays a bare number.
        metrics.append(("tour.m.rope_slowest", f"{pos * float(theta) ** (-(dh - 2) / dh):.3g}"))
    return StageView(
        metrics=metrics,
        table={"tour.col.dim": list(range(8)), "tour.col.value": [round(float(x), 5) for x in row[:8]]},
        fill={"token": label(tr.tokens, tr.n_tokens - 1), "id": int(tr.token_ids[-1]), "d": tr.d_model, "pos": pos},
    )


def _blocks(tr: Trace, decode: Decode, layer: int) -> StageView:
    layer = max(0, min(tr.n_layers - 1, layer))
    p = tr.n_tokens - 1  # follow the last token: its stream is what predicts the next token
    norms = [_norm(tr.resid[i, p]) for i in range(tr.n_layers + 1)]
    return StageView(
        metrics=[("tour.m.resid_in", _fmt(norms[layer], 2)), ("tour.m.attn_out", _fmt(float(tr.attn_out_norm[layer, p]), 2)),
                 ("tour.m.mlp_out", _fmt(float(tr.mlp_out_norm[layer, p]), 2)), ("tour.m.resid_out", _fmt(norms[layer + 1], 2))],
        chart={"kind": "resid_norms", "norms": norms, "layer": layer},
        fill={"L": tr.n_layers, "layer": layer, "H": tr.n_heads, "Hkv": tr.n_kv_heads},
        uses_layer=True,
    )


def _hidden(tr: Trace, decode: Decode, layer: int) -> StageView:
    h = tr.final_hidden[-1]  # [d] after the final norm: the LM head's input
    return StageView(
        metrics=[("tour.m.raw_norm", _fmt(_norm(tr.resid[-1, -1]), 2)), ("tour.m.final_norm", _fmt(_norm(h), 2)),
                 ("tour.m.d_model", str(tr.d_model))],
        table={"tour.col.dim": list(range(8)), "tour.col.value": [round(float(x), 5) for x in h[:8]]},
        fill={"d": tr.d_model, "norm": _fmt(_norm(h), 2)},
    )


def top_next(tr: Trace, decode: Decode, n: int = TOP_N) -> tuple[list[int], list[str], list[float], list[float]]:
    """The n most likely next tokens after the last position: ids, pieces, logits, probabilities
    (softmax over the whole vocabulary at temperature 1)."""
    order = top_k(tr.last_logits, n)
    probs = tr.last_probs(1.0)[order]
    ids = [int(i) for i in order]
    return ids, [visible(s) for s in decode(ids)], [float(tr.last_logits[i]) for i in ids], [float(p) for p in probs]


def _logits(tr: Trace, decode: Decode, layer: int) -> StageView:
    ids, pieces, logits, probs = top_next(tr, decode)
    return StageView(
        metrics=[("tour.m.vocab", f"{tr.vocab_size:,}"), ("tour.m.top1", f"{pieces[0]} · {probs[0]:.1%}")],
        table={"ui.token": pieces, "tour.col.id": ids, "tour.col.logit": [round(x, 3) for x in logits],
               "tour.col.prob": [round(x, 4) for x in probs]},
        chart={"kind": "top_probs", "pieces": pieces, "probs": probs},
        fill={"V": f"{tr.vocab_size:,}", "top": pieces[0], "p": f"{probs[0]:.1%}"},
    )


def _sampling(tr: Trace, decode: Decode, layer: int) -> StageView:
    top = int(np.argmax(tr.last_logits))
    piece = visible(decode([top])[0])
    p_by_t = [float(tr.last_probs(t)[top]) for t in TEMPERATURES]
    return StageView(
        metrics=[("tour.m.greedy", piece), ("tour.m.entropy", f"{entropy_bits(tr.last_probs(1.0)):.2f}")],
        table={"tour.col.temperature": list(TEMPERATURES), "tour.col.p_top": [round(p, 4) for p in p_by_t]},
        fill={"top": piece, "p_lo": f"{p_by_t[0]:.1%}", "p_hi": f"{p_by_t[-1]:.1%}"},
    )


def _kv_cache(tr: Trace, decode: Decode, layer: int) -> StageView:
    bpv = tr.kv_itemsize  # the traced K and V are the model's own values, in its dtype
    total = kv_bytes(tr.n_layers, tr.n_kv_heads, tr.head_dim, tr.n_tokens, bpv)
    mha = kv_bytes(tr.n_layers, tr.n_heads, tr.head_dim, tr.n_tokens, bpv)  # if every query head had its own K/V
    return StageView(
        metrics=[("tour.m.kv_total", f"{total:,} B"), ("tour.m.kv_per_token", f"{total // tr.n_tokens:,} B"),
                 ("tour.m.kv_mha", f"{mha:,} B")],
        fill={"L": tr.n_layers, "Hkv": tr.n_kv_heads, "dh": tr.head_dim, "T": tr.n_tokens, "bytes": f"{total:,}",
              "H": tr.n_heads, "ratio": tr.n_heads // tr.n_kv_heads},
    )


NEXT_TAIL = 24  # the next-token stage shows at most this many prompt tokens (the tail), then the new one


def _next_token(tr: Trace, decode: Decode, layer: int) -> StageView:
    """The prompt's tokens (its last NEXT_TAIL on a long prompt, numbered by their real positions)
    and the greedy next token appended at position T: T + 1 chips when the prompt is short."""
    top = int(np.argmax(tr.last_logits))
    new_piece = decode([top])[0]
    first = max(0, tr.n_tokens - NEXT_TAIL)
    seq = [*(str(t) for t in tr.tokens), new_piece]
    piece = label(seq, tr.n_tokens)  # the new token, read with its neighbours (it may finish a character)
    grow = kv_bytes(tr.n_layers, tr.n_kv_heads, tr.head_dim, 1, tr.kv_itemsize)
    return StageView(
        metrics=[("tour.m.next", piece), ("tour.m.new_len", f"{tr.n_tokens + 1:,}"), ("tour.m.kv_grow", f"+{grow:,} B")],
        chips=seq[first:], chips_start=first, chips_new=1,
        fill={"top": piece, "T1": tr.n_tokens + 1, "pos": tr.n_tokens, "hidden": first},
    )


_VIEWS: dict[str, Callable[[Trace, Decode, int], StageView]] = {
    "text": _text, "tokens": _tokens, "embeddings": _embeddings, "blocks": _blocks, "hidden": _hidden,
    "logits": _logits, "sampling": _sampling, "kv_cache": _kv_cache, "next_token": _next_token,
}


def stage_view(key: str, tr: Trace, decode: Decode, layer: int = 0) -> StageView:
    """The numbers of stage ``key`` for the prompt in ``tr`` (``layer``: the blocks stage's layer)."""
    view = _VIEWS[key](tr, decode, layer)
    # token text lands inside `code` in the explanation: a backtick in it would end the code span
    view.fill = {k: v.replace("`", "ˋ") if isinstance(v, str) else v for k, v in view.fill.items()}
    return view


def clamp_step(step: int) -> int:
    return max(0, min(len(STAGES) - 1, int(step)))
