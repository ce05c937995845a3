"""The journey of a sentence: the numbers each stage shows, read off one Trace (pure functions),
and the greedy loop that turns one forward pass into a whole answer."""

from __future__ import annotations

import inspect
import re
import site
import sys
import sysconfig
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from torch import nn
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

import core.backends as backends
from core.common.i18n import t
from core.common.numbers import top_k
from core.common.paths import CORE
from core.engine import roles
from core.engine.hf_trace import KV_KEEP_MAX
from core.engine.tokens import readable_tokens, visible
from core.engine.trace import Trace
from core.engine.types import LoadedModel, Tokenizer

MAX_NEW = 24  # new tokens the journey's loop shows at most
# Above this many prompt tokens the loop waits for the reader's click: the trace keeps no keys and
# values there (``KV_KEEP_MAX``), so the loop forms them again, and each of its MAX_NEW steps reads the whole
# prompt's KV cache. Up to it, the trace is the prefill and the steps are cheap: the loop runs at once.
DEFER_ABOVE = KV_KEEP_MAX


def src_title(n: int, lang: str) -> str:
    """The heading of a stage's "where this was computed" list: "1 place", "{n} places"."""
    return t("journey.src_title_one" if n == 1 else "journey.src_title", lang, n=n)


def deferred(n_tokens: int) -> bool:
    """Whether the journey runs its loop only when the reader asks for it (a prompt of ``n_tokens``)."""
    return n_tokens > DEFER_ABOVE


def vector_preview(x: np.ndarray, n: int = 6, lang: str = "en") -> str:
    """'[0.0123, -0.4567, …]  (576 values, ‖x‖ = 1.234)' — the first values of a real vector, its size
    said in ``lang`` (576 个数)."""
    head = ", ".join(f"{v:+.4f}" for v in x[:n])
    size = t("journey.n_values", lang, n=x.shape[-1])
    return f"[{head}, …]  ({size}, ‖x‖ = {float(np.linalg.norm(x)):.3f})"


POSITION_NOTES = {"RoPE": "journey.s4.pos", "learned": "journey.s4.pos_learned", "sinusoidal": "journey.s4.pos_sinusoidal"}


def position_note(position_type: str) -> tuple[str, dict[str, str]]:
    """The i18n key and fields of the sentence on how this model knows positions, from its own fact
    (``ModelFacts.position_type``): RoPE rotates q and k inside attention; learned or sinusoidal
    positions add a vector to the embedding here; no position information at all otherwise."""
    return POSITION_NOTES.get(str(position_type), "journey.s4.pos_none"), {"pos": str(position_type)}


def last_token_norms(tr: Trace) -> np.ndarray:
    """‖resid[l, −1]‖ for l = 0 … L: how the last position's vector grows through the blocks."""
    return np.linalg.norm(tr.resid[:, -1, :].astype(np.float64), axis=-1)


@dataclass(frozen=True)
class Part:
    """One part of the whole-model overview (the home page's first figure): its i18n name
    (``journey.ov_<key>``), the page that shows it, and its live value on this prompt."""

    key: str
    page: str
    value: str


def overview(tr: Trace, tokenizer: Tokenizer, n_heads: int) -> tuple[Part, ...]:
    """The whole model on this trace, left to right: text → tokens → embeddings → blocks (attention, MLP) →
    final norm → logits → the next token, each with its size or value read off the trace."""
    T, L, d = tr.n_tokens, tr.n_layers, tr.resid.shape[-1]
    txt, _, _, prob = top_next_tokens(tr, tokenizer, k=1)[0]
    return (
        Part("text", "tokens", f"{len(tr.text):,}"),
        Part("tokens", "tokens", f"T = {T}"),
        Part("embed", "context", f"[{T}, {d}]"),
        Part("attn", "heads", f"{L} × {n_heads}"),
        Part("mlp", "residual", f"[{T}, {d}]"),  # each block's MLP rewrites every position: in and out [T, d]
        Part("norm", "norms", f"[{T}, {d}]"),
        Part("logits", "logits", f"[{tr.last_logits.shape[-1]:,}]"),
        Part("next", "generation", f"{visible(txt)} · {prob:.0%}"),
    )


