"""Diagnose a slow or wrong answer: the measurements behind the tutorial's symptom → root-cause table.

Pure (no Streamlit). Every time is a ``Timing`` (``core.common.timing``), prefill and decode timed the
app's one way (``generate.measure_tpot``). ``measure_prefill_curve`` and ``fit_prefill`` (t(n) = a + b·n + c·n²,
coefficients never negative: per-token work and attention over earlier positions), ``extrapolate`` (always
with its assumptions), ``fit_tpot`` and ``exercise`` (the tutorial's 2K → 20K); ``measure_decode`` (the
streaming timeline); ``MemoryShape`` / ``memory_at`` / ``max_requests`` (weights vs KV cache vs activations
against a budget); ``temperature_demo``. The page's sentences are ``core.gen.report``'s.
"""

from __future__ import annotations

import itertools
import math
import os
import platform
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from core.common import timing
from core.common.numbers import softmax, top_k
from core.common.progress import Progress, noop
from core.common.timing import Timing
from core.engine import budget
from core.engine import config as cfgread
from core.engine.tokens import encode
from core.engine.types import HeadGeometry, LoadedModel, ModelFacts, Phrase, Tokenizer
from core.gen import generate, kvcalc

# input lengths the prefill curve is measured at (cut at the chosen longest and at the context window)
CURVE_LENGTHS: tuple[int, ...] = (64, 128, 256, 512, 1024, 1536, 2048, 3072, 4096)
EXERCISE_FROM, EXERCISE_TO, EXERCISE_OUTPUT = 2_000, 20_000, 100  # the tutorial's exercise: 2K → 20K input, 100 output
# The extrapolation's assumptions, as i18n keys (``diagnose.assume_<key>``): the page states every one.
ASSUMPTIONS: tuple[str, ...] = ("same_machine", "shape_holds", "alone", "memory", "context")
# The tutorial's symptoms, in the page's order (i18n ``diagnose.sym_<key>``, ``diagnose.<key>.cause|check|fix``),
# and the pages that explain each one in depth.
SYMPTOMS: tuple[str, ...] = ("slow_first", "slow_answer", "oom", "temperature", "attention")
SEE_ALSO: dict[str, tuple[str, ...]] = {"slow_first": ("long_context", "kv_cache"), "slow_answer": ("generation", "decoding"), "oom": ("kv_cache",),
                                        "temperature": ("logits",), "attention": ("ablation", "cause_patching")}
BASE_TEXT = "The quick brown fox jumps over the lazy dog. 小明把书交给小红。"


def machine() -> dict[str, Any]:
    """Which machine measured: processor, CPU count, torch's intra-op threads."""
    return {"processor": platform.processor() or platform.machine() or "?", "cpus": os.cpu_count() or 0,
            "threads": int(torch.get_num_threads())}


# ---------------------------------------------------------------------------------------------
# Symptom 1: the first token gets slower as the input grows


TPOT_STEPS = 4  # decode steps timed after each prefill of the curve: the TPOT at that cache length


@dataclass(frozen=True)
class PrefillPoint:
    n_tokens: int
    tokenise: Timing  # the tokenizer turning the text into ids
    prefill: Timing  # the whole prompt through the model once, up to the first token's logits (TTFT)
    decode: Timing | None = None  # the decode steps right after it, reading a cache of ≈ n_tokens positions (TPOT)


def curve_lengths(longest: int, max_positions: int, lengths: Sequence[int] = CURVE_LENGTHS) -> list[int]:
    """The lengths to measure: those up to ``longest`` that fit the context window (at least one)."""
    room = max(1, int(max_positions or 1 << 30) - 1)
    out = [n for n in lengths if n <= min(longest, room)]
    return out or [max(1, min(longest, room))]


def text_of(tokenizer: Tokenizer, n_tokens: int) -> tuple[str, list[int]]:
    """Ordinary text of at least ``n_tokens`` tokens, and its first ``n_tokens`` ids."""
    base = tokenizer(BASE_TEXT, add_special_tokens=False)["input_ids"]
    k = n_tokens // max(1, len(base)) + 1
    text = " ".join([BASE_TEXT] * k)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return text, list(ids)[:n_tokens]


