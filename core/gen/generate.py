"""Generation step by step: one prefill, then one decode step per new token, with a KV cache.

A ``Stepper`` belongs to one session (or one CLI run); the shared model holds nothing per request: the
KV cache lives in the Stepper, every forward pass holds ``loaded.lock``, and attention is read through the
per-thread ``xray.recording()``. ``prefill()`` runs the whole prompt once (its time is the TTFT);
``step()`` feeds the one token chosen last, appending its K/V (each step's time is one TPOT). Times are
taken inside the lock, so they count the computation, not the wait. ``run_without_cache`` re-runs the whole
prefix for every token (the cost the cache saves); ``generate_record`` serves ``python -m core generate``.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

import core.backends as backends
from core.common import timing
from core.common.numbers import softmax, top_k
from core.common.progress import Progress, noop
from core.common.timing import Timing
from core.engine.tokens import encode, readable_tokens
from core.engine.trace import MAX_TOKENS
from core.engine.types import LoadedModel, Phrase, Tokenizer
from core.gen.sampling import SamplingConfig, choose, next_token_distribution

TOP_K = 10  # candidates kept per step
MAX_PROMPT_TOKENS = MAX_TOKENS  # same limit as the tracer
MAX_PREFILL_PATTERN = 256  # keep the prefill's [L, H, T, T] weights only up to this many tokens (≈ 35 MB on SmolLM2)


def greedy_config() -> SamplingConfig:
    return SamplingConfig(greedy=True)


def _pick(logits: np.ndarray, cfg: SamplingConfig | None, previous: Sequence[int], rng: np.random.Generator) -> int:
    """The next token id, by the sampler (greedy = argmax after any repetition penalty)."""
    if cfg is None:
        return int(np.argmax(logits))
    return int(choose(logits, cfg, previous_ids=tuple(previous), rng=rng))


def _rng(cfg: SamplingConfig) -> np.random.Generator:
    return np.random.default_rng(None if cfg.seed is None else int(cfg.seed))


# ---------------------------------------------------------------------------------------------
# Records


@dataclass
class StepRecord:
    """What one forward pass of the generation loop did (index 0 is the prefill)."""

    index: int
    phase: str  # "prefill" | "decode"
    n_input: int  # tokens fed through the model in this pass (T for prefill, 1 for decode)
    token_id: int  # the token chosen from this pass's last logits
    token: str
    top_ids: np.ndarray  # [K] highest model probabilities
    top_probs: np.ndarray  # [K] the model's softmax probabilities (temperature 1)
    top_sample_probs: np.ndarray  # [K] the same ids under the sampling settings
    attn: np.ndarray | None  # [L, H, T_total] float16: the fed token's attention over the cache (prefill: last row)
    kv_tokens: int  # positions held in the cache after this pass
    kv_bytes_layers: np.ndarray  # [L] bytes of K and V per layer, from the cache tensors
    kv_bytes: int  # total over layers
    seconds: float  # wall time of this pass (forward + choice)

    @property
    def top_index(self) -> int:
        """Where the chosen token stands among ``top_ids`` (-1: sampled from outside the top K)."""
        return int(next((i for i, t in enumerate(self.top_ids) if t == self.token_id), -1))


class Stepper:
    """Prefill once, then decode one token at a time with a KV cache held here (per session)."""

    def __init__(
        self,
        loaded: LoadedModel,
        prompt_ids: Sequence[int],
        sampling_cfg: SamplingConfig | None = None,
        max_steps: int = 32,
        *,
        record_attention: bool = True,
        stop_at_eos: bool = True,
    ) -> None:
        ids = [int(i) for i in prompt_ids]
        if not ids:
            raise ValueError("The prompt has no tokens.")
        if max_steps < 1:
            raise ValueError("max_steps must be at least 1")
        self.loaded = loaded
        self.prompt_ids = ids
        self.cfg = sampling_cfg if sampling_cfg is not None else greedy_config()
        self.max_steps = int(max_steps)  # new tokens at most, the prefill's included
        self.record_attention = record_attention
        self.stop_at_eos = stop_at_eos
        self.eos = loaded.eos_ids()
        self.rng = _rng(self.cfg)
        self.cache: Any = None  # DynamicCache (HF) or list of (K, V) (toy): see backends.cache_layers
        self.records: list[StepRecord] = []
        self.generated: list[int] = []
        self.prefill_pattern: np.ndarray | None = None  # [L, H, T, T] float16
        self.stop_reason: str | None = None  # None while running | "eos" | "max_steps" | "context" | "interrupted"
        self.max_positions = backends.context_room(loaded)
        if len(ids) > self.max_positions:  # encode_prompt cuts a prompt there; ids from elsewhere are refused, never crash
            raise ValueError(f"The prompt has {len(ids)} tokens; this model has only {self.max_positions} positions.")

    # -- state ------------------------------------------------------------------------------
    @property
    def started(self) -> bool:
        return bool(self.records)

    @property
    def done(self) -> bool:
        return self.stop_reason is not None

    @property
    def all_ids(self) -> list[int]:
        return self.prompt_ids + self.generated

    @property
    def ttft(self) -> float | None:
        return self.records[0].seconds if self.records else None

    @property
    def tpots(self) -> list[float]:
        return [r.seconds for r in self.records[1:]]

    # -- the model call ---------------------------------------------------------------------
    def _forward(self, new_ids: list[int], record: bool | None = None) -> backends.Step:
        rec = self.record_attention if record is None else record
        step = backends.forward_step(self.loaded, new_ids, self.cache, record_attention=rec)
        self.cache = step.cache  # the KV cache stays ours (per session), never on the shared model
        return step

    def _record(self, phase: str, n_input: int, fw: backends.Step) -> StepRecord:
        t0 = time.perf_counter()
        tok = _pick(fw.last_logits, self.cfg, self.all_ids, self.rng)
        choose_s = time.perf_counter() - t0  # choosing the token is part of the step's cost
        top = top_k(fw.last_logits, TOP_K)
        probs = softmax(fw.last_logits).astype(np.float32)
        sample = np.asarray(next_token_distribution(fw.last_logits, self.cfg, tuple(self.all_ids)), dtype=np.float32)  # [V] after the settings
        attn_row = None
        if fw.attn is not None:
            attn_row = fw.attn[:, :, -1, :].to(dtype=torch.float16).numpy()  # [L, H, Tk]
        per_layer = kv_bytes_per_layer(self.cache)
        rec = StepRecord(
            index=len(self.records),
            phase=phase,
            n_input=n_input,
            token_id=tok,
            token=readable_tokens(self.loaded.tokenizer, [tok])[0],
            top_ids=top,
            top_probs=probs[top],
            top_sample_probs=sample[top],
            attn=attn_row,
            kv_tokens=cache_length(self.cache),
            kv_bytes_layers=per_layer,
            kv_bytes=int(per_layer.sum()),
            seconds=fw.seconds + choose_s,
        )
        self.records.append(rec)
        self.generated.append(tok)
        self.stop_reason = backends.stop_reason(self.loaded, tok, len(self.generated), len(self.all_ids), self.max_steps,
                                                stop_at_eos=self.stop_at_eos)
        return rec

    # -- the two phases ---------------------------------------------------------------------
    def prefill(self) -> StepRecord:
        """Run the whole prompt once, fill the cache, choose the first new token."""
        if self.started:
            raise RuntimeError("prefill() was already run; reset() first")
        # a long prompt's prefill runs without its [L, H, T, T] weights (fused attention): at 4,096
        # tokens they would be 18 GB in float32; every decode step still records its one new row
        fw = self._forward(self.prompt_ids, record=self.record_attention and len(self.prompt_ids) <= MAX_PREFILL_PATTERN)
        if fw.attn is not None:
            self.prefill_pattern = fw.attn.to(dtype=torch.float16).numpy()  # [L, H, T, T]
        return self._record("prefill", len(self.prompt_ids), fw)

    def step(self) -> StepRecord | None:
        """Feed the last chosen token through the model with the cache; None once stopped."""
        if not self.started:
            return self.prefill()
        if self.done:
            return None
        fw = self._forward([self.generated[-1]])
        return self._record("decode", 1, fw)

    def run(self, n: int | None = None) -> list[StepRecord]:
        """Up to ``n`` more passes (prefill included if not yet run), or until it stops."""
        out = []
        while not self.done and (n is None or len(out) < n):
            r = self.step()
            if r is None:
                break
            out.append(r)
        return out

    def reset(self) -> None:
        self.__init__(self.loaded, self.prompt_ids, self.cfg, self.max_steps,  # type: ignore[misc]
                      record_attention=self.record_attention, stop_at_eos=self.stop_at_eos)

    # -- views ------------------------------------------------------------------------------
    def kv_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per pass: cache positions [n], total bytes [n], bytes per layer [n, L]."""
        if not self.records:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, 0), np.int64)
        toks = np.array([r.kv_tokens for r in self.records], dtype=np.int64)
        tot = np.array([r.kv_bytes for r in self.records], dtype=np.int64)
        per = np.stack([r.kv_bytes_layers for r in self.records]).astype(np.int64)
        return toks, tot, per



