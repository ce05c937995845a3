"""Widgets whose range or text comes from the model, the prompt or the user, made safe once.

``int_slider`` never fails (a single-value range is shown as text, a kept value is pulled into range);
``layer_slider`` / ``layer_head_pickers`` are bound to the URL; ``hold`` / ``put`` keep a widget's value
across relabelling and page changes; ``*_url`` widgets read a link's ``?param=`` once, validated, and
write it back; ``md`` / ``code`` make typed text inert in Markdown (``core.common.escape``);
``config_error`` says a ConfigError in the user's language.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from core.common import escape
from core.engine.types import ConfigError
from core.plot import attnview
from core.web import ui

md, code = escape.md, escape.code  # the one escaping helper, under the names pages use


def _held(key: str) -> str:
    return f"_held_{key}"


def _remember(key: str) -> None:
    st.session_state[_held(key)] = st.session_state.get(key)


def hold(key: str, default: Any, options: Sequence[Any] | None = None) -> dict[str, Any]:
    """Give widget ``key`` the value this page holds for it (``default`` the first time, or when it
    is no longer one of ``options``) before the widget is drawn. Spread the result into the widget
    call (it is the on_change that keeps the held value up to date) and give the widget no
    ``value``/``index`` of its own. Not for widgets inside a form (no on_change there)."""
    v = st.session_state.get(_held(key), default)
    if options is not None and v not in options:
        v = default
    st.session_state[_held(key)] = v
    st.session_state[key] = v
    return {"key": key, "on_change": _remember, "args": (key,)}


def put(key: str, value: Any) -> None:
    """Move widget ``key`` to ``value`` from a callback (a "go to" button): the held value too, so
    the browser shows it on the next run."""
    st.session_state[_held(key)] = value
    st.session_state[key] = value


def radio_url(label: str, options: Sequence[Any], default: Any, *, key: str, param: str, where: DeltaGenerator | None = None,
              format_func: Callable[[Any], str] = str, **kw: Any) -> Any:
    """A radio whose choice a link carries (``?param=``, one of ``options``), kept across relabelling."""
    first = ui.qp_choice(param, options, default)
    v = (where or st).radio(label, list(options), format_func=format_func, **hold(key, first, options), **kw)
    ui.set_qp(**{param: v})
    return v


def tabs_url(keys: Sequence[str], names: Sequence[str], *, key: str, param: str = "tab") -> Sequence[Any]:
    """``st.tabs`` (``names``, one per ``keys``) whose open tab a link carries (``?param=``, one of ``keys``)
    and the URL follows. The tab a visit opens on is read from the URL once, while the widget is new: it is
    part of the widget's identity, so reading it again after a click would make a new widget and lose the next click."""
    opened = f"{key}__opened_on"
    if key not in st.session_state or opened not in st.session_state:
        st.session_state[opened] = ui.qp_choice(param, keys, keys[0])
    first = st.session_state[opened]
    tabs = st.tabs(list(names), default=names[list(keys).index(first)], key=key, on_change="rerun")
    shown = st.session_state.get(key)
    ui.set_qp(**{param: keys[list(names).index(shown)] if shown in names else first})
    return tabs


def selectbox_url(label: str, options: Sequence[Any], default: Any, *, key: str, param: str, where: DeltaGenerator | None = None,
                  format_func: Callable[[Any], str] = str, **kw: Any) -> Any:
    """A selectbox whose choice a link carries (``?param=``), kept across relabelling."""
    first = ui.qp_choice(param, options, default)
    v = (where or st).selectbox(label, list(options), format_func=format_func, placeholder=ui.t("ui.choose"), **hold(key, first, options), **kw)
    ui.set_qp(**{param: v})
    return v


def toggle_url(label: str, default: bool, *, key: str, param: str, where: DeltaGenerator | None = None, **kw: Any) -> bool:
    """A toggle a link carries as ``?param=1`` / ``0``."""
    v = bool((where or st).toggle(label, **hold(key, ui.qp_bool(param, default), (True, False)), **kw))
    ui.set_qp(**{param: "1" if v else "0"})
    return v


def _in_range(v: Any, lo: float, hi: float) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and lo <= v <= hi


