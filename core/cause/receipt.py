"""“Why this token?” — a receipt where every line is a measurement, made by the app's own instruments.

For one position of a prompt and the token predicted there (the model's choice, or a token it scored):

1. **where it formed** — the logit lens (``core.stream.lens``, handed in by the caller: areas do not import
   each other): the first layer boundary where the token is the lens's top-1 and where it enters the top 5,
   and its lens probability at every boundary (the curve);
2. **what it read** — gradient × input (``attribution.grad_x_input``) of logit(token) − logit(rival): the
   prompt tokens with the largest |score|, what share of all |scores| they hold, and what the scores sum to
   beside the logit difference they estimate; then **confirmation** by activation patching
   (``patching.capture`` / ``patching.run``): each of those tokens' embedding replaced by the *neutral
   token* (the vocabulary row nearest the mean embedding row — attribution's own baseline — that is neither
   in the prompt nor special), its measured Δp; a source whose Δp is small or goes the other way than its
   score says is *not confirmed*;
3. **which heads and MLPs carried it** — every head's output and every MLP's output *at this position*
   replaced by what it is in the neutral run (the prompt with all its top sources replaced together): the
   components whose replacement moves p most, each with its Δp, a head with its attention from this position;
4. **against what** — the rival (the best other token), the margin, and the temperatures at which the rival
   would be sampled more than ``SHARE`` of the time, solved over the whole softmax (``rival_temperatures``);
5. **what was not measured** — from the measurements themselves: the sources' interaction (removed together
   vs the sum of removed alone), what the budget bounded, what the model does not allow.

The logits at ``pos`` depend only on tokens 0 … pos, so attribution and patching run on that prefix (and so
on a position's receipt equals the last position's of the prefix). Budget: ``BUDGET_TOKENS`` (the Cause
pages' own limit) — a longer prefix gets the lens and the rival, and says that attribution and patching
were bounded and why. ``forward_passes`` counts the model's forward calls the receipt made.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from core.cause import attribution, pair, patching
from core.common import escape, i18n
from core.common.numbers import softmax, top_k
from core.common.progress import Progress, noop
from core.engine import roles, tokens
from core.engine.hooks import scoped_hooks
from core.engine.types import LoadedModel, Phrase, Tokenizer, UnsupportedArchitectureError, say

BUDGET_TOKENS = pair.MAX_TOKENS  # attribution and patching run on prefixes up to this many tokens (~3 s at 64 here)
N_SOURCES = 3  # prompt tokens confirmed by patching
TAIL = 24  # tokens of the context that the receipt's heading quotes
N_COMPONENTS = 5  # heads and MLPs listed
TOP5 = 5
SHARE = 0.10  # the rival's share of samples the temperature line asks about
CONFIRM = 0.10  # a source is confirmed when removing it moves p, the way its score says, by at least this share of p
STEPS = 5  # progress: lens, attribution, confirmation, components, rival

# (top ids [L+1, k], their probabilities [L+1, k], the token's own lens probability [L+1]) at one position
Lens = Callable[[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class Formed:
    top1: int | None  # the first layer boundary where the token is the lens's top-1 (None: at none)
    top5: int | None  # … where it is among the top 5
    curve: np.ndarray  # [L+1] its lens probability at every boundary (row L: the model's own)
    top_ids: np.ndarray  # [L+1, k] the lens's best tokens, best first
    top_probs: np.ndarray  # [L+1, k]
    top_tokens: tuple[str, ...]  # [L+1] the lens's top-1 at each boundary, as a page shows it


@dataclass(frozen=True)
class Source:
    pos: int
    token: str
    score: float  # gradient × input toward the token (vs the rival)
    p_after: float  # p(token) with this prompt token replaced by the neutral token
    dp: float  # p_after − p (patching's own unpatched run)
    confirmed: bool


@dataclass(frozen=True)
class Read:
    sources: tuple[Source, ...]
    scores: np.ndarray  # [T] gradient × input of every prompt token
    value: float  # the logit difference they estimate
    total: float  # Σ scores
    top_share: float  # Σ |sources' scores| / Σ |all scores|
    neutral_id: int
    neutral_token: str
    p: float  # p(token) in patching's recorded unpatched run
    p_all_removed: float  # … with every source replaced at once (the neutral run)

    @property
    def dp_all(self) -> float:
        return self.p_all_removed - self.p

    @property
    def dp_sum(self) -> float:
        return float(sum(s.dp for s in self.sources))


@dataclass(frozen=True)
class Component:
    kind: str  # "head" | "mlp"
    layer: int
    head: int | None
    p_after: float
    dp: float
    attends: tuple[tuple[int, str, float], ...] = ()  # a head's strongest attention from this position: (pos, token, weight)


@dataclass(frozen=True)
class Rival:
    id: int
    token: str
    p_token: float
    p_rival: float
    logit_token: float
    logit_rival: float
    t_from: float | None  # the rival is sampled more than SHARE of the time for T in (t_from, t_to); None: never
    t_to: float | None  # math.inf: at every higher temperature
    peak: float  # the rival's largest share at any temperature …
    peak_t: float  # … and where (math.inf: as T grows without bound)

    @property
    def margin(self) -> float:
        return self.logit_token - self.logit_rival


@dataclass(frozen=True)
class Receipt:
    model: str
    tokens: tuple[str, ...]  # the prefix 0 … pos, as readable pieces
    pos: int
    token_id: int
    token: str
    p: float  # p(token) at pos, softmax of the trace's logits (the logits page's number)
    chosen: bool  # the token is the model's own top-1 there
    formed: Formed | None
    read: Read | None
    carried: tuple[Component, ...] | None
    n_components: int  # heads and MLPs measured
    rival: Rival
    unavailable: tuple[Phrase, ...] = ()  # which part could not be made, and why
    forward_passes: int = 0
    rows_positions: int = 0  # Σ over the forward passes of batch rows × positions fed
    notes: tuple[Phrase, ...] = field(default=())
    tail: str = ""  # the context's last TAIL tokens decoded together, made visible (whole characters, not ‹E5 BE› bytes)

    @property
    def n_tokens(self) -> int:
        return self.pos + 1


# ---------------------------------------------------------------------------------------------
# the rival and the temperature, exactly over the whole softmax


def _log_share(z: np.ndarray, r: int, beta: float) -> float:
    """log softmax(β·z)[r] (float64)."""
    x = beta * z
    m = float(x.max())
    return float(x[r] - m - math.log(np.exp(x - m).sum()))


def _slope(z: np.ndarray, r: int, beta: float) -> float:
    """d/dβ log softmax(β·z)[r] = z[r] − E_β[z]: decreasing in β (its derivative is −Var_β[z])."""
    p = softmax(beta * z)
    return float(z[r] - p @ z)


def _root(f: Callable[[float], float], lo: float, hi: float) -> float:
    """A root of ``f`` in [lo, hi] (f(lo), f(hi) of opposite signs) by bisection to float64's last bit."""
    flo = f(lo)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        fm = f(mid)
        if (fm > 0) == (flo > 0):
            lo, flo = mid, fm
        else:
            hi = mid
    return 0.5 * (lo + hi)


