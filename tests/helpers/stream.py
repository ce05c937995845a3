"""Helpers shared by the tiers of test_stream's tests (tests/*/test_stream*.py)."""

from __future__ import annotations

import floats
import numpy as np
import torch

from core.engine.roles import find_sites
from core.stream import lens


def _softmax(x: np.ndarray) -> np.ndarray:
    z = x.astype(np.float64) - x.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def _norm_error(module, x: np.ndarray) -> np.ndarray:
    """Elementwise: how far one float32 route of the norm ``module`` on ``x`` [d] lies from the exact
    result (``lens.norm_steps``, float64). RMSNorm: the mean of d squares (γ_d relative), + eps, rsqrt,
    two products: < γ_{d+10} × |out|. LayerNorm: the mean is off by ≤ γ_d mean|x|, ≤ γ_d c on each
    centred-and-scaled entry (c = mean|x| / σ); the variance by γ_d (1 + 2c) relative; then as RMSNorm,
    and the bias's addition."""
    st = lens.norm_steps(module, x)
    g = floats.gamma(len(st.x) + 10)
    if st.kind == "RMSNorm":
        return g * np.abs(st.out)
    c = np.abs(st.x).mean() / st.scale
    return np.abs(st.weight) * (g * c + g * (1 + 2 * c) * np.abs(st.normed)) + floats.U32 * np.abs(st.out)


def _head(model, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(logits, probabilities) [T, V] float64 of stream rows ``x`` [T, d]: lm_head(final_norm(x)) and its
    softmax by ``model``'s own modules, in its dtype."""
    sites = find_sites(model)
    dtype = next(model.parameters()).dtype
    with torch.inference_mode():
        z = sites.lm_head(sites.require_final_norm()(torch.from_numpy(np.array(x)).to(dtype)))
        return z.double().numpy(), torch.softmax(z, dim=-1).double().numpy()


def _assert_top_as_accurate(top: np.ndarray, ref32: np.ndarray, ref64: np.ndarray, what: str) -> None:
    """``top`` [T]: a route's largest probability at each position; ``ref32`` / ``ref64`` [T, V]: HF's
    float32 route's probabilities and the exact ones. ``top`` is as accurate as any of the float32
    route's T × V probabilities: ROUTE_FACTOR × their largest error + one float32 rounding of the largest
    (``floats.assert_as_accurate``'s allowance, measured on whole distributions, not on T numbers)."""
    allow = floats.allowed_error(ref32, ref64)
    floats.assert_within(top, ref64.max(-1), allow, what=what, why="as accurate as HF's float32 route (assert_as_accurate's allowance)")


def _check_lens_row(ids: np.ndarray, top: np.ndarray, twins, x: np.ndarray, what: str) -> None:
    """A lens row (top ids and probabilities) read from the stream rows ``x`` against HF's own final norm
    and LM head on x, in float32 and float64: its ids are the exact argmax as far as float32 can tell
    (``floats.assert_greedy_choice``), its probabilities as accurate as the float32 route's."""
    (z32, p32), (z64, p64) = _head(twins[0], x), _head(twins[1], x)
    floats.assert_greedy_choice(ids, z32, z64, what)
    _assert_top_as_accurate(top, p32, p64, what)


def _sublayer_outputs(model, ids, toy: bool = False) -> dict[str, np.ndarray]:
    """What every attention and MLP module of ``model`` (in its own dtype) adds to the stream for
    ``ids``: {"attn_out", "mlp_out"}, each [L, T, d] float64, by forward hooks."""
    sites = find_sites(model)
    got: dict[str, dict[int, np.ndarray]] = {"attn_out": {}, "mlp_out": {}}

    def keep(site, i):
        return lambda _m, _a, out: got[site].__setitem__(i, (out[0] if isinstance(out, tuple) else out)[0].double().numpy())

    hooks = [m.register_forward_hook(keep(site, i)) for site, mods in (("attn_out", sites.attns), ("mlp_out", sites.mlps))
             for i, m in enumerate(mods)]
    try:
        with torch.inference_mode():
            x = torch.tensor([[int(i) for i in ids]])
            model(x) if toy else model(input_ids=x, use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    return {site: np.stack([v[i] for i in sorted(v)]) for site, v in got.items()}


def _check_mlp_steps(s, ref32, ref64, where: str) -> None:
    """The by-hand MLP (float64 on the trace's float32 stream) and the traced mlp_out: two routes to one
    vector, each as accurate as HF's own eager model, so within twice that allowance of each other."""
    floats.assert_as_accurate(s.out, ref32, ref64, what=f"the MLP by hand, {where}")
    floats.assert_within(s.out, s.traced, 2 * floats.allowed_error(ref32, ref64), what=f"by hand vs traced mlp_out, {where}",
                         why="two routes, each within assert_as_accurate's allowance")
