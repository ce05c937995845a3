"""Guided tour: the sidebar prompt walked through every stage, text → … → next token (?step=)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from core.common import i18n
from core.engine import tokens
from core.learn import figures as learn_fig
from core.learn import tour
from core.web import chips, nav, page, presenter, ui, widgets


def _go(step: int) -> None:
    ui.set_qp(step=tour.clamp_step(step))


def _nav(step: int, n: int, where: str) -> None:
    """Back / Next buttons (the step lives in the URL, so a link opens the same stage)."""
    c1, c2, _ = st.columns([1, 1, 4])
    c1.button(ui.t("tour.back"), key=f"tour_back_{where}", on_click=_go, args=(step - 1,), disabled=step == 0,
              width="stretch")
    last = step == n - 1
    c2.button(ui.t("tour.restart" if last else "tour.next"), key=f"tour_next_{where}", on_click=_go,
              args=(0 if last else step + 1,), type="primary", width="stretch")


def render() -> None:
    projector = presenter.is_on()  # on a projector the header is only the title, the buttons and the stage: no scroll to reach it
    lang, n = ui.lang(), len(tour.STAGES)
    step = ui.qp_int("step", 0, 0, n - 1)
    ui.set_qp(step=step)
    stage = tour.STAGES[step]
    if not projector:  # the stage's heading says "i. name" already; the bar repeats it
        st.progress((step + 1) / n, text=ui.t("tour.progress", i=step + 1, n=n, name=ui.t(f"tour.{stage.key}.title")))
    _nav(step, n, "top")
    st.header(f"{step + 1}. {ui.t(f'tour.{stage.key}.title')}")

    got = ui.model_and_trace()
    if got is None:
        return
    loaded, tr = got
    layer = 0
    view = tour.stage_view(stage.key, tr, lambda ids: tokens.readable_tokens(loaded.tokenizer, ids))
    if view.uses_layer:  # the layer lives in the URL too (?layer=), shared with the other pages
        layer = widgets.int_slider(ui.t("tour.layer_pick"), 0, tr.n_layers - 1, ui.qp_layer(tr.n_layers, tr.n_layers - 1),
                                   key="tour_layer")
        ui.set_qp(layer=layer)
        view = tour.stage_view(stage.key, tr, lambda ids: tokens.readable_tokens(loaded.tokenizer, ids), layer)
    st.markdown(ui.t(f"tour.{stage.key}.body", **view.fill))

    if stage.key == "text":
        st.caption(ui.t("tour.text_label"))
        st.code(tr.text[:3000], language=None, wrap_lines=True)
        ui.english_note(ui.prompt())  # a Chinese prompt on SmolLM2: trained mostly on English, in numbers
    if view.chips is not None:
        with st.container(key="tour_tokens"):
            chips.show(view.chips, positions=True, limit=200, start=view.chips_start, framed_tail=view.chips_new)
        if view.chips_start:
            st.caption(ui.t("tour.next_hidden", n=view.chips_start - 1))
    cols = st.columns(len(view.metrics))
    for col, (label, value) in zip(cols, view.metrics):
        col.metric(ui.t(label), value)
    if view.chart is not None:
        fig = learn_fig.stage_figure(view.chart, lambda k: i18n.t(k, lang))
        presenter.chart(fig, width="stretch", key="tour_chart")
    if view.table is not None and not presenter.is_on():
        st.dataframe(pd.DataFrame({ui.t(k): v for k, v in view.table.items()}), hide_index=True, key="tour_table")
    ui.badge("formula" if stage.key == "kv_cache" else "model")

    if stage.pages:
        st.markdown(f"**{ui.t('tour.deep')}**")
        for p in stage.pages:
            nav.page_link(p)
    presenter.sources(stage.concept)
    _nav(step, n, "bottom")
    if not presenter.is_on():
        ui.download_trace(tr, "tour")


page.run(render)