def measure_prefill_curve(loaded: LoadedModel, lengths: Sequence[int], reps: int = 3, warmup: int = 1,
                          progress: Progress = noop, tpot_steps: int = TPOT_STEPS) -> list[PrefillPoint]:
    """Tokenising, prefill and decode-step time at each length (``reps`` timed runs after ``warmup``
    untimed ones; ``tpot_steps`` decode steps after each prefill, 0 for none); its progress counts the
    lengths done, saying the one being measured (``diagnose.progress_prefill``)."""
    out = []
    for i, n in enumerate(lengths):
        progress(i, len(lengths), Phrase("diagnose.progress_prefill", {"done": i, "total": len(lengths), "n": n}))
        text, ids = text_of(loaded.tokenizer, int(n))
        tok_t, _ = timing.repeat(lambda text=text: loaded.tokenizer(text, add_special_tokens=False), reps=max(reps, 5), warmup=1)
        m = generate.measure_tpot(loaded, ids, n_decode=tpot_steps, reps=reps, warmup=warmup)
        out.append(PrefillPoint(len(ids), tok_t, m.prefill, m.decode))
    progress(len(lengths), len(lengths), Phrase("diagnose.progress_prefill", {"done": len(lengths), "total": len(lengths),
                                                                             "n": lengths[-1] if lengths else 0}))
    return out


@dataclass(frozen=True)
class Fit:
    """t(n) = a + b·n + c·n² in seconds, fitted to medians; ``max_rel_error``: the largest relative
    miss on the points it was fitted on (its stated error)."""

    a: float
    b: float
    c: float
    max_rel_error: float
    n_points: int

    def predict(self, n: Any) -> Any:
        n = np.asarray(n, dtype=np.float64)
        return self.a + self.b * n + self.c * n * n

    @property
    def degenerate(self) -> bool:
        """A part set to zero by the ≥ 0 constraint (on two or more points): the measurements could not tell
        it apart, so a split into parts would report noise (the other part at 100 %)."""
        return self.n_points >= 2 and (self.b == 0 or self.c == 0)

    def parts(self, n: float) -> dict[str, float]:
        """The fixed, linear and quadratic parts at ``n`` tokens (seconds)."""
        return {"fixed": self.a, "linear": self.b * n, "quadratic": self.c * n * n}


def fit_prefill(ns: Sequence[float], seconds: Sequence[float], degree: int = 2) -> Fit:
    """Least squares in relative terms (each point weighted by 1/t, so the short inputs count as much
    as the long ones) with every coefficient ≥ 0: the best fit over the subsets of {1, n, n²} (``degree``
    1: of {1, n}) whose unconstrained solution is non-negative — exactly the non-negative least-squares
    optimum for so few terms. Non-negative because no part of the work gets cheaper with more tokens."""
    n = np.asarray(ns, dtype=np.float64)
    t = np.asarray(seconds, dtype=np.float64)
    if n.size == 0 or n.size != t.size:
        raise ValueError("the fit needs as many times as lengths, at least one")
    if degree not in (1, 2):
        raise ValueError("degree is 1 (a + b·n) or 2 (a + b·n + c·n²)")
    w = 1.0 / np.maximum(t, 1e-12)
    cols = np.stack([np.ones_like(n), n, n * n], axis=1)  # [P, 3]
    best: tuple[float, np.ndarray] | None = None
    for k in range(1, degree + 2):
        for subset in itertools.combinations(range(degree + 1), k):
            if len(subset) > n.size:
                continue
            A = cols[:, subset] * w[:, None]
            coef, *_ = np.linalg.lstsq(A, t * w, rcond=None)
            if np.any(coef < 0):
                continue
            full = np.zeros(3)
            full[list(subset)] = coef
            err = float(np.sum(((cols @ full) - t) ** 2 * w * w))
            if best is None or err < best[0] - 1e-15:
                best = (err, full)
    assert best is not None  # the single-term fits of positive times are never negative
    a, b, c = (float(x) for x in best[1])
    pred = a + b * n + c * n * n
    rel = float(np.max(np.abs(pred - t) / np.maximum(t, 1e-12)))
    return Fit(a, b, c, rel, int(n.size))