def number_url(label: str, lo: int, hi: int, default: int, *, key: str, param: str, where: DeltaGenerator | None = None, **kw: Any) -> int:
    """A whole-number input a link carries (``?param=``, clamped to lo … hi)."""
    first = ui.qp_int(param, default, lo, hi)
    held = st.session_state.get(_held(key))
    if held is not None and not _in_range(held, lo, hi):
        st.session_state[_held(key)] = first
    v = int((where or st).number_input(label, lo, hi, **hold(key, first), **kw))
    ui.set_qp(**{param: v})
    return v


def slider_url(label: str, lo: float, hi: float, default: float, step: float, *, key: str, param: str, where: DeltaGenerator | None = None,
               **kw: Any) -> float:
    """A number slider a link carries (``?param=``, clamped to lo … hi and snapped to ``step``)."""
    first = ui.qp_float(param, default, lo, hi, step)
    held = st.session_state.get(_held(key))
    if held is not None and not _in_range(held, lo, hi):
        st.session_state[_held(key)] = first
    v = float((where or st).slider(label, float(lo), float(hi), step=float(step), **hold(key, float(first)), **kw))
    ui.set_qp(**{param: f"{v:g}"})
    return v


def int_slider(label: str, lo: int, hi: int, value: int | None = None, *, key: str, where: DeltaGenerator | None = None, **kw: Any) -> int:
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
    if kept is not None:
        value = None  # the session holds the value (a "go to" button may just have set it): no default beside it
    if value is None:
        return int(box.slider(label, lo, hi, key=key, **kw))
    return int(box.slider(label, lo, hi, max(lo, min(hi, int(value))), key=key, **kw))


def layer_slider(key: str, n_layers: int, label_key: str = "ui.layer") -> int:
    """One layer picker bound to the URL's ``layer``."""
    layer = int_slider(ui.t(label_key), 0, n_layers - 1, ui.qp_layer(n_layers, 0), key=key)
    ui.set_qp(layer=layer)
    return layer


def layer_head_pickers(key: str, n_layers: int, n_heads: int, *, with_head: bool = True) -> tuple[int, int]:
    """Layer (and head) pickers bound to the URL's ``layer`` and ``head``."""
    c1, c2 = st.columns(2)
    layer = int_slider(ui.t("ui.layer"), 0, n_layers - 1, ui.qp_layer(n_layers, 0), key=f"{key}_layer", where=c1)
    head = 0
    if with_head:
        head = int_slider(ui.t("ui.head"), 0, n_heads - 1, ui.qp_int("head", 0, 0, n_heads - 1), key=f"{key}_head", where=c2)
    ui.set_qp(layer=layer, head=head if with_head else st.query_params.get("head"))
    return layer, head


def config_error(e: ConfigError) -> None:
    """A config that cannot be read, said in the user's language (which field, and why)."""
    st.error(ui.t(f"anatomy.err_{e.code}", detail=code(e.detail)))


def map_window(key: str, n_tokens: int, cells: int = attnview.CELLS, *, param: str = "win", kind: str = "map",
               where: DeltaGenerator | None = None) -> int | None:
    """For a prompt longer than ``cells``: the whole map averaged, or a window of exact weights from a
    chosen start (in the URL as ``param``, ``win`` by default). Returns the window's start, or None for
    the overview. ``kind``: "map" (a [T, T] map), "row" (one query's weights: summed bars) or "strip"
    (per-position values: averaged columns) — only the words of the choice differ."""
    if n_tokens <= cells:
        return None
    hi = n_tokens - cells
    url = st.query_params.get(param)
    default_mode = "window" if url not in (None, "") else "overview"
    c1, c2 = (where or st).columns([1, 2])
    suffix = "" if kind == "map" else f"_{kind}"
    names = {m: ui.t(f"attnview.mode_{m}{suffix}") for m in ("overview", "window")}  # fixed now: this run's language
    mode = c1.radio(ui.t("attnview.mode"), ["overview", "window"], index=0 if default_mode == "overview" else 1,
                    format_func=names.get, key=f"{key}_mapmode")
    if mode == "overview":
        ui.set_qp(**{param: None})
        return None
    start = int_slider(ui.t("attnview.start"), 0, hi, ui.qp_int(param, hi, 0, hi), key=f"{key}_win", where=c2, step=1)
    ui.set_qp(**{param: start})
    return start