# ---------------------------------------------------------------------------------------------
# What the cache holds, read off its real tensors


def cache_length(cache: Any) -> int:
    kv = backends.cache_layers(cache)
    return int(kv[0][0].shape[-2]) if kv and kv[0][0] is not None else 0


def kv_bytes_per_layer(cache: Any) -> np.ndarray:
    """Bytes held per layer, read off the real tensors: numel × element size, K plus V.  # [L]"""
    return np.array(
        [int(k.numel() * k.element_size() + v.numel() * v.element_size()) for k, v in backends.cache_layers(cache)],
        dtype=np.int64,
    )


# ---------------------------------------------------------------------------------------------
# Without the cache: the same tokens, by recomputing the whole prefix every time


@dataclass
class NoCacheRun:
    token_ids: list[int]
    seconds: list[float]  # per pass; pass i processes len(prompt) + i tokens
    lengths: list[int]  # tokens processed per pass


def run_without_cache(loaded: LoadedModel, prompt_ids: Sequence[int], n_steps: int,
                      cfg: SamplingConfig | None = None) -> NoCacheRun:
    """``n_steps`` new tokens, each by a full forward pass over prompt + everything generated so far."""
    cfg = cfg if cfg is not None else greedy_config()
    rng = _rng(cfg)
    ids = [int(i) for i in prompt_ids]
    out, secs, lens = [], [], []
    for _ in range(int(n_steps)):
        step = backends.forward_step(loaded, ids, use_cache=False)  # the whole prefix, [1, T + i]
        t0 = time.perf_counter()
        tok = _pick(step.last_logits, cfg, ids, rng)
        secs.append(step.seconds + time.perf_counter() - t0)  # choosing the token is part of the pass
        lens.append(len(ids))
        out.append(tok)
        ids.append(tok)
        if backends.stop_reason(loaded, tok, len(out), len(ids), int(n_steps)) is not None:  # the one stop rule
            break
    return NoCacheRun(out, secs, lens)