def fit_points(points: Sequence[PrefillPoint]) -> Fit:
    return fit_prefill([p.n_tokens for p in points], [p.prefill.median for p in points])


def curve_busy(points: Sequence[PrefillPoint]) -> bool:
    """Whether any tokenising or prefill of the curve was timed on a busy machine (``Timing.busy``)."""
    return any(p.prefill.busy or p.tokenise.busy for p in points)


def tpot_points(points: Sequence[PrefillPoint]) -> list[PrefillPoint]:
    """The points whose decode steps were timed (a prompt filling the context window leaves none)."""
    return [p for p in points if p.decode is not None]


def fit_tpot(points: Sequence[PrefillPoint]) -> Fit | None:
    """TPOT(n) = a + b·n through the decode medians (``c`` = 0): ``b`` is the seconds one more cached
    position adds to every decode step, ``b × 1000`` the growth per 1,000 tokens. None without points."""
    pts = tpot_points(points)
    if not pts:
        return None
    return fit_prefill([p.n_tokens for p in pts], [p.decode.median for p in pts if p.decode is not None], degree=1)


@dataclass(frozen=True)
class Extrapolation:
    """The fitted curve carried to ``n_tokens``: a prediction, not a measurement."""

    n_tokens: int
    seconds: float
    parts: dict[str, float]
    measured_up_to: int
    factor: float  # n_tokens / measured_up_to: how far past the data
    beyond_context: bool  # the model could not even take this many tokens
    assumptions: tuple[str, ...] = ASSUMPTIONS

    @property
    def is_extrapolation(self) -> bool:
        return self.n_tokens > self.measured_up_to


def extrapolate(fit: Fit, n_tokens: int, measured_up_to: int, max_positions: int | None = None) -> Extrapolation:
    n = int(n_tokens)
    return Extrapolation(n, float(fit.predict(n)), fit.parts(n), int(measured_up_to), n / max(1, int(measured_up_to)),
                         bool(max_positions) and n > int(max_positions or 0))


@dataclass(frozen=True)
class Exercise:
    """The tutorial's exercise (2K → 20K input tokens, 100 output tokens) read off the measured curves:
    the prefill curve at both lengths and, where decode steps were timed, the TPOT line at both."""

    fit: Fit  # the prefill curve through the measured medians
    small: Extrapolation  # the curve at EXERCISE_FROM
    large: Extrapolation  # the curve at EXERCISE_TO
    tpot: Fit | None  # the TPOT line (None: no decode step was timed)
    tpot_up_to: int  # the longest cache the TPOT line was measured at (0 without a line)

    @property
    def ratio(self) -> float:
        """The TTFT at EXERCISE_TO over the TTFT at EXERCISE_FROM."""
        return self.large.seconds / max(self.small.seconds, 1e-12)

    @property
    def quadratic_share(self) -> float:
        """The attention (n²) part of the TTFT at EXERCISE_TO, in per cent."""
        return 100 * self.large.parts["quadratic"] / max(self.large.seconds, 1e-12)

    def decode_seconds(self) -> tuple[float, float] | None:
        """EXERCISE_OUTPUT × TPOT after each input length, from the TPOT line (None without one)."""
        if self.tpot is None:
            return None
        return (EXERCISE_OUTPUT * float(self.tpot.predict(EXERCISE_FROM)), EXERCISE_OUTPUT * float(self.tpot.predict(EXERCISE_TO)))


def exercise(points: Sequence[PrefillPoint], max_positions: int | None = None) -> Exercise:
    """The exercise from a measured curve (at least one point)."""
    fit = fit_points(points)
    top = points[-1].n_tokens
    timed = tpot_points(points)
    return Exercise(fit, extrapolate(fit, EXERCISE_FROM, top, max_positions), extrapolate(fit, EXERCISE_TO, top, max_positions),
                    fit_tpot(points), timed[-1].n_tokens if timed else 0)


