"""Lessons: two prepared 45-minute routes (taught in English or in Chinese), each step a link to exactly
one view with what to say and what to ask; then the self-study order of the tutorials' sections, with
the pages this session has opened ticked off (``core.web.visits``, marked by the router)."""

from __future__ import annotations

import streamlit as st

from core.engine.types import EMBEDDED_ID
from core.learn import examples, lessons
from core.web import cache, nav, page, presenter, ui, visits, widgets


def _she_view() -> examples.View | None:
    """Seed 000's 她 → 小红 view on the model the lesson's links open (the embedded one: they name no
    model), read off every layer's attention; None (and the link leaves the view to the page) if it cannot be read."""
    try:
        tr = cache.get_trace(EMBEDDED_ID, examples.SHE.prompt, False)
        return examples.view_of(tr, lambda layer: cache.site(tr, "attn_pattern", layer))
    except Exception:  # the link still opens the page on the example's prompt, where its button finds the view
        return None


def _href(route: lessons.Route, step: lessons.Step, view: examples.View | None) -> str:
    """The step's link, refused like nav.page_link when its page is not registered: always in presenter mode
    (it is for the projector), whatever this page's own mode (the teacher's laptop need not be in it)."""
    if step.page not in nav.STEMS:
        raise KeyError(f"no page '{step.page}' is registered in core.web.nav.PAGES")
    return lessons.href(route, step, view, present=True)


def _step(i: int, route: lessons.Route, step: lessons.Step, view: examples.View | None, notes: bool) -> None:
    base = f"lessons.{route.key}.{step.key}"
    with st.container(border=True, key=f"lessons_step_{route.key}_{i}"):
        st.header(ui.t("lessons.step_head", i=i, title=ui.t(f"{base}.title"), m=step.minutes))
        # A plain link, not st.page_link: it starts a fresh session that reads every setting from the URL,
        # so the view is the prepared one whatever this session changed (prompt, sliders held by pages).
        st.markdown(f"🔗 [{ui.t('lessons.open_projector', page=ui.t(f'page.{step.page}'))}]({_href(route, step, view)})")
        st.markdown(f"**{ui.t('lessons.say')}** {ui.t(f'{base}.say')}")
        st.markdown(f"**{ui.t('lessons.ask')}** {ui.t(f'{base}.ask')}")
        answer = ui.t(f"{base}.answer", **lessons.fill(step, view))
        if notes:  # the teacher's notes: written out, also in presenter mode (which hides expanders)
            st.markdown(f"**{ui.t('lessons.answer')}:** {answer}" if ui.lang() == "en" else f"**{ui.t('lessons.answer')}：**{answer}")
        else:
            with st.expander(ui.t("lessons.answer")):  # hidden on a projector (presenter mode hides expanders)
                st.markdown(answer)


def _route() -> None:
    keys = list(lessons.ROUTES)
    default = ui.lang() if ui.lang() in lessons.ROUTES else keys[0]
    key = widgets.radio_url(ui.t("lessons.route"), keys, default, format_func=ui.fmt("lessons.route_{}"), horizontal=True,
                            key="lessons_route", param="route")
    route = lessons.ROUTES[key]
    st.markdown(ui.t(f"lessons.route_{key}_intro", n=len(route.steps), m=route.minutes, prompt=widgets.code(route.prompt)))
    notes = widgets.toggle_url(ui.t("lessons.notes"), False, key="lessons_notes", param="notes", help=ui.t("lessons.notes_help"))
    st.caption(ui.t("lessons.links_note_present"))
    view = _she_view() if any(s.view == "she" for s in route.steps) else None
    for i, step in enumerate(route.steps, start=1):
        _step(i, route, step, view, notes)


def _self_study() -> None:
    st.header(ui.t("lessons.self_title"), anchor="self_study")  # the home page links here (?focus=self_study)
    st.markdown(ui.t("lessons.self_intro"))
    opened = set(visits.opened())
    done = lessons.covered(opened)
    if done:
        st.success(ui.t("lessons.covered", n=len(done), N=len(lessons.SECTIONS), ids=", ".join(f"§{s.id}" for s in done)))
    else:
        st.info(ui.t("lessons.covered_none", N=len(lessons.SECTIONS)))
    nxt = lessons.first_open(opened)
    for i, stem in enumerate(lessons.ORDER, start=1):
        mark = "✅" if stem in opened else "⬜"
        c1, c2 = st.columns([2, 3], vertical_alignment="center")
        nav.page_link(stem, label=f"{i}. {ui.t(f'page.{stem}')}", icon=mark, where=c1)  # same session: opening it ticks it
        secs = lessons.sections_at(stem)
        c2.caption(" · ".join(f"§{s.id} {ui.t(s.key)}" for s in secs) + (f" — {ui.t('lessons.next')}" if stem == nxt else ""))
        for tab, ids in lessons.tabs_at(stem):  # the page's tabs that cover sections (the architecture tabs): opened at the tab
            nav.page_link(stem, label=ui.t("lessons.tab_link", tab=ui.t(f"{stem}.tab_{tab}"), ids=", ".join(f"§{i}" for i in ids)),
                          icon="📑", where=c2, query={"tab": tab})


def render() -> None:
    projector = presenter.is_on()  # on a projector: the route only, no intro paragraph
    _route()
    if not projector:
        _self_study()


page.run(render)