def rival_temperatures(logits: np.ndarray, r: int, share: float = SHARE) -> tuple[float | None, float | None, float, float]:
    """The temperatures T at which token ``r`` is sampled with probability > ``share``, over the whole
    softmax of ``logits``: (t_from, t_to, peak, peak_t). log p_r(β = 1/T) is concave in β (its slope
    z_r − E_β[z] falls as β grows), so the set is one interval (t_from, t_to), found by bisection on either
    side of the peak; (None, None) when even the peak share is at most ``share``. t_to = ∞ when the share stays
    above as T grows without bound (a vocabulary of fewer than 1/share tokens); t_from = 0 when r is the top token."""
    z = np.asarray(logits, dtype=np.float64)
    target = math.log(share)

    def f(beta: float) -> float:
        return _log_share(z, r, beta) - target

    top = bool(z[r] >= z.max())
    if top:  # the slope stays ≥ 0: the share grows as T falls, to its peak at T → 0
        beta_peak = math.inf
        peak = math.exp(_log_share(z, r, 1e300)) if np.sum(z == z[r]) > 1 else 1.0
    else:
        hi = 1.0
        while _slope(z, r, hi) > 0:
            hi *= 2.0
        beta_peak = 0.0 if _slope(z, r, 0.0) <= 0 else _root(lambda b: _slope(z, r, b), 0.0, hi)
        peak = math.exp(_log_share(z, r, beta_peak))
    peak_t = 0.0 if beta_peak == math.inf else (math.inf if beta_peak == 0 else 1.0 / beta_peak)
    if peak <= share:
        return None, None, peak, peak_t
    # the low-β (hot) side: below the peak the share rises with β
    b0 = 0.0 if beta_peak == math.inf else beta_peak
    if f(0.0) > 0:
        t_to = math.inf
    else:
        hi = b0 if b0 > 0 else 1.0
        while beta_peak == math.inf and f(hi) <= 0:
            hi *= 2.0
        t_to = 1.0 / _root(f, 0.0, hi)
    if beta_peak == math.inf:
        return 0.0, t_to, peak, peak_t
    hi = max(2.0 * beta_peak, 1.0)
    while f(hi) > 0:
        hi *= 2.0
    return 1.0 / _root(f, beta_peak, hi), t_to, peak, peak_t