# ---------------------------------------------------------------------------------------------
# Symptom 2 and streaming: one request, tokenise → prefill → N decode steps


@dataclass(frozen=True)
class DecodeRun:
    n_prompt: int
    n_decode: int
    tokenise: Timing
    prefill: Timing  # TTFT: the prompt through the model, up to the first token
    step_medians: list[float]  # per decode step, median over the timed runs
    decode: Timing  # every decode step of every timed run: its median is the TPOT
    kv_tokens: list[int]  # positions in the cache after the prefill and after each step
    kv_bytes: int  # bytes the real cache tensors held at the end
    kv_tokens_end: int

    @property
    def tpot(self) -> float:
        return self.decode.median

    @property
    def busy(self) -> bool:
        return self.tokenise.busy or self.prefill.busy or self.decode.busy

    @property
    def first_token(self) -> float:
        """Seconds from the request's start until the first output token: tokenising + prefill medians."""
        return self.tokenise.median + self.prefill.median

    @property
    def total(self) -> float:
        """Seconds from the request's start until its last output token."""
        return float(self.cumulative()[-1])

    def cumulative(self) -> np.ndarray:
        """Seconds from the request's start until output token k (k = 1 … n_decode + 1): [N + 1]."""
        return self.first_token + np.concatenate([[0.0], np.cumsum(self.step_medians)])


def measure_decode(loaded: LoadedModel, prompt: str, chat: bool, n_decode: int = 32, reps: int = 3, warmup: int = 1,
                   progress: Progress = noop) -> DecodeRun:
    """The prompt tokenised and generated ``n_decode`` + 1 tokens by ``generate.measure_tpot`` (end token
    ignored: a step's cost does not depend on which token it is), ``reps`` timed runs after ``warmup``;
    its progress counts the runs (``diagnose.progress_decode``). Raises EmptyPromptError on an empty prompt."""
    tok_t, enc = timing.repeat(lambda: encode(loaded.tokenizer, prompt, chat=chat, max_tokens=generate.MAX_PROMPT_TOKENS,
                                                      max_positions=loaded.facts.max_positions),
                               reps=max(reps, 5), warmup=1)
    ids = list(enc.ids)

    def step(done: int, total: int, _words: Any = None) -> None:
        progress(done, total, Phrase("diagnose.progress_decode", {"done": done, "total": total, "n": len(ids)}))

    m = generate.measure_tpot(loaded, ids, n_decode=n_decode, reps=reps, warmup=warmup, progress=step)
    medians = [float(np.median([r[j] for r in m.runs])) for j in range(m.n_decode)]  # per step, over the timed runs
    decode = m.decode if m.decode is not None else timing.of([0.0])
    return DecodeRun(len(ids), m.n_decode, tok_t, m.prefill, medians, decode, list(m.kv_tokens), m.kv_bytes, m.kv_tokens[-1])


# ---------------------------------------------------------------------------------------------
# Symptom 3: out of memory as concurrency rises


MAX_BUDGET_GB = 1e6  # a petabyte: beyond it, no accelerator exists to plan for


def parse_budget_gb(text: Any) -> tuple[float | None, str | None]:
    """(bytes, None) for a usable budget in decimal GB, or (None, reason) — reason is an i18n suffix
    (``diagnose.budget_<reason>``): not_number, not_finite, not_positive, too_big."""
    try:
        gb = float(str(text).strip().replace(",", ""))
    except (TypeError, ValueError):
        return None, "not_number"
    if not math.isfinite(gb):
        return None, "not_finite"
    if gb <= 0:
        return None, "not_positive"
    if gb > MAX_BUDGET_GB:
        return None, "too_big"
    return gb * budget.GB, None


