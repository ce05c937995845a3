"""What the three Cause-and-effect pages share: the pair of prompts and its two answers (widgets kept
in the session and the URL, validated once into a sentence), the recorded pair.

URL: ``clean``, ``corrupt``, ``answer``, ``foil`` carry the pair (each capped like a text box);
the patching page adds ``site``, ``layer``, ``pos`` / ``head`` (the chosen cell), the attribution
page ``steps`` and ``attn_layer`` — all validated where they are read.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import streamlit as st

from core.cause import pair, patching
from core.engine.tokens import visible
from core.engine.types import LoadedModel, UnsupportedArchitectureError
from core.web import cache, nav, ui, widgets

FIELDS = ("clean", "corrupted", "answer", "foil")
URL = {"clean": "clean", "corrupted": "corrupt", "answer": "answer", "foil": "foil"}
CAPS = {"clean": pair.MAX_CHARS, "corrupted": pair.MAX_CHARS, "answer": pair.MAX_ANSWER_CHARS, "foil": pair.MAX_ANSWER_CHARS}
STATE = "cause_pair"
T = TypeVar("T")  # what a pair reader returns


def _from_link() -> dict[str, str]:
    """The pair a link carries (each field capped), the first preset for what it lacks."""
    default = pair.PairText.of(pair.PRESETS[0])
    out = {}
    for f in FIELDS:
        raw = st.query_params.get(URL[f])
        out[f] = raw[: CAPS[f]] if isinstance(raw, str) and raw != "" else getattr(default, f)
    return out


def current() -> pair.PairText:
    if STATE not in st.session_state:
        st.session_state[STATE] = _from_link()
    return pair.PairText(**st.session_state[STATE])


def _preset_of(text: pair.PairText) -> str:
    return next((p.key for p in pair.PRESETS if pair.PairText.of(p) == text), pair.FREE)


def _apply_preset(key: str) -> None:
    p = pair.preset(st.session_state[f"{key}_preset"])
    if p is not None:
        for f in FIELDS:
            st.session_state[f"{key}_{f}"] = getattr(p, f)


def set_answers(key: str, answer: str, foil: str) -> None:
    """A button's callback: put these answers in the boxes (runs before the boxes are drawn)."""
    st.session_state[f"{key}_answer"], st.session_state[f"{key}_foil"] = answer, foil


def inputs(key: str) -> pair.PairText:
    """Example picker, the two prompts and the two answers; kept in the session (shared by the three
    pages) and in the URL. ``key`` namespaces the widgets per page."""
    cur = current()
    for f in FIELDS:
        st.session_state.setdefault(f"{key}_{f}", getattr(cur, f))
    st.session_state.setdefault(f"{key}_preset", _preset_of(cur))
    st.selectbox(ui.t("cause.preset"), [*pair.PRESET_KEYS, pair.FREE], placeholder=ui.t("ui.choose"), key=f"{key}_preset",
                 format_func=ui.fmt("cause.preset_{}"), on_change=_apply_preset, args=(key,))
    c1, c2 = st.columns(2)
    c1.text_input(ui.t("cause.clean"), key=f"{key}_clean", max_chars=pair.MAX_CHARS)
    c2.text_input(ui.t("cause.corrupted"), key=f"{key}_corrupted", max_chars=pair.MAX_CHARS)
    c1.text_input(ui.t("cause.answer"), key=f"{key}_answer", max_chars=pair.MAX_ANSWER_CHARS, help=ui.t("cause.answer_help"))
    c2.text_input(ui.t("cause.foil"), key=f"{key}_foil", max_chars=pair.MAX_ANSWER_CHARS, help=ui.t("cause.answer_help"))
    text = pair.PairText(*(str(st.session_state[f"{key}_{f}"]) for f in FIELDS))
    st.session_state[STATE] = {f: getattr(text, f) for f in FIELDS}
    ui.set_qp(**{URL[f]: (getattr(text, f) or None) for f in FIELDS})
    st.caption(ui.t("cause.plain_text", k=pair.MAX_TOKENS))
    return text


