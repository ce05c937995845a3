"""The journey of a sentence: the numbers each stage shows, read off one Trace (pure functions),
and the greedy loop that turns one forward pass into a whole answer."""

from __future__ import annotations

import html
from typing import Any, Sequence

import numpy as np
import plotly.graph_objects as go

from core.trace import Trace

# Token chips cycle through these pastel colours so neighbouring tokens are told apart.
CHIP_COLOURS = ("#fde68a", "#bfdbfe", "#bbf7d0", "#fbcfe8", "#ddd6fe", "#fed7aa", "#a5f3fc")


def token_chips_html(tokens: Sequence[str], ids: Sequence[int], special: Sequence[bool] | None = None) -> str:
    """Tokens as coloured chips with their IDs under them (text escaped; spaces and newlines shown)."""
    chips = []
    for i, (tok, tid) in enumerate(zip(tokens, ids)):
        shown = html.escape(str(tok))
        if not shown.startswith("⟨"):  # byte labels such as ⟨E5 BE⟩ keep their own spaces
            shown = shown.replace(" ", "␣").replace("\n", "⏎")
        bg = "#e5e7eb" if special is not None and special[i] else CHIP_COLOURS[i % len(CHIP_COLOURS)]
        border = "2px dashed #6b7280" if special is not None and special[i] else "1px solid #00000022"
        chips.append(
            f'<span style="display:inline-block;margin:2px;padding:2px 6px;border-radius:6px;background:{bg};'
            f'border:{border};font-family:monospace;text-align:center;line-height:1.25">{shown}'
            f'<br><small style="color:#374151">{int(tid)}</small></span>'
        )
    return '<div style="line-height:2.2">' + "".join(chips) + "</div>"


def special_mask(tokenizer: Any, ids: Sequence[int]) -> list[bool]:
    specials = set(getattr(tokenizer, "all_special_ids", []) or [])
    return [int(i) in specials for i in ids]


def vector_preview(x: np.ndarray, n: int = 6) -> str:
    """'[0.0123, -0.4567, …]  (576 values, ‖x‖ = 1.234)' — the first values of a real vector."""
    head = ", ".join(f"{v:+.4f}" for v in x[:n])
    return f"[{head}, …]  ({x.shape[-1]} values, ‖x‖ = {float(np.linalg.norm(x)):.3f})"


def last_token_norms(tr: Trace) -> np.ndarray:
    """‖resid[l, −1]‖ for l = 0 … L: how the last position's vector grows through the blocks."""
    return np.linalg.norm(tr.resid[:, -1, :].astype(np.float64), axis=-1)


def top_next_tokens(tr: Trace, tokenizer: Any, k: int = 8) -> list[tuple[str, int, float, float]]:
    """(token text, id, logit, probability) of the k best next tokens at the last position."""
    p = tr.last_probs()
    order = np.argsort(-tr.last_logits)[:k]
    from core.tracing import readable_tokens  # a byte token shows as ⟨E8⟩, never as �

    texts = readable_tokens(tokenizer, [int(i) for i in order])
    return [(txt, int(i), float(tr.last_logits[i]), float(p[i])) for txt, i in zip(texts, order)]


def norms_figure(norms: np.ndarray, title: str, xlab: str, ylab: str) -> go.Figure:
    fig = go.Figure(go.Scatter(x=list(range(len(norms))), y=norms, mode="lines+markers",
                               hovertemplate="resid[%{x}]: ‖x‖ = %{y:.3f}<extra></extra>"))
    fig.update_layout(title=title, xaxis_title=xlab, yaxis_title=ylab, height=300, margin=dict(l=10, r=10, t=40, b=10))
    return fig


def greedy_continuation(loaded: Any, ids: Sequence[int], max_new: int = 24) -> tuple[list[int], bool]:
    """Greedy decoding with a KV cache: the journey's loop. Returns (new ids, stopped at an end token).

    The same prefill/decode stepper as the generation page, without recording attention rows."""
    from core.generate import Stepper

    stepper = Stepper(loaded, ids, max_steps=max_new, record_attention=False)
    stepper.run()
    return list(stepper.generated), stepper.stop_reason == "eos"