def rival_of(logits: np.ndarray, token: int) -> int:
    """The best token other than ``token``."""
    best = top_k(logits, 2).tolist()
    return best[1] if best[0] == token else best[0]


def against(tokenizer: Tokenizer, logits: np.ndarray, token: int) -> Rival:
    z = np.asarray(logits, dtype=np.float64)
    r = rival_of(z, token)
    p = softmax(z)
    t_from, t_to, peak, peak_t = rival_temperatures(z, r)
    return Rival(r, tokens.visible_tokens(tokenizer, [r])[0], float(p[token]), float(p[r]), float(z[token]), float(z[r]),
                 t_from, t_to, peak, peak_t)


# ---------------------------------------------------------------------------------------------
# the instruments, on the prefix 0 … pos


def formed(tokenizer: Tokenizer, lens: Lens, pos: int, token: int) -> Formed:
    ids, probs, curve = lens(pos, token)
    top1 = [i for i in range(ids.shape[0]) if int(ids[i, 0]) == token]
    top5 = [i for i in range(ids.shape[0]) if token in ids[i, :TOP5].tolist()]
    return Formed(top1[0] if top1 else None, top5[0] if top5 else None, np.asarray(curve, dtype=np.float64), ids, probs,
                  tuple(tokens.visible_tokens(tokenizer, ids[:, 0].tolist())))


def neutral_token(loaded: LoadedModel, avoid: Sequence[int]) -> int:
    """The vocabulary row nearest (Euclidean) to the mean embedding row — attribution's baseline, "no particular
    token" — among the tokens that are neither in ``avoid`` nor special."""
    w = roles.find_sites(loaded.model).embed.weight
    with torch.no_grad():
        w64 = w.detach().double()
        d = ((w64 - w64.mean(0, keepdim=True)) ** 2).sum(-1)  # [V]
    banned = {int(i) for i in avoid} | {int(i) for i in (getattr(loaded.tokenizer, "all_special_ids", None) or [])}
    banned = [i for i in banned if 0 <= i < d.shape[0]]
    if banned:
        d[banned] = math.inf
    return int(torch.argmin(d))


def _probs_of(token: int) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda lg: torch.softmax(lg.double(), dim=-1)[:, token]


