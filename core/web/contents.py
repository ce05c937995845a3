"""A long page's contents: its section headers, as links, at the top of the sidebar (issue 40: long pages had none).

``app.py`` keeps the place (``place``: at the top of the sidebar, under the pages' navigation, above the shared
language, model and prompt boxes) before the page runs; a page draws a section's header with ``section``
(``st.header`` with an anchor, noted for this run); ``core.web.page.run`` fills the place after the page has drawn
(``draw``) with one link per section, when there are at least ``MIN_SECTIONS``. The sidebar, not a line under the
title: the list would push each page's picture down; the sidebar is collapsed on a projector and on a phone, out of
the way. Plain Markdown links to the headers' anchors: focusable, read as a list of links after a label of their
own by a screen reader, followed with Enter."""

from __future__ import annotations

import threading
from typing import Any

import streamlit as st

from core.common import escape
from core.web import ui

MIN_SECTIONS = 3
_RUN = threading.local()  # this run's place and its (anchor, title) pairs: a session's script runs in its own thread


def place() -> None:
    """Keep the contents' place for this run (call it inside ``with st.sidebar`` where the list should go)."""
    _RUN.where, _RUN.found = st.container(), []


def section(key: str, anchor: str | None = None, **kw: Any) -> None:
    """The header ``ui.t(key, **kw)`` with ``anchor`` (default: the key, ``.`` → ``_``, e.g. ``tokens_pca_title``), listed."""
    title, anchor = ui.t(key, **kw), anchor or key.replace(".", "_")
    st.header(title, anchor=anchor)
    if getattr(_RUN, "found", None) is not None:
        _RUN.found.append((anchor, title))


def draw() -> None:
    """The contents in their place, if the page has drawn enough sections; the place is given up either way."""
    where, found = getattr(_RUN, "where", None), getattr(_RUN, "found", None) or []
    _RUN.where = _RUN.found = None
    if where is None or len(found) < MIN_SECTIONS:
        return
    where.markdown(f"**{ui.t('ui.contents')}**\n\n" + "\n".join(f"- [{escape.md(title)}](#{anchor})" for anchor, title in found))
