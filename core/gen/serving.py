"""The serving lab: many requests on the real model — a padded batch (``padded_batch``), continuous
batching with a paged KV cache, prefix reuse, and what happens when the blocks run out (``run_workload``),
all measured.

Nothing here schedules or allocates: that is transformers' own engine (``ContinuousBatchingManager``),
fed a workload at the requests' arrival times, on a plain copy of the model (``plain_model``: the engine
refuses the traced attention) that shares the traced model's weight tensors. What it did is *read*,
step by step, from its own objects (``_Recorder``; ``tests/test_serving.py`` pins each coupling). A
workload is checked where it enters (``parse_workload`` for a file, ``requests_from_rows`` for the
page's table; ``encode_workload`` for what needs the tokenizer) and crosses as ``Request``s.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, ContinuousBatchingConfig, GenerationConfig

from core.common.progress import Progress, noop
from core.engine.hooks import scoped_hooks
from core.engine.tokens import encode
from core.engine.types import CodedError, EmptyPromptError, LoadedModel, Phrase, Tokenizer

# ---------------------------------------------------------------------------------------------
# bounds: a class shares one server, so one student's workload must stay short (seconds, not minutes)

MAX_REQUESTS = 32
MAX_NEW_TOKENS = 256  # per request
MAX_PROMPT_TOKENS = 2048  # per request, after the chat template
MAX_PROMPT_CHARS = 20_000  # per request, before tokenising (bounds the tokenizer's work too)
MAX_ARRIVAL_S = 30.0  # the run holds the lab copy while it waits for the last arrival
MAX_ID_CHARS = 64
MAX_TOTAL_NEW_TOKENS = 1024  # the whole workload: the engine run and the sequential reference both generate these
MAX_TOTAL_PROMPT_TOKENS = 8192
MAX_WORKLOAD_BYTES = 1_000_000
PAGE_SIZE = (4, 256)  # tokens per page (the engine's own floor is 4)
MAX_BATCH_TOKENS = (16, 2048)  # tokens in one forward step (a longer prefill is chunked)
BLOCKS = (1, 4096)
MAX_POOL_BYTES = 256 * 2**20  # the paged cache's memory, whatever page size and block count are asked for
DEFAULT_PAGE_SIZE = 32
DEFAULT_MAX_BATCH_TOKENS = 256
ENGINE_SAFETY_MARGIN = 0.15  # FIFOScheduler's default: below 15 % free blocks it admits no new prefill but one
TIMEOUT_S = 300.0  # a run that takes longer is stopped
PADDED_PROMPTS = (2, 3)
PADDED_MAX_TOKENS = 64

FIELDS: dict[str, str] = {"id": "string", "prompt": "string", "max_new_tokens": "integer", "arrival_s": "number",
                          "chat": "boolean"}
REQUIRED = ("id", "prompt", "max_new_tokens")

ENGINE_LOGGERS = ("ContinuousBatchingLogger", "transformers.generation.continuous_batching")


class WorkloadError(CodedError, ValueError):
    """Why a workload (or a lab setting) cannot run: an i18n key ``serving.err_<code>`` and its fields
    (``line`` names the workload's line, from 1)."""

    PREFIX = "serving.err_"


@dataclass(frozen=True)
class Request:
    """One request of a workload. ``arrival_s``: seconds after the workload starts; ``chat``: wrap the
    prompt in the chat template. ``line``: where it was read (for error messages; not compared)."""

    id: str
    prompt: str
    max_new_tokens: int
    arrival_s: float = 0.0
    chat: bool = False
    line: int = field(default=0, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "line"}


@dataclass(frozen=True)
class EngineSettings:
    """What the engine is given (validated here, wherever it comes from). ``num_blocks=None``: enough
    blocks for the whole workload at once (bounded by MAX_POOL_BYTES)."""

    page_size: int = DEFAULT_PAGE_SIZE
    num_blocks: int | None = None
    max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS
    prefix_sharing: bool = True

    def __post_init__(self) -> None:
        for name, value, (lo, hi) in (("page_size", self.page_size, PAGE_SIZE),
                                      ("max_batch_tokens", self.max_batch_tokens, MAX_BATCH_TOKENS),
                                      ("num_blocks", self.num_blocks, BLOCKS)):
            if name == "num_blocks" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise WorkloadError("bad_setting", name=name, lo=lo, hi=hi, got=repr(value))


# ---------------------------------------------------------------------------------------------
# the workload: JSON lines, validated where they enter


def _check_field(line: int, key: str, v: Any) -> Any:
    """The value of one field, or a WorkloadError saying what it must be."""
    wrong = WorkloadError("wrong_type", line=line, field=key, expected=FIELDS[key], got=type(v).__name__ if key in ("id", "prompt") else repr(v))
    if key in ("id", "prompt"):
        if not isinstance(v, str):
            raise wrong
        if not v.strip():
            raise WorkloadError("empty_field", line=line, field=key)
        limit = MAX_ID_CHARS if key == "id" else MAX_PROMPT_CHARS
        if len(v) > limit:
            raise WorkloadError("too_long", line=line, field=key, n=len(v), max=limit)
        try:
            v.encode("utf-8")
        except UnicodeEncodeError as e:  # a lone surrogate ("\\ud800" in the JSON): no character, no token
            raise WorkloadError("not_text", line=line, field=key, at=e.start + 1) from None
        return v
    if key == "chat":
        if not isinstance(v, bool):
            raise wrong
        return v
    whole = key == "max_new_tokens"
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (whole and isinstance(v, float) and not v.is_integer()):
        raise wrong
    lo, hi = (1, MAX_NEW_TOKENS) if whole else (0, MAX_ARRIVAL_S)
    if not lo <= v <= hi or not math.isfinite(v):  # the range first: isfinite cannot read a 400-digit integer
        raise WorkloadError("out_of_range", line=line, field=key, lo=lo, hi=hi, got=repr(v))
    return int(v) if whole else float(v)


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _requests(objects: Iterable[tuple[int, Any]]) -> tuple[Request, ...]:
    """The requests of ``(line, object)`` pairs, each object checked (fields, types, ranges), then the
    workload (duplicate ids, at most MAX_REQUESTS requests and MAX_TOTAL_NEW_TOKENS new tokens)."""
    out: list[Request] = []
    seen: dict[str, int] = {}
    total_new = 0
    for line, obj in objects:
        if not isinstance(obj, dict):
            raise WorkloadError("not_object", line=line, got=type(obj).__name__)
        unknown = sorted(set(obj) - set(FIELDS), key=str)
        if unknown:
            raise WorkloadError("unknown_field", line=line, field=str(unknown[0]), allowed=", ".join(FIELDS))
        missing = [k for k in REQUIRED if k not in obj]
        if missing:
            raise WorkloadError("missing_field", line=line, field=missing[0])
        vals = {k: _check_field(line, k, obj[k]) for k in FIELDS if k in obj}
        if vals["id"] in seen:
            raise WorkloadError("duplicate_id", line=line, id=vals["id"], first=seen[vals["id"]])
        seen[vals["id"]] = line
        if len(out) == MAX_REQUESTS:
            raise WorkloadError("too_many_requests", line=line, max=MAX_REQUESTS)
        total_new += vals["max_new_tokens"]
        if total_new > MAX_TOTAL_NEW_TOKENS:
            raise WorkloadError("too_many_new_tokens", line=line, max=MAX_TOTAL_NEW_TOKENS)
        out.append(Request(line=line, **vals))
    if not out:
        raise WorkloadError("empty")
    return tuple(out)


def parse_workload(text: str) -> tuple[Request, ...]:
    """The requests of a JSONL workload (one JSON object per line; blank lines are skipped). Refuses,
    with one WorkloadError naming the line: an empty workload, a line that is not a JSON object, an
    unknown or missing field, a value of the wrong type or out of its range, a duplicate id, more than
    MAX_REQUESTS requests or more than MAX_TOTAL_NEW_TOKENS new tokens in all. Lengths in tokens are
    checked by ``encode_workload`` (they need the tokenizer)."""
    if not isinstance(text, str):
        raise WorkloadError("empty")
    if len(text.encode("utf-8", "surrogatepass")) > MAX_WORKLOAD_BYTES:
        raise WorkloadError("too_big", max=MAX_WORKLOAD_BYTES)

    def objects() -> Iterator[tuple[int, Any]]:
        for line, raw in enumerate(text.splitlines(), start=1):
            if raw.strip():
                try:
                    yield line, json.loads(raw, parse_constant=_no_constants)
                except ValueError as e:
                    raise WorkloadError("not_json", line=line, detail=str(getattr(e, "msg", e))) from None

    return _requests(objects())


def _empty(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def check_edits(state: Any, n_rows: int) -> None:
    """Refuse an editor's raw edit state (``{"edited_rows", "added_rows", "deleted_rows"}`` as the browser
    sent it, on a table of ``n_rows`` rows) before anything applies it: edits of another shape, more than
    MAX_REQUESTS rows once rows are added and deleted, or more than MAX_WORKLOAD_BYTES of edits."""
    if state is None:
        return
    if not isinstance(state, Mapping):
        raise WorkloadError("bad_edit")
    added, deleted, edited = (state.get(k, default) for k, default in (("added_rows", []), ("deleted_rows", []), ("edited_rows", {})))
    if not (isinstance(added, list) and isinstance(deleted, list) and isinstance(edited, Mapping)):
        raise WorkloadError("bad_edit")
    n = n_rows + len(added) - len({d for d in deleted if isinstance(d, int) and 0 <= d < n_rows})
    if n > MAX_REQUESTS or len(edited) > n_rows + len(added):
        raise WorkloadError("too_many_rows", n=max(n, len(edited)), max=MAX_REQUESTS)
    if len(json.dumps([added, edited], default=str)) > MAX_WORKLOAD_BYTES:
        raise WorkloadError("too_big", max=MAX_WORKLOAD_BYTES)


def requests_from_rows(rows: Sequence[Mapping[str, Any]]) -> tuple[Request, ...]:
    """The requests of the lab's edited table (row k is line k + 1), checked as a workload file's lines
    are. A cell left empty (None, or NaN where the column is numeric) is left out, so the request's
    default applies, as in a JSONL line without it."""
    return _requests((k, {f: v for f, v in row.items() if not _empty(v)} if isinstance(row, Mapping) else row)
                     for k, row in enumerate(rows, start=1))


def encode_workload(tokenizer: Tokenizer, requests: Sequence[Request], max_positions: int | None) -> list[list[int]]:
    """Each request's prompt ids (the chat template applied where ``chat``), refusing — naming the line —
    a prompt of more than MAX_PROMPT_TOKENS tokens, one whose tokens plus ``max_new_tokens`` exceed the
    model's context, and workloads of more than MAX_TOTAL_PROMPT_TOKENS prompt tokens in all."""
    out, total = [], 0
    for r in requests:
        try:
            ids = encode(tokenizer, r.prompt, chat=r.chat, max_tokens=10**9).ids
        except EmptyPromptError:
            raise WorkloadError("empty_field", line=r.line, field="prompt") from None
        if len(ids) > MAX_PROMPT_TOKENS:
            raise WorkloadError("prompt_too_long", line=r.line, n=len(ids), max=MAX_PROMPT_TOKENS)
        if max_positions and len(ids) + r.max_new_tokens > max_positions:
            raise WorkloadError("over_context", line=r.line, n=len(ids), new=r.max_new_tokens, context=max_positions)
        total += len(ids)
        if total > MAX_TOTAL_PROMPT_TOKENS:
            raise WorkloadError("too_many_prompt_tokens", line=r.line, max=MAX_TOTAL_PROMPT_TOKENS)
        out.append([int(i) for i in ids])
    return out


# ---------------------------------------------------------------------------------------------
# the plain copy the engine accepts


def plain_model(loaded: LoadedModel) -> LoadedModel:
    """A copy of an HF ``loaded`` model that continuous batching accepts: its own modules and its own
    config with SDPA attention (transformers' engine refuses the traced "xray" one), or eager, which the
    engine runs as its paged eager, for a model without SDPA (Gemma-2: soft-capped attention logits), built
    on the meta device and then given the traced model's own parameter and buffer tensors. The weights
    are shared, read-only (nothing here trains or edits them), so the copy costs no weight memory; the
    traced model's modules, config and attention implementation are never touched."""
    if loaded.is_toy:
        raise WorkloadError("toy")
    src = loaded.model
    cfg = copy.deepcopy(src.config)  # the engine sets attn_implementation on the copy's config, never the traced one
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa" if src._supports_sdpa else "eager", dtype=src.dtype)
    for kind, named in (("_parameters", src.named_parameters(remove_duplicate=False)),
                        ("_buffers", src.named_buffers(remove_duplicate=False))):
        for name, tensor in named:
            owner, _, leaf = name.rpartition(".")
            getattr(plain.get_submodule(owner), kind)[leaf] = tensor  # the same tensor object: no copy
    left = [n for n, t in [*plain.named_parameters(), *plain.named_buffers()] if t.is_meta]
    left += [f"{mn}.{k}" for mn, m in plain.named_modules() for k, v in vars(m).items()
             if isinstance(v, torch.Tensor) and v.is_meta]
    if left:  # a module keeps a tensor the traced model does not expose: refuse rather than compute with nothing
        raise WorkloadError("copy_incomplete", names=", ".join(left[:5]))
    plain.eval()
    plain.requires_grad_(False)
    plain.generation_config = copy.deepcopy(src.generation_config)
    return LoadedModel(plain, loaded.tokenizer, loaded.facts, loaded.spec, "hf", loaded.source)


def _pad_id(tokenizer: Tokenizer, loaded: LoadedModel) -> int:
    pad = getattr(tokenizer, "pad_token_id", None)
    return int(pad if pad is not None else min(loaded.eos_ids(), default=0))


# ---------------------------------------------------------------------------------------------
# one padded batch


@dataclass
class PaddedBatch:
    """One forward of 2–3 prompts padded to one length (``side``: where the pad tokens go).

    ``mask_2d`` [B, T]: 1 = a real token; ``mask_4d`` [B, T, T]: which key each query may read, as the
    model's attention layers received it (causal × padding; a row of a pad query may be empty);
    ``expected_4d``: the same rule written here (causal AND key is real), for real query rows;
    ``position_ids`` [B, T] given to the model (real tokens count 0, 1, 2 … whatever the padding).
    ``logits[b]`` [n_b, V]: the batched logits at prompt b's real positions; ``alone[b]``: the same
    prompt run by itself; ``logits_without_mask`` / ``logits_without_positions``: the batch again with
    an all-ones mask / with positions 0…T-1 in every row. ``error_*``: max |batched − alone| over all real positions for the right
    batch, without the padding mask (all ones) and without the shifted positions (0…T-1 in every
    row); ``argmax_changed_*``: how many real positions' next token changes."""

    side: str
    prompts: list[str]
    token_ids: list[list[int]]
    input_ids: np.ndarray
    mask_2d: np.ndarray
    mask_4d: np.ndarray
    expected_4d: np.ndarray
    position_ids: np.ndarray
    logits: list[np.ndarray]
    alone: list[np.ndarray]
    logits_without_mask: list[np.ndarray]
    logits_without_positions: list[np.ndarray]
    error: float
    error_without_mask: float
    error_without_positions: float
    argmax_changed: int
    argmax_changed_without_mask: int

    @property
    def lengths(self) -> list[int]:
        return [len(t) for t in self.token_ids]


def _padded_inputs(ids: list[list[int]], pad: int, side: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The token rows and their 0/1 masks, each row ``side``-padded with ``pad`` to the longest."""
    n = max(map(len, ids))
    join = (lambda real, fill: fill + real) if side == "left" else (lambda real, fill: real + fill)
    return (torch.tensor([join(x, [pad] * (n - len(x))) for x in ids]),
            torch.tensor([join([1] * len(x), [0] * (n - len(x))) for x in ids]))


def _forward(plain: LoadedModel, x: torch.Tensor, mask: torch.Tensor | None, pos: torch.Tensor | None,
             capture: dict | None = None) -> torch.Tensor:
    """Logits [B, T, V] (float32 numpy-ready); ``capture`` receives the attention mask layer 0 was given."""
    kw: dict[str, Any] = {"attention_mask": mask, "position_ids": pos, "use_cache": False}
    specs = []
    if capture is not None:
        layer0 = plain.model.model.layers[0].self_attn

        def grab(_m: Any, args: Any, kwargs: dict) -> None:
            capture["mask"] = kwargs.get("attention_mask")

        specs.append((layer0, "pre_kwargs", grab))
    with plain.lock, torch.inference_mode(), scoped_hooks(specs):
        return plain.model(input_ids=x, **kw).logits.float()


def _mask_matrix(m: Any, B: int, T: int) -> np.ndarray:
    """The [B, T, T] allowed-matrix of what a layer received (a bool or additive float mask, or None)."""
    if m is None:
        return np.broadcast_to(np.tril(np.ones((T, T), dtype=bool)), (B, T, T)).copy()
    a = (m if m.dtype == torch.bool else m == 0).detach().cpu().numpy()
    a = a[:, 0] if a.ndim == 4 else a  # [B, 1, T, T] → [B, T, T]
    return np.broadcast_to(a, (B, T, T)).copy()


def padded_batch(plain: LoadedModel, prompts: Sequence[str], side: str = "left") -> PaddedBatch:
    """One forward pass of 2–3 prompts of different lengths, ``side``-padded (see ``PaddedBatch``)."""
    if side not in ("left", "right"):
        raise WorkloadError("bad_side", got=repr(side))
    if not PADDED_PROMPTS[0] <= len(prompts) <= PADDED_PROMPTS[1]:
        raise WorkloadError("padded_count", lo=PADDED_PROMPTS[0], hi=PADDED_PROMPTS[1], n=len(prompts))
    tok = plain.tokenizer
    ids = []
    for i, p in enumerate(prompts, start=1):
        try:
            x = encode(tok, p, max_tokens=10**9).ids
        except EmptyPromptError:
            raise WorkloadError("padded_empty", n=i) from None
        if len(x) > PADDED_MAX_TOKENS:
            raise WorkloadError("padded_too_long", n=i, tokens=len(x), max=PADDED_MAX_TOKENS)
        ids.append(x)
    x, mask = _padded_inputs(ids, _pad_id(tok, plain), side)
    B, T = x.shape
    pos = (mask.cumsum(-1) - 1).clamp(min=0)  # real tokens count 0, 1, 2 … from their first real token
    capture: dict[str, Any] = {}
    batched = _forward(plain, x, mask, pos, capture)
    no_mask = _forward(plain, x, torch.ones_like(mask), pos)
    no_pos = _forward(plain, x, mask, torch.arange(T).expand(B, T))
    alone = [_forward(plain, torch.tensor([r]), None, None)[0].numpy() for r in ids]
    m4 = _mask_matrix(capture.get("mask"), B, T)
    real = mask.numpy().astype(bool)
    expected = np.tril(np.ones((T, T), dtype=bool))[None] & real[:, None, :] & real[:, :, None]

    def compare(out: torch.Tensor) -> tuple[list[np.ndarray], float, int]:
        rows = [out[b, np.flatnonzero(real[b])].numpy() for b in range(B)]
        err = max(float(np.abs(r - a).max()) for r, a in zip(rows, alone))
        changed = sum(int((r.argmax(-1) != a.argmax(-1)).sum()) for r, a in zip(rows, alone))
        return rows, err, changed

    rows, err, ch = compare(batched)
    rows_m, err_m, ch_m = compare(no_mask)
    rows_p, err_p, _ = compare(no_pos)
    return PaddedBatch(side, list(prompts), ids, x.numpy(), mask.numpy(), m4, expected, pos.numpy(), rows, alone,
                       rows_m, rows_p, err, err_m, err_p, ch, ch_m)


# ---------------------------------------------------------------------------------------------
# the engine, read step by step


@dataclass
class Step:
    """One forward step of the engine. ``prefill``: request → prompt tokens computed in this step (a long
    prompt is split over several steps: chunked prefill); ``decode``: requests that fed one token;
    ``blocks``: request → the cache blocks it holds during the step (0 … num_blocks-1; a block in two
    lists is shared); ``blocks_used``: distinct blocks held; ``blocks_cached``: blocks no request holds
    but the engine keeps for a later prefix match; ``joined``/``finished``/``preempted``: requests that
    entered the batch, ended, or were evicted (their cache freed, to be recomputed later) at this step."""

    index: int
    start_s: float
    t_s: float
    prefill: dict[str, int]
    decode: list[str]
    blocks_used: int
    blocks_cached: int
    blocks: dict[str, list[int]]
    joined: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class RequestResult:
    """One request as the engine served it: what was measured; what follows from it is a property (a new
    per-request metric is one property here and one column in ``report.requests_table``). Times in
    seconds from the first arrival. ``token_s``: when each token came (the end of the engine step that
    made it); ``outcome``: "finished", or "refused" with the engine's ``error`` (it could not fit the
    request in the pool). ``computed_prompt_tokens``: prompt tokens the engine ran through the model (more
    than ``prompt_tokens`` after a preemption, fewer when shared blocks supplied ``reused_prompt_tokens``).
    ``solo_token_ids``: the same request alone with HF ``generate`` (greedy, same model)."""

    id: str
    prompt_tokens: int
    max_new_tokens: int
    token_ids: list[int]
    text: str
    arrival_s: float
    first_scheduled_s: float | None
    token_s: list[float]
    reused_prompt_tokens: int
    computed_prompt_tokens: int
    preemptions: int
    outcome: str
    error: str | None = None
    engine_token_s: list[float] | None = None  # the engine's own per-token stamps (after a preemption: since it)
    solo_token_ids: list[int] | None = None
    solo_s: float | None = None

    @property
    def first_token_s(self) -> float | None:
        return self.token_s[0] if self.token_s else None

    @property
    def finish_s(self) -> float | None:
        return self.token_s[-1] if self.token_s else None

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.arrival_s

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first."""
        return (self.token_s[-1] - self.token_s[0]) / (len(self.token_s) - 1) if len(self.token_s) > 1 else None

    @property
    def queue_s(self) -> float | None:
        return None if self.first_scheduled_s is None else self.first_scheduled_s - self.arrival_s

    @property
    def e2e_s(self) -> float | None:
        return None if self.finish_s is None else self.finish_s - self.arrival_s

    @property
    def equals_solo(self) -> bool | None:
        """Whether the engine produced exactly the tokens of the request alone (None: not checked)."""
        return None if self.solo_token_ids is None else self.outcome == "finished" and self.token_ids == self.solo_token_ids

    def to_json(self) -> dict[str, Any]:
        """Every field and every property."""
        return {**asdict(self), **{k: getattr(self, k) for k, v in vars(RequestResult).items() if isinstance(v, property)}}


@dataclass
class ServeResult:
    """A workload served by the engine: per request, per step, and in total (see ``to_json``)."""

    requests: list[RequestResult]
    steps: list[Step]
    settings: dict[str, Any]
    memory: dict[str, Any]
    wall_s: float
    tokens_per_s: float
    sequential_tokens_per_s: float | None
    sequential_s: float | None
    refused: str | None
    transformers_version: str = transformers.__version__

    def to_json(self) -> dict[str, Any]:
        """The CLI's output: every field, each request with its derived metrics."""
        return {**asdict(self), "requests": [r.to_json() for r in self.requests]}


class _Recorder:
    """Reads what the engine does, from its own objects, by wrapping four of its methods on ONE batch
    processor (instance attributes: the classes are untouched, and the processor dies with the run).

    Couples to transformers' internals (continuous_batching/, pinned by tests/test_serving.py):
    * ``ContinuousBatchingManager.batch_processor``: created by the public ``warmup()``; the generation
      loop reuses it (``_create_batch_processor`` resets and returns an existing one).
    * ``processor.scheduler.schedule_batch(token_budget, cache_budget)`` → (list of
      ``FutureRequestState`` or None, …): each has ``state`` (a ``RequestState``: ``request_id``,
      ``generated_len()``, ``status``), ``query_length`` (tokens fed this step) and ``has_new_token``.
      A state with generated tokens is decoding; one without is prefilling ``query_length`` prompt tokens.
      A non-empty list is always followed by one forward and one ``update_batch()``.
    * ``processor.cache.search_prefix_match(request_id, prompt_ids)`` → prompt tokens supplied by shared blocks.
    * ``processor.cache.cache_allocators`` (name → allocator): ``block_table`` (request → block ids),
      ``blocks_per_sector`` (the pool's first two sectors are never allocated: trash), ``ledger.cached_blocks``.
    * ``processor.offloading_manager.offload_requests()``: evicts requests when the pool is full; the ones
      that leave ``scheduler.active_requests`` were preempted (with no CPU swap space they are soft reset:
      re-queued, their prompt and tokens so far recomputed later).
    """

    def __init__(self, processor: Any, t0: float) -> None:
        self.p = processor
        self.t0 = t0
        self.steps: list[Step] = []
        self.matched: dict[str, int] = {}
        self.computed: dict[str, int] = {}
        self.token_times: dict[str, list[float]] = {}
        self.first_scheduled: dict[str, float] = {}
        self.preempted: dict[str, int] = {}
        self._pending: tuple[list[Any], Step] | None = None
        self._preempted_now: list[str] = []
        allocators = processor.cache.cache_allocators
        self.allocator = allocators.get("full_attention") or next(iter(allocators.values()))
        self.first_block = 2 * self.allocator.blocks_per_sector  # block ids start after the two trash sectors
        sched, cache, off = processor.scheduler, processor.cache, processor.offloading_manager
        self._schedule, self._match, self._update, self._offload = (
            sched.schedule_batch, cache.search_prefix_match, processor.update_batch, off.offload_requests)
        sched.schedule_batch = self.schedule_batch
        cache.search_prefix_match = self.search_prefix_match
        processor.update_batch = self.update_batch
        off.offload_requests = self.offload_requests

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def search_prefix_match(self, request_id: str, prompt_ids: list[int]) -> int:
        n = self._match(request_id, prompt_ids)
        self.matched[request_id] = int(n)  # the admission that runs counts (a preempted request is matched again)
        return n

    def offload_requests(self) -> bool:
        before = set(self.p.scheduler.active_requests)
        ok = self._offload()
        gone = sorted(before - set(self.p.scheduler.active_requests))
        for rid in gone:
            self.preempted[rid] = self.preempted.get(rid, 0) + 1
        self._preempted_now += gone
        return ok

    def _tables(self) -> dict[str, list[int]]:
        return {rid: [b - self.first_block for b in blocks] for rid, blocks in self.allocator.block_table.items()}

    def schedule_batch(self, token_budget: int, cache_budget: int) -> Any:
        out = self._schedule(token_budget, cache_budget)
        batch = out[0]
        if batch:
            t = self.now()
            prefill: dict[str, int] = {}
            decode: list[str] = []
            joined: list[str] = []
            for fs in batch:
                rid = fs.state.request_id
                if rid not in self.first_scheduled:
                    self.first_scheduled[rid] = t
                    joined.append(rid)
                if fs.state.generated_len() > 0:
                    decode.append(rid)
                else:
                    prefill[rid] = int(fs.query_length)
                    self.computed[rid] = self.computed.get(rid, 0) + int(fs.query_length)
            tables = self._tables()
            used = len({b for blocks in tables.values() for b in blocks})
            step = Step(len(self.steps), t, t, prefill, decode, used, len(self.allocator.ledger.cached_blocks),
                        tables, joined, [], sorted(set(self._preempted_now)))
            self._preempted_now = []
            self._pending = (list(batch), step)
        return out

    def update_batch(self) -> None:
        self._update()
        if self._pending is None:
            return
        batch, step = self._pending
        self._pending = None
        step.t_s = self.now()
        for fs in batch:
            rid = fs.state.request_id
            if fs.has_new_token:
                self.token_times.setdefault(rid, []).append(step.t_s)
            if fs.state.status.name == "FINISHED":
                step.finished.append(rid)
        self.steps.append(step)


def pool_blocks_needed(prompt_lens: Sequence[int], new_tokens: Sequence[int], page_size: int) -> int:
    """Blocks that hold every request at its longest at once, with the engine's safety margin on top
    (below it the FIFO scheduler admits one new prefill per step): the default pool."""
    need = sum(math.ceil((p + n) / page_size) for p, n in zip(prompt_lens, new_tokens))
    return math.ceil(need / (1 - ENGINE_SAFETY_MARGIN)) + 1


def memory_report(plain: LoadedModel, page_size: int, num_blocks: int, prompt_lens: Sequence[int],
                  new_tokens: Sequence[int], peak_blocks: int = 0, pool_bytes_measured: int | None = None) -> dict[str, Any]:
    """The pool against the KV-bytes rule (``HeadGeometry.kv_bytes``, the KV page's formula) and against
    a contiguous cache of the model's whole context per request."""
    g = plain.facts.geometry
    bpv = plain.facts.value_bytes
    ctx = int(plain.facts.max_positions or 0)
    n = len(prompt_lens)
    return {
        "bytes_per_token": g.kv_bytes(1, bpv),
        "bytes_per_block": g.kv_bytes(page_size, bpv),
        "pool_bytes_formula": g.kv_bytes(page_size * num_blocks, bpv),
        "pool_bytes_measured": pool_bytes_measured,
        "peak_blocks_used": int(peak_blocks),
        "peak_bytes_used": g.kv_bytes(page_size * int(peak_blocks), bpv),
        "needed_bytes": sum(g.kv_bytes(p + k, bpv) for p, k in zip(prompt_lens, new_tokens)),
        "contiguous_max_length_bytes": g.kv_bytes(ctx, bpv, requests=n),
        "context": ctx,
        "formula": "2 × layers × KV heads × head_dim × bytes per value × tokens",
        "layers": g.n_layers, "kv_heads": g.n_kv_heads, "head_dim": g.dh, "bytes_per_value": bpv,
    }


def _greedy(loaded: LoadedModel, max_new_tokens: int) -> GenerationConfig:
    eos = sorted(loaded.eos_ids())
    return GenerationConfig(max_new_tokens=int(max_new_tokens), do_sample=False, num_beams=1,
                            eos_token_id=eos or None, pad_token_id=_pad_id(loaded.tokenizer, loaded))


def _in_worker(fn: Callable[[], Any]) -> Any:
    """``fn()`` computed in a fresh thread, as the engine computes in its own: on a loaded machine torch's
    thread team of the process's main thread decodes several times slower than a fresh thread's, which
    would make batching look better than it is (the CLI runs in the main thread)."""
    with ThreadPoolExecutor(1, thread_name_prefix="serving-reference") as pool:
        return pool.submit(fn).result()


def solo_generate(plain: LoadedModel, ids: Sequence[int], max_new_tokens: int) -> tuple[list[int], float]:
    """One request alone with HF ``generate`` (greedy, the plain model, a contiguous cache), computed in a
    thread of its own as the engine's steps are (``_in_worker``): its new token ids and its wall time."""
    x = torch.tensor([list(ids)])

    def run() -> tuple[list[int], float]:
        with plain.lock, torch.inference_mode():
            t = time.perf_counter()
            out = plain.model.generate(x, attention_mask=torch.ones_like(x),
                                       generation_config=_greedy(plain, max_new_tokens))
            return out[0, x.shape[1]:].tolist(), time.perf_counter() - t

    return _in_worker(run)


PROGRESS_ENGINE = 4  # a request served by the engine counts 4 units of a run's progress, checked by generate 1

_quiet_lock = threading.Lock()


@contextlib.contextmanager
def _quiet_engine_log() -> Iterator[None]:
    """The engine logs a refusal ("No requests can be scheduled …") with its traceback; the lab reports it as a result instead."""
    with _quiet_lock:
        old = [(lg, lg.level) for lg in map(logging.getLogger, ENGINE_LOGGERS)]
        for lg, _ in old:
            lg.setLevel(logging.CRITICAL)
        try:
            yield
        finally:
            for lg, level in old:
                lg.setLevel(level)


def run_workload(plain: LoadedModel, requests: Sequence[Request], *, page_size: int = DEFAULT_PAGE_SIZE,
                 num_blocks: int | None = None, max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
                 prefix_sharing: bool = True, progress: Progress = noop, solo: bool = True,
                 prompt_ids: Sequence[Sequence[int]] | None = None, timeout_s: float = TIMEOUT_S,
                 stop: Callable[[], bool] = lambda: False) -> ServeResult:
    """Serve ``requests`` with transformers' continuous batching on ``plain`` (``plain_model``), greedy:
    each request is handed to the running engine when its ``arrival_s`` comes. Then (``solo``) the same
    requests one after another with HF ``generate`` on the same model: each request's ✓ and the
    sequential throughput. A pool too small is not an error: what the engine does (queue, preempt, or
    refuse a request it can never fit) is in the result. Its progress (``progress(done, total, words)``, from
    this thread) counts ``PROGRESS_ENGINE`` units per request the engine has finished and one per request
    checked by ``generate``, out of ``PROGRESS_ENGINE + 1`` per request. ``stop()``, asked about every 50 ms
and before each solo run, stops the run when true (WorkloadError "stopped"; ``timeout_s`` likewise).
The whole run holds ``plain.lock`` (one workload at a time on the lab's copy)."""
    settings = EngineSettings(page_size, num_blocks, max_batch_tokens, bool(prefix_sharing))
    if not requests:
        raise WorkloadError("empty")
    ids = [list(map(int, x)) for x in prompt_ids] if prompt_ids is not None else \
        encode_workload(plain.tokenizer, requests, plain.facts.max_positions)
    lens = [len(x) for x in ids]
    news = [r.max_new_tokens for r in requests]
    blocks = settings.num_blocks or pool_blocks_needed(lens, news, page_size)
    bytes_per_block = plain.facts.geometry.kv_bytes(page_size, plain.facts.value_bytes)
    if blocks * bytes_per_block > MAX_POOL_BYTES:
        if settings.num_blocks is not None:
            raise WorkloadError("pool_too_big", blocks=blocks, mib=blocks * bytes_per_block // 2**20,
                                max_mib=MAX_POOL_BYTES // 2**20, most=MAX_POOL_BYTES // bytes_per_block)
        blocks = MAX_POOL_BYTES // bytes_per_block  # the default pool, capped: the engine then queues
    cb = ContinuousBatchingConfig(page_size=page_size, num_blocks=blocks, max_batch_tokens=max_batch_tokens,
                                  allow_block_sharing=settings.prefix_sharing, auto_switch_to_flash=False,
                                  use_async_batching=False, use_cuda_graph=False, cpu_offload_space=0.0,
                                  scheduler_type="fifo", max_requests_per_batch=len(requests))
    gen = _greedy(plain, max(news))
    arrivals = [float(r.arrival_s) for r in requests]
    origin = min(arrivals)
    order = sorted(range(len(requests)), key=lambda i: (arrivals[i], i))
    outputs: dict[str, Any] = {}
    submitted: dict[str, float] = {}
    total = (PROGRESS_ENGINE + 1) * len(requests)
    with plain.lock, _quiet_engine_log(), torch.inference_mode():
        progress(0, total, Phrase("serving.step_start", {"n": len(requests), "blocks": blocks, "page": page_size}))
        manager = plain.model.init_continuous_batching(generation_config=gen, continuous_batching_config=cb)
        clean = False
        try:
            manager.warmup()  # creates the batch processor (its CUDA-graph warm-up is a no-op on the CPU)
            pool_bytes = int(manager.batch_processor.cache.cache_tensor.numel() * manager.batch_processor.cache.cache_tensor.element_size())
            engine_blocks = int(manager.batch_processor.cache.num_blocks)
            t0 = time.perf_counter()
            rec = _Recorder(manager.batch_processor, t0)
            manager.start()
            nxt, last_say = 0, -1.0
            while len(outputs) < len(requests):
                now = time.perf_counter() - t0
                while nxt < len(order) and arrivals[order[nxt]] - origin <= now:
                    i = order[nxt]
                    submitted[requests[i].id] = time.perf_counter() - t0
                    manager.add_request(ids[i], request_id=requests[i].id, max_new_tokens=requests[i].max_new_tokens,
                                        record_timestamps=True)
                    nxt += 1
                wait = 0.05 if nxt >= len(order) else max(0.0, min(0.05, arrivals[order[nxt]] - origin - now))
                out = manager.get_result(timeout=wait) if wait > 0 or nxt >= len(order) else None
                if out is not None and out.is_finished():
                    outputs[out.request_id] = out
                elif out is None and not manager.is_running() and (
                        nxt >= len(order) or manager.background_thread_status.fatal_error is not None):
                    break  # the loop ended: a refusal fails every request in it, and those came back already
                if now > timeout_s:
                    raise WorkloadError("timeout", s=int(timeout_s))
                if stop():
                    raise WorkloadError("stopped")
                if now - last_say >= 1.0:
                    last_say = now
                    progress(PROGRESS_ENGINE * len(outputs), total,
                             Phrase("serving.step_engine", {"done": len(outputs), "n": len(requests), "steps": len(rec.steps),
                                                            "s": f"{now:.1f}"}))
            wall = time.perf_counter() - t0
            fatal = manager.background_thread_status.fatal_error
            clean = True
        finally:
            # after an exception (a timeout, Ctrl-C) drop what is still running instead of finishing it
            manager.stop(block=True, timeout=30, hard_stop=not clean)
            manager.destroy()
    refused = None if fatal is None else str(fatal)
    results: list[RequestResult] = []
    for i, (r, n_prompt) in enumerate(zip(requests, lens)):
        out = outputs.get(r.id)
        toks = [int(t) for t in out.generated_tokens] if out is not None else []
        done = out is not None and out.error is None
        err = out.error if out is not None else "the engine stopped before this request came back"
        results.append(RequestResult(
            id=r.id, prompt_tokens=n_prompt, max_new_tokens=r.max_new_tokens, token_ids=toks,
            text=plain.tokenizer.decode(toks, skip_special_tokens=True), arrival_s=submitted.get(r.id, arrivals[i] - origin),
            first_scheduled_s=rec.first_scheduled.get(r.id), token_s=rec.token_times.get(r.id, []),
            reused_prompt_tokens=rec.matched.get(r.id, 0), computed_prompt_tokens=rec.computed.get(r.id, 0),
            preemptions=rec.preempted.get(r.id, 0), outcome="finished" if done else ("refused" if refused else "failed"),
            error=None if done else (err or refused),
            engine_token_s=None if out is None or out.timestamps is None else [t - t0 for t in out.timestamps]))
    n_tokens = sum(len(x.token_ids) for x in results)
    end = max((x.finish_s for x in results if x.finish_s is not None), default=wall)
    seq_s = None
    if solo:
        seq_s = 0.0
        for k, (x, p) in enumerate(zip(results, ids)):
            progress(PROGRESS_ENGINE * len(requests) + k, total, Phrase("serving.step_solo", {"k": k + 1, "n": len(results)}))
            if stop():
                raise WorkloadError("stopped")
            x.solo_token_ids, x.solo_s = solo_generate(plain, p, x.max_new_tokens)
            seq_s += x.solo_s
    seq_tokens = sum(len(x.solo_token_ids or []) for x in results)
    peak = max((s.blocks_used for s in rec.steps), default=0)
    mem = memory_report(plain, page_size, engine_blocks, lens, news, peak, pool_bytes)
    mem["pool_bytes_data"] = engine_blocks * bytes_per_block  # the two trash sectors are in pool_bytes_measured only
    progress(total, total, Phrase("serving.step_done"))
    return ServeResult(
        results, rec.steps,
        {"page_size": page_size, "num_blocks": engine_blocks, "max_batch_tokens": max_batch_tokens,
         "prefix_sharing": settings.prefix_sharing, "requested_blocks": settings.num_blocks},
        mem, wall, n_tokens / end if end > 0 else 0.0,
        (seq_tokens / seq_s) if seq_s else None, seq_s, refused)


def sharing_summary(shared: ServeResult, unshared: ServeResult) -> dict[str, Any]:
    """The same workload with block sharing on and off: TTFT of every request after the first to arrive,
    prompt tokens computed vs reused, and the peak blocks each run held."""
    first = min(shared.requests, key=lambda r: (r.arrival_s, r.id))
    off = {r.id: r for r in unshared.requests}
    rows = [{"id": a.id, "ttft_shared_s": a.ttft_s, "ttft_unshared_s": off[a.id].ttft_s, "reused_prompt_tokens": a.reused_prompt_tokens,
             "computed_shared": a.computed_prompt_tokens, "computed_unshared": off[a.id].computed_prompt_tokens}
            for a in shared.requests if a is not first]
    return {"requests": rows,
            "computed_prompt_tokens": [sum(r.computed_prompt_tokens for r in x.requests) for x in (shared, unshared)],
            "reused_prompt_tokens": sum(r.reused_prompt_tokens for r in shared.requests),
            "peak_blocks": [x.memory["peak_blocks_used"] for x in (shared, unshared)]}
