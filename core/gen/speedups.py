"""Cheaper decoding, and what it costs: another kernel, speculation, lower precision — measured on the model.

* **Kernels** (``kernels``): the same weights through HF's eager attention, torch's fused SDPA and a
  float64 copy as the reference; only rounding differs (largest logit difference, first changed greedy choice).
* **Speculation** (``speculate``): transformers' own assisted generation (prompt lookup, or early exit
  through the model's own first layers); greedy verification keeps exactly plain greedy's tokens.
  ``_watching`` wraps the candidate generator transformers builds to record each round's drafts and
  acceptances, changing nothing (it couples to ``get_candidates``, ``update_candidate_strategy`` and
  ``num_matches``). Early exit cuts the shared model's ``config.num_hidden_layers`` while it drafts, so
  the whole call holds ``loaded.lock``.
* **Precision** (``precision``): copies of the float32 baseline whose weight matrices are quantised and
  de-quantised by ``gguf``'s own quantizers, plus a real bfloat16 copy. A quantised variant runs float32
  kernels, so its time measures the float kernel; only its numbers and bytes are low-bit. One copy lives
  at a time (``LIVE``) and none replaces the shared model.

Every result is plain data (``to_dict`` / ``from_dict``): the shipped reference run
(``assets/decoding_reference.json``, tests/benchmarks/bench_decoding.py) and a live run are drawn by the same code.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from core.common import timing
from core.common.paths import asset
from core.common.progress import Progress, noop
from core.common.timing import Timing
from core.engine.types import LoadedModel, Phrase
from core.toy.train import repeated_sequence

# Bounded sizes (a live run on the page; the benchmark may ask for more)
MAX_NEW = 64  # new tokens a live run may ask for
DEFAULT_NEW = 32
MAX_REPS = 5
LOOKUP_TOKENS = 4  # prompt_lookup_num_tokens: tokens drafted per round by prompt lookup
EXIT_LAYER = 8  # assistant_early_exit: the draft reads the residual stream after this many blocks
METHODS = ("lookup", "early_exit")
KERNELS = ("sdpa", "eager", "float64")
# The quantised variants, largest first; TQ1_0 (ternary, 1.69 bits a weight) is the smallest type the gguf
# package's numpy quantizers can write.
QUANT_TYPES = ("Q8_0", "Q5_1", "Q4_0", "TQ1_0")
VARIANTS = (*QUANT_TYPES, "bf16")

# Prompts the page and the benchmark share: one whose answer copies the prompt, one with nothing to copy.
COPY_PROMPT = ("Copy this list exactly, one item per line: apple, banana, cherry, grape, lemon, mango, "
               "orange, peach, pear, plum.")
FREE_PROMPT = "Write a short poem about the sea at night."


def _greedy_kwargs(loaded: LoadedModel) -> dict[str, Any]:
    """Plain greedy settings for ``generate`` (no sampling; the model's eos ends it; pad = eos)."""
    eos = sorted(loaded.eos_ids())
    return {"do_sample": False, "eos_token_id": eos, "pad_token_id": eos[0], "temperature": None, "top_p": None,
            "top_k": None}


def _generate(model: torch.nn.Module, ids: Sequence[int], max_new: int, greedy: dict[str, Any], **kw: Any) -> list[int]:
    """``model.generate`` on one prompt: the new token ids (greedy unless ``kw`` says otherwise)."""
    x = torch.tensor([list(ids)], dtype=torch.long)
    with torch.no_grad():
        out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=int(max_new), **greedy, **kw)
    return [int(t) for t in out[0, x.shape[1]:]]


def _check(ids: Sequence[int], max_new: int) -> None:
    if not ids:
        raise ValueError("The prompt has no tokens.")
    if not 1 <= int(max_new) <= 4 * MAX_NEW:
        raise ValueError(f"max_new must be 1 … {4 * MAX_NEW}")


# ---------------------------------------------------------------------------------------------
# Copies of the shared model (one at a time)

LIVE: weakref.WeakSet = weakref.WeakSet()  # the variant models alive now (a test holds this to one)
_ONE_AT_A_TIME = threading.Lock()


