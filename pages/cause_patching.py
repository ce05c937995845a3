"""Activation patching: run the corrupted prompt with one activation copied from the clean run, for
every (layer, position) — or every head at the last position — and see how much of the clean answer
comes back. Click or pick a cell to see that run's next tokens."""

from __future__ import annotations

import numpy as np
import streamlit as st

from core.cause import figures as cause_fig
from core.cause import pair, patching
from core.common.numbers import three_significant
from core.engine.tokens import position_label
from core.web import cache, cause, page, presenter, ui, widgets
from core.web.bar import Bar

GRID = "cpatch_grid"


def _site() -> str:
    link = st.query_params.get("site")
    st.session_state.setdefault("cpatch_site", link if link in patching.PATCHED else "resid")
    site = st.radio(ui.t("cause.site"), patching.PATCHED, key="cpatch_site", format_func=ui.fmt("cause.site_{}"), horizontal=True)
    ui.set_qp(site=site)
    return site


def _sweep(loaded, r: cause.Ready, site: str) -> np.ndarray:
    with Bar(patching.sweep_words(site), lang=ui.lang()) as bar:
        raw = cache.cause_sweep(loaded, *r.ids, r.answers.answer, r.answers.foil, site, progress=bar)
    sp = patching.sweep_plan(r.base, site)
    st.caption(ui.t("cause.runs_cached" if sp.cached else "cause.runs", n=f"{sp.runs:,}", passes=f"{sp.passes:,}",
                    pct=three_significant(100 * sp.share)))
    if sp.unchanged:
        st.caption(ui.t("cause.runs_same", m=f"{sp.unchanged:,}"))
    return raw


def _cell(r: cause.Ready, site: str, raw: np.ndarray) -> tuple[int, int]:
    """The cell to look at: a click, the pickers, the link's — or, at first, the one that restores most."""
    L, n_cols = raw.shape
    norm = patching.normalise(raw, r.ld_clean, r.ld_corrupted)
    best = patching.best_cell(raw if norm is None else norm)
    click = cause.new_click(GRID, L, n_cols)
    if click is not None:  # read before the pickers are drawn, so that they can move to it
        st.session_state["cpatch_layer"], st.session_state[f"cpatch_col_{site}"] = click
    heads = site == patching.HEAD
    st.caption(ui.t("cause.pick_hint"))
    c1, c2 = st.columns(2)
    qp, col_key = ("head" if heads else "pos"), f"cpatch_col_{site}"
    first = {k: k not in st.session_state for k in ("cpatch_layer", col_key)}  # later, the session holds the value
    layer = widgets.int_slider(ui.t("cause.pick_layer"), 0, L - 1, ui.qp_layer(L, best[0]) if first["cpatch_layer"] else None,
                               key="cpatch_layer", where=c1)
    col = widgets.int_slider(ui.t("cause.pick_head" if heads else "cause.pick_pos"), 0, n_cols - 1,
                             ui.qp_int(qp, best[1], 0, n_cols - 1) if first[col_key] else None, key=col_key, where=c2)
    ui.set_qp(layer=layer, **{qp: col})
    return layer, col


def _where(r: cause.Ready, site: str, col: int) -> str:
    if site == patching.HEAD:
        return ui.t("cause.cell_where_head", h=col)
    return ui.t("cause.cell_where_pos", pos=col, tok=widgets.md(position_label(r.tokens.tokens_corrupted, col)))


def _grid_figure(r: cause.Ready, site: str, raw: np.ndarray, cell: tuple[int, int]) -> None:
    norm = patching.normalise(raw, r.ld_clean, r.ld_corrupted)
    label = ui.t(f"cause.site_{site}")
    if norm is None:
        st.info(ui.t("cause.no_span", ld=f"{r.ld_clean:.3f}"))
    title = ui.t("cause.fig_grid_title" if norm is not None else "cause.fig_grid_title_raw", site=label)
    fig = cause_fig.fig_patch_grid(raw if norm is None else norm, raw, r.tokens.tokens_corrupted, title, ui.lang(), mark=cell,
                                   heads=site == patching.HEAD, normalised=norm is not None)
    presenter.chart(fig, width="stretch", key=GRID, on_select="rerun", selection_mode="points")
    ui.badge("model")
    if norm is not None:
        bl, bc = patching.best_cell(norm)
        st.markdown(ui.t("cause.best", l=bl, where=_where(r, site, bc), s=f"{norm[bl, bc]:.0%}"))
    st.markdown(ui.t(f"cause.measured_{site}"))


def _detail(loaded, r: cause.Ready, site: str, cell: tuple[int, int]) -> None:
    layer, col = cell
    heads = site == patching.HEAD
    pos, head = (r.base.n_tokens - 1, col) if heads else (col, None)
    st.header(ui.t("cause.pick_title"))
    st.markdown(f"{ui.t(f'cause.site_{site}')} · {ui.t('cause.layer_n', l=layer)} · {_where(r, site, col)}")
    run = cache.cause_run(loaded, *r.ids, site, layer, pos, head)
    ld = pair.logit_diff(run, r.answers.answer, r.answers.foil)
    norm = patching.normalise(ld, r.ld_clean, r.ld_corrupted)
    names = {"p_patched": run, "p_clean": r.base.clean_logits(), "p_corrupted": r.base.corrupted_logits()}
    rows = pair.compare_rows(loaded.tokenizer, names, "p_patched")
    m1, m2, m3 = st.columns(3)
    m1.metric(ui.t("cause.m_cell_ld"), f"{ld:.3f}")
    m2.metric(ui.t("cause.m_cell_restored"), "—" if norm is None else f"{float(norm):.0%}")
    m3.metric(ui.t("cause.m_cell_top"), rows[0]["token"])
    head_names = {"token": ui.t("cause.col_token"), **{k: ui.t(f"cause.col_{k}") for k in names}}
    # every probability to two decimals (never 2.9% beside 3.78%, or 0% beside 0.01%); text, so it reads the same on a projector
    table = [{head_names[k]: (v if k == "token" else f"{v:.2%}") for k, v in row.items() if k in head_names} for row in rows]
    presenter.frame(table, hide_index=True, width="stretch")
    ui.badge("model")


def render() -> None:
    text = cause.inputs("cpatch")
    loaded = ui.loaded_model()
    r = cause.ready(loaded, text) if loaded is not None else None
    if r is None:
        return
    site = _site()
    raw = _sweep(loaded, r, site)
    cell = _cell(r, site, raw)
    _grid_figure(r, site, raw, cell)
    _detail(loaded, r, site, cell)


page.run(render)
