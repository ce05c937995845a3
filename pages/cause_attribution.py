"""Attribution: which input tokens pushed the answer — gradient × input and integrated gradients on the
token embeddings, as coloured chips and bars, beside the last position's attention for contrast."""

from __future__ import annotations

import streamlit as st

from core.cause import attribution
from core.cause import figures as cause_fig
from core.web import cache, cause, chips, page, presenter, ui, widgets
from core.web.bar import Bar


def _steps() -> int:
    link = ui.qp_choice("steps", attribution.IG_STEPS, attribution.DEFAULT_STEPS)  # one of the slider's values, compared as text
    st.session_state.setdefault("cattr_steps", link if link in attribution.IG_STEPS else attribution.DEFAULT_STEPS)
    steps = st.select_slider(ui.t("cause.steps"), attribution.IG_STEPS, key="cattr_steps")
    ui.set_qp(steps=steps)
    return int(steps)


def _chips(title: str, tokens, values) -> None:
    st.markdown(f"**{title}**")
    chips.show_page(tokens, key="attribution", colours=attribution.chip_colours(values), titles=[f"{v:+.4f}" for v in values],
                    notes=[f"{v:+.3f}" for v in values], positions=True)


def render() -> None:
    text = cause.inputs("cattr")
    loaded = ui.loaded_model()
    pt = cause.encoded(loaded, text) if loaded is not None else None
    ans = cause.answers(loaded, text) if pt is not None else None
    if ans is None:
        return
    steps = _steps()
    with Bar(attribution.ig_words(), lang=ui.lang()) as bar:
        att = cache.cause_attribution(loaded, pt.ids_clean, ans.answer, ans.foil, steps, progress=bar)
    gxi, ig = att.gxi, att.ig
    a, f = cause.token_md(ans.answer_text), cause.token_md(ans.foil_text)
    st.markdown(ui.t("cause.attr_target", a=a, f=f, ld=f"{gxi.value:.3f}"))
    _chips(ui.t("cause.chips_gxi"), pt.tokens_clean, gxi.scores)
    _chips(ui.t("cause.chips_ig", steps=steps), pt.tokens_clean, ig.scores)
    L = loaded.facts.n_layers
    layer = widgets.int_slider(ui.t("cause.attn_layer"), 0, L - 1, ui.qp_int("attn_layer", L - 1, 0, L - 1), key="cattr_layer")
    ui.set_qp(attn_layer=layer)
    attn = cache.cause_attention_row(loaded, text.clean, layer)
    presenter.chart(cause_fig.fig_attribution(pt.tokens_clean, gxi.scores, ig.scores, attn, steps, layer, ui.lang()), width="stretch")
    ui.badge("model")
    st.markdown(ui.t("cause.gxi_sum", total=f"{gxi.total:.3f}", ld=f"{gxi.value:.3f}"))
    st.markdown(ui.t("cause.completeness", total=f"{ig.total:.4f}", delta=f"{ig.delta:.4f}", gap=f"{ig.gap:+.2g}", steps=steps))
    if ig.relative_gap > attribution.ROUGH_GAP:
        st.warning(ui.t("cause.ig_rough", steps=steps, rel=f"{ig.relative_gap:,.0%}"))
    st.caption(ui.t("cause.baseline_note"))
    st.markdown(ui.t("cause.why_differ"))
    for key in ("cause.measured_gxi", "cause.measured_ig", "cause.measured_attn"):
        st.markdown(f"- {ui.t(key)}")


page.run(render)
