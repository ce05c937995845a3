"""Logits & sampling: top candidates, temperature / top-k / top-p / penalty, a seeded draw, the logit lens."""

import numpy as np
import pandas as pd
import streamlit as st

from core.engine.tokens import position_label
from core.gen import sampling
from core.stream import figures as ps
from core.web import cache, presenter, ui


def render() -> None:
    ui.header("page.logits", "logits.intro")
    tr = ui.current_trace()
    if tr is None:
        return
    lang, t, spec = ui.lang(), ui.t, ui.model_spec()

    st.subheader(t("logits.h_top"))
    top = np.argsort(-tr.last_logits, kind="stable")[:10]
    p1 = tr.last_probs()
    st.dataframe(pd.DataFrame({
        t("logits.col_rank"): range(1, len(top) + 1),
        t("logits.col_token"): cache.token_texts(spec, tuple(top.tolist())),
        t("logits.col_id"): top, t("logits.col_logit"): tr.last_logits[top].round(3), t("logits.col_prob"): p1[top].round(4),
    }), hide_index=True, width="stretch")
    ui.badge("model", position_label(tr.tokens, tr.n_tokens - 1))

    st.subheader(t("logits.h_controls"))
    c = st.columns(4)
    temp = c[0].slider(t("logits.temperature"), 0.05, 3.0, 1.0, 0.05, key="logits_temp")
    top_k = c[1].number_input(t("logits.top_k"), 0, tr.vocab_size, 0, key="logits_topk")
    top_p = c[2].slider(t("logits.top_p"), 0.05, 1.0, 1.0, 0.01, key="logits_topp")
    pen = c[3].slider(t("logits.penalty"), 1.0, 2.0, 1.0, 0.05, key="logits_pen")
    st.caption(t("logits.order"))
    prev = tr.token_ids.tolist()  # the penalty looks at the tokens already in the context
    cfg = sampling.SamplingConfig(temperature=temp, top_k=int(top_k), top_p=top_p, repetition_penalty=pen)
    steps = sampling.filter_steps(tr.last_logits, cfg, prev)
    order = np.argsort(-steps["scaled"], kind="stable")[:30]
    texts = cache.token_texts(spec, tuple(order.tolist()))
    st.plotly_chart(ps.fig_candidates(steps, texts, order, lang), width="stretch")
    m = st.columns(3)
    m[0].metric(t("logits.m_kept"), f"{int(steps['keep'].sum()):,}")
    m[1].metric(t("logits.m_top1"), f"{steps['probs'].max():.3f}")
    m[2].metric(t("logits.m_entropy"), f"{sampling.entropy_bits(steps['probs']):.2f}")
    ui.badge("model")

    st.subheader(t("logits.h_draw"))
    seed = int(st.number_input(t("logits.seed"), 0, 2**31 - 1, 0, key="logits_seed"))
    greedy_id = sampling.choose(tr.last_logits, sampling.SamplingConfig(greedy=True, repetition_penalty=pen), prev)
    drawn_id = sampling.choose(tr.last_logits, sampling.SamplingConfig(temp, int(top_k), top_p, pen, seed=seed), prev)
    g_txt, d_txt = cache.token_texts(spec, (greedy_id, drawn_id))
    d = st.columns(2)
    d[0].metric(t("logits.greedy"), f"«{g_txt}»", f"id {greedy_id} · p = {steps['probs'][greedy_id]:.3f}", delta_color="off", delta_arrow="off")
    d[1].metric(t("logits.sampled", seed=seed), f"«{d_txt}»", f"id {drawn_id} · p = {steps['probs'][drawn_id]:.3f}", delta_color="off", delta_arrow="off")
    st.caption(t("logits.draw_note"))
    ui.badge("model")

    st.subheader(t("logits.h_lens"))
    st.caption(t("logits.lens_note"))
    try:
        ids, probs, cells = cache.get_lens(spec, ui.prompt(), ui.chat())
    except Exception as e:  # e.g. a model without a findable final norm
        st.info(t("logits.lens_fail", msg=str(e)))
        return
    T = tr.n_tokens
    lo, hi = (0, T) if T <= 16 else st.slider(t("logits.lens_window"), 0, T, (T - 16, T), key="logits_win")
    hi = max(hi, lo + 1)
    show = st.toggle(t("logits.lens_text"), value=True, key="logits_lens_text")
    cells = np.asarray(cells, dtype=object).reshape(ids.shape)[:, lo:hi]
    st.plotly_chart(ps.fig_logit_lens(ids[:, lo:hi], probs[:, lo:hi], cells.ravel().tolist(), list(tr.tokens[lo:hi]), lang, show,
                                      offset=lo), width="stretch")
    ui.badge("model")
    ui.download_trace("logits")


render()
presenter.sources("sampling")
