"""A long page's contents: its section headers, as links, in the sidebar (issue 40: long pages had none).

A page draws a section's header with ``section`` (``st.header`` with an anchor, noted for this run); ``core.web.page.run``
keeps a place in the sidebar before the page draws and fills it after (``draw``) with one link per section, when
there are at least ``MIN_SECTIONS``. The sidebar, not a line under the title: the list would push each page's
picture down, and the sidebar is where the reader already looks for where to go (collapsed on a projector and on a
phone, out of the way). Plain Markdown links to the headers' anchors: focusable, read as a list of links under
a heading of their own by a screen reader, followed with Enter."""

from __future__ import annotations

from typing import Any

import streamlit as st

from core.common import escape
from core.web import ui

MIN_SECTIONS = 3
_RUN = "_xr_sections"  # this run's (anchor, title) pairs, in the page's order


def start() -> None:
    st.session_state[_RUN] = []


def section(key: str, anchor: str | None = None, **kw: Any) -> None:
    """The header ``ui.t(key, **kw)`` with ``anchor`` (default: the key, ``.`` → ``_``, e.g. ``tokens_pca_title``), listed."""
    title, anchor = ui.t(key, **kw), anchor or key.replace(".", "_")
    st.header(title, anchor=anchor)
    st.session_state.setdefault(_RUN, []).append((anchor, title))


def draw(where: Any) -> None:
    """The contents in ``where`` (a sidebar container kept before the page drew), if the page has enough sections."""
    found = st.session_state.get(_RUN, [])
    if len(found) < MIN_SECTIONS:
        return
    where.markdown(f"**{ui.t('ui.contents')}**\n\n" + "\n".join(f"- [{escape.md(title)}](#{anchor})" for anchor, title in found))