def extended_prompt_ids(tokenizer: Tokenizer, prompt: str, chat: bool, min_len: int, max_len: int = MAX_PROMPT_TOKENS) -> list[int]:
    """The prompt's ids, its *text* repeated until they are at least ``min_len`` tokens (at most ``max_len``).

    Repeating the text, not the ids, keeps a chat-templated prompt well formed: one system turn, one
    user turn holding the repeated question, then the assistant's cue — so the model answers as it
    would the real prompt instead of stopping at once on a template repeated three times."""
    enc = encode(tokenizer, prompt, chat=chat, max_tokens=max_len)
    k = 1
    while len(enc.ids) < min_len and not enc.truncated_from and k < 4096:
        k += 1
        enc = encode(tokenizer, " ".join([prompt.strip()] * k), chat=chat, max_tokens=max_len)
    return list(enc.ids)


def run_with_cache(loaded: LoadedModel, prompt_ids: Sequence[int], n_steps: int, cfg: SamplingConfig | None = None,
                   *, record_attention: bool = False) -> Stepper:
    """The cached counterpart of ``run_without_cache``: prefill + decode steps, ``n_steps`` tokens."""
    st = Stepper(loaded, prompt_ids, cfg, max_steps=n_steps, record_attention=record_attention)
    st.run()
    return st


# ---------------------------------------------------------------------------------------------
# Record for the CLI / notebooks


def warm_up(loaded: LoadedModel) -> None:
    """A tiny untimed generation: the first forward pass of a process pays one-off costs (memory
    pools, kernel selection) that would otherwise be reported as the prefill's time."""
    ids = loaded.tokenizer("Hello world, hello", add_special_tokens=False)["input_ids"] or [0]
    run_with_cache(loaded, ids, 3, record_attention=True)


