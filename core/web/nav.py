"""The app's pages, listed once: the router builds its navigation from this list, and every link to a
page (journey stages, tour stages, quiz answers, the positions page's pointer to the toy) goes
through ``page_link``, which refuses a page that is not registered rather than checking files."""

from __future__ import annotations

from typing import Any

import streamlit as st

from core.gen import workloads
from core.web import ui

# (section key, page file stem, icon), in the order of the sidebar
PAGES: tuple[tuple[str, str, str], ...] = (
    ("nav.start", "journey", "🧭"),
    ("nav.start", "tour", "🎓"),
    ("nav.inside", "tokens", "🔤"),
    ("nav.inside", "context", "🍎"),
    ("nav.inside", "heads", "👁️"),
    ("nav.inside", "long_context", "📜"),
    ("nav.inside", "ablation", "✂️"),
    ("nav.inside", "residual", "➕"),
    ("nav.inside", "logits", "🎲"),
    ("nav.inside", "anatomy", "🧬"),
    ("nav.maths", "attention_lab", "🧮"),
    ("nav.maths", "masks", "🎭"),
    ("nav.maths", "multihead", "🧩"),
    ("nav.maths", "positions", "🌀"),
    ("nav.maths", "norms", "📏"),
    ("nav.maths", "toy", "🧪"),
    ("nav.cause", "cause_pair", "⚖️"),
    ("nav.cause", "cause_patching", "🩹"),
    ("nav.cause", "cause_attribution", "🎯"),
    ("nav.generation", "training", "🏋️"),
    ("nav.generation", "generation", "⏭️"),
    ("nav.generation", "kv_cache", "🗄️"),
    ("nav.generation", "serving", "🚦"),
    ("nav.generation", "chat", "💬"),
    ("nav.generation", "diagnose", "🩺"),
    ("nav.learn", "quiz", "✅"),
    ("nav.learn", "lessons", "🗺️"),
    ("nav.learn", "references", "📚"),
)
STEMS: tuple[str, ...] = tuple(stem for _, stem, _ in PAGES)
DEFAULT = "journey"
# Hidden second routes (URL path → page stem). The default page is served at the app's root, so a
# deep link to "/journey" would answer "Page not found"; this route opens the same script there.
ALIASES: dict[str, str] = {DEFAULT: DEFAULT}
# Streamlit still reserves the default page's own url_path (its internal key, never a URL: the default
# page answers at "/" only), so that path must differ from the alias above.
ROOT_KEY = "root"


def route(url_path: str) -> str | None:
    """The page stem a URL path opens ("" is the default page); None if no page answers there."""
    path = url_path.strip("/")
    if path == "":
        return DEFAULT
    if path in STEMS and path != DEFAULT:
        return path
    return ALIASES.get(path)


def navigation() -> Any:
    """The st.navigation object of every registered page, grouped by section (titles translated), with
    the hidden alias routes next to their page (registered after it, so links still go to its main route)."""
    sections: dict[str, list[Any]] = {}
    for section, stem, icon in PAGES:
        title = ui.t(f"page.{stem}")
        pages = sections.setdefault(ui.t(section), [])
        default = stem == DEFAULT
        pages.append(st.Page(f"pages/{stem}.py", title=title, icon=icon, url_path=ROOT_KEY if default else stem, default=default))
        pages.extend(st.Page(f"pages/{stem}.py", title=title, icon=icon, url_path=path, visibility="hidden")
                     for path, target in ALIASES.items() if target == stem)
    return st.navigation(sections, expanded=True)


APP_NAME = "Transformer X-Ray"


def label_document(page: Any) -> None:
    """The browser tab says which page this is ("Attention heads · Transformer X-Ray", in the page's
    language) (WCAG 2.4.2); the document's language is ``core.web.a11y``'s."""
    st.set_page_config(page_title=f"{page.title} · {APP_NAME}")


def page_link(stem: str, *, label: str | None = None, icon: str = "➡️", where: Any = None,
              query: dict[str, str] | None = None) -> None:
    """A link to a registered page (``where``: a container; the main area by default; ``query``: view
    settings the link opens, e.g. one part of a page), keeping the language."""
    if stem not in STEMS:
        raise KeyError(f"no page '{stem}' is registered in core.web.nav.PAGES")
    (where or st).page_link(f"pages/{stem}.py", label=label or ui.t(f"page.{stem}"), icon=icon,
                            query_params={"lang": ui.lang(), **query} if query else None)


def see_page(stem: str, *, where: Any = None) -> None:
    """The "See the page: …" link under a stage or an answer."""
    page_link(stem, label=ui.t("ui.see_page", page=ui.t(f"page.{stem}")), where=where)


def serving_link(shape: str, *, where: Any = None) -> None:
    """A link to the part of the serving lab that runs the request shape ``shape`` (``workloads.LAB_PART``)."""
    part, preset = workloads.LAB_PART[shape]
    page_link("serving", label=ui.t(f"serving.link_{shape}"), icon="🚦", where=where, query={"part": part, "workload": preset})