def read_and_carried(loaded: LoadedModel, ids: Sequence[int], token: int, rival: int, tokens_: Sequence[str],
                     attention: Callable[[int], np.ndarray], progress: Progress = noop
                     ) -> tuple[Read, tuple[Component, ...], int]:
    """What the prefix ``ids`` read (attribution, then patching against the neutral token) and which heads
    and MLPs carried it (patching at the last position); ``attention(layer)`` [H, T] is that layer's attention
    from the last position. Returns (read, the components that moved p most, how many were measured)."""
    ids = [int(i) for i in ids]
    T = len(ids)
    gxi = attribution.grad_x_input(loaded, ids, token, rival)
    scores = np.asarray(gxi.scores, dtype=np.float64)
    progress(2, STEPS, Phrase("receipt.progress_confirm"))
    first = 1 if T > 1 else 0  # attribution's baseline keeps the first token (the attention sink): so does this
    order = sorted(range(first, T), key=lambda t: (-abs(scores[t]), t))
    picked = [t for t in order[:N_SOURCES] if scores[t] != 0]
    neutral = neutral_token(loaded, ids)
    removed = list(ids)
    for t in picked:
        removed[t] = neutral
    base = patching.capture(loaded, removed, ids)  # "clean" = all sources removed, "corrupted" = the prompt as it is
    p0 = float(torch.softmax(base.logits[1].double(), -1)[token])
    p_all = float(torch.softmax(base.logits[0].double(), -1)[token])
    one = patching.run(loaded, base, [patching.Patch("resid", 0, t) for t in picked], reduce=_probs_of(token)) if picked else []
    sources = []
    for t, pa in zip(picked, one):
        dp = float(pa) - p0
        expect = -1.0 if scores[t] > 0 else 1.0  # a token that pushed toward the answer lowers p when removed
        sources.append(Source(t, tokens_[t], float(scores[t]), float(pa), dp, dp * expect >= CONFIRM * p0))
    mags = np.abs(scores[first:])
    read = Read(tuple(sources), scores, float(gxi.value), float(scores.sum()),
                float(sum(abs(s.score) for s in sources) / mags.sum()) if mags.sum() > 0 else 0.0,
                neutral, tokens.visible_tokens(loaded.tokenizer, [neutral])[0], p0, p_all)
    progress(3, STEPS, Phrase("receipt.progress_components"))
    L, H = base.n_layers, base.n_heads
    comps = [patching.Patch(patching.HEAD, layer, T - 1, h) for layer in range(L) for h in range(H)]
    comps += [patching.Patch("mlp_out", layer, T - 1) for layer in range(L)]
    after = patching.run(loaded, base, comps, reduce=_probs_of(token), reuse_prefix=True)  # [n]
    dps = np.asarray(after, dtype=np.float64) - p0
    best = sorted(range(len(comps)), key=lambda i: (-abs(dps[i]), i))[:N_COMPONENTS]
    out = []
    for i in best:
        p = comps[i]
        attends: tuple[tuple[int, str, float], ...] = ()
        if p.site == patching.HEAD:
            row = np.asarray(attention(p.layer)[p.head], dtype=np.float64)  # [T] from this position
            attends = tuple((int(j), tokens_[int(j)], float(row[j])) for j in top_k(row, 2).tolist())
        out.append(Component("head" if p.site == patching.HEAD else "mlp", p.layer, p.head, float(after[i]), float(dps[i]), attends))
    return read, tuple(out), len(comps)


class _Counter:
    """Counts this thread's forward calls of the model inside the block, and the rows × positions they fed
    through the last block (patched runs are made into rows inside the model, so the input ids do not say)."""

    def __init__(self, loaded: LoadedModel) -> None:
        self.model, self.passes, self.rows_positions = loaded.model, 0, 0
        self.last = roles.find_sites(loaded.model).blocks[-1]

    def count(self, *_a: Any) -> None:
        self.passes += 1

    def fed(self, _m: Any, _a: tuple, out: Any) -> None:
        h = out[0] if isinstance(out, (tuple, list)) else out
        if isinstance(h, torch.Tensor) and h.dim() == 3:
            self.rows_positions += int(h.shape[0] * h.shape[1])

    def scope(self) -> Any:
        return scoped_hooks([(self.model, "pre", self.count), (self.last, "forward", self.fed)])


