"""Training vs inference: labels shifted by one, every position's loss from one parallel pass (teacher
forcing), beside inference's one position at a time — the same logits for the same prefix."""

import pandas as pd
import streamlit as st

from core.common import escape
from core.engine.tokens import label, position_label
from core.learn import figures as lf
from core.learn import training
from core.web import cache, nav, page, presenter, ui, widgets

SHOWN_SHIFT = 8  # pairs written out in the "inputs / labels" lines


def _shift(tf: training.TeacherForcing) -> None:
    st.header(ui.t("training.h_shift"), anchor="shift")
    st.markdown(ui.t("training.shift_note"))
    k = min(SHOWN_SHIFT, tf.n)
    more = " …" if tf.n > k else ""
    inputs = " ".join(f"`{escape.code(position_label(tf.tokens, i))}`" for i in range(k))
    labels = " ".join(f"`{escape.code(position_label(tf.tokens, i + 1))}`" for i in range(k))
    st.markdown(f"{ui.t('training.inputs_line', x=inputs + more)}  \n{ui.t('training.labels_line', x=labels + more)}")


def _table(tf: training.TeacherForcing, texts: list[str]) -> pd.DataFrame:
    """One row per position: what it reads, what it must predict, the model's favourite, p and the loss."""
    return pd.DataFrame({
        ui.t("training.col_pos"): list(range(tf.n)),
        ui.t("training.col_input"): [label(tf.tokens, i) for i in range(tf.n)],
        ui.t("training.col_label"): [label(tf.tokens, i + 1) for i in range(tf.n)],
        ui.t("training.col_top1"): texts,
        ui.t("training.col_p"): [f"{p:.2%}" for p in tf.p_label],
        ui.t("training.col_rank"): [int(r) + 1 for r in tf.rank],
        ui.t("training.col_loss"): [round(float(v), 3) for v in tf.losses],
    })


def _loss(tf: training.TeacherForcing, texts: list[str], chosen: int) -> None:
    st.header(ui.t("training.h_loss"))
    st.markdown(ui.t("training.loss_note"))
    if tf.cut:
        st.caption(ui.t("training.cut", n=tf.ids.size, total=tf.n_total))
    m = st.columns(4)
    m[0].metric(ui.t("training.m_positions"), f"{tf.n:,}")
    m[1].metric(ui.t("training.m_loss"), f"{tf.mean_loss:.3f}")
    m[2].metric(ui.t("training.m_ppl"), f"{tf.perplexity:,.1f}")
    m[3].metric(ui.t("training.m_top1"), f"{tf.n_top1} / {tf.n}")
    presenter.chart(lf.loss_figure(tf.losses, tf.p_label, tf.rank, tf.tokens, chosen, ui.t))
    ui.badge("model", ui.t("training.one_pass"))
    presenter.frame(_table(tf, texts), hide_index=True, width="stretch")
    st.caption(ui.t("training.hf_check"))


def _inference(tr, tf: training.TeacherForcing, loaded, texts: list[str]) -> int:
    st.header(ui.t("training.h_infer"))
    st.markdown(ui.t("training.infer_note"))
    T = tf.ids.size
    t = widgets.int_slider(ui.t("training.pick_pos"), 0, T - 1, ui.qp_int("pos", T - 2, 0, T - 1), key="training_pos")
    ui.set_qp(pos=t)
    lines = []
    for s in range(max(0, t - 2), t + 1):  # the loop generation runs: the text so far → one new token
        prefix = " ".join(label(tf.tokens, j) for j in range(max(0, s - 3), s + 1))
        real = ui.t("training.real_next", tok=escape.code(label(tf.tokens, s + 1))) if s + 1 < T else ""
        fav = escape.code(texts[s]) if s < tf.n else ""
        lines.append(f"- `{'… ' if s > 3 else ''}{escape.code(prefix)}` → `{fav}` {real}" if fav else
                     f"- `{'… ' if s > 3 else ''}{escape.code(prefix)}` → ?")
    st.markdown("\n".join(lines))
    with st.spinner(ui.t("training.running_prefix", n=t + 1)):
        sl = cache.same_logits(tr, t)
    m = st.columns(3)
    m[0].metric(ui.t("training.m_diff"), f"{sl.max_diff:.2e}")
    m[1].metric(ui.t("training.m_rel"), f"{sl.max_diff / max(sl.scale, 1e-30):.1e}")
    m[2].metric(ui.t("training.m_same_top", k=sl.top_ids.size), ui.t("training.yes") if sl.same_top else ui.t("training.no"))
    zp, zf = sl.top_logits()
    presenter.chart(lf.same_logits_figure(zp, zf, cache.token_texts(loaded, tuple(int(i) for i in sl.top_ids)), ui.t))
    ui.badge("model", ui.t("training.where", p=escape.md(position_label(tf.tokens, t))))
    st.caption(ui.t("training.same_note", n=t + 1, T=T))
    st.info(ui.t("training.kv_note"))
    nav.see_page("kv_cache")
    return t


def render(tr) -> None:
    if tr.n_tokens < 2:
        st.info(ui.t("training.too_short"))
        return
    loaded = cache.model_of(tr)
    with st.spinner(ui.t("training.running")):
        tf = cache.teacher_forcing(tr)
    texts = cache.token_texts(loaded, tuple(int(i) for i in tf.top1))
    _shift(tf)
    held = st.session_state.get("training_pos")  # the position the inference section picks (this run's, not the URL's last)
    chosen = held if isinstance(held, int) else ui.qp_int("pos", tf.ids.size - 2, 0, tf.ids.size - 1)
    _loss(tf, texts, chosen)
    _inference(tr, tf, loaded, texts)
    st.caption(ui.t("training.quiz_note"))
    nav.see_page("quiz")


page.run(render)