def top_next_tokens(tr: Trace, tokenizer: Tokenizer, k: int = 8) -> list[tuple[str, int, float, float]]:
    """(token text, id, logit, probability) of the k best next tokens at the last position."""
    p = tr.last_probs()
    order = top_k(tr.last_logits, k)

    texts = readable_tokens(tokenizer, [int(i) for i in order])
    return [(txt, int(i), float(tr.last_logits[i]), float(p[i])) for txt, i in zip(texts, order)]


def top_frame(rows: Sequence[tuple[str, int, float, float]], token_header: str) -> pd.DataFrame:
    """The next-token table: each candidate made visible by the one label rule (a newline shows as ⏎)."""
    return pd.DataFrame([(visible(txt), i, logit, p) for txt, i, logit, p in rows], columns=[token_header, "ID", "logit", "p"])


def greedy_continuation(loaded: LoadedModel, ids: Sequence[int], max_new: int = MAX_NEW, *,
                        prefill: backends.Step | None = None) -> tuple[list[int], bool]:
    """Greedy decoding with a KV cache: the journey's loop. Returns (new ids, stopped at an end token).

    The prompt goes through the model once (the prefill: every layer caches its keys and values and
    the last position's scores choose the first new token), then each step feeds only the token just
    chosen — the same ``backends.forward_step`` and stop rule (``backends.stop_reason``) as the generation page's Stepper, without its per-step
    records (top-K, attention rows, timings), which the journey does not show. ``prefill``: that first
    pass, if the caller already has it for exactly ``ids`` (its cache is then extended in place)."""
    ids = [int(i) for i in ids]
    if not ids:
        raise ValueError("The prompt has no tokens.")
    step = prefill if prefill is not None else backends.forward_step(loaded, ids)
    new = [int(np.argmax(step.last_logits))]  # greedy: the highest score
    while (why := backends.stop_reason(loaded, new[-1], len(new), len(ids) + len(new), max_new)) is None:
        step = backends.forward_step(loaded, [new[-1]], step.cache)  # one token in; K/V appended to the cache
        new.append(int(np.argmax(step.last_logits)))
    return new, why == "eos"


# ---------------------------------------------------------------------------------------------
# Where each stage was computed, read from the loaded model's own classes with ``inspect``, never typed by hand: a Llama gives
# modeling_llama.py, a Qwen2 modeling_qwen2.py, the toy core/toy/model.py, each at its installed line.


@dataclass(frozen=True)
class Source:
    """One piece of code a stage ran: ``name`` (a qualified name, or the call inside one) at ``path``
    (relative to site-packages for an installed library, to the repository for the app's own code),
    line ``line``; ``file`` is the absolute path, ``text`` that line as written."""

    name: str
    path: str
    line: int
    file: str
    text: str

    def label(self) -> str:
        return f"{self.path}:{self.line}"


def _roots() -> list[Path]:
    """Where installed code lives (site-packages, longest first), then the repository for the app's own."""
    found = {Path(p).resolve() for p in (*site.getsitepackages(), site.getusersitepackages(), sysconfig.get_paths()["purelib"])}
    return [*sorted(found, key=lambda p: -len(str(p))), CORE.parent]


def shown_path(file: str) -> str:
    """``file`` relative to the site-packages (or the repository) it lives in; as given if in neither."""
    f = Path(file).resolve()
    for root in _roots():
        if f.is_relative_to(root):
            return f.relative_to(root).as_posix()
    return f.as_posix()


def _lines(fn: Callable) -> tuple[str, list[str], int]:
    fn = inspect.unwrap(fn)
    lines, start = inspect.getsourcelines(fn)
    return inspect.getsourcefile(fn) or "", lines, start


def code_of(fn: Callable) -> Source:
    """Where ``fn`` is defined: the line of its ``def`` (after any decorators), read from its source file."""
    file, lines, start = _lines(fn)
    name = inspect.unwrap(fn).__name__
    i = next((k for k, s in enumerate(lines) if s.lstrip().startswith((f"def {name}(", f"async def {name}("))), 0)
    return Source(inspect.unwrap(fn).__qualname__, shown_path(file), start + i, file, lines[i].strip())


def call_in(fn: Callable, needle: str) -> Source | None:
    """The first line of ``fn``'s source that contains ``needle`` (where it calls a part), or None."""
    file, lines, start = _lines(fn)
    pat = re.compile(re.escape(needle) + (r"(?![A-Za-z0-9_])" if needle[-1:].isidentifier() else ""))  # self.h, not self.hidden
    for k, s in enumerate(lines):
        if pat.search(s) and not s.lstrip().startswith("#"):
            return Source(f"{inspect.unwrap(fn).__qualname__} → {needle.rstrip('(')}", shown_path(file), start + k, file, s.strip())
    return None


