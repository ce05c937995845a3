"""Past the training length: what a model does at positions its training never reached, measured.

* **the toy, live**: the trained toy (RoPE, trained on ``seq_len`` tokens: assets/toy/loss_curve.json) run
  on held-out rows of its task many times that long, past ``max_positions`` too; the loss per bin of
  positions, on every token and on the predictable ones (what the induction circuit can get right);
* **the embedded model, shipped**: SmolLM2 on Python's ``pydoc_data.topics`` past its trained length, the
  loss per bin beside a control (the same tokens rescored in a window inside the trained length); too slow
  for a page visit, so ``python -m tests.benchmarks.bench_past_training --write`` writes assets/past_training.json.

Every log p comes from ``backends.next_token_logprob``, the app's one per-position loss. No Streamlit here.
"""

from __future__ import annotations

import functools
import json
import math
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

import core.backends as backends
from core.common.paths import asset
from core.engine.trace import MAX_TOKENS
from core.engine.types import LoadedModel, Tokenizer
from core.toy import run as toy_run
from core.toy import train as toy_train
from core.toy.model import ToyConfig, ToyTransformer
from core.toy.tokenizer import ByteTokenizer

# -- one forward pass, as the per-position loss reads it ---------------------------------------------------


@dataclass(frozen=True)
class Rows:
    """What ``backends.next_token_logprob`` reads of a forward pass (a Trace's fields of the same names):
    the ids, the final hidden states (after the last norm, before the LM head) and the model's own logits
    at the last position (which tells whether the LM head alone reproduces the model's output)."""

    token_ids: np.ndarray  # [T] int64
    final_hidden: np.ndarray  # [T, d] float32
    last_logits: np.ndarray  # [V] float32


def next_logprob(loaded: LoadedModel, rows: Rows) -> np.ndarray:
    """[T−1] log p(ids[t + 1] | ids[0 … t]): the app's one per-position loss helper."""
    return backends.next_token_logprob(loaded, rows).logp


def final_norm(model: torch.nn.Module) -> torch.nn.Module:
    """The norm whose output the LM head reads: the toy's ``norm``, an HF decoder's ``model.norm``."""
    if isinstance(model, ToyTransformer):
        return model.norm
    base = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    return base.norm


def forward_rows(loaded: LoadedModel, ids: torch.Tensor) -> list[Rows]:
    """One forward pass of ``ids`` [B, T] (no cache), kept as ``Rows`` per batch row: the final norm's output
    read by a hook, the last position's logits from the model's own output."""
    got: dict[str, torch.Tensor] = {}
    hook = final_norm(loaded.model).register_forward_hook(lambda _m, _i, out: got.__setitem__("h", out))
    try:
        with loaded.lock, torch.inference_mode():
            if loaded.is_toy:
                last = loaded.model(ids)[0][:, -1]  # [B, V]
            else:
                last = loaded.model(input_ids=ids, use_cache=False, logits_to_keep=1).logits[:, -1]
    finally:
        hook.remove()
    h = got["h"].float().numpy()
    return [Rows(ids[i].numpy().astype(np.int64), h[i], last[i].float().numpy()) for i in range(ids.shape[0])]


# -- bins ---------------------------------------------------------------------------------------------------


def bins_of(n: int, width: int) -> list[tuple[int, int]]:
    """(first, last) positions of consecutive runs of ``width`` covering 0 … n − 1 exactly once."""
    if n < 1 or width < 1:
        raise ValueError("bins need n ≥ 1 positions and a width ≥ 1")
    return [(a, min(a + width, n) - 1) for a in range(0, n, width)]


