"""Activation patching (causal tracing): run the corrupted prompt, copy in ONE activation from the
clean run, and see how much of the clean answer comes back.

Sites (rows of ``core.engine.trace.SITES``): ``resid``, ``attn_out``, ``mlp_out`` at (layer, position), and
``z`` per head at the last position (``roles.head_slice``, what head ablation zeroes). A batch of patched
runs (``_forward_rows``) copies the corrupted stream once per row from the first patched block; a sweep
skips positions no run patches (``plan``, with ``backends.prefix_kv``). The recording and a single patched
run both use row 0 of a batch of two, so the ends are exact: patching nothing IS the corrupted run, copying
the whole stream at layer 0 IS the clean run, bit for bit (a sweep's runs may differ in the last float32
bits). Hooks are scoped to the calling thread; passes hold the model's lock.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

import core.backends as backends
from core.cause import pair
from core.common.progress import Progress, noop
from core.engine import hf_trace, roles
from core.engine.hooks import HookSpec, scoped_hooks
from core.engine.hooks import first_of as _first
from core.engine.hooks import hidden_of as _hidden_of
from core.engine.trace import site_row
from core.engine.types import LoadedModel, Phrase, UnsupportedArchitectureError

# the registry's sites a patched run copies from the clean run (``Baseline`` keeps each under its name)
PATCHED = tuple(site_row(name).name for name in ("resid", "attn_out", "mlp_out", "z"))
BY_POSITION = PATCHED[:3]  # the layer × position grids
HEAD = "z"  # the layer × head grid: one head's slice of ``z`` at the last position
TOKENS_PER_PASS = 512  # rows × T per batched pass: big enough to use the CPU well, small in memory

# progress: core.common.progress's (done, total, words), in patched runs


@dataclass(frozen=True)
class Patch:
    """One patched run: copy the clean ``site`` at (``layer``, ``pos``) into the corrupted run
    (``pos=None``: every position); ``head`` for site "z" (that head's slice)."""

    site: str
    layer: int
    pos: int | None
    head: int | None = None

    def __post_init__(self) -> None:
        if self.site not in PATCHED:
            raise ValueError(f"unknown site {self.site!r}; one of {PATCHED}")
        if (self.site == HEAD) != (self.head is not None):
            raise ValueError(f"a head is given exactly for site {HEAD!r}")


@dataclass(frozen=True)
class Baseline:
    """The clean and the corrupted run, recorded: their next-token scores and the
    activations every patched run copies from (clean) or starts from (corrupted)."""

    ids_clean: tuple[int, ...]
    ids_corrupted: tuple[int, ...]
    logits: torch.Tensor  # [2, V] float32 at the last position: row 0 clean, row 1 corrupted
    resid: torch.Tensor  # [L, 2, T, d]: the stream entering block l
    attn_out: torch.Tensor  # [L, 2, T, d]
    mlp_out: torch.Tensor  # [L, 2, T, d]
    z: torch.Tensor  # [L, 2, T, H·dh]: the heads' outputs side by side (the output projection's input)
    head_dim: int

    @property
    def n_layers(self) -> int:
        return int(self.resid.shape[0])

    @property
    def n_tokens(self) -> int:
        return int(self.resid.shape[2])

    @property
    def n_heads(self) -> int:
        return int(self.z.shape[-1]) // self.head_dim

    def clean_logits(self) -> np.ndarray:
        return self.logits[0].numpy()

    def corrupted_logits(self) -> np.ndarray:
        return self.logits[1].numpy()

    def site(self, name: str) -> torch.Tensor:
        """[L, 2, T, ·] a patching site of both runs (``z``: the heads side by side)."""
        return getattr(self, name)


def _with_first(out: Any, new: torch.Tensor) -> Any:
    """``out`` with its tensor (or its tuple's first item) replaced by ``new``."""
    return (new, *out[1:]) if isinstance(out, tuple) else new


# ---------------------------------------------------------------------------------------------
# the two runs every patched run reuses


def capture(loaded: LoadedModel, ids_clean: Sequence[int], ids_corrupted: Sequence[int]) -> Baseline:
    """Run the clean and the corrupted prompt and keep every site of both; refuse (with the reason) a
    model whose blocks are not one pre-norm residual chain, since its sites would not mean what the
    page says they mean."""
    ids_clean, ids_corrupted = tuple(int(i) for i in ids_clean), tuple(int(i) for i in ids_corrupted)
    if len(ids_clean) != len(ids_corrupted):
        raise pair.PairError("counts", n_clean=len(ids_clean), n_corrupted=len(ids_corrupted))
    width = loaded.facts.n_heads * loaded.facts.head_dim
    runs, logits = [], []
    with loaded.lock, torch.inference_mode():
        for ids in (ids_clean, ids_corrupted):
            x = torch.tensor([ids, ids], dtype=torch.long)  # [2, T]: row 0 is kept (see the module's docstring)
            cap = hf_trace.capture_sites(loaded, lambda x=x: backends.last_logits(loaded, x), len(ids), keep=PATCHED)
            logits.append(cap.logits[0].float())  # [V]
            runs.append([cap.stacked(k)[:, None] for k in PATCHED])  # each [L, 1, T, ·]
    z = runs[0][-1]
    if z.shape[-1] != width:
        raise UnsupportedArchitectureError("z_width", model=type(loaded.model).__name__, n=z.shape[-1], width=width)
    stream = [torch.cat(pair_of, dim=1) for pair_of in zip(*runs)]  # each [L, 2, T, ·]: clean, corrupted
    return Baseline(ids_clean, ids_corrupted, torch.stack(logits), *stream, head_dim=loaded.facts.head_dim)


# ---------------------------------------------------------------------------------------------
# patched runs, many per forward pass


def _start(rows: Sequence[Patch | None]) -> int:
    """The first block any row patches: the rows are made there (before it they are all the corrupted run)."""
    return min((p.layer for p in rows if p is not None), default=0)


def _hooks(base: Baseline, sites: roles.Parts, rows: Sequence[Patch | None], B: int, skip: int = 0) -> list[HookSpec]:
    """The hooks of one batched pass; ``skip``: the pass starts at that position (the earlier ones come
    from a cache, ``_forward_rows``), so position t of the prompt is position t − skip of the pass."""
    by: dict[tuple[str, int], list[tuple[int, Patch]]] = {}
    for b, p in enumerate(rows):
        if p is not None:
            by.setdefault((p.site, p.layer), []).append((b, p))
    start = _start(rows)
    clean = {k: base.site(k)[:, 0, skip:] for k in PATCHED}  # [L, T − skip, ·] of the clean run
    dh = base.head_dim

    def write(x: torch.Tensor, site: str, layer: int) -> torch.Tensor:
        x = x.clone()  # never edit a tensor the model still uses
        src = clean[site][layer]  # [T − skip, ·]
        for b, p in by.get((site, layer), []):
            cols = roles.head_slice(p.head, dh) if p.head is not None else slice(None)
            if p.pos is None:
                x[b, :, cols] = src[:, cols]
            else:
                x[b, p.pos - skip, cols] = src[p.pos - skip, cols]
        return x

    def block_pre(layer: int) -> Callable[..., Any]:
        def pre(_m: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
            h = _hidden_of(args, kwargs)
            if layer == start:  # the rows begin here, from the corrupted run's own stream (recorded)
                h = base.resid[layer, 1, skip:].expand(B, -1, -1)  # [B, T − skip, d]
            h = write(h, "resid", layer)
            return ((h, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": h})

        return pre

    def out_hook(site: str, layer: int) -> Callable[..., Any]:
        return lambda _m, _a, out: _with_first(out, write(_first(out), site, layer))

    def z_pre(layer: int) -> Callable[..., Any]:
        return lambda _m, args: (write(args[0], HEAD, layer), *args[1:])

    specs: list[HookSpec] = [(sites.blocks[start], "pre_kwargs", block_pre(start))]
    for site, layer in sorted(by):
        if site == "resid" and layer != start:
            specs.append((sites.blocks[layer], "pre_kwargs", block_pre(layer)))
        elif site == "attn_out":
            specs.append((sites.attns[layer], "forward", out_hook(site, layer)))
        elif site == "mlp_out":
            specs.append((sites.mlps[layer], "forward", out_hook(site, layer)))
        elif site == HEAD:
            specs.append((roles.out_proj(sites.attns[layer]), "pre", z_pre(layer)))
    return specs


def _check_patch(base: Baseline, p: Patch) -> None:
    L, T, H = base.n_layers, base.n_tokens, base.n_heads
    if not 0 <= p.layer < L:
        raise ValueError(f"layer {p.layer} is outside 0 … {L - 1}")
    if p.pos is not None and not 0 <= p.pos < T:
        raise ValueError(f"position {p.pos} is outside 0 … {T - 1}")
    if p.head is not None and not 0 <= p.head < H:
        raise ValueError(f"head {p.head} is outside 0 … {H - 1}")


def _forward_rows(loaded: LoadedModel, base: Baseline, rows: Sequence[Patch | None],
                  prefix: tuple[int, list[tuple[torch.Tensor, torch.Tensor]]] | None = None) -> torch.Tensor:
    """One batched forward pass, one row per patched run (None = no patch): last-position scores [n, V].
    ``prefix`` = (P, the corrupted run's keys and values of its first P positions): no row patches
    before position P, so those positions are the corrupted run's in every row and the pass feeds
    only positions P … T − 1 after them."""
    n = len(rows)
    B = max(2, n)  # at least two rows, like the recording: equal inputs give bit-identical scores
    rows = [*rows, *([None] * (B - n))]
    sites = roles.find_sites(loaded.model)
    skip = prefix[0] if prefix else 0
    x = torch.tensor([base.ids_corrupted[skip:]], dtype=torch.long)  # [1, T − skip]: rows are made at the first patched block
    with loaded.lock, torch.inference_mode(), scoped_hooks(_hooks(base, sites, rows, B, skip)):
        if prefix:
            logits = backends.last_logits_after(loaded, x, prefix[1], rows=B, rows_from=_start(rows)).float()
        else:
            logits = backends.last_logits(loaded, x).float()  # [B, V]
    if logits.shape[0] != B:
        raise UnsupportedArchitectureError("rows_not_carried")
    return logits[:n]


def chunk_size(n_tokens: int) -> int:
    """Patched runs per forward pass of ``n_tokens`` positions each."""
    return max(2, min(64, TOKENS_PER_PASS // max(1, n_tokens)))


BAND = 5  # layers per band of the tiled order (``_tiles``)
MOST_ROWS = 128  # rows of one tiled pass at most (a pass of one position is mostly the output layer's [rows, V])


def _tiles(patches: Sequence[Patch | None], n_tokens: int, chunk: int | None) -> list[tuple[int, list[int]]]:
    """The runs in passes that each feed only what they must: (skip, indices) per pass, where the pass
    starts at position ``skip`` (the earliest any of its runs patches; None: 0) and at its first
    patched block. Runs are ordered by band of ``BAND`` layers, then latest position first, so that a
    pass holds runs of nearby layers and positions; a pass takes runs while rows × positions fed stays
    within ``TOKENS_PER_PASS`` (at most ``chunk`` rows, else ``MOST_ROWS``)."""
    def pos(i: int) -> int:
        p = patches[i]
        return 0 if p is None or p.pos is None else p.pos

    def layer(i: int) -> int:
        return -1 if patches[i] is None else patches[i].layer

    order = sorted(range(len(patches)), key=lambda i: (layer(i) // BAND, -pos(i), layer(i)))
    most = chunk or MOST_ROWS
    out: list[tuple[int, list[int]]] = []
    cur: list[int] = []
    skip = n_tokens
    for i in order:
        s = min(skip, pos(i))
        full = len(cur) >= most
        too_long = len(cur) >= 2 and (len(cur) + 1) * (n_tokens - s) > TOKENS_PER_PASS  # two rows at least
        if full or too_long:
            out.append((skip, cur))
            cur, s = [], pos(i)
        cur.append(i)
        skip = s
    if cur:
        out.append((skip, cur))
    return out


def _by_layer(base: Baseline, patches: Sequence[Patch | None], chunk: int | None) -> list[tuple[int, list[int]]]:
    """The runs sorted by layer, ``chunk`` (else ``chunk_size``) per pass, every pass feeding all positions."""
    chunk = chunk or chunk_size(base.n_tokens)
    order = sorted(range(len(patches)), key=lambda i: (patches[i].layer if patches[i] is not None else -1))
    return [(0, order[s : s + chunk]) for s in range(0, len(patches), chunk)]


def fed(base: Baseline, patches: Sequence[Patch | None], passes: Sequence[tuple[int, list[int]]]) -> int:
    """What a plan computes, in (row, position, block) units: each pass feeds its rows' positions from
    its ``skip`` on through the blocks from its first patched one (``_start``)."""
    T, L = base.n_tokens, base.n_layers
    return sum(len(idx) * (T - skip) * (L - max(0, _start([patches[i] for i in idx]))) for skip, idx in passes)


def unchanged(base: Baseline, p: Patch | None) -> bool:
    """Whether the patch copies values the corrupted run already has (bit for bit): then the patched
    run IS the corrupted run and need not be computed. So it is for every site at a position before
    the prompts' first differing token (both runs computed it from the same tokens), for the
    residual stream entering block 0 wherever the tokens are the same, and for no patch at all."""
    if p is None:
        return True
    src = base.site(p.site)[p.layer]  # [2, T, ·]: clean, corrupted
    cols = roles.head_slice(p.head, base.head_dim) if p.head is not None else slice(None)
    rows = slice(None) if p.pos is None else p.pos
    return torch.equal(src[0, rows, cols], src[1, rows, cols])


def plan(base: Baseline, patches: Sequence[Patch | None], *, chunk: int | None = None,
         reuse_prefix: bool = True) -> list[tuple[int, list[int]]]:
    """The passes ``run`` makes, (skip, run indices) each, for the runs that are not ``unchanged``
    (those are the corrupted run, not computed): by layer (every position fed), or — with
    ``reuse_prefix`` and when it feeds less (``fed``) — tiled by layers and positions, each pass
    starting at its earliest patched position after the corrupted run's cached keys and values.
    A short pair is swept by layer (the tiles would feed more); a long one is tiled; a head sweep (all
    at the last position) feeds 1 position a run."""
    todo = [i for i, p in enumerate(patches) if not unchanged(base, p)]
    sub = [patches[i] for i in todo]

    def back(passes: list[tuple[int, list[int]]]) -> list[tuple[int, list[int]]]:
        return [(skip, [todo[j] for j in idx]) for skip, idx in passes]

    by_layer = back(_by_layer(base, sub, chunk))
    if not reuse_prefix:
        return by_layer
    tiled = back(_tiles(sub, base.n_tokens, chunk))
    return tiled if fed(base, patches, tiled) < fed(base, patches, by_layer) else by_layer


def run(loaded: LoadedModel, base: Baseline, patches: Sequence[Patch | None], *, chunk: int | None = None,
        progress: Progress = noop, reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
        reuse_prefix: bool = False) -> np.ndarray:
    """The patched runs' last-position scores, [n, V] float32 — or ``reduce(scores)`` per chunk
    (e.g. the logit difference, [n]), so a sweep never holds n × V numbers. Runs are grouped by
    layer (a pass starts at its first patched block) and batched ``chunk`` at a time.

    ``reuse_prefix``: when no run of a pass patches before position P > 0, positions 0 … P − 1 are
    the corrupted run's in every row (a decoder looks only back), so their keys and values are
    computed once and the pass feeds only the positions from P on (``plan``) — a head sweep (all at
    the last position) then feeds one position per run. Equal to the full runs up to float rounding
    (≈ 1e-5, the cache's sums are grouped differently), so single runs, whose ends are exact, do not
    use it."""
    for p in patches:
        if p is not None:
            _check_patch(base, p)
    n = len(patches)
    chunks = plan(base, patches, chunk=chunk, reuse_prefix=reuse_prefix)
    # the corrupted run's keys and values of all but its last position: a pass starting at position P
    # takes the first P of them (a position's keys and values depend only on the positions before it)
    kv = backends.prefix_kv(loaded, base.ids_corrupted[:-1]) if any(skip for skip, _ in chunks) else []
    corrupted = base.logits[1:2]  # [1, V]: the recorded corrupted run, every ``unchanged`` run's result
    same = (reduce(corrupted) if reduce else corrupted).numpy()
    res = np.empty((n, *same.shape[1:]), dtype=same.dtype)
    res[:] = same[0]
    done = n - sum(len(idx) for _, idx in chunks)
    if done:
        progress(done, n, None)
    for skip, idx in chunks:
        prefix = (skip, [(k[:, :, :skip], v[:, :, :skip]) for k, v in kv]) if skip else None
        out = _forward_rows(loaded, base, [patches[i] for i in idx], prefix)
        res[idx] = (reduce(out) if reduce else out).numpy()
        done += len(idx)
        progress(done, n, None)
    return res


def patched_logits(loaded: LoadedModel, base: Baseline, patch: Patch | None) -> np.ndarray:
    """One patched run's next-token scores [V] (None: the corrupted run, unpatched)."""
    return run(loaded, base, [patch])[0]


def logit_diffs(loaded: LoadedModel, base: Baseline, patches: Sequence[Patch | None], answer: int, foil: int, *,
                chunk: int | None = None, progress: Progress = noop, reuse_prefix: bool = False) -> np.ndarray:
    """logit(answer) − logit(foil) of each patched run, [n] float64 (see ``pair.logit_diff``)."""
    return run(loaded, base, patches, chunk=chunk, progress=progress, reuse_prefix=reuse_prefix,
               reduce=lambda lg: lg[:, answer].double() - lg[:, foil].double())


# ---------------------------------------------------------------------------------------------
# the grids the page draws and the CLI saves


def grid_patches(site: str, n_layers: int, n_tokens: int) -> list[Patch]:
    """Every (layer, position) of ``site`` (resid / attn_out / mlp_out), row-major [L, T]."""
    return [Patch(site, layer, t) for layer in range(n_layers) for t in range(n_tokens)]


def head_patches(n_layers: int, n_heads: int, pos: int) -> list[Patch]:
    """Every (layer, head) at position ``pos``, row-major [L, H]."""
    return [Patch(HEAD, layer, pos, h) for layer in range(n_layers) for h in range(n_heads)]


def sweep_patches(base: Baseline, site: str) -> tuple[list[Patch], tuple[int, int]]:
    """The patched runs of a sweep of ``site`` and the grid they fill: every (layer, position) [L, T]
    for resid / attn_out / mlp_out, every (layer, head) at the last position [L, H] for z."""
    L, T = base.n_layers, base.n_tokens
    if site == HEAD:
        return head_patches(L, base.n_heads, T - 1), (L, base.n_heads)
    if site in BY_POSITION:
        return grid_patches(site, L, T), (L, T)
    raise ValueError(f"unknown site {site!r}; one of {PATCHED}")


@dataclass(frozen=True)
class SweepPlan:
    """How a sweep is computed, for the page to say: ``runs`` patched runs in ``passes`` forward
    passes, ``share`` = what they compute ÷ what running every patched run in full would (``fed``),
    ``cached``: some passes start after the corrupted run's cached keys and values."""

    runs: int
    passes: int
    share: float
    cached: bool
    unchanged: int = 0  # runs that copy what the corrupted run already has: not computed (``unchanged``)


def sweep_plan(base: Baseline, site: str, chunk: int | None = None) -> SweepPlan:
    patches, _ = sweep_patches(base, site)
    passes = plan(base, patches, chunk=chunk)
    full = len(patches) * base.n_tokens * base.n_layers
    computed = sum(len(idx) for _, idx in passes)
    return SweepPlan(len(patches), len(passes), fed(base, patches, passes) / max(1, full), any(skip for skip, _ in passes),
                     len(patches) - computed)


def sweep(loaded: LoadedModel, base: Baseline, site: str, answer: int, foil: int, *,
          progress: Progress = noop, chunk: int | None = None) -> np.ndarray:
    """Raw logit differences of every patched run of ``site`` (``sweep_patches``): [L, T] for resid /
    attn_out / mlp_out (position t of layer l), [L, H] for head (each head at the last position). The
    passes are ``plan``'s: they may start after the corrupted run's cached keys and values. Its progress
    counts the runs, said as ``sweep_words``."""
    patches, shape = sweep_patches(base, site)
    return logit_diffs(loaded, base, patches, answer, foil, chunk=chunk, reuse_prefix=True,
                       progress=lambda done, n, _w=None: progress(done, n, sweep_words(site, done, n))).reshape(shape)


def sweep_words(site: str, done: int | None = None, n: int | None = None) -> Phrase:
    """A sweep's progress in words: "Patching {site}: {done} of {n} runs" (None: not known yet, "…")."""
    return Phrase("cause.progress", {"site": Phrase(f"cause.site_{site}"), "done": "0" if done is None else f"{done:,}",
                                     "n": "…" if n is None else f"{n:,}"})


def normalise(ld: np.ndarray | float, ld_clean: float, ld_corrupted: float) -> np.ndarray | None:
    """(ld − corrupted) / (clean − corrupted): 0 = the corrupted run, 1 = the clean run; None when the
    two runs do not differ (nothing to restore)."""
    span = float(ld_clean) - float(ld_corrupted)
    if not np.isfinite(span) or abs(span) < 1e-6:
        return None
    return (np.asarray(ld, dtype=np.float64) - float(ld_corrupted)) / span


def best_cell(norm: np.ndarray) -> tuple[int, int]:
    """The (row, column) that restores the most."""
    i = int(np.nanargmax(norm))
    return i // norm.shape[1], i % norm.shape[1]


def export(loaded: LoadedModel, pt: pair.PairTokens, ans: pair.Answers, base: Baseline,
           grids: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The .npz record of a patching experiment (``python -m core patch``): both prompts' tokens, their
    logit differences, and each site's grid of raw logit differences (not normalised, so that anyone
    can check them); ``meta`` says how to normalise."""
    ld_c = pair.logit_diff(base.clean_logits(), ans.answer, ans.foil)
    ld_r = pair.logit_diff(base.corrupted_logits(), ans.answer, ans.foil)
    meta = {"model": loaded.facts.name, "answer": ans.answer_text, "foil": ans.foil_text, "answer_id": ans.answer,
            "foil_id": ans.foil, "n_layers": base.n_layers, "n_tokens": base.n_tokens, "n_heads": base.n_heads,
            "sites": {"resid": "[L, T] the residual stream entering block l at position t, copied from the clean run",
                      "attn_out": "[L, T] layer l's attention output at position t, copied from the clean run",
                      "mlp_out": "[L, T] layer l's MLP output at position t, copied from the clean run",
                      "z": "[L, H] head h's output (its slice of the output projection's input) at the last position"},
            "values": "logit(answer) - logit(foil) at the last position of each patched run of the corrupted prompt",
            "normalise": "(x - logit_diff_corrupted) / (logit_diff_clean - logit_diff_corrupted): 0 = corrupted, 1 = clean"}
    out = {"tokens_clean": np.asarray(pt.tokens_clean, dtype=str), "tokens_corrupted": np.asarray(pt.tokens_corrupted, dtype=str),
           "token_ids_clean": np.asarray(pt.ids_clean, dtype=np.int64),
           "token_ids_corrupted": np.asarray(pt.ids_corrupted, dtype=np.int64),
           "logit_diff_clean": np.float64(ld_c), "logit_diff_corrupted": np.float64(ld_r), "meta": np.asarray(json.dumps(meta))}
    out.update({site: np.asarray(g, dtype=np.float64) for site, g in grids.items()})
    return out