@contextlib.contextmanager
def variant(loaded: LoadedModel, convert: Callable[[torch.Tensor], torch.Tensor] | None = None, *,
            attn: str | None = None) -> Iterator[Any]:
    """A copy of the shared model whose parameters are ``convert(p)`` (None: the very same tensors, read
    only), and whose attention is ``attn`` ("eager", "sdpa"; None: the shared model's). The copy is built
    with the shared parameters as its deepcopy memo, so nothing of the shared model is duplicated unless
    converted, and nothing of it is ever written: each converted tensor is a new Parameter set on the copy
    (tied weights stay tied). One variant exists at a time in this process; it is dropped on exit."""
    with _ONE_AT_A_TIME:
        model = loaded.model
        keep = {id(t): t for t in itertools.chain(model.parameters(), model.buffers())}
        twin = copy.deepcopy(model, memo=dict(keep))
        if convert is not None:
            made: dict[int, torch.nn.Parameter] = {}
            for mod in twin.modules():
                for name, p in list(mod._parameters.items()):
                    if p is None:
                        continue
                    if id(p) not in made:
                        made[id(p)] = torch.nn.Parameter(convert(p.detach()), requires_grad=False)
                    mod._parameters[name] = made[id(p)]
            del made
        if attn is not None:
            twin.set_attn_implementation(attn)
        twin.eval()
        LIVE.add(twin)
        try:
            yield twin
        finally:
            LIVE.discard(twin)
            del twin


# ---------------------------------------------------------------------------------------------
# 1. Kernels


@dataclass
class KernelResult:
    """Eager, SDPA and float64 on one prompt: prefill logits compared, greedy texts compared, times."""

    prompt_ids: list[int]
    max_abs: dict[str, float]  # "eager_vs_sdpa", "sdpa_vs_float64", "eager_vs_float64": largest |Δ logit| over the prompt
    tokens: dict[str, list[int]]  # kernel → its greedy continuation
    fork: dict[str, int | None]  # kernel → first index where its continuation differs from float64's (None: never)
    seconds_per_token: dict[str, dict[str, Any]]  # kernel → Timing.to_dict() of generation seconds / new token
    n_new: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> KernelResult:
        return cls(**d)

    def timing(self, kernel: str) -> Timing:
        return Timing.from_dict(self.seconds_per_token[kernel])


def _kernel_model(loaded: LoadedModel, kernel: str) -> contextlib.AbstractContextManager:
    if kernel == "sdpa":
        return variant(loaded, attn="sdpa")
    if kernel == "eager":
        return variant(loaded, attn="eager")
    return variant(loaded, lambda p: p.to(torch.float64), attn="eager")


def kernels(loaded: LoadedModel, ids: Sequence[int], n_new: int = DEFAULT_NEW, reps: int = 3,
            progress: Progress = noop) -> KernelResult:
    """Eager, SDPA and float64 (eager) on ``ids``: the prompt's logits, a greedy generation of ``n_new``
    tokens, and ``reps`` timed generations each (seconds per new token, prefill included). One model copy at
    a time (the float64 copy is twice the float32 model)."""
    _check(ids, n_new)
    reps = max(1, min(int(reps), MAX_REPS))
    greedy = _greedy_kwargs(loaded)
    x = torch.tensor([list(ids)], dtype=torch.long)
    logits: dict[str, torch.Tensor] = {}
    toks: dict[str, list[int]] = {}
    secs: dict[str, list[float]] = {}
    for i, k in enumerate(KERNELS):
        progress(i, len(KERNELS), Phrase("decoding.progress_kernel", {"kernel": k}))
        with _kernel_model(loaded, k) as m:
            with loaded.lock, torch.no_grad():  # the lock per pass or generation: a class is never held for a whole part
                logits[k] = m(x).logits[0].to(torch.float64)
            with loaded.lock:
                toks[k] = _generate(m, ids, n_new, greedy)
            secs[k] = []
            for _ in range(reps):
                with loaded.lock:
                    t0 = time.perf_counter()
                    got = _generate(m, ids, n_new, greedy)
                    secs[k].append((time.perf_counter() - t0) / max(1, len(got)))
        del m  # the copy goes before the next is made (one in memory at a time)
    progress(len(KERNELS), len(KERNELS), Phrase("decoding.progress_done"))

    def gap(a: str, b: str) -> float:
        return float((logits[a] - logits[b]).abs().max())

    return KernelResult(
        prompt_ids=[int(i) for i in ids],
        max_abs={"eager_vs_sdpa": gap("eager", "sdpa"), "sdpa_vs_float64": gap("sdpa", "float64"),
                 "eager_vs_float64": gap("eager", "float64")},
        tokens=toks,
        fork={k: first_fork(toks["float64"], toks[k]) for k in KERNELS},
        seconds_per_token={k: timing.of(v).to_dict() for k, v in secs.items()},
        n_new=int(n_new),
    )