def make(loaded: LoadedModel, ids: Sequence[int], pos: int, logits: np.ndarray, lens: Lens | None,
         attention: Callable[[int], np.ndarray], token: int | None = None, *, model_name: str = "",
         progress: Progress = noop) -> Receipt:
    """The receipt of position ``pos`` of the prompt ``ids`` (its logits there: ``logits`` [V], the trace's),
    for ``token`` (None: the model's own top-1). ``lens`` reads the logit lens (None: the model has none);
    ``attention(layer)`` is that layer's attention [H, T, T] of the traced prompt."""
    ids = [int(i) for i in ids[: pos + 1]]
    z = np.asarray(logits, dtype=np.float64)
    chosen_id = int(top_k(z, 1)[0])
    token = chosen_id if token is None else int(token)
    if not 0 <= token < z.shape[0]:
        raise ValueError(f"token {token} is outside the vocabulary 0 … {z.shape[0] - 1}")
    pieces = tuple(tokens.visible_tokens(loaded.tokenizer, ids))
    unavailable: list[Phrase] = []
    notes: list[Phrase] = []
    counter = _Counter(loaded)
    progress(0, STEPS, Phrase("receipt.progress_lens"))
    fm = None
    if lens is None:
        unavailable.append(Phrase("receipt.no_lens"))
    else:
        try:
            fm = formed(loaded.tokenizer, lens, pos, token)
        except UnsupportedArchitectureError as e:
            unavailable.append(Phrase("receipt.unavailable_formed", {"why": Phrase(e.key, e.params)}))
    rival = against(loaded.tokenizer, z, token)
    progress(1, STEPS, Phrase("receipt.progress_read"))
    read = carried = None
    n_comp = 0
    if len(ids) > BUDGET_TOKENS:
        notes.append(Phrase("receipt.bounded", {"n": f"{len(ids):,}", "k": BUDGET_TOKENS}))
    else:
        try:
            with counter.scope():
                read, carried, n_comp = read_and_carried(loaded, ids, token, rival.id, pieces,
                                                         lambda layer: attention(layer)[:, pos, : pos + 1], progress)
        except UnsupportedArchitectureError as e:
            unavailable.append(Phrase("receipt.unavailable_cause", {"why": Phrase(e.key, e.params)}))
    progress(STEPS, STEPS, Phrase("receipt.progress_done"))
    return Receipt(model_name, pieces, pos, token, tokens.visible_tokens(loaded.tokenizer, [token])[0],
                   float(softmax(z)[token]), token == chosen_id, fm, read, carried, n_comp, rival, tuple(unavailable),
                   counter.passes, counter.rows_positions, tuple(notes), _tail(loaded.tokenizer, ids))


def _tail(tokenizer: Any, ids: Sequence[int]) -> str:
    """The last ``TAIL`` tokens decoded together (a Chinese character split over tokens reads as itself), from a
    token where a character starts (one more, up to 3, while the text would start inside a character)."""
    start = max(0, len(ids) - TAIL)
    while start > 0 and len(ids) - start < TAIL + 3 and tokenizer.decode(ids[start:]).startswith("\ufffd"):
        start -= 1
    return tokens.visible(tokens.decoded_text(tokenizer, ids[start:]))


# ---------------------------------------------------------------------------------------------
# the receipt in words: each sentence chosen by the measured values (never one template for every run)


def pct(p: float) -> str:
    """A probability as a page shows it: one decimal of a percent, or two significant digits when smaller."""
    return f"{p:.1%}" if p >= 0.001 or p == 0 else f"{p * 100:.1g}%"


def points(dp: float) -> str:
    """A change of probability in percentage points, signed, one decimal ('+28.8', '−0.4'); never '-0.0'."""
    v = round(dp * 100, 1)
    return "0.0" if v == 0 else f"{v:+.1f}".replace("-", "−")


def signed(x: float, digits: int = 3) -> str:
    """A signed number with a true minus sign ('+1.143', '−0.165')."""
    return f"{x:+.{digits}f}".replace("-", "−")