def bin_means(values: np.ndarray, bins: list[tuple[int, int]], mask: np.ndarray | None = None) -> tuple[list[float | None], list[int]]:
    """Per bin, the mean of ``values`` [..., n] over its positions (and rows), counting only ``mask``ed
    entries when given; ``None`` where a bin holds none. With the number of entries averaged."""
    v = np.asarray(values, dtype=np.float64)
    m = np.ones(v.shape, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    means: list[float | None] = []
    counts: list[int] = []
    for a, b in bins:
        sel = m[..., a : b + 1]
        k = int(sel.sum())
        counts.append(k)
        means.append(float(v[..., a : b + 1][sel].mean()) if k else None)
    return means, counts


def mean_over(values: np.ndarray, lo: int, hi: int, mask: np.ndarray | None = None) -> float | None:
    """The mean of ``values`` [..., n] at positions lo … hi − 1 (``mask``ed entries only when given)."""
    v = np.asarray(values, dtype=np.float64)[..., lo:hi]
    m = np.ones(v.shape, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)[..., lo:hi]
    return float(v[m].mean()) if m.any() else None


# -- the toy, live ------------------------------------------------------------------------------------------

TOY_FACTOR = 8  # the toy runs this many times its trained length (96 → 768: past max_positions 512 too)
TOY_ROWS = 8  # held-out rows averaged
TOY_BIN = 32  # positions per bin
HELD_OUT_SEED = 2026  # training draws its rows from random.Random(1); these come from another stream


def toy_trained_length(folder: Path = toy_run.ASSETS) -> int:
    """The sequence length the shipped toy was trained on (its inputs: ``seq_len`` tokens, positions
    0 … seq_len − 1), as ``make toy`` recorded it beside the loss curve: the number that matters here, not
    the config's ``max_positions`` (RoPE never reads it)."""
    return int(json.loads((folder / toy_run.LOSS_FILE).read_text(encoding="utf-8"))["seq_len"])


def held_out(n_rows: int, length: int, seed: int = HELD_OUT_SEED) -> tuple[np.ndarray, np.ndarray]:
    """Rows of the toy's own task, drawn from ``seed``: ``(ids [n, length], predictable [n, length − 1])``.
    Each row is <bos> + random segments (``SEG_MIN`` … ``SEG_MAX`` letters of the training alphabet), each
    written twice, cut at ``length``; ``predictable[r, t]`` says whether target t + 1 lies in a second copy
    after its first letter (what an induction head can predict; a first copy is chance whatever the position)."""
    rng = random.Random(seed)
    bos = ByteTokenizer().bos_token_id
    ids = np.empty((n_rows, length), dtype=np.int64)
    pred = np.zeros((n_rows, length), dtype=bool)  # by position of the token itself
    for r in range(n_rows):
        body: list[int] = []
        flag: list[bool] = []
        while len(body) < length - 1:
            seg = [rng.choice(toy_train.ALPHABET) for _ in range(rng.randint(toy_train.SEG_MIN, toy_train.SEG_MAX))]
            body += seg + seg
            flag += [False] * len(seg) + [False] + [True] * (len(seg) - 1)
        ids[r] = [bos, *body[: length - 1]]
        pred[r] = [False, *flag[: length - 1]]
    return ids, pred[:, 1:]  # predictable[t]: the target of position t, ids[t + 1]


@dataclass(frozen=True)
class ToyPast:
    """The toy's loss per bin of positions on held-out rows run past its trained length."""

    length: int  # tokens per row
    trained: int  # the training sequence length
    max_positions: int  # the config's limit (RoPE does not enforce it)
    layers: int
    rows: int
    seed: int
    bins: list[tuple[int, int]]  # over the predicting positions 0 … length − 2
    loss_all: list[float | None]  # nats, every predicted token
    loss_copy: list[float | None]  # nats, predictable tokens only
    n_copy: list[int]
    logp: np.ndarray  # [rows, length − 1]
    predictable: np.ndarray  # [rows, length − 1]
    seconds: float

    def summary(self) -> dict[str, float | None]:
        """Mean loss on the predictable tokens inside the trained length, past it, and past max_positions."""
        nll = -self.logp
        n = nll.shape[1]
        return {"inside": mean_over(nll, 0, self.trained, self.predictable),
                "past": mean_over(nll, self.trained, n, self.predictable),
                "past_max": mean_over(nll, self.max_positions, n, self.predictable) if self.max_positions < n else None,
                "all_inside": mean_over(nll, 0, self.trained), "all_past": mean_over(nll, self.trained, n)}


def measure_toy(loaded: LoadedModel, length: int, rows: int = TOY_ROWS, seed: int = HELD_OUT_SEED, width: int = TOY_BIN,
                trained: int | None = None) -> ToyPast:
    """Run the toy on ``rows`` held-out rows of ``length`` tokens (one row at a time: its attention keeps
    [H, T, T] weights) and bin the loss of every predicting position."""
    t0 = time.perf_counter()
    ids, pred = held_out(rows, length, seed)
    logp = np.stack([next_logprob(loaded, forward_rows(loaded, torch.from_numpy(ids[r : r + 1]))[0]) for r in range(rows)])
    bins = bins_of(length - 1, width)
    loss_all, _ = bin_means(-logp, bins)
    loss_copy, n_copy = bin_means(-logp, bins, pred)
    return ToyPast(length, toy_trained_length() if trained is None else trained, loaded.facts.max_positions or 0, loaded.facts.n_layers, rows, seed,
                   bins, loss_all, loss_copy, n_copy, logp, pred, time.perf_counter() - t0)


@functools.lru_cache(maxsize=2)
def toy_past(factor: int = TOY_FACTOR) -> ToyPast:
    """The trained toy (loaded from assets/toy/, ~100 kB) run ``factor`` × its trained length: deterministic,
    so measured once per process and shared (a second or so on 2 cores)."""
    trained = toy_trained_length()
    return measure_toy(toy_run.load_trained(), trained * factor, trained=trained)


@functools.lru_cache(maxsize=1)
def toy_refusal() -> str:
    """``learned_refusal`` for the shipped toy's shape (assets/toy/config.json)."""
    return learned_refusal(ToyConfig.from_dict(json.loads((toy_run.ASSETS / toy_run.CONFIG_FILE).read_text(encoding="utf-8"))))


def learned_refusal(cfg: ToyConfig) -> str:
    """What a toy of the same shape but with a *learned* position table says when asked for one position
    more than it has: the error its forward raises (weights are irrelevant: it refuses before any)."""
    learned = ToyTransformer(ToyConfig.from_dict({**cfg.to_dict(), "position": "learned"}))
    try:
        with torch.inference_mode():
            learned(torch.zeros(1, cfg.max_positions + 1, dtype=torch.long))
    except ValueError as e:
        return str(e)
    raise AssertionError("a learned position table accepted a position past its end")


CHANCE = math.log(len(toy_train.ALPHABET))  # a uniform guess among the training letters (a formula: ln 64)


def nats(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"


def toy_text(tp: ToyPast) -> dict[str, Any]:
    """The numbers the page's sentences about ``tp`` quote, formatted (every one read off ``tp``)."""
    s = tp.summary()
    return {"trained": f"{tp.trained:,}", "length": f"{tp.length:,}", "maxpos": f"{tp.max_positions:,}", "rows": tp.rows,
            "layers": tp.layers, "bin": tp.bins[0][1] - tp.bins[0][0] + 1, "factor": f"{tp.length / tp.trained:g}",
            "inside": nats(s["inside"]), "past": nats(s["past"]), "past_max": nats(s["past_max"]), "last_in": tp.trained - 1,
            "last": f"{tp.length - 1:,}", "chance": f"{CHANCE:.2f}", "s": f"{tp.seconds:.1f}", "seed": tp.seed}


# -- the embedded model, measured once and shipped ---------------------------------------------------------

REFERENCE_FILE = "past_training.json"  # in assets/
REAL_BIN = 512
DOCUMENT = "pydoc_data.topics"


def document_text() -> tuple[str, str]:
    """(text, source): Python's own help topics (the stdlib's ``pydoc_data.topics``), in key order, one
    blank line apart: natural English (with some code) shipped with every Python."""
    from pydoc_data import topics  # deferred: only the reference script reads the document

    keys = sorted(topics.topics)
    text = "\n\n".join(topics.topics[k] for k in keys)
    v = sys.version_info
    return text, f"{DOCUMENT} (Python {v.major}.{v.minor}.{v.micro}): the {len(keys)} help topics in key order, joined by blank lines; the first tokens"


def document_ids(tokenizer: Tokenizer, n_tokens: int) -> tuple[np.ndarray, str]:
    """The document's first ``n_tokens`` tokens (no special tokens) and its source."""
    text, source = document_text()
    ids = np.asarray(tokenizer(text, add_special_tokens=False)["input_ids"], dtype=np.int64)
    if ids.size < n_tokens:
        raise ValueError(f"{DOCUMENT} has {ids.size:,} tokens, fewer than the {n_tokens:,} asked for")
    return ids[:n_tokens], source


def measure_real(loaded: LoadedModel, n_tokens: int, trained: int, width: int = REAL_BIN, control: bool = True,
                 log: Any = print) -> dict[str, Any]:
    """The loss per bin of positions of the document's first ``n_tokens`` tokens in one forward pass, and
    (``control``) the tokens past ``trained`` scored again in the window of the last ``trained`` tokens
    (they then sit at positions n − trained … trained − 1, inside the trained length, with ≥ n − trained
    tokens of context). Returns the record's measured part."""
    ids, source = document_ids(loaded.tokenizer, n_tokens)
    t0 = time.perf_counter()
    logp = next_logprob(loaded, forward_rows(loaded, torch.from_numpy(ids[None]))[0])  # [n − 1]
    t_full = time.perf_counter() - t0
    log(f"full forward of {n_tokens:,} tokens: {t_full:.1f} s")
    bins = bins_of(n_tokens - 1, width)
    loss, _ = bin_means(-logp, bins)
    out: dict[str, Any] = {"n_tokens": int(n_tokens), "trained": int(trained), "trace_cut": MAX_TOKENS, "bin": int(width),
                           "document": source, "first": [a for a, _ in bins], "last": [b for _, b in bins], "loss": loss,
                           "loss_inside": mean_over(-logp, 0, trained), "loss_past": mean_over(-logp, trained, n_tokens - 1),
                           "seconds_full": round(t_full, 1)}
    if control and n_tokens > trained:
        start = n_tokens - trained  # the window ids[start:] puts original position p at p − start
        t1 = time.perf_counter()
        lw = next_logprob(loaded, forward_rows(loaded, torch.from_numpy(ids[None, start:]))[0])  # [trained − 1]
        t_ctrl = time.perf_counter() - t1
        log(f"control window of {trained:,} tokens: {t_ctrl:.1f} s")
        ctrl = np.full(n_tokens - 1, np.nan)
        ctrl[start:] = lw  # position p ≥ start predicted inside the window
        live = ~np.isnan(ctrl)
        lo = trained  # the control compares only the positions past the trained length
        cmask = np.zeros(n_tokens - 1, dtype=bool)
        cmask[lo:] = live[lo:]
        out["control"] = bin_means(-np.nan_to_num(ctrl), bins, cmask)[0]
        out["control_start"] = int(start)
        out["loss_past_control"] = mean_over(-np.nan_to_num(ctrl), lo, n_tokens - 1, cmask)
        out["seconds_control"] = round(t_ctrl, 1)
    return out


def reference_record(measured: dict[str, Any], machine: str, when: str, model: str, seconds: float) -> dict[str, Any]:
    """The shipped file: the measurement with its label (machine, torch and threads, date, model, time)."""
    return {"machine": machine, "date": when, "torch": torch.__version__, "threads": torch.get_num_threads(), "model": model,
            "attention": "sdpa", "seconds": round(seconds, 1), **measured}


LABEL_KEYS = ("machine", "date", "torch", "threads", "model", "attention", "seconds", "document")
CURVE_KEYS = ("first", "last", "loss")


def check_reference(rec: dict[str, Any]) -> list[str]:
    """What is wrong with a reference record (empty: nothing): its label set, its bins contiguous from 0 to
    n − 2, every loss a finite number, the trained length inside the document."""
    bad = [f"missing {k}" for k in (*LABEL_KEYS, *CURVE_KEYS, "n_tokens", "trained", "trace_cut", "bin") if k not in rec]
    if bad:
        return bad
    first, last, loss = rec["first"], rec["last"], rec["loss"]
    if not (len(first) == len(last) == len(loss)) or not first:
        bad.append("first, last and loss must line up")
    elif first[0] != 0 or last[-1] != rec["n_tokens"] - 2 or any(first[i + 1] != last[i] + 1 for i in range(len(first) - 1)):
        bad.append("bins must cover positions 0 … n − 2 once, in order")
    if not all(isinstance(x, (int, float)) and math.isfinite(x) for x in loss):
        bad.append("every bin's loss must be a measured number")
    if not 0 < rec["trained"] < rec["n_tokens"]:
        bad.append("the document must run past the trained length")
    if "control" in rec and len(rec["control"]) != len(loss):
        bad.append("control must line up with loss")
    return bad


def real_text(rec: dict[str, Any]) -> dict[str, Any]:
    """The numbers the page's sentences about the shipped record quote, formatted (every one read off ``rec``)."""
    n, trained = rec["n_tokens"], rec["trained"]
    return {"n": f"{n:,}", "trained": f"{trained:,}", "cut": f"{rec['trace_cut']:,}", "factor": f"{n / trained:g}",
            "inside": nats(rec["loss_inside"]), "past": nats(rec["loss_past"]), "ctrl": nats(rec.get("loss_past_control")),
            "last_in": f"{trained - 1:,}", "last": f"{n - 2:,}", "start": f"{rec.get('control_start', 0):,}",
            "seconds": f"{rec['seconds']:,.0f}", "threads": rec["threads"], "torch": rec["torch"], "attention": rec["attention"],
            "date": rec["date"]}


def widest_gap(rec: dict[str, Any]) -> dict[str, str] | None:
    """The bin where the whole-document loss stands furthest above the control's (None without a control, or
    where the control is never the lower one)."""
    pairs = [(full - c, a, b, full, c) for a, b, full, c in zip(rec["first"], rec["last"], rec["loss"], rec.get("control") or [], strict=False)
             if c is not None]
    if not pairs or max(pairs)[0] <= 0:
        return None
    _, a, b, full, c = max(pairs)
    return {"a": f"{a:,}", "b": f"{b:,}", "full": nats(full), "ctrl": nats(c)}


def load_reference(path: Path | None = None) -> dict[str, Any]:
    """The shipped measurement (assets/past_training.json), checked."""
    p = asset(REFERENCE_FILE) if path is None else Path(path)
    rec = json.loads(p.read_text(encoding="utf-8"))
    bad = check_reference(rec)
    if bad:
        raise ValueError(f"{p.name}: not a past-training measurement ({'; '.join(bad)})")
    return rec
