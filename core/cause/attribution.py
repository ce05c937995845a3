"""Attribution: which input tokens pushed the answer? Two gradient methods on the token embeddings,
and the last position's attention beside them for contrast.

f(E) = logit(answer) − logit(foil) at the last position, as a function of the embedding rows E [T, d]
(``Trace.embeddings``, before any position information).

* **gradient × input**: per token t, Σ_d ∂f/∂E[t,d] · E[t,d], the first-order estimate of zeroing that row.
* **integrated gradients** (Sundararajan et al., 2017): per token t, Σ_d (E − B)[t,d] · ∫₀¹ ∂f/∂E[t,d](B + α·(E − B)) dα,
  by Gauss–Legendre quadrature with ``steps`` nodes; the scores sum to f(E) − f(B) up to the quadrature error.
  The baseline B is the mean embedding row at every position but the first, which keeps its own: the first
  position is pre-norm models' attention sink, and moving it makes f too rough along the path to integrate
  (an all-zero baseline is worse still: RMSNorm near zero jumps by whole logits). So the first token gets no
  integrated-gradients score, and the page says so.

Gradients are taken on an embeddings leaf handed to the model by a scoped forward hook (``core.engine.hooks``),
never through the shared parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

import core.backends as backends
from core.common.progress import Progress, noop
from core.engine import roles
from core.engine.hooks import scoped_hooks
from core.engine.trace import SiteReader, Trace
from core.engine.types import LoadedModel, Phrase

IG_STEPS = (16, 32, 64, 128, 256)
DEFAULT_STEPS = 128
ROUGH_GAP = 0.1  # a relative completeness gap above this: the page says the scores need more steps
ROWS_PER_PASS = 512  # interpolation points × T per forward/backward pass



def embeddings(loaded: LoadedModel, ids: Sequence[int]) -> torch.Tensor:
    """The embedding rows of ``ids``, [T, d] (a plain tensor: usable in autograd later)."""
    emb = roles.find_sites(loaded.model).embed
    with loaded.lock, torch.no_grad():
        return emb(torch.tensor([list(ids)], dtype=torch.long))[0].detach().clone()


def _ld_of_rows(loaded: LoadedModel, ids: Sequence[int], rows: torch.Tensor, answer: int, foil: int) -> torch.Tensor:
    """f for each row of embeddings ``rows`` [S, T, d] → [S] (in autograd: call under enable_grad)."""
    S = rows.shape[0]
    emb = roles.find_sites(loaded.model).embed
    x = torch.tensor([list(ids)] * S, dtype=torch.long)  # [S, T]; the hook swaps their embeddings for ``rows``
    with scoped_hooks([(emb, "forward", lambda _m, _a, _out: rows)]):
        lg = backends.last_logits(loaded, x)  # [S, V]
    return lg[:, answer] - lg[:, foil]


def value_and_grad(loaded: LoadedModel, ids: Sequence[int], rows: torch.Tensor, answer: int,
                   foil: int) -> tuple[np.ndarray, torch.Tensor]:
    """f at each row [S] (float64) and ∂f/∂rows [S, T, d]."""
    leaf = rows.detach().clone().requires_grad_(True)
    with loaded.lock, torch.enable_grad():
        f = _ld_of_rows(loaded, ids, leaf, answer, foil)
        (g,) = torch.autograd.grad(f.sum(), leaf)  # rows are independent: the sum's gradient is each row's
    return f.detach().double().numpy(), g.detach()


@dataclass(frozen=True)
class GradXInput:
    scores: np.ndarray  # [T] Σ_d grad · embedding, per token
    value: float  # f at the input: the logit difference

    @property
    def total(self) -> float:
        return float(self.scores.sum())


def grad_x_input(loaded: LoadedModel, ids: Sequence[int], answer: int, foil: int) -> GradXInput:
    e = embeddings(loaded, ids)  # [T, d]
    f, g = value_and_grad(loaded, ids, e[None], answer, foil)
    return GradXInput((g[0] * e).sum(-1).double().numpy(), float(f[0]))


def gauss_legendre(steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights of the ``steps``-point Gauss–Legendre rule on [0, 1] (weights sum to 1)."""
    if steps < 1:
        raise ValueError("steps must be at least 1")
    x, w = np.polynomial.legendre.leggauss(steps)
    return (x + 1) / 2, w / 2


def baseline(loaded: LoadedModel, e: torch.Tensor, keep_first: bool = True) -> torch.Tensor:
    """The IG baseline for embeddings ``e`` [T, d]: the mean embedding row everywhere, the first
    position keeping its own row (see the module's docstring)."""
    w = roles.find_sites(loaded.model).embed.weight
    with torch.no_grad():
        b = w.detach().double().mean(0).to(e.dtype)[None].repeat(e.shape[0], 1)  # [T, d]
    if keep_first:
        b[0] = e[0]
    return b