def warm_prefill(loaded: LoadedModel, ids: Sequence[int], record_attention: bool = False) -> None:
    """An untimed pass of exactly the prompt's shape, recorded the way the Stepper's prefill will be: the
    first pass of a new length pays one-off costs (buffers sized for it, kernels chosen for that shape)
    which ``warm_up``'s short prompt does not cover, and which are no part of the prefill's own time."""
    ids = [int(i) for i in ids]
    backends.forward_step(loaded, ids, None, use_cache=True, record_attention=record_attention and len(ids) <= MAX_PREFILL_PATTERN)


@contextlib.contextmanager
def _ctrl_c_asks_to_stop() -> Iterator[Callable[[], bool]]:
    """While the passes run, a first Ctrl-C only raises a flag (read after each pass); a second one raises
    KeyboardInterrupt at once. A handler that raised at the first press could land anywhere, inside a
    finaliser (``__del__``, a weakref callback) run by the garbage collector mid-step, where Python prints
    "Exception ignored" and goes on decoding: a flag cannot be lost that way. The handler is installed even where
    SIGINT was ignored at start — a job started in the background by a shell without job control inherits SIG_IGN,
    and Python keeps it, so ``kill -INT`` would have been ignored and the run gone on to its last token (the hang
    of stop 33's CI run, started that way) — and the previous disposition is put back after the run. Off the main
    thread (where no signal arrives) the flag is never raised."""
    asked = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield asked.is_set
        return

    def on_sigint(signum: int, frame: Any) -> None:
        if asked.is_set():
            raise KeyboardInterrupt
        asked.set()

    old = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield asked.is_set
    finally:
        signal.signal(signal.SIGINT, old if old is not None else signal.default_int_handler)


def _run_interruptible(st: Stepper, total: int, progress: Progress) -> None:
    """``st.run()`` with its progress after each pass (tokens so far of tokens at most, said with the seconds
    since the prefill began: ``generation.progress_tokens``); Ctrl-C stops it after the pass in flight and
    keeps what was generated (``stop_reason = "interrupted"``); a second Ctrl-C stops it inside the pass."""
    t0 = time.perf_counter()
    with _ctrl_c_asks_to_stop() as asked:
        try:
            while not st.done:
                if st.step() is None:
                    break
                done = len(st.records)
                progress(done, total, Phrase("generation.progress_tokens", {"done": done, "total": total,
                                                                     "seconds": f"{time.perf_counter() - t0:.1f}"}))
                if asked() and not st.done:
                    st.stop_reason = "interrupted"
        except KeyboardInterrupt:
            st.stop_reason = "interrupted"
            n = min(len(st.records), len(st.generated))  # the interrupt may fall between the two appends
            del st.records[n:], st.generated[n:]


def generate_record(loaded: LoadedModel, prompt: str, steps: int, cfg: SamplingConfig | None = None, *, chat: bool = False,
                    warmup: bool = True, progress: Progress = noop) -> dict[str, Any]:
    """Run prefill + decode and return plain arrays (the CLI writes them to an .npz).

    Every per-pass array has one entry per generated token; entry 0 is the prefill, so
    ``step_seconds[0] == prefill_seconds`` and ``step_seconds[1:]`` are the TPOTs.

    ``steps`` is capped by the model's context (the Stepper stops with ``"context"``); ``progress(done, total, words)``
    is called after every pass. Ctrl-C during the passes ends the run after the pass in flight (a second
    Ctrl-C, inside it): the record holds the tokens so far and ``meta["stop_reason"] == "interrupted"`` (it may
    hold no token at all if a second Ctrl-C interrupted the prefill itself).
    """
    enc = backends.encode_prompt(loaded, prompt, chat=chat, max_tokens=MAX_PROMPT_TOKENS)
    if warmup:
        warm_up(loaded)
    st = Stepper(loaded, enc.ids, cfg, max_steps=steps, record_attention=False)
    total = min(st.max_steps, max(1, st.max_positions - len(enc.ids)))  # the Stepper stops there ("context")
    _run_interruptible(st, total, progress)
    toks, tot, per = st.kv_arrays()
    cfg_d = asdict(st.cfg)
    meta = {
        "model": loaded.facts.name,
        "model_kind": loaded.kind,
        "facts": loaded.facts.to_dict(),
        "prompt": prompt,
        "chat": chat,
        "text": enc.text,
        "sampling": cfg_d,
        "stop_reason": st.stop_reason,
        "steps_requested": int(steps),
        "steps_at_most": total,
        "eos_token_ids": sorted(st.eos),
        "notes": list(enc.notes),
        "warmed_up": warmup,
        "layout": "entry 0 of every per-pass array is the prefill; the rest are decode steps",
    }
    return {
        "prompt_ids": np.asarray(enc.ids, dtype=np.int64),
        "prompt_tokens": np.asarray(readable_tokens(loaded.tokenizer, enc.ids), dtype=str),
        "token_ids": np.asarray(st.generated, dtype=np.int64),
        "tokens": np.asarray([r.token for r in st.records], dtype=str),
        "text": np.asarray(loaded.tokenizer.decode(st.generated)),
        "kv_tokens": toks,
        "kv_bytes": tot,
        "kv_bytes_layers": per,
        "step_seconds": np.array([r.seconds for r in st.records], dtype=np.float64),
        "prefill_seconds": np.float64(st.ttft or 0.0),
        "meta": np.asarray(json.dumps(meta, ensure_ascii=False, default=str)),
    }


