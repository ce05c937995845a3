"""How close two float computations must be, and why: every float comparison in the suite goes through here.

Two computations of one value either take the **same route** (the same kernels on the same inputs in the
same order) — then they are equal bit for bit on any CPU, and the test asserts equality
(``assert_same``) — or they take **different routes** (SDPA vs eager attention, numpy's float64 vs torch's
float32, another order of a sum, a float16 copy), and then they differ by rounding only. How much is a
property of the arithmetic, not of the machine that happened to run the test, so each bound below is
derived from the unit roundoff of the formats involved and from the numbers actually summed:

* one sum or dot product of ``n`` terms, in any order (blocked, vectorised, fused multiply-add):
  ``|fl(Σ x_i) − Σ x_i| ≤ γ_n Σ|x_i|`` with ``γ_n = n·u / (1 − n·u)`` (Higham, *Accuracy and Stability of
  Numerical Algorithms*, §3.1). Two routes, each within that of the exact value, are within twice it
  (``sum_bound``, ``matmul_bound``);
* a value stored as float16 moves by at most half the float16 spacing at that value (``f16_rounding``);
* a whole network run by two routes (every layer's attention through a different kernel, say): the
  rounding of each layer is carried and amplified by the layers after it, by an amount that depends on
  the weights, so no closed form fits. There the bound is *measured in the same run*: the same model in
  float64 gives (to float32's eyes) the exact answer, HF's own float32 eager route's distance from it is
  float32's error on this input on this CPU, and the route under test must be no further from the exact
  answer than ``ROUTE_FACTOR`` times that (``assert_as_accurate``). On another CPU both distances move
  together.
"""

from __future__ import annotations

import numpy as np

U32 = 2.0**-24  # float32 unit roundoff: half the spacing of float32 numbers at 1.0
U64 = 2.0**-53  # float64 unit roundoff
U16 = 2.0**-11  # float16 unit roundoff

# A route under test may be this many times as far from the exact (float64) answer as HF's own float32
# eager route on the same input: the two routes round the same operations in different orders (blocked
# SDPA kernels, bands of query rows), so their errors are of one size but not equal; 4 leaves room for
# one route rounding a few times more coarsely, and is still ~10⁴ times below any real bug (a wrong mask
# or scale moves a weight by 10⁻², a logit by 10⁻¹).
ROUTE_FACTOR = 4.0


def gamma(n: int, u: float = U32) -> float:
    """Higham's γ_n: the relative error bound of a sum or dot product of ``n`` terms, in any order."""
    nu = n * u
    if nu >= 1:
        raise ValueError(f"γ_{n} is undefined for u = {u}: the sum is too long for the format")
    return nu / (1 - nu)


def sum_bound(abs_sum, n: int, u: float = U32, routes: int = 2):
    """How far ``routes`` computations of one ``n``-term sum can lie apart: ``routes · γ_n · Σ|x_i|``
    (``abs_sum``: the sum of the terms' absolute values, a number or an array)."""
    return routes * gamma(n, u) * np.asarray(abs_sum, dtype=np.float64)


def matmul_bound(a, b, u: float = U32, routes: int = 2) -> np.ndarray:
    """Elementwise bound on how far two routes of ``a @ b`` can lie apart: ``2 γ_n (|a| @ |b|)``, with n
    the inner dimension (each element is one dot product)."""
    a64, b64 = np.abs(np.asarray(a, dtype=np.float64)), np.abs(np.asarray(b, dtype=np.float64))
    return sum_bound(a64 @ b64, a64.shape[-1], u, routes)


def f16_rounding(x) -> np.ndarray:
    """How far storing ``x`` as float16 can move it: half the float16 spacing at |x| (≥ the subnormal step)."""
    h = np.abs(np.asarray(x, dtype=np.float64)).astype(np.float16)
    return np.spacing(h).astype(np.float64) / 2 + np.spacing(np.float16(0)).astype(np.float64)


def assert_same(actual, desired, what: str = "") -> None:
    """Same route: the same numbers bit for bit, on any CPU."""
    np.testing.assert_array_equal(np.asarray(actual), np.asarray(desired),
                                  err_msg=f"{what}: the same route must give the same bits".strip(": "))


def assert_within(actual, desired, bound, what: str = "", why: str = "") -> None:
    """|actual − desired| ≤ bound, elementwise (``bound`` a number or an array that broadcasts). The
    message says which element is furthest over, by how much, and what the bound stands for."""
    a = np.asarray(actual, dtype=np.float64)
    d = np.asarray(desired, dtype=np.float64)
    b = np.broadcast_to(np.asarray(bound, dtype=np.float64), np.broadcast_shapes(a.shape, d.shape))
    diff = np.abs(a - d)
    bad = ~(diff <= b)  # NaN counts as over
    if bad.any():
        ratio = np.where(b > 0, diff / np.where(b > 0, b, 1), np.inf)
        i = np.unravel_index(int(np.nanargmax(np.where(bad, ratio, -1))), diff.shape)
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {bad.size} elements over the bound ({why or 'float rounding'}); worst at {i}: "
            f"|{a[i]!r} − {d[i]!r}| = {diff[i]:.3g} > {b[i]:.3g}")