def _calls(fn: Callable, parent: Any, child: Any) -> Source | None:
    """Where ``fn`` (a forward of ``parent``) calls its part ``child``: the line with ``self.<name>(``."""
    name = next((n for n, c in parent.named_children() if c is child), None) if child is not None else None
    return call_in(fn, f"self.{name}(") if name else None


def _module_fn(cls: type, names: Sequence[str]) -> Any | None:
    """The first function named in ``names`` in the module that defines ``cls`` (apply_rotary_pos_emb …)."""
    mod = sys.modules.get(cls.__module__)
    return next((f for n in names if callable(f := getattr(mod, n, None))), None)


ROPE_MODULE_FNS = ("apply_rotary_pos_emb", "apply_rope")  # HF Llama family, the toy
ROPE_TABLE_FNS = ("rope_cos_sin",)  # the toy computes cos/sin in a function, HF in a RotaryEmbedding module
ATTN_FNS = ("eager_attention_forward",)  # HF: the softmax(QKᵀ/√d + M)·V the traced (eager) attention runs


def stage_sources(loaded: LoadedModel) -> dict[int, tuple[Source, ...]]:
    """Stage number of the journey (1 … 9) → the code that computed it, read from the loaded model's own
    classes (``type(part).forward`` and the lines that call each part) and the app's own functions."""
    model, tok = loaded.model, loaded.tokenizer
    sites = roles.find_sites(model)
    base = getattr(model, getattr(model, "base_model_prefix", ""), None) or model
    top_fwd, base_fwd = type(model).forward, type(base).forward
    attn = sites.attns[0]
    rotary = next((m for _, m in model.named_modules() if type(m).__name__.endswith("RotaryEmbedding")), None)
    rope_fn = _module_fn(type(attn), ROPE_MODULE_FNS)
    table_fn = _module_fn(type(attn), ROPE_TABLE_FNS)
    attn_fn = _module_fn(type(attn), ATTN_FNS)
    impl = getattr(getattr(model, "config", None), "_attn_implementation", None)  # what this model was loaded with
    run_fn = ALL_ATTENTION_FUNCTIONS.get(impl) if impl else None  # the app's xray: eager's numbers, SDPA's speed
    fast_fn = getattr(sys.modules.get(run_fn.__module__), "sdpa_attention_forward", None) if run_fn else None
    layers_name = next((n for n, c in base.named_children() if isinstance(c, nn.ModuleList) and len(c) == len(sites.blocks)), None)

    def some(*xs: Source | None) -> tuple[Source, ...]:
        return tuple(x for x in xs if x is not None)

    return {
        1: some(code_of(backends.encode_prompt)),
        2: some(code_of(type(tok).tokenize) if hasattr(type(tok), "tokenize") else code_of(type(tok).encode)),
        3: some(code_of(type(tok).__call__)),
        4: some(_calls(base_fwd, base, sites.embed), code_of(type(sites.embed).forward),
                _calls(base_fwd, base, rotary) or (call_in(base_fwd, "rope_cos_sin(") if table_fn else None),
                code_of(type(rotary).forward) if rotary is not None else (code_of(table_fn) if table_fn else None)),
        5: some(call_in(base_fwd, f"self.{layers_name}") if layers_name else None, code_of(type(sites.blocks[0]).forward),
                code_of(type(sites.attn_norms[0]).forward) if sites.attn_norms[0] is not None else None,
                code_of(type(attn).forward), code_of(rope_fn) if rope_fn else None, code_of(attn_fn) if attn_fn else None,
                code_of(run_fn) if run_fn else None, code_of(fast_fn) if fast_fn else None,
                code_of(type(sites.mlps[0]).forward)),
        6: some(_calls(base_fwd, base, sites.final_norm), code_of(type(sites.final_norm).forward) if sites.final_norm is not None else None),
        7: some(_calls(top_fwd, model, sites.lm_head), code_of(type(sites.lm_head).forward)),
        8: some(code_of(top_next_tokens)),
        9: some(code_of(greedy_continuation), code_of(backends.forward_step)),
    }