@dataclass(frozen=True)
class MemoryShape:
    """What sizes a model's memory: its KV geometry, parameter count and widths, and bytes per value."""

    name: str
    geometry: HeadGeometry
    n_params: int
    d_model: int
    d_ff: int
    vocab: int
    bytes_per_value: int

    @classmethod
    def of_facts(cls, facts: ModelFacts, bytes_per_value: int) -> MemoryShape:
        return cls(facts.name, facts.geometry, int(facts.n_params), facts.d_model, facts.d_ff, facts.vocab_size,
                   int(bytes_per_value))

    @classmethod
    def of_config(cls, text: str | dict[str, Any], bytes_per_value: int) -> MemoryShape:
        """From a pasted config.json, validated by ``core.engine.config`` (ConfigError otherwise)."""
        cfg = cfgread.parse(text)
        g = kvcalc.from_config(cfg, name="config.json")
        d = g.d_model or cfgread.pos_int(cfg, "hidden_size")
        return cls("config.json", g, budget.n_params(cfg), d, cfgread.pos_int(cfg, "intermediate_size", 4 * d),
                   cfgread.pos_int(cfg, "vocab_size"), int(bytes_per_value))

    def kv_bytes(self, context: int, requests: int = 1) -> int:
        """The calculator's formula: 2 × layers × KV heads × head_dim × bytes × tokens × requests."""
        return self.geometry.kv_bytes(int(context), self.bytes_per_value, int(requests))

    def weight_bytes(self) -> int:
        return budget.weight_bytes(self.n_params, self.bytes_per_value)

    def activation_bytes(self, context: int, requests: int = 1) -> int:
        """An estimate of the transient tensors of prefilling every request at once, one layer at a time:
        hidden state, its norm, attention output and residual (4·d), K and V (2·KV width), gate/up/activation
        (3·d_ff) per position, with fused attention (no T × T matrix), plus the last position's logits in fp32."""
        g = self.geometry
        per_pos = 4 * self.d_model + 2 * g.n_kv_heads * g.dh + 3 * self.d_ff
        return int(requests) * (int(context) * per_pos * self.bytes_per_value + self.vocab * 4)


@dataclass(frozen=True)
class MemoryAt:
    context: int
    requests: int
    weights: int
    kv: int
    activations: int

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.activations


def memory_at(shape: MemoryShape, context: int, requests: int) -> MemoryAt:
    return MemoryAt(int(context), int(requests), shape.weight_bytes(), shape.kv_bytes(context, requests),
                    shape.activation_bytes(context, requests))