# ---------------------------------------------------------------------------------------------
# The one TPOT: how every page measures a decode step (and the prefill), and with vs without the cache

TPOT_DECODE, TPOT_REPS, TPOT_WARMUP = 8, 3, 1  # decode steps per run, timed runs, untimed warm-up runs


@dataclass(frozen=True)
class TpotMeasure:
    """Pure generation steps of one prompt: no attention recorded, greedy, each pass timed inside the
    model's lock (computation only, not the wait for another session), after an untimed warm-up run.

    ``prefill``: seconds of the whole prefill, one sample per timed run (the TTFT);
    ``decode``: seconds of each decode step of every timed run (the TPOT is its median)."""

    prefill: Timing
    decode: Timing | None  # None when the context window leaves no room for a decode step
    n_prompt: int
    n_decode: int  # decode steps per run
    runs: tuple[tuple[float, ...], ...] = ()  # per timed run, each decode step's seconds (the samples of ``decode``)
    kv_tokens: tuple[int, ...] = ()  # the last run's cache positions after the prefill and after each step
    kv_bytes: int = 0  # bytes the last run's cache tensors held at its end

    @property
    def prefill_per_token(self) -> float:
        return self.prefill.median / max(1, self.n_prompt)

    @property
    def tpot(self) -> float | None:
        return None if self.decode is None else self.decode.median

    @property
    def busy(self) -> bool:
        return self.prefill.busy or bool(self.decode is not None and self.decode.busy)


def measure_tpot(loaded: LoadedModel, prompt_ids: Sequence[int], n_decode: int = TPOT_DECODE, reps: int = TPOT_REPS,
                 warmup: int = TPOT_WARMUP, cfg: SamplingConfig | None = None,
                 progress: Progress = noop) -> TpotMeasure:
    """The TTFT and TPOT of ``prompt_ids`` on ``loaded``, measured the one way this app measures them.

    Both the stepper and the KV-cache page call this, so "TPOT" means the same number everywhere:
    ``warmup`` untimed runs, then ``reps`` runs of prefill + ``n_decode`` decode steps, with no
    attention recorded and the end token ignored (a step's cost does not depend on which token it is).
    ``cfg``: the sampling settings (greedy by default), since choosing the token is part of a step.
    ``progress(done, total, None)``: runs done, called before each run (warm-up included) and once at the end."""
    ids = [int(i) for i in prompt_ids]
    n_dec = max(0, min(int(n_decode), backends.context_room(loaded) - len(ids) - 1))
    prefills: list[float] = []
    runs: list[tuple[float, ...]] = []
    last: list[Stepper] = []  # the latest run, for what its cache held
    total = warmup + reps

    def one_run() -> list[float]:
        progress(len(prefills), total, None)
        s = Stepper(loaded, ids, cfg, max_steps=n_dec + 1, record_attention=False, stop_at_eos=False)
        s.run()
        prefills.append(float(s.ttft or 0.0))
        runs.append(tuple(s.tpots))
        last[:] = [s]
        return s.tpots

    decode = timing.gather(one_run, reps, warmup) if n_dec > 0 else None
    if decode is None:  # still time the prefill the same way
        for _ in range(total):
            one_run()
    progress(total, total, None)
    toks, held, _ = last[0].kv_arrays()
    return TpotMeasure(timing.of(prefills[warmup:], warmup), decode, len(ids), n_dec, tuple(runs[warmup:]),
                       tuple(int(x) for x in toks), int(held[-1]))