@dataclass(frozen=True)
class IntegratedGradients:
    scores: np.ndarray  # [T]
    steps: int
    value: float  # f(input)
    baseline_value: float  # f(baseline)

    @property
    def total(self) -> float:
        return float(self.scores.sum())

    @property
    def delta(self) -> float:
        """What completeness says the scores must sum to: f(input) − f(baseline)."""
        return self.value - self.baseline_value

    @property
    def gap(self) -> float:
        """Σ scores − (f(input) − f(baseline)): the quadrature error (0 for the exact integral)."""
        return self.total - self.delta

    @property
    def relative_gap(self) -> float:
        """|gap| / max(|f(input) − f(baseline)|, 1e-6)."""
        return abs(self.gap) / max(abs(self.delta), 1e-6)


def integrated_gradients(loaded: LoadedModel, ids: Sequence[int], answer: int, foil: int, steps: int = DEFAULT_STEPS,
                         *, keep_first: bool = True, progress: Progress = noop) -> IntegratedGradients:
    """Integrated gradients from ``baseline`` to the input's embeddings, ``steps`` Gauss–Legendre nodes;
    its progress counts the nodes done, said as ``ig_words``."""
    e = embeddings(loaded, ids)  # [T, d]
    b = baseline(loaded, e, keep_first)  # [T, d]
    alphas, weights = gauss_legendre(steps)
    T = e.shape[0]
    per = max(1, ROWS_PER_PASS // max(1, T))
    avg = torch.zeros_like(e, dtype=torch.float64)  # Σ_s w_s ∂f/∂E at B + α_s (E − B)   [T, d]
    for s in range(0, steps, per):
        a = torch.tensor(alphas[s : s + per], dtype=e.dtype)[:, None, None]  # [S, 1, 1]
        _, g = value_and_grad(loaded, ids, b[None] + a * (e - b)[None], answer, foil)  # [S, T, d]
        avg += (torch.tensor(weights[s : s + per])[:, None, None] * g.double()).sum(0)
        done = min(s + per, steps)
        progress(done, steps, ig_words(done, steps))
    ends, _ = value_and_grad(loaded, ids, torch.stack([e, b]), answer, foil)
    scores = (avg * (e - b).double()).sum(-1).numpy()  # [T]
    return IntegratedGradients(scores, steps, float(ends[0]), float(ends[1]))


def ig_words(done: int | None = None, steps: int | None = None) -> Phrase:
    """The attributions' progress in words: "Integrated gradients: {done} of {n} steps" (None: not known yet)."""
    return Phrase("cause.progress_ig", {"done": "0" if done is None else f"{done:,}", "n": "…" if steps is None else f"{steps:,}"})


@dataclass(frozen=True)
class Attributions:
    """Both methods for one prompt and answer pair (what the page draws)."""

    gxi: GradXInput
    ig: IntegratedGradients

    @property
    def nbytes(self) -> int:
        return int(self.gxi.scores.nbytes + self.ig.scores.nbytes)


def attribute(loaded: LoadedModel, ids: Sequence[int], answer: int, foil: int, steps: int = DEFAULT_STEPS, *,
              progress: Progress = noop) -> Attributions:
    out = Attributions(grad_x_input(loaded, ids, answer, foil),
                       integrated_gradients(loaded, ids, answer, foil, steps, progress=progress))
    out.gxi.scores.flags.writeable = out.ig.scores.flags.writeable = False  # cached and shared: read-only
    return out


def last_row_attention(tr: Trace, layer: int, site: SiteReader | None = None) -> np.ndarray:
    """How the last position attends to every position at ``layer``, averaged over heads: [T], sums to 1
    (read through ``site``, default ``tr.site``)."""
    w = (site or tr.site)("attn_pattern", layer)  # [H, T, T] float16
    return w[:, -1, :].astype(np.float64).mean(0)


def chip_colours(values: Sequence[float] | np.ndarray) -> list[str]:
    """A background per token: red pushes toward the answer, blue toward the foil, the strength
    proportional to |value| / max |value| (white for 0). The strongest stays light enough for the page's
    text to read on it at 4.5:1 or more (alpha 0.45: 5.9:1 on red, 6.4:1 on blue; at 0.70 it fell to 3.9:1),
    and the chips write each value under its token (its sign too), so neither depends on colour alone."""
    v = np.asarray(values, dtype=np.float64)
    top = float(np.abs(v).max()) if v.size else 0.0
    out = []
    for x in v:
        a = 0.0 if top == 0 else min(1.0, abs(x) / top)
        rgb = (220, 38, 38) if x > 0 else (37, 99, 235)
        out.append(f"rgba({rgb[0]},{rgb[1]},{rgb[2]},{0.08 + 0.37 * a:.2f})" if a > 0 else "rgba(255,255,255,1)")
    return out