def max_requests(shape: MemoryShape, context: int, budget_bytes: float) -> int:
    """How many requests of ``context`` tokens fit the budget together (0: not even one; the weights
    are held once and shared)."""
    room = float(budget_bytes) - shape.weight_bytes()
    one = shape.kv_bytes(context) + shape.activation_bytes(context)
    if room <= 0 or one <= 0:
        return 0
    return int(room // one)


def request_axis(limit: int, requests: int) -> np.ndarray:
    """Concurrent-request counts for the memory figure: past both the limit and the chosen count."""
    top = max(8, int(requests), math.ceil(1.5 * max(limit, 1)))
    top = min(top, 10**7)
    return np.unique(np.linspace(1, top, num=min(top, 60)).round().astype(np.int64))


# ---------------------------------------------------------------------------------------------
# Symptom 4: a lower temperature does not fix a wrong fact


TEMPERATURES: tuple[float, ...] = (0.3, 0.7, 1.0, 1.5)


@dataclass(frozen=True)
class MemoryPlan:
    """Everything the memory figure and its sentences show, for one (shape, context, requests, budget)."""

    at: MemoryAt  # the learner's own point
    limit: int  # the most requests that fit the budget
    requests: np.ndarray  # the x axis
    weights: int
    kv: list[int]  # per x
    activations: list[int]  # per x
    budget: float  # bytes

    @property
    def fits(self) -> bool:
        return self.at.total <= self.budget


def memory_plan(shape: MemoryShape, context: int, requests: int, budget_bytes: float) -> MemoryPlan:
    """``memory_at`` for the chosen point, ``max_requests`` under the budget, and the curves over the request axis."""
    limit = max_requests(shape, context, budget_bytes)
    xs = request_axis(limit, requests)
    return MemoryPlan(memory_at(shape, context, requests), limit, xs, shape.weight_bytes(),
                      [shape.kv_bytes(context, int(r)) for r in xs], [shape.activation_bytes(context, int(r)) for r in xs],
                      budget_bytes)


def real_cache_check(facts: Any, run: DecodeRun) -> tuple[int, bool]:
    """(the formula's KV bytes at the run's final cache length, whether the real cache held exactly that)."""
    formula = MemoryShape.of_facts(facts, facts.value_bytes).kv_bytes(run.kv_tokens_end)
    return formula, formula == run.kv_bytes


@dataclass(frozen=True)
class TemperatureDemo:
    ids: np.ndarray  # [K] candidate token ids shown
    temperatures: tuple[float, ...]
    question: np.ndarray  # [nT, K] softmax(logits_question / T)[ids]
    evidence: np.ndarray  # [nT, K] softmax(logits_with_evidence / T)[ids]
    top_question: int  # argmax of the question's logits (the same at every T > 0)
    top_evidence: int


def temperature_demo(logits_question: np.ndarray, logits_evidence: np.ndarray,
                     temperatures: Sequence[float] = TEMPERATURES, k: int = 5) -> TemperatureDemo:
    """The top ``k`` candidates of each prompt (at T = 1), their probabilities at every temperature."""
    lq = np.asarray(logits_question)
    le = np.asarray(logits_evidence)
    ids = list(dict.fromkeys([*top_k(lq, k).tolist(), *top_k(le, k).tolist()]))
    ids_a = np.asarray(ids, dtype=np.int64)
    q = np.stack([softmax(lq, temperature=T)[ids_a] for T in temperatures])  # [nT, K]
    e = np.stack([softmax(le, temperature=T)[ids_a] for T in temperatures])
    return TemperatureDemo(ids_a, tuple(float(T) for T in temperatures), q, e, int(np.argmax(lq)), int(np.argmax(le)))


# ---------------------------------------------------------------------------------------------
# the page's glue (pages/diagnose.py keeps only the widgets)

LONGEST_CHOICES = (256, 512, 1024, 2048, 4096)  # the prefill curve's longest prompt, offered on the page
EXERCISE_ANSWERS = ("phase", "temperature", "output", "hardware")  # the 2K → 20K exercise's choices
EXERCISE_RIGHT = "phase"  # prefill is quadratic in the prompt: the phase, not the sampler or the output length
PASTE_EXAMPLE = ('{"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, '
                 '"hidden_size": 4096, "intermediate_size": 14336, "vocab_size": 128256}')  # an 8B-class config to edit


def asked_again(done: Sequence[Any] | None, want: Sequence[Any]) -> bool:
    """Whether the measurement asked for last (``done``: its settings, then its run number) had the settings ``want``."""
    return done is not None and tuple(done[: len(want)]) == tuple(want)


def next_request(done: Sequence[Any] | None, want: Sequence[Any], fresh: int) -> tuple:
    """What a press of a measure button asks for: ``want`` with run 0 (the run every visitor shares, the cache keys
    on it) the first time, with the run number ``fresh`` (one no one has used) when the same was asked before."""
    return (*want, fresh if asked_again(done, want) else 0)


def memory_shape(source: str, config_text: str, facts: ModelFacts, bytes_per_value: int) -> MemoryShape:
    """The model the memory plan is for: a pasted config (``source == "paste"``) or the current model's facts;
    ConfigError when the pasted text is not a usable config."""
    if source == "paste":
        return MemoryShape.of_config(config_text, bytes_per_value)
    return MemoryShape.of_facts(facts, bytes_per_value)


def with_evidence(evidence: str, question: str) -> str:
    """The temperature demo's second prompt: the evidence sentence, then the question."""
    return f"{evidence.strip()} {question.strip()}"