def cost_prompt_ids(loaded: LoadedModel, n_prefill: int) -> list[int]:
    """``n_prefill`` tokens of ordinary text (a sentence repeated): the prompt the per-token costs use."""
    base = loaded.tokenizer("The quick brown fox jumps over the lazy dog. 小明把书交给小红。", add_special_tokens=False)["input_ids"]
    return (base * (n_prefill // max(1, len(base)) + 1))[:n_prefill]  # [n_prefill]


def measure_costs(loaded: LoadedModel, n_prefill: int = 128, n_decode: int = TPOT_DECODE, reps: int = TPOT_REPS) -> TpotMeasure:
    """Per-token costs for the request-shape simulation (``core.gen.kvcalc.simulate``): ``measure_tpot``
    on ``n_prefill`` tokens of ordinary text. Prefill seconds per prompt token = ``prefill_per_token``;
    decode seconds per new token = ``tpot``."""
    return measure_tpot(loaded, cost_prompt_ids(loaded, n_prefill), n_decode, reps)


@dataclass(frozen=True)
class CacheComparison:
    """The same greedy tokens generated with and without the KV cache, ``reps`` times each (interleaved,
    after a warm-up of both); per pass, the median over the timed runs."""

    n_prompt: int
    n_requested: int
    with_ids: list[int]
    without_ids: list[int]
    with_total: Timing  # seconds for all the tokens, one sample per timed run
    without_total: Timing
    with_seconds: list[float]  # per pass, median over runs; pass 0 is the prefill
    without_seconds: list[float]
    with_lengths: list[int]  # sequence length the pass produced its token at
    without_lengths: list[int]
    stop_reason: str  # "eos" (an end token came before n), "max_steps" or "context"

    @property
    def n_done(self) -> int:
        return len(self.with_ids)

    @property
    def same(self) -> bool:
        return self.with_ids == self.without_ids

    @property
    def verdict(self) -> timing.Comparison:
        """``faster == "a"``: the cache was faster; the ratio is the larger total over the smaller."""
        return timing.compare(self.with_total, self.without_total)

    @property
    def busy(self) -> bool:
        return self.with_total.busy or self.without_total.busy


def _column_medians(rows: Sequence[Sequence[float]]) -> list[float]:
    n = min(len(r) for r in rows)
    return [float(np.median([r[i] for r in rows])) for i in range(n)]


def compare_with_without(loaded: LoadedModel, prompt_ids: Sequence[int], n: int, reps: int = TPOT_REPS,
                         warmup: int = TPOT_WARMUP) -> CacheComparison:
    """``n`` greedy tokens with the cache (prefill + decode steps) and without it (the whole prefix
    again for every token), ``reps`` timed runs of each, interleaved so that a busy spell hits both."""
    ids = [int(i) for i in prompt_ids]
    for _ in range(warmup):  # the first passes at these lengths pay one-off costs (allocator, kernels)
        run_with_cache(loaded, ids, 2)
        run_without_cache(loaded, ids, 1)
    w_rows, wo_rows, w_tot, wo_tot = [], [], [], []
    w = wo = None
    for _ in range(max(1, reps)):
        w = run_with_cache(loaded, ids, n)
        wo = run_without_cache(loaded, ids, n)
        w_rows.append([r.seconds for r in w.records])
        wo_rows.append(list(wo.seconds))
        w_tot.append(sum(w_rows[-1]))
        wo_tot.append(sum(wo_rows[-1]))
    assert w is not None and wo is not None
    T = len(ids)
    return CacheComparison(
        n_prompt=T, n_requested=int(n), with_ids=list(w.generated), without_ids=list(wo.token_ids),
        with_total=timing.of(w_tot, warmup), without_total=timing.of(wo_tot, warmup),
        with_seconds=_column_medians(w_rows), without_seconds=_column_medians(wo_rows),
        with_lengths=[T + i for i in range(len(w.records))],  # pass i feeds T tokens (i = 0) or 1, at length T + i
        without_lengths=list(wo.lengths), stop_reason=w.stop_reason or "max_steps")
