"""Same token, different context: one token's residual stream in two prompts, layer by layer."""

from __future__ import annotations

import streamlit as st

from core.engine.tokens import position_label
from core.inside import embeddings
from core.inside import figures as inside_fig
from core.web import page, presenter, ui, widgets


def _pick(col, label: str, tr, default: int, key: str, param: str) -> int:
    """A position picker whose choice a link carries (``?param=``), clamped to the prompt."""
    first = ui.qp_int(param, min(default, tr.n_tokens - 1), 0, tr.n_tokens - 1)
    i = col.selectbox(label, range(tr.n_tokens), index=first,
                      format_func=lambda i: embeddings.pick_label(tr.tokens, tr.token_ids, i), placeholder=ui.t("ui.choose"), key=key)
    ui.set_qp(**{param: i})
    return int(i)


def _notes(c: embeddings.ContextComparison, pos: int) -> None:
    if not c.same_id:
        st.warning(ui.t("context.diff_ids", a=c.id_a, b=c.id_b))
    elif c.same_prefix:
        st.info(ui.t("context.same_prefix", p=pos))


def _word(comps: list[embeddings.ContextComparison], labels_a: list[str], labels_b: list[str], lang: str) -> None:
    """Every followed token: one line each in the chart, one row each in the table."""
    presenter.chart(inside_fig.fig_context([c.sim for c in comps], [f"{a} | {b}" for a, b in zip(labels_a, labels_b)],
                                           comps[-1].base, lang), width="stretch", key="context_fig")
    if len(comps) > 1:
        st.markdown(f"**{ui.t('context.word_table')}**")
        fmt = {ui.t(f"context.col_{k}"): "{:.3f}" for k in ("embed", "min", "last")}
        presenter.frame(embeddings.word_table(comps, labels_a, labels_b, lang).style.format(fmt), hide_index=True,
                        key="context_word_table")


def _result(comps: list[embeddings.ContextComparison], labels_a: list[str], labels_b: list[str], lang: str, position_type: str) -> None:
    """The last followed token's numbers (it has read the whole word), then every token's curve."""
    c, label_a, label_b = comps[-1], labels_a[-1], labels_b[-1]
    m1, m2, m3 = st.columns(3)
    m1.metric(ui.t("context.m_embed"), f"{c.sim[0]:.3f}")  # the same 3 decimals as its neighbours
    m2.metric(ui.t("context.m_min"), f"{c.sim.min():.3f}", help=ui.t("context.m_min_help", l=c.weakest_layer))
    m3.metric(ui.t("context.m_last"), f"{c.sim[-1]:.3f}", help=ui.t("context.m_base_help", b=float(c.base[-1])))
    _word(comps, labels_a, labels_b, lang)
    ui.badge("model", ui.t("context.badge", a=widgets.md(label_a), b=widgets.md(label_b)))
    added = position_type in ("learned", "sinusoidal")  # GPT-2 adds its position vector to the stream: no RoPE sentence
    st.markdown(ui.t("context.explain_added", pos=ui.t(f"context.pos_{position_type}")) if added else ui.t("context.explain"))
    with st.expander(ui.t("context.table")):
        fmt = {ui.t("context.col_sim"): "{:.6f}", ui.t("context.col_base"): "{:.4f}"}
        presenter.frame(embeddings.context_table(c, lang).style.format(fmt), hide_index=True)
        ui.badge("model")


def render() -> None:
    loaded = ui.loaded_model()
    if loaded is None:
        return
    preset = widgets.selectbox_url(ui.t("context.preset"), list(embeddings.CONTEXT_PAIRS), next(iter(embeddings.CONTEXT_PAIRS)),
                                   format_func=ui.fmt("context.preset_{}"), key="context_preset", param="pair")  # a link keeps the pair
    a0, b0, word = embeddings.CONTEXT_PAIRS[preset]
    picture = st.container()  # the result first, on the first screen; the prompts and positions that set it under it
    c1, c2 = st.columns(2)
    pa = c1.text_input(ui.t("context.prompt_a"), a0, key=f"context_a_{preset}", max_chars=2000)
    pb = c2.text_input(ui.t("context.prompt_b"), b0, key=f"context_b_{preset}", max_chars=2000)
    ta = ui.current_trace(pa, chat_mode=False)
    tb = ui.current_trace(pb, chat_mode=False)
    if ta is None or tb is None:
        return
    da, db = embeddings.default_positions(ta.token_ids, tb.token_ids, embeddings.word_ids(loaded.tokenizer, word))
    if st.session_state.get("_context_shown", (preset, pa, pb)) != (preset, pa, pb):  # another pair: the link's positions were the old one's
        for k in ("pa", "pb"):
            st.query_params.pop(k, None)
    st.session_state["_context_shown"] = (preset, pa, pb)
    ia = _pick(c1, ui.t("context.pos_a"), ta, da, f"context_pa_{preset}_{abs(hash(pa))}", "pa")
    ib = _pick(c2, ui.t("context.pos_b"), tb, db, f"context_pb_{preset}_{abs(hash(pb))}", "pb")
    if not embeddings.comparable(ta.resid, tb.resid):
        st.error(ui.t("context.mismatch"))
        return
    wid = embeddings.word_ids(loaded.tokenizer, word)
    most = min(8, ia + 1, ib + 1)
    n = widgets.int_slider(ui.t("context.follow"), 1, most, min(max(1, len(wid)), most), key=f"context_n_{preset}",
                           help=ui.t("context.follow_help"))
    pairs = embeddings.follow_pairs(ia, ib, n)
    comps = embeddings.compare_word(ta.token_ids, ta.resid, tb.token_ids, tb.resid, pairs)
    labels_a = [position_label(ta.tokens, i) for i, _ in pairs]
    labels_b = [position_label(tb.tokens, j) for _, j in pairs]
    c = comps[-1]
    with picture:
        _notes(c, ia)
        if n > 1:
            st.caption(ui.t("context.word_note", n=n, a=widgets.md(" ".join(labels_a)), b=widgets.md(" ".join(labels_b))))
        _result(comps, labels_a, labels_b, ui.lang(), loaded.facts.position_type)


page.run(render)