def assert_as_accurate(ours, ref32, ref64, what: str = "", factor: float = ROUTE_FACTOR) -> None:
    """A route under test is as accurate as HF's own float32 route: max|ours − ref64| ≤ factor ·
    max|ref32 − ref64| (+ one float32 rounding of the largest value, for a reference that happens to
    round exactly). ``ref64``: the same model in float64 on the same input; ``ref32``: HF's float32 route."""
    o, r32, r64 = (np.asarray(x, dtype=np.float64) for x in (ours, ref32, ref64))
    floor = U32 * float(np.abs(r64).max(initial=0.0))
    noise = float(np.abs(r32 - r64).max(initial=0.0))
    err = float(np.abs(o - r64).max(initial=0.0))
    assert err <= factor * noise + floor, (
        f"{what}: the route under test is {err:.3g} from the float64 answer, HF's float32 route {noise:.3g}; "
        f"allowed {factor:g}× that + {floor:.2g}")


# -- attention weights and logits: the bounds the trace, generation and toy tests share ------------------


def allowed_error(ref32, ref64) -> float:
    """What ``assert_as_accurate`` allows a route under test: ROUTE_FACTOR × HF float32's error + a rounding."""
    return ROUTE_FACTOR * float(np.abs(np.asarray(ref32, np.float64) - ref64).max()) + U32 * float(np.abs(ref64).max())


def assert_greedy_choice(ids, ref32, ref64, what: str) -> None:
    """``ids`` [n] are the argmax of the rows of the exact logits ``ref64`` [n, V] as far as float32 can tell:
    logits within ``allowed_error`` of the exact ones can only prefer an id whose exact logit is within twice
    that of the maximum (so, where the top two lie further apart, the very argmax)."""
    ref64 = np.asarray(ref64, np.float64)
    short = ref64.max(-1) - np.take_along_axis(ref64, np.asarray(ids)[:, None], -1)[:, 0]
    assert np.all(short <= 2 * allowed_error(ref32, ref64)), f"{what}: not the argmax (short of it by {short.max():.3g})"


def assert_f16_as_accurate(ours16, ref64, allowed: float, what: str) -> None:
    """Weights stored as float16, from a route other than HF's: within float16's rounding of them plus
    ``allowed`` (``allowed_error``: what ``assert_as_accurate`` allows) of the exact (float64) weights."""
    assert_within(ours16, ref64, f16_rounding(ours16) + allowed, what, "float16 storage + ROUTE_FACTOR × float32's own error")


def assert_rows_sum_to_one(p16, what: str) -> None:
    """Softmax rows stored as float16 sum to 1 within each weight's float16 rounding plus float32 softmax's
    normalisation (a T-term sum and a division: γ_{T+1})."""
    assert_within(p16.astype(np.float64).sum(-1), 1.0, f16_rounding(p16).sum(-1) + gamma(p16.shape[-1] + 1),
                         what, "float16 storage of each weight + the softmax's sum and division")


def attention64(q, k):
    """softmax(q·kᵀ/√dh + causal mask) in float64 from traced q [H, T, dh] and k [Hkv, T, dh], query head
    h reading KV head h // (H/Hkv); with the scores and which of them are live (not masked)."""
    H, T, dh = q.shape
    kr = np.repeat(k.astype(np.float64), H // k.shape[0], axis=0)
    live = np.tril(np.ones((T, T), dtype=bool))
    s = np.where(live, q.astype(np.float64) @ kr.transpose(0, 2, 1) / np.sqrt(dh), -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    return w / w.sum(-1, keepdims=True), s, live


def softmax_error(q, k, w, s, live, routes: int = 1) -> np.ndarray:
    """How far float32's softmax(fl(q·kᵀ)·scale + mask) can lie from the exact weights ``w`` (scores
    ``s``), per weight, for each of ``routes`` routes. Each score is one dh-term dot product, scaled: off by
    Δ ≤ γ_{dh+4}·scale·|q|·|k| (the +4: the scale's rounding and its product, or SDPA scaling q and k by
    √scale each). Scores off by ≤ Δ move a weight by a factor within e^{±2Δ}; float32's softmax itself adds
    ε = 2u(r + 4) + γ_{T+1} relative: the subtraction of the row's maximum (r: the live scores' spread)
    and exp (≤ 2 ulps), in the numerator and in the denominator, then the T-term sum and the division."""
    H, T, dh = q.shape
    kr = np.repeat(np.abs(k.astype(np.float64)), H // k.shape[0], axis=0)
    delta = gamma(dh + 4) / np.sqrt(dh) * (np.abs(q.astype(np.float64)) @ kr.transpose(0, 2, 1))
    big = np.where(live, delta, 0).max(-1, keepdims=True)
    spread = np.where(live, s.max(-1, keepdims=True) - np.where(live, s, 0), 0).max(-1, keepdims=True)
    eps = 2 * U32 * (spread + 4) + gamma(T + 1)
    return routes * w * np.expm1(2 * big + np.log1p(eps))


def head_allowance(loaded, h) -> float:
    """How far a float32 route of the LM head's logits on the final hidden vector ``h`` [d] may lie from
    the exact ones: ``assert_as_accurate``'s allowance for the head's product alone (ROUTE_FACTOR × its
    float32 error here, against the same product in float64, + one float32 rounding of the largest logit)."""
    import torch  # the rest of this module is numpy only

    W = loaded.model.get_output_embeddings().weight.detach()
    x = torch.from_numpy(np.array(h))
    with torch.inference_mode():
        z32, z64 = (W @ x).double().numpy(), (W.double() @ x.double()).numpy()
    return allowed_error(z32, z64)
