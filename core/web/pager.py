"""Previous / next between pages, in the sidebar's order (``core.web.nav.PAGES``): the two links at the foot
of every page (``core.web.page.run`` draws them), so a student can walk the app without the sidebar (a phone,
a projector with the sidebar collapsed)."""

from __future__ import annotations

import streamlit as st

from core.web import nav, ui


def neighbours(stem: str) -> tuple[str | None, str | None]:
    """The registered pages before and after ``stem`` in ``nav.PAGES`` (None at either end)."""
    i = nav.STEMS.index(stem)
    return (nav.STEMS[i - 1] if i > 0 else None), (nav.STEMS[i + 1] if i + 1 < len(nav.STEMS) else None)


def prev_next(stem: str) -> None:
    """The links to the previous and the next page (same session: the visit is ticked off, the language kept)."""
    before, after = neighbours(stem)
    c1, c2 = st.columns(2)
    if before is not None:
        nav.page_link(before, label=ui.t("pager.prev", page=ui.t(f"page.{before}")), icon="⬅️", where=c1)
    if after is not None:
        nav.page_link(after, label=ui.t("pager.next", page=ui.t(f"page.{after}")), icon="➡️", where=c2)