def temp(t: float) -> str:
    return "∞" if math.isinf(t) else f"{t:.3g}"


def _third(layer: int, n: int) -> str:
    """Which part of the depth a boundary lies in: early / middle / late / last."""
    if layer >= n:
        return "last"
    return ("early", "middle", "late")[min(2, 3 * layer // max(1, n))]


def formed_lines(rc: Receipt, tok: Callable[[str], str]) -> list[Phrase]:
    f = rc.formed
    if f is None:
        return []
    L = len(f.curve) - 1
    out = []
    t = tok(rc.token)
    if f.top1 is None:
        out.append(Phrase("receipt.formed_never", {"tok": t, "k": "—" if f.top5 is None else f.top5, "L": L,
                                                    "best": tok(f.top_tokens[-1])}))
    else:
        out.append(Phrase(f"receipt.formed_{_third(f.top1, L)}", {"tok": t, "l": f.top1, "L": L,
                                                                   "k": "—" if f.top5 is None else f.top5}))
    jumps = np.diff(f.curve)
    j = int(np.argmax(jumps))
    if jumps[j] > 0:
        out.append(Phrase("receipt.formed_jump", {"a": j, "b": j + 1, "pa": pct(f.curve[j]), "pb": pct(f.curve[j + 1])}))
    return out


def read_lines(rc: Receipt, tok: Callable[[str], str]) -> list[Phrase]:
    r = rc.read
    if r is None:
        return []
    if not r.sources:
        return [Phrase("receipt.read_alone", {"tok": tok(rc.tokens[0])})]
    ratio = r.total / r.value if r.value else math.nan
    kind = ("opposite" if not ratio > 0 else "close" if 0.8 <= ratio <= 1.25 else "under" if ratio < 0.8 else "over")
    out = [Phrase("receipt.read_share", {"n": len(r.sources), "share": f"{r.top_share:.0%}"}),
           Phrase(f"receipt.read_sum_{kind}", {"total": signed(r.total), "value": signed(r.value), "rival": tok(rc.rival.token),
                                               "ratio": f"{ratio:.0%}" if math.isfinite(ratio) else "—"}),
           Phrase("receipt.neutral", {"tok": tok(r.neutral_token)})]
    for s in r.sources:
        if s.confirmed:
            key = "receipt.source_confirmed"
        elif (s.dp < 0) != (s.score > 0) and s.dp != 0:
            key = "receipt.source_opposite"
        else:
            key = "receipt.source_small"
        out.append(Phrase(key, {"tok": tok(s.token), "pos": s.pos, "score": signed(s.score), "p": pct(s.p_after), "dp": points(s.dp)}))
    return out


def carried_lines(rc: Receipt, tok: Callable[[str], str]) -> list[Phrase]:
    if rc.carried is None or rc.read is None:
        return []
    out = [Phrase("receipt.carried_intro", {"n": f"{rc.n_components:,}"})]
    if not rc.carried or abs(rc.carried[0].dp) < CONFIRM * rc.read.p:
        big = rc.carried[0] if rc.carried else None
        out.append(Phrase("receipt.carried_none", {"dp": points(0.0 if big is None else big.dp), "p": pct(rc.read.p)}))
    for c in rc.carried:
        way = "down" if c.dp < 0 else "up"
        if c.kind == "head":
            (ja, ta, wa) = c.attends[0] if c.attends else (0, "", 0.0)
            out.append(Phrase(f"receipt.comp_head_{way}", {"l": c.layer, "h": c.head, "p": pct(c.p_after), "dp": points(c.dp),
                                                             "tok": tok(ta), "pos": ja, "w": f"{wa:.2f}"}))
        else:
            out.append(Phrase(f"receipt.comp_mlp_{way}", {"l": c.layer, "p": pct(c.p_after), "dp": points(c.dp)}))
    return out


def against_lines(rc: Receipt, tok: Callable[[str], str]) -> list[Phrase]:
    r = rc.rival
    args = {"tok": tok(rc.token), "rival": tok(r.token), "p": pct(r.p_token), "pr": pct(r.p_rival), "margin": f"{abs(r.margin):.3f}"}
    out = [Phrase("receipt.against_ahead" if r.margin >= 0 else "receipt.against_behind", args)]
    share = f"{SHARE:.0%}"
    if r.t_from is None:
        out.append(Phrase("receipt.temp_never", {"rival": tok(r.token), "share": share, "peak": pct(r.peak), "t": temp(r.peak_t)}))
    elif r.t_from == 0 and math.isinf(r.t_to or 0):
        out.append(Phrase("receipt.temp_always", {"rival": tok(r.token), "share": share}))
    elif r.t_from == 0:
        out.append(Phrase("receipt.temp_below", {"rival": tok(r.token), "share": share, "b": temp(r.t_to)}))
    elif math.isinf(r.t_to or 0):
        out.append(Phrase("receipt.temp_above", {"rival": tok(r.token), "share": share, "a": temp(r.t_from)}))
    else:
        out.append(Phrase("receipt.temp_between", {"rival": tok(r.token), "share": share, "a": temp(r.t_from), "b": temp(r.t_to),
                                                    "peak": pct(r.peak), "t": temp(r.peak_t)}))
    return out


def unmeasured_lines(rc: Receipt, tok: Callable[[str], str]) -> list[Phrase]:
    out = list(rc.unavailable) + list(rc.notes)
    r = rc.read
    if r is not None and len(r.sources) > 1:
        diff = r.dp_all - r.dp_sum
        small = abs(diff) <= CONFIRM * max(abs(r.dp_all), abs(r.dp_sum), 1e-12)
        out.append(Phrase("receipt.interaction_small" if small else "receipt.interaction",
                          {"n": len(r.sources), "all": points(r.dp_all), "sum": points(r.dp_sum), "diff": points(diff)}))
    if r is not None:
        T = rc.n_tokens
        ig_passes = math.ceil(attribution.DEFAULT_STEPS / max(1, attribution.ROWS_PER_PASS // max(1, T))) + 1
        out.append(Phrase("receipt.no_ig", {"steps": attribution.DEFAULT_STEPS, "passes": ig_passes}))
        if T > 1:
            out.append(Phrase("receipt.first_kept", {"tok": tok(rc.tokens[0])}))
    if rc.carried is not None:
        out.append(Phrase("receipt.not_paths", {"n": f"{rc.n_components:,}"}))
    out.append(Phrase("receipt.cost", {"passes": rc.forward_passes, "rp": f"{rc.rows_positions:,}"}))
    return out


SECTIONS = ("formed", "read", "carried", "against", "unmeasured")


def lines(rc: Receipt, tok: Callable[[str], str] = str) -> dict[str, list[Phrase]]:
    """Every section's sentences (Phrases: said in either language); ``tok`` shows a token's text (a page's
    code span, the card's «»)."""
    return {"formed": formed_lines(rc, tok), "read": read_lines(rc, tok), "carried": carried_lines(rc, tok),
            "against": against_lines(rc, tok), "unmeasured": unmeasured_lines(rc, tok)}


def md_token(text: str) -> str:
    """A token's text as an inert Markdown code span (nothing in it renders)."""
    return f"`{escape.code(text)}`"


def card_markdown(rc: Receipt, lang: str) -> str:
    """The one-page card in Markdown, in ``lang``: the title, then every section's sentences."""
    said = lines(rc, md_token)
    out = [f"# {i18n.t('receipt.title', lang, tok=md_token(rc.token))}", "",
           i18n.t("receipt.context", lang, model=escape.md(rc.model), pos=rc.pos, n=rc.n_tokens,
                  prompt=md_token(rc.tail)), ""]
    for sec in SECTIONS:
        if said[sec]:
            out += [f"## {i18n.t(f'receipt.h_{sec}', lang)}", ""]
            out += [f"- {say(p, lang)}" for p in said[sec]]
            out.append("")
    return "\n".join(out)
