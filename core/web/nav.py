"""The app's pages, listed once: the router builds its navigation from this list, and every link to a
page (journey stages, tour stages, quiz answers, the positions page's pointer to the toy) goes
through ``page_link``, which refuses a page that is not registered rather than checking files."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from core.gen import workloads
from core.web import ui

# One row per page, in the order of the sidebar (core.web.page.run reads a page's row to frame it)
Need = Literal["nothing", "model", "trace", "pair"]


@dataclass(frozen=True)
class Page:
    """A registered page: its section (an i18n key), file stem (pages/<stem>.py; its title is ``page.<stem>``),
    icon, intro (an i18n key, or None), what it needs before it can draw (``nothing``; the ``model``; the
    shared prompt's ``trace``; or the ``pair`` model and trace) and the concept whose references close
    it (``presenter.sources``; None: the page says its own sources, or none). ``projector_intro``: False
    when a projector shows the title alone (the intro paragraph would push the content off the screen)."""

    section: str
    stem: str
    icon: str
    intro: str | None = None
    needs: Need = "nothing"
    sources: str | None = None
    projector_intro: bool = True


PAGES: tuple[Page, ...] = (
    Page("nav.start", "journey", "🧭", "journey.intro", needs="pair", sources="decoder_only"),
    Page("nav.start", "tour", "🎓", "tour.intro", projector_intro=False),
    Page("nav.start", "classroom", "🙋", "classroom.intro"),
    Page("nav.inside", "tokens", "🔤", "tokens.intro", needs="pair"),
    Page("nav.inside", "context", "🍎", "context.intro", sources="transformer"),
    Page("nav.inside", "heads", "👁️", "heads.intro", needs="trace", sources="attention"),
    Page("nav.inside", "long_context", "📜", "longctx.intro", needs="pair", sources="attention"),
    Page("nav.inside", "ablation", "✂️", "ablation.intro", needs="pair", sources="attention"),
    Page("nav.inside", "residual", "➕", "residual.intro", needs="pair", sources="transformer"),
    Page("nav.inside", "logits", "🎲", "logits.intro", needs="trace", sources="sampling"),
    Page("nav.inside", "anatomy", "🧬", "anatomy.intro", needs="model", sources="model"),
    Page("nav.maths", "attention_lab", "🧮", "attention_lab.intro", sources="attention", projector_intro=False),
    Page("nav.maths", "masks", "🎭", "masks.intro", sources="attention", projector_intro=False),
    Page("nav.maths", "multihead", "🧩", "multihead.intro", sources="multihead", projector_intro=False),
    Page("nav.maths", "positions", "🌀", "positions.intro", sources="positions"),
    Page("nav.maths", "norms", "📏", "norms.intro", sources="norms"),
    Page("nav.maths", "toy", "🧪", "toy.intro", sources="transformer"),
    Page("nav.cause", "cause_pair", "⚖️", "cause.pair_intro"),
    Page("nav.cause", "cause_patching", "🩹", "cause.patch_intro"),
    Page("nav.cause", "cause_attribution", "🎯", "cause.attr_intro"),
    Page("nav.generation", "training", "🏋️", "training.intro", needs="trace", sources="training"),
    Page("nav.generation", "generation", "⏭️", "generation.intro", needs="model", sources="kv_cache"),
    Page("nav.generation", "kv_cache", "🗄️", "kv_cache.intro", needs="model", sources="kv_cache"),
    Page("nav.generation", "serving", "🚦", "serving.intro", needs="model", sources="kv_cache"),
    Page("nav.generation", "chat", "💬", "chat.intro", needs="model", sources="decoder_only"),
    Page("nav.generation", "diagnose", "🩺", "diagnose.intro", sources="kv_cache"),
    Page("nav.generation", "decoding", "🏎️", "decoding.intro", needs="model", sources="kv_cache"),
    Page("nav.learn", "quiz", "✅", None),
    Page("nav.learn", "lessons", "🗺️", "lessons.intro", projector_intro=False),
    Page("nav.learn", "references", "📚", "references.intro"),
)
STEMS: tuple[str, ...] = tuple(p.stem for p in PAGES)
BY_STEM: dict[str, Page] = {p.stem: p for p in PAGES}
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
    for row in PAGES:
        section, stem, icon = row.section, row.stem, row.icon
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


def page_link(stem: str, *, label: str | None = None, icon: str = "➡️", where: DeltaGenerator | None = None,
              query: dict[str, str] | None = None) -> None:
    """A link to a registered page (``where``: a container; the main area by default; ``query``: view
    settings the link opens, e.g. one part of a page), keeping the language."""
    if stem not in STEMS:
        raise KeyError(f"no page '{stem}' is registered in core.web.nav.PAGES")
    (where or st).page_link(f"pages/{stem}.py", label=label or ui.t(f"page.{stem}"), icon=icon,
                            query_params={"lang": ui.lang(), **query} if query else None)


def see_page(stem: str, *, where: DeltaGenerator | None = None) -> None:
    """The "See the page: …" link under a stage or an answer."""
    page_link(stem, label=ui.t("ui.see_page", page=ui.t(f"page.{stem}")), where=where)


def serving_link(shape: str, *, where: DeltaGenerator | None = None) -> None:
    """A link to the part of the serving lab that runs the request shape ``shape`` (``workloads.LAB_PART``)."""
    part, preset = workloads.LAB_PART[shape]
    page_link("serving", label=ui.t(f"serving.link_{shape}"), icon="🚦", where=where, query={"part": part, "workload": preset})
