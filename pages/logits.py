"""Logits & sampling: top candidates, temperature / top-k / top-p / penalty, a seeded draw, the logit lens."""

from dataclasses import replace

import streamlit as st

from core.common.numbers import entropy_bits, top_k
from core.engine.tokens import position_label
from core.gen import sampling
from core.stream import candidates, lens
from core.stream import figures as ps
from core.web import cache, contents, page, presenter, ui, widgets
from core.web import receipt as why


def _top(tr, loaded, lang: str) -> None:
    contents.section("logits.h_top")
    ids = candidates.top_ids(tr.last_logits)
    table = candidates.top_table(tr.last_logits, ids, cache.token_texts(loaded, tuple(ids)), lang)
    presenter.frame(candidates.top_table_view(table, lang), hide_index=True, width="stretch")
    ui.badge("model", position_label(tr.tokens, tr.n_tokens - 1))


def _controls(tr) -> sampling.SamplingConfig:
    c = st.columns(4)  # the settings are in the URL (validated there): a shared link shows the same filtering
    temp = widgets.slider_url(ui.t("logits.temperature"), 0.05, 3.0, 1.0, 0.05, key="logits_temp", param="temp", where=c[0])
    k = widgets.number_url(ui.t("logits.top_k"), 0, tr.vocab_size, 0, key="logits_topk", param="top_k", where=c[1])
    top_p = widgets.slider_url(ui.t("logits.top_p"), 0.05, 1.0, 1.0, 0.01, key="logits_topp", param="top_p", where=c[2])
    pen = widgets.slider_url(ui.t("logits.penalty"), 1.0, 2.0, 1.0, 0.05, key="logits_pen", param="penalty", where=c[3])
    return sampling.SamplingConfig(temperature=temp, top_k=int(k), top_p=top_p, repetition_penalty=pen)


def _filtering(tr, loaded, lang: str, cfg: sampling.SamplingConfig, prev: list[int], picture) -> dict:
    """The candidates before and after the filtering, and what is left, drawn in ``picture`` (above the settings)."""
    steps = sampling.filter_steps(tr.last_logits, cfg, prev)
    order = top_k(steps["scaled"], candidates.N_BARS)
    with picture:
        presenter.chart(ps.fig_candidates(steps, cache.token_texts(loaded, tuple(order.tolist())), order, lang), width="stretch",
                        key="logits_candidates")
        m = st.columns(3)
        m[0].metric(ui.t("logits.m_kept"), f"{int(steps['keep'].sum()):,}")
        m[1].metric(ui.t("logits.m_top1"), f"{steps['probs'].max():.4f}")  # four decimals, as the table's probabilities
        m[2].metric(ui.t("logits.m_entropy"), f"{entropy_bits(steps['probs']):.2f}")
        ui.badge("model")
    st.caption(ui.t("logits.order"))
    return steps


def _draw(tr, loaded, cfg: sampling.SamplingConfig, prev: list[int], probs) -> None:
    contents.section("logits.h_draw")
    seed = widgets.number_url(ui.t("logits.seed"), 0, 2**31 - 1, 0, key="logits_seed", param="seed")
    greedy_id = sampling.choose(tr.last_logits, sampling.SamplingConfig(greedy=True, repetition_penalty=cfg.repetition_penalty), prev)
    drawn_id = sampling.choose(tr.last_logits, replace(cfg, seed=seed), prev)
    g_txt, d_txt = cache.token_texts(loaded, (greedy_id, drawn_id))
    d = st.columns(2)
    d[0].metric(ui.t("logits.greedy"), f"«{g_txt}»")
    d[0].caption(candidates.pick_note(greedy_id, probs))
    d[1].metric(ui.t("logits.sampled", seed=seed), f"«{d_txt}»")
    d[1].caption(candidates.pick_note(drawn_id, probs))
    st.caption(ui.t("logits.draw_note"))
    ui.badge("model")


def _lens(tr, lang: str) -> None:
    contents.section("logits.h_lens")
    T, W = tr.n_tokens, lens.LENS_WINDOW
    lo, hi = (0, T) if T <= W else st.slider(ui.t("logits.lens_window"), 0, T, (T - W, T), key="logits_win")
    hi = max(hi, lo + 1)
    if hi - lo > lens.LENS_MAX:
        hi = lo + lens.LENS_MAX
        st.caption(ui.t("logits.lens_capped", n=lens.LENS_MAX, a=lo, b=hi - 1))
    try:  # only the window's positions are read through the LM head (31 passes over T rows otherwise)
        ids, probs, cells = cache.get_lens(tr, lo, hi)
    except Exception as e:  # e.g. a model without a findable final norm
        st.info(ui.t("logits.lens_fail", msg=widgets.md(e)))
        return
    show = st.toggle(ui.t("logits.lens_text"), value=True, key="logits_lens_text")
    v = lens.lens_view(ids, probs, cells, tr.tokens, lo, hi, first=lo)
    fig = ps.fig_logit_lens(v.ids, v.probs, v.cells, v.tokens, lang, show, offset=v.offset)
    st.caption(ps.lens_caption(fig, lang))  # which row is the prediction, read off the figure itself
    presenter.chart(fig, width="stretch")
    ui.badge("model")
    ui.download_trace(tr, "logits")


def render(tr) -> None:
    lang, loaded = ui.lang(), cache.model_of(tr)
    contents.section("logits.h_controls")
    picture = st.container()  # the picture first, on the first screen; the settings that shape it under it
    cfg = _controls(tr)
    prev = tr.token_ids.tolist()  # the penalty looks at the tokens already in the context
    steps = _filtering(tr, loaded, lang, cfg, prev, picture)
    _top(tr, loaded, lang)
    why.offer(loaded, tr)  # "Why this token?": a receipt for a position's choice
    _draw(tr, loaded, cfg, prev, steps["probs"])
    _lens(tr, lang)


page.run(render)