@dataclass(frozen=True)
class Ready:
    """A pair that can be patched: tokens, answers, the recorded runs and the one number."""

    tokens: pair.PairTokens
    answers: pair.Answers
    base: patching.Baseline
    ld_clean: float
    ld_corrupted: float

    @property
    def ids(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return self.tokens.ids_clean, self.tokens.ids_corrupted


def token_md(text: str) -> str:
    """A token's text as an inert Markdown code span, spaces made visible (" Paris" → `␣Paris`)."""
    return f"`{widgets.code(visible(text))}`"


def _or_warning(read: Callable[..., T], *args: Any) -> T | None:
    """``read(*args)``, or None with the PairError's sentence shown, in the reader's language."""
    try:
        return read(*args)
    except pair.PairError as e:
        st.warning(e.markdown(ui.lang()))
        return None


def encoded(loaded: LoadedModel, text: pair.PairText) -> pair.PairTokens | None:
    p = pair.preset(_preset_of(text))
    if p is not None and not pair.fits(loaded.tokenizer, p):  # say first that the example, not the learner, is at fault
        st.info(ui.t("cause.preset_unfit", model=widgets.md(ui.model_label())))
    return _or_warning(pair.encode_pair, loaded.tokenizer, text.clean, text.corrupted, pair.MAX_TOKENS, loaded.facts.max_positions)


def answers(loaded: LoadedModel, text: pair.PairText) -> pair.Answers | None:
    return _or_warning(pair.answers, loaded.tokenizer, text.answer, text.foil)


def baseline(loaded: LoadedModel, pt: pair.PairTokens) -> patching.Baseline | None:
    try:
        return cache.cause_baseline(loaded, pt.ids_clean, pt.ids_corrupted)
    except UnsupportedArchitectureError as e:
        st.error(ui.t("cause.unsupported", msg=ui.error_md(e)))
        return None


def ready(loaded: LoadedModel, text: pair.PairText) -> Ready | None:
    """Everything a patching or attribution view needs, or None with one sentence shown."""
    pt = encoded(loaded, text)
    if pt is None:
        return None
    if not pt.same_length:
        st.warning(pair.PairError("counts", n_clean=len(pt.ids_clean), n_corrupted=len(pt.ids_corrupted)).markdown(ui.lang()))
        nav.page_link("cause_pair", icon="⚖️")  # the sentence points at the alignment table: that page has it
        return None
    ans = answers(loaded, text)
    base = baseline(loaded, pt) if ans is not None else None
    if base is None:
        return None
    return Ready(pt, ans, base, pair.logit_diff(base.clean_logits(), ans.answer, ans.foil),
                 pair.logit_diff(base.corrupted_logits(), ans.answer, ans.foil))


def new_click(chart_key: str, n_rows: int, n_cols: int) -> tuple[int, int] | None:
    """The (row, column) of a grid cell just clicked in chart ``chart_key`` (its selection, read from
    the session at the start of the run), or None when nothing new was clicked or the point is no cell of the
    grid (a crafted event: ∞, NaN, text, a point off the grid)."""
    sel = st.session_state.get(chart_key) or {}
    sel = sel.get("selection") if isinstance(sel, Mapping) else None
    pts = sel.get("points") if isinstance(sel, Mapping) else None
    if not pts or not isinstance(pts, list) or pts == st.session_state.get(f"{chart_key}_seen"):
        return None
    st.session_state[f"{chart_key}_seen"] = pts
    point = pts[0]
    try:  # what the browser sent: x = 1e999 (∞) or NaN is no cell, nor is a value off the grid
        y, x = float(point.get("y", 0)), float(point.get("x", 0))
    except (TypeError, ValueError, AttributeError, OverflowError):
        return None
    if not (math.isfinite(x) and math.isfinite(y)) or not (-0.5 <= y < n_rows - 0.5 and -0.5 <= x < n_cols - 0.5):
        return None
    return max(0, min(n_rows - 1, round(y))), max(0, min(n_cols - 1, round(x)))
