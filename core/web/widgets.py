"""Widgets whose range or text comes from the model, the prompt or the user, made safe once.

* ``int_slider``: a slider over ``lo..hi`` that never fails. Ranges come from the prompt (T
  positions), the model (layers, heads) or the stepper (passes), and any of them may hold a single
  value (a one-token prompt, a one-layer or one-head model, the pass right after prefill): Streamlit
  refuses a slider whose ends are equal, so the single value is shown as text instead. A value kept
  in the session from a longer prompt is pulled back into the new range.
* ``layer_slider`` / ``layer_head_pickers``: the layer (and head) pickers bound to the URL, built on it.
* ``md`` / ``code``: text a user typed (or a token of it) made inert where the page renders Markdown:
  no HTML tag, no image or link, no emphasis; ``code`` for text quoted inside a `code span`.
* ``config_error``: a ConfigError as a sentence in the user's language, its detail made inert.
"""

from __future__ import annotations

import re
from typing import Any

import streamlit as st

from core.engine.types import ConfigError
from core.web import ui

# Markdown that acts (images, links, emphasis, headings, tables, strikethrough, maths, Streamlit's
# :colour[…] directives) starts with one of these; a backslash makes each a plain character.
_MD_SPECIAL = re.compile(r"([\\`*_\[\]()#!|~$:{}])")


def md(text: Any) -> str:
    """``text`` shown as itself inside Markdown: ``<``, ``>`` and ``&`` as entities (so no ``<img``
    tag ever reaches the renderer, and an entity typed by the user stays visible), Markdown's active
    characters backslash-escaped, line breaks as spaces."""
    s = str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = _MD_SPECIAL.sub(r"\\\1", s)
    s = re.sub(r"[\r\n]+", " ", s)
    return re.sub(r"^(\s*\d*)([-+=.)])", r"\1\\\2", s)  # "- x", "1. x" would start a list


def code(text: Any) -> str:
    """``text`` safe inside a `code span` (where nothing is rendered): a backtick would end the span,
    so it becomes ˋ; line breaks become spaces."""
    return re.sub(r"[\r\n]+", " ", str(text).replace("`", "ˋ"))


def int_slider(label: str, lo: int, hi: int, value: int | None = None, *, key: str, where: Any = None, **kw: Any) -> int:
    """A whole-number slider over ``lo..hi`` (``where``: a column or container; the page by default).

    A range of one value is shown as text (``ui.only_value``) and returned; a session value left
    from a wider range is clamped into this one; ``value=None`` leaves the value to the session."""
    box = st if where is None else where
    lo, hi = int(lo), int(hi)
    if hi <= lo:
        box.markdown(ui.t("ui.only_value", label=label, value=lo))
        return lo
    kept = st.session_state.get(key)
    if kept is not None and not (isinstance(kept, int) and lo <= kept <= hi):
        st.session_state[key] = max(lo, min(hi, int(kept))) if isinstance(kept, (int, float)) else lo
        value = None  # the session holds the value now; a default beside it would be ignored
    if value is None:
        return int(box.slider(label, lo, hi, key=key, **kw))
    return int(box.slider(label, lo, hi, max(lo, min(hi, int(value))), key=key, **kw))


def layer_slider(key: str, n_layers: int, label_key: str = "ui.layer") -> int:
    """One layer picker bound to the URL's ``layer``."""
    layer = int_slider(ui.t(label_key), 0, n_layers - 1, ui.qp_int("layer", 0, 0, n_layers - 1), key=key)
    ui.set_qp(layer=layer)
    return layer


def layer_head_pickers(key: str, n_layers: int, n_heads: int, *, with_head: bool = True) -> tuple[int, int]:
    """Layer (and head) pickers bound to the URL's ``layer`` and ``head``."""
    c1, c2 = st.columns(2)
    layer = int_slider(ui.t("ui.layer"), 0, n_layers - 1, ui.qp_int("layer", 0, 0, n_layers - 1), key=f"{key}_layer", where=c1)
    head = 0
    if with_head:
        head = int_slider(ui.t("ui.head"), 0, n_heads - 1, ui.qp_int("head", 0, 0, n_heads - 1), key=f"{key}_head", where=c2)
    ui.set_qp(layer=layer, head=head if with_head else st.query_params.get("head"))
    return layer, head


def config_error(e: ConfigError) -> None:
    """A config that cannot be read, said in the user's language (which field, and why)."""
    st.error(ui.t(f"anatomy.err_{e.code}", detail=code(e.detail)))
