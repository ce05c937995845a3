"""The app's pages, listed once: the router builds its navigation from this list, and every link to a
page (journey stages, tour stages, quiz answers, the positions page's pointer to the toy) goes
through ``page_link``, which refuses a page that is not registered rather than checking files."""

from __future__ import annotations

from typing import Any

import streamlit as st

from core.web import ui

# (section key, page file stem, icon), in the order of the sidebar
PAGES: tuple[tuple[str, str, str], ...] = (
    ("nav.start", "journey", "🧭"),
    ("nav.start", "tour", "🎓"),
    ("nav.inside", "tokens", "🔤"),
    ("nav.inside", "context", "🍎"),
    ("nav.inside", "heads", "👁️"),
    ("nav.inside", "ablation", "✂️"),
    ("nav.inside", "residual", "➕"),
    ("nav.inside", "logits", "🎲"),
    ("nav.inside", "anatomy", "🧬"),
    ("nav.maths", "attention_lab", "🧮"),
    ("nav.maths", "masks", "🎭"),
    ("nav.maths", "multihead", "🧩"),
    ("nav.maths", "positions", "🌀"),
    ("nav.maths", "toy", "🧪"),
    ("nav.generation", "generation", "⏭️"),
    ("nav.generation", "kv_cache", "🗄️"),
    ("nav.generation", "chat", "💬"),
    ("nav.learn", "quiz", "✅"),
    ("nav.learn", "references", "📚"),
)
STEMS: tuple[str, ...] = tuple(stem for _, stem, _ in PAGES)
DEFAULT = "journey"


def navigation() -> Any:
    """The st.navigation object of every registered page, grouped by section (titles translated)."""
    sections: dict[str, list[Any]] = {}
    for section, stem, icon in PAGES:
        sections.setdefault(ui.t(section), []).append(
            st.Page(f"pages/{stem}.py", title=ui.t(f"page.{stem}"), icon=icon, url_path=stem, default=(stem == DEFAULT))
        )
    return st.navigation(sections, expanded=True)


def page_link(stem: str, *, label: str | None = None, icon: str = "➡️", where: Any = None) -> None:
    """A link to a registered page (``where``: a container; the main area by default)."""
    if stem not in STEMS:
        raise KeyError(f"no page '{stem}' is registered in core.web.nav.PAGES")
    (where or st).page_link(f"pages/{stem}.py", label=label or ui.t(f"page.{stem}"), icon=icon)


def see_page(stem: str, *, where: Any = None) -> None:
    """The "See the page: …" link under a stage or an answer."""
    page_link(stem, label=f"{ui.t('ui.see_page')}: {ui.t(f'page.{stem}')}", where=where)