def first_fork(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first index where two continuations differ (one ending earlier counts as differing there); None: equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


# ---------------------------------------------------------------------------------------------
# 2. Speculation


@dataclass(frozen=True)
class Round:
    """One verification pass: the drafted ids, how many of them the model accepted (a prefix), and the
    tokens the pass kept (the accepted drafts, then the model's own next token)."""

    drafted: tuple[int, ...]
    accepted: int
    kept: tuple[int, ...]

    def marked(self) -> list[tuple[int, str]]:
        """The pass's ids as a reader sees them: the accepted drafts, the model's own token in the first rejected
        draft's slot, then the rejected drafts ("accepted" / "model" / "rejected")."""
        return ([(t, "accepted") for t in self.drafted[:self.accepted]] + [(t, "model") for t in self.kept[self.accepted:]]
                + [(t, "rejected") for t in self.drafted[self.accepted:]])


@dataclass
class SpecResult:
    """One assisted greedy generation, round by round, and its speed against plain greedy decoding."""

    method: str  # "lookup" | "early_exit"
    prompt_ids: list[int]
    tokens: list[int]  # the assisted generation's new ids
    plain: list[int]  # plain greedy generate's new ids (the test: equal)
    rounds: list[Round]
    n_layers: int
    exit_layer: int
    lookup_tokens: int
    plain_seconds: list[float] = field(default_factory=list)  # interleaved runs: plain greedy …
    spec_seconds: list[float] = field(default_factory=list)  # … and assisted, run after run

    @property
    def drafted(self) -> int:
        return sum(len(r.drafted) for r in self.rounds)

    @property
    def accepted(self) -> int:
        return sum(r.accepted for r in self.rounds)

    @property
    def acceptance(self) -> float | None:
        """Accepted drafts / drafted tokens (None: nothing was drafted)."""
        return self.accepted / self.drafted if self.drafted else None

    @property
    def verify_passes(self) -> int:
        """Full forward passes of the model (the first one is the prefill)."""
        return len(self.rounds)

    @property
    def plain_passes(self) -> int:
        """Plain greedy decoding's full passes for the same tokens: one per new token."""
        return len(self.tokens)

    @property
    def passes_saved(self) -> int:
        return self.plain_passes - self.verify_passes

    @property
    def draft_cost(self) -> float:
        """The drafts' work in full-pass equivalents: prompt lookup's is none (an n-gram search); early exit's
        is one pass through ``exit_layer`` of ``n_layers`` blocks per drafted token."""
        return 0.0 if self.method == "lookup" else self.drafted * self.exit_layer / self.n_layers

    @property
    def same(self) -> bool:
        return self.tokens == self.plain

    def ratios(self) -> list[float]:
        """Plain seconds / assisted seconds, pair by pair (> 1: speculation was faster)."""
        return [p / s for p, s in zip(self.plain_seconds, self.spec_seconds, strict=True) if s > 0]

    def speedup(self) -> Timing | None:
        r = self.ratios()
        return timing.of(r) if r else None

    def verdict(self) -> str | None:
        """Why the measured speed-up is what it is: "nothing_drafted", "none_accepted" (then any ratio is overhead
        and noise), "faster" or "slower"; None before a timed run."""
        sp = self.speedup()
        if sp is None:
            return None
        return ("nothing_drafted" if self.drafted == 0 else "none_accepted" if self.accepted == 0
                else "faster" if sp.median > 1 else "slower")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["rounds"] = [asdict(r) for r in self.rounds]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SpecResult:
        d = dict(d)
        d["rounds"] = [Round(tuple(r["drafted"]), int(r["accepted"]), tuple(r["kept"])) for r in d["rounds"]]
        return cls(**d)


@contextlib.contextmanager
def _watching(model: torch.nn.Module, rounds: list[Round]) -> Iterator[None]:
    """Record every round of ``model.generate``'s assisted decoding into ``rounds``: the candidate generator
    transformers builds is kept as it is, with its ``get_candidates`` and ``update_candidate_strategy``
    wrapped to note the drafts and the number accepted. Call with ``loaded.lock`` held (the wrapper is set on
    the shared model for the call's length)."""
    own = model._get_candidate_generator

    def make(*a: Any, **k: Any) -> Any:
        gen = own(*a, **k)
        get, update = gen.get_candidates, gen.update_candidate_strategy
        seen: dict[str, Any] = {}

        def get_candidates(input_ids: torch.Tensor, *ga: Any, **gk: Any) -> Any:
            cand, logits = get(input_ids, *ga, **gk)
            seen["n"], seen["drafted"] = int(input_ids.shape[1]), tuple(int(t) for t in cand[0, input_ids.shape[1]:])
            return cand, logits

        def update_candidate_strategy(input_ids: torch.Tensor, scores: torch.Tensor, num_matches: int) -> Any:
            kept = tuple(int(t) for t in input_ids[0, seen["n"]:])
            rounds.append(Round(seen["drafted"], int(num_matches), kept))
            return update(input_ids, scores, num_matches)

        gen.get_candidates, gen.update_candidate_strategy = get_candidates, update_candidate_strategy
        return gen

    model._get_candidate_generator = make
    try:
        yield
    finally:
        del model._get_candidate_generator


def _assist_kwargs(method: str, lookup_tokens: int, exit_layer: int) -> dict[str, Any]:
    if method == "lookup":
        return {"prompt_lookup_num_tokens": int(lookup_tokens)}
    if method == "early_exit":
        return {"assistant_early_exit": int(exit_layer)}
    raise ValueError(f"unknown speculation method {method!r}")


def speculate(loaded: LoadedModel, ids: Sequence[int], method: str, max_new: int = DEFAULT_NEW, *, reps: int = 0,
              lookup_tokens: int = LOOKUP_TOKENS, exit_layer: int = EXIT_LAYER, progress: Progress = noop) -> SpecResult:
    """Assisted greedy generation of ``max_new`` tokens with ``method``, every round recorded, beside plain
    greedy ``generate`` (the same tokens, or the test fails); then ``reps`` interleaved timings of both
    (plain, assisted, plain, assisted …) on the shared model, each generation holding ``loaded.lock``."""
    _check(ids, max_new)
    n_layers = int(loaded.facts.n_layers)
    if not 1 <= int(exit_layer) < n_layers:
        raise ValueError(f"exit_layer must be 1 … {n_layers - 1}")
    if not 1 <= int(lookup_tokens) <= 16:
        raise ValueError("lookup_tokens must be 1 … 16")
    reps = max(0, min(int(reps), MAX_REPS))
    model, greedy = loaded.model, _greedy_kwargs(loaded)
    assist = _assist_kwargs(method, lookup_tokens, exit_layer)
    total = 2 + 2 * reps
    progress(0, total, Phrase("decoding.progress_plain"))
    with loaded.lock:
        plain = _generate(model, ids, max_new, greedy)
    progress(1, total, Phrase("decoding.progress_spec", {"method": method}))
    rounds: list[Round] = []
    with loaded.lock, _restored(model), _watching(model, rounds):
        tokens = _generate(model, ids, max_new, greedy, **assist)
    res = SpecResult(method, [int(i) for i in ids], tokens, plain, rounds, n_layers, int(exit_layer), int(lookup_tokens))
    for r in range(reps):
        progress(2 + 2 * r, total, Phrase("decoding.progress_timing", {"done": r + 1, "n": reps}))
        for out, kw in ((res.plain_seconds, {}), (res.spec_seconds, assist)):
            with loaded.lock, _restored(model):
                t0 = time.perf_counter()
                _generate(model, ids, max_new, greedy, **kw)
                out.append(time.perf_counter() - t0)
    progress(total, total, Phrase("decoding.progress_done"))
    return res


@contextlib.contextmanager
def _restored(model: torch.nn.Module) -> Iterator[None]:
    """Whatever assisted generation leaves on the shared model (its generation config's draft length, the
    early exit's layer count) is put back as it was."""
    gen_cfg = copy.deepcopy(model.generation_config)
    layers = model.config.num_hidden_layers
    base = getattr(model, model.base_model_prefix, model)
    base_layers = base.config.num_hidden_layers
    try:
        yield
    finally:
        model.generation_config = gen_cfg
        model.config.num_hidden_layers = layers
        base.config.num_hidden_layers = base_layers


# ---------------------------------------------------------------------------------------------
# 3. Precision


def quant_round_trip(w: np.ndarray, qtype: str) -> tuple[np.ndarray, int]:
    """``w`` (float32) quantised by gguf's quantizer ``qtype`` and de-quantised by gguf's dequantizer: (the
    float32 values, the quantised bytes). A row whose length is not a multiple of the type's block is
    quantised as blocks of consecutive weights across rows (the bytes and values are those blocks'); llama.cpp
    would store such a tensor in another type instead."""
    t = GGMLQuantizationType[qtype]
    block = GGML_QUANT_SIZES[t][0]
    a = np.ascontiguousarray(w, dtype=np.float32)
    if a.size % block:
        raise ValueError(f"{qtype} quantises blocks of {block} weights; this tensor has {a.size}")
    flat = a.reshape(-1, a.shape[-1]) if a.shape[-1] % block == 0 else a.reshape(-1, block)
    q = quants.quantize(flat, t)
    return quants.dequantize(q, t).reshape(a.shape).astype(np.float32, copy=False), int(q.nbytes)


def _quantised(qtype: str, counted: list[int]) -> Callable[[torch.Tensor], torch.Tensor]:
    """A parameter converter for ``variant``: every matrix through ``quant_round_trip`` (its quantised bytes
    counted), vectors (the norms' scales) kept in float32 as llama.cpp keeps them."""
    def convert(p: torch.Tensor) -> torch.Tensor:
        if p.ndim < 2:
            counted.append(p.numel() * 4)
            return p.clone()
        w, nbytes = quant_round_trip(p.float().numpy(), qtype)
        counted.append(nbytes)
        return torch.from_numpy(w)
    return convert


def _bf16(counted: list[int]) -> Callable[[torch.Tensor], torch.Tensor]:
    def convert(p: torch.Tensor) -> torch.Tensor:
        counted.append(p.numel() * 2)
        return p.to(torch.bfloat16)
    return convert


def kl_rows(base_logits: np.ndarray, other_logits: np.ndarray) -> np.ndarray:
    """KL(p_base ‖ p_other) in nats for every row of two [T, V] logit arrays (float64 softmax)."""
    a = np.asarray(base_logits, dtype=np.float64)
    b = np.asarray(other_logits, dtype=np.float64)
    la = a - a.max(-1, keepdims=True)
    la -= np.log(np.exp(la).sum(-1, keepdims=True))
    lb = b - b.max(-1, keepdims=True)
    lb -= np.log(np.exp(lb).sum(-1, keepdims=True))
    return (np.exp(la) * (la - lb)).sum(-1)


def top1_agree(base_logits: np.ndarray, other_logits: np.ndarray) -> np.ndarray:
    """Per row: whether both arrays' highest logit is the same token."""
    return np.argmax(base_logits, -1) == np.argmax(other_logits, -1)


def drift(base_hidden: np.ndarray, other_hidden: np.ndarray) -> np.ndarray:
    """Per residual-stream point (embeddings, after each block): mean over positions of ‖h_other − h_base‖ / ‖h_base‖.  # [L+1]"""
    d = np.linalg.norm(np.asarray(other_hidden, np.float64) - base_hidden, axis=-1)
    n = np.linalg.norm(np.asarray(base_hidden, np.float64), axis=-1)
    return (d / np.maximum(n, 1e-12)).mean(-1)


@dataclass
class Variant:
    """One precision variant against the float32 baseline, on the same tokens."""

    name: str  # "Q8_0" … or "bf16"
    bits: float  # bits per weight of its matrices
    weight_bytes: int
    kl: list[float]  # per position of the baseline sequence (prompt + baseline continuation)
    agree: list[bool]  # per position: the same top-1 token as the baseline
    drift: list[float]  # per residual-stream point
    tokens: list[int]  # its own greedy continuation
    fork: int | None  # first index where it differs from the baseline's (None: never within n_new)
    seconds: list[float]  # interleaved with the baseline's ``PrecisionResult.base_seconds``: generation seconds / token

    @property
    def kl_mean(self) -> float:
        return float(np.mean(self.kl))

    @property
    def top1(self) -> float:
        return float(np.mean(self.agree))


@dataclass
class PrecisionResult:
    """The float32 baseline (the de-quantised Q4_1 GGUF) and its variants on one prompt."""

    prompt_ids: list[int]
    base_tokens: list[int]
    base_bytes: int  # the float32 weights
    gguf_bytes: int | None  # the shipped GGUF's tensor bytes (Q4_1 blocks), when the file is at hand
    n_new: int
    variants: list[Variant]
    base_seconds: dict[str, list[float]]  # variant name → the baseline's seconds / token timed beside it

    def tpot_ratio(self, name: str) -> Timing | None:
        """Variant time per token / baseline time per token, pair by pair (> 1: the variant is slower)."""
        v = next(v for v in self.variants if v.name == name)
        r = [a / b for a, b in zip(v.seconds, self.base_seconds.get(name, []), strict=False) if b > 0]
        return timing.of(r) if r else None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PrecisionResult:
        d = dict(d)
        d["variants"] = [Variant(**v) for v in d["variants"]]
        return cls(**d)


def _logits_and_stream(m: torch.nn.Module, seq: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    x = torch.tensor([list(seq)], dtype=torch.long)
    with torch.no_grad():
        out = m(x, output_hidden_states=True)
    return (out.logits[0].float().numpy(),
            torch.stack([h[0] for h in out.hidden_states]).float().numpy())


def _bits(name: str) -> float:
    if name == "bf16":
        return 16.0
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType[name]]
    return size * 8 / block


def precision(loaded: LoadedModel, ids: Sequence[int], names: Sequence[str] = VARIANTS, n_new: int = DEFAULT_NEW,
              reps: int = 1, gguf_bytes: int | None = None, progress: Progress = noop) -> PrecisionResult:
    """Each variant in ``names`` built, measured and dropped before the next (one in memory at a time): on the
    baseline's own sequence (the prompt + its greedy continuation of ``n_new`` tokens), the KL divergence and
    top-1 agreement per position and the residual stream's drift per layer; its own greedy continuation and
    where it forks; its weight bytes; ``reps`` generations timed alternately with the baseline's."""
    _check(ids, n_new)
    bad = [n for n in names if n not in VARIANTS]
    if bad or not names:
        raise ValueError(f"unknown variants {bad}; choose from {VARIANTS}")
    reps = max(1, min(int(reps), MAX_REPS))
    greedy = _greedy_kwargs(loaded)
    model = loaded.model
    total = 1 + len(names)
    progress(0, total, Phrase("decoding.progress_base"))
    with loaded.lock:
        base_tokens = _generate(model, ids, n_new, greedy)
        seq = list(ids) + base_tokens
        base_logits, base_hidden = _logits_and_stream(model, seq)
    base_bytes = sum(p.numel() * 4 for p in model.parameters())
    variants: list[Variant] = []
    base_seconds: dict[str, list[float]] = {}
    for i, name in enumerate(names):
        progress(1 + i, total, Phrase("decoding.progress_variant", {"name": name, "done": i + 1, "n": len(names)}))
        counted: list[int] = []
        conv = _bf16(counted) if name == "bf16" else _quantised(name, counted)
        with variant(loaded, conv) as m:
            with loaded.lock:
                logits, hidden = _logits_and_stream(m, seq)
                toks = _generate(m, ids, n_new, greedy)
            secs, base_secs = [], []
            for _ in range(reps):
                for out, mm in ((base_secs, model), (secs, m)):
                    with loaded.lock:
                        t0 = time.perf_counter()
                        got = _generate(mm, ids, n_new, greedy)
                        out.append((time.perf_counter() - t0) / max(1, len(got)))
        del m  # the copy goes before the next is made (one in memory at a time)
        variants.append(Variant(name, _bits(name), int(sum(counted)), kl_rows(base_logits, logits).tolist(),
                                top1_agree(base_logits, logits).tolist(), drift(base_hidden, hidden).tolist(), toks,
                                first_fork(base_tokens, toks), secs))
        base_seconds[name] = base_secs
        del logits, hidden
    progress(total, total, Phrase("decoding.progress_done"))
    return PrecisionResult([int(i) for i in ids], base_tokens, int(base_bytes), gguf_bytes, int(n_new), variants,
                           base_seconds)


# ---------------------------------------------------------------------------------------------
# The shipped reference run (tests/benchmarks/bench_decoding.py --write)

REFERENCE_FILE = "decoding_reference.json"


@dataclass
class Reference:
    """A whole run of all three parts on the embedded model, with the machine and the date it ran on."""

    machine: str
    date: str
    versions: str
    shared: bool  # measured while other work shared the machine
    prompts: dict[str, str]  # "copy" / "free" → the prompt text (chat template applied when run)
    kernels: KernelResult
    speculation: dict[str, dict[str, SpecResult]]  # prompt key → method → result
    precision: PrecisionResult

    def to_dict(self) -> dict[str, Any]:
        return {"machine": self.machine, "date": self.date, "versions": self.versions, "shared": self.shared,
                "prompts": self.prompts, "kernels": self.kernels.to_dict(),
                "speculation": {p: {m: r.to_dict() for m, r in d.items()} for p, d in self.speculation.items()},
                "precision": self.precision.to_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Reference:
        return cls(str(d["machine"]), str(d["date"]), str(d["versions"]), bool(d["shared"]), dict(d["prompts"]),
                   KernelResult.from_dict(d["kernels"]),
                   {p: {m: SpecResult.from_dict(r) for m, r in v.items()} for p, v in d["speculation"].items()},
                   PrecisionResult.from_dict(d["precision"]))


def load_reference() -> Reference | None:
    """The shipped reference run, or None when the file is missing or unreadable (the page then offers live runs only)."""
    try:
        return Reference.from_dict(json.loads(asset(REFERENCE_FILE).read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


# ---------------------------------------------------------------------------------------------
# The toy's clean story: trained in float32, then 8 and 4 bits

TOY_TYPES = ("Q8_0", "Q4_0")


@dataclass(frozen=True)
class ToyRow:
    """The toy transformer at one precision, on its induction test (a random letter sequence, then the same again)."""

    name: str  # "F32" (as trained), "Q8_0", "Q4_0"
    bits: float
    kl_mean: float  # KL(float32 ‖ this) per position, averaged
    top1: float  # share of positions whose top-1 token is float32's
    loss_second_copy: float  # nats per token predicting the repeated copy (the induction heads' work)


def toy_precision(toy: LoadedModel, seg_len: int = 24) -> list[ToyRow]:
    """The toy (``core.toy``, trained in float32) with every weight matrix through gguf's Q8_0 and Q4_0 round
    trips: how far its predictions move on the induction test, and whether it still copies."""
    ids = repeated_sequence(seg_len, 2, 1)
    x = torch.tensor([ids])

    def run(m: torch.nn.Module) -> tuple[np.ndarray, float]:
        with torch.no_grad():
            logits = m(x)[0][0]
        nll = torch.nn.functional.cross_entropy(logits[:-1], x[0, 1:], reduction="none")
        return logits.double().numpy(), float(nll[seg_len + 1:].mean())

    base, base_loss = run(toy.model)
    rows = [ToyRow("F32", 32.0, 0.0, 1.0, base_loss)]
    for name in TOY_TYPES:
        with variant(toy, _quantised(name, [])) as m:
            logits, loss = run(m)
        del m
        rows.append(ToyRow(name, _bits(name), float(kl_rows(base, logits).mean()), float(top1_agree(base, logits).mean()), loss))
    return rows
