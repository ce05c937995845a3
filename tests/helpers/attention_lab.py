"""Helpers shared by the tiers of test_attention_lab's tests (tests/*/test_attention_lab*.py)."""

from __future__ import annotations

import math

import floats
import numpy as np

from core.maths import attention as A


def _weight_error(q, k, mask=None, scale=None, u: float = floats.U64) -> tuple[np.ndarray, np.ndarray]:
    """(the exact weights softmax(q·kᵀ·scale), elementwise how far one route's lie from them in a format
    of unit roundoff u): each score is a d_k-term dot product and a scaling by a rounded scale (γ_{d_k+2}
    Σ|q·k|·scale, Higham); moving the scores by ≤ δ moves a weight by ≤ w (e^{2δ} − 1); the softmax
    itself rounds its T_k-term sum of positive terms (γ_{T_k}), each exponent's argument (≤ u × the
    visible scores' spread), each exp (2u) and the division (u)."""
    q, k = np.asarray(q, dtype=np.float64), np.asarray(k, dtype=np.float64)
    dk, Tk = q.shape[-1], k.shape[-2]
    scale = 1 / math.sqrt(dk) if scale is None else scale
    vis = np.ones((q.shape[-2], Tk), dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    s = np.where(vis, q @ np.swapaxes(k, -1, -2) * scale, -np.inf)
    sa = np.where(vis, np.abs(q) @ np.swapaxes(np.abs(k), -1, -2) * abs(scale), 0.0)
    delta = floats.gamma(dk + 2, u) * sa.max(-1, keepdims=True)
    top = s.max(-1, keepdims=True)
    e = np.exp(s - top)
    w = e / e.sum(-1, keepdims=True)
    spread = top - np.where(vis, s, np.inf).min(-1, keepdims=True)
    return w, w * (np.expm1(2 * delta) + floats.gamma(Tk, u) + (spread + 3) * u)


def real_row_bound(ex: dict[str, np.ndarray]) -> np.ndarray:
    """Per key: how far the calculator's float64 weights of a real row (``A.real_row``) may lie from the
    model's own: HF's float32 eager softmax (``_weight_error``), kept in float16 (``floats.f16_rounding``),
    and the calculator's float64 rounding of the same steps."""
    return floats.f16_rounding(ex["reference"]) + sum(_weight_error(ex["q"], ex["k"], ex["mask"], u=u)[1][0] for u in (floats.U32, floats.U64))


def check_page_real_row(at, smol) -> None:
    """The calculator page's real row: its "max |calculator − model|" metric is this computation on the
    page's own row (its prompt, layer, head and position; the softmax over every key), and the row is
    within ``real_row_bound`` of the model's weights.

    The row is read from the cache entries the page itself used (same trace, same derived layer): the
    metric is a difference of two float computations, so recomputing the trace here could legitimately
    differ in its last bits (another thread count, another kernel) and the string compared would not
    hold for a reason. The bound below checks the same row against the model independently."""
    from core.common.numbers import max_abs_diff
    from core.web import cache

    spec, prompt, chat = at.session_state["model_spec_ok"], at.session_state["prompt"], at.toggle(key="chat").value
    layer, head, pos = (at.slider(key=f"attention_lab_{n}").value for n in ("layer", "head", "pos"))
    tr = cache.get_trace(spec, prompt, chat)
    assert cache.has_site(tr, "attn_pattern", layer), "the page derived this layer: it is in the shared cache"
    ex = A.real_row(tr, layer, head, pos, cache.door(tr))
    w = A.attention_steps(ex["q"], ex["k"], ex["v"], ex["mask"]).weights[0]
    diff = [m for m in at.metric if m.label.startswith(("max |", "本行"))]
    assert diff and diff[0].value == f"{max_abs_diff(w, ex['reference']):.2e}"
    floats.assert_within(w, ex["reference"], real_row_bound(ex), what=f"the page's row (layer {layer}, head {head}, row {pos})",
                         why="float16 storage of the model's float32 weights")


def _clock(durations: list[float]):
    """A fake perf_counter: the k-th timed call takes durations[k] seconds."""
    stamps, now = [], 0.0
    for d in durations:
        stamps += [now, now + d]
        now += d + 100.0
    return iter(stamps).__next__
