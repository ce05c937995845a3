"""Long context: what the predicting position reads across a whole document (which heads find a
fact planted early), and how the first token soaks up attention as the sequence grows."""

from __future__ import annotations

import streamlit as st

from core.common import escape
from core.inside import figures as inside_fig
from core.inside import heads, longctx, pasttrain
from core.learn import long_docs
from core.web import cache, page, presenter, ui, widgets


def _span(loaded, tr) -> tuple[int, int]:
    """The key span to follow: the planted fact of a long-document preset, else the user's choice."""
    T = tr.n_tokens
    doc = long_docs.which(tr.prompt)
    found = long_docs.span_of(loaded.tokenizer, tr.text, tr.token_ids.tolist(), long_docs.load(doc).fact) if doc else None
    a0, b0 = found or longctx.default_span(T)  # from position 1: a span with the sink in it ranks the sink
    a, b = st.slider(ui.t("longctx.span"), 0, T - 1, (a0, b0), key=f"longctx_span_{doc or 'free'}_{T}")
    if found:
        st.caption(ui.t("longctx.fact_is", a=found[0], b=found[1], fact=widgets.md(long_docs.load(doc).fact)))
    else:
        st.caption(ui.t("longctx.span_free"))
    return int(a), int(b)


def _reader(loaded, tr, lang: str) -> None:
    st.header(ui.t("longctx.h_reader"))
    st.markdown(ui.t("longctx.reader_intro", T=tr.n_tokens))
    a, b = _span(loaded, tr)
    z, block = longctx.reader_map(tr.last_attn)
    presenter.chart(inside_fig.fig_reader_map(z, block, tr.n_tokens, (a, b), lang), width="stretch")
    st.caption(ui.t("longctx.pooled_note", b=block) if block > 1 else ui.t("longctx.exact_note"))
    mass = longctx.span_mass(tr.last_attn, a, b)
    uniform = longctx.uniform_share(a, b, tr.n_tokens)
    presenter.chart(inside_fig.fig_span_heads(mass, uniform, lang), width="stretch")
    best = ", ".join(heads.head_label(e) for e in heads.top_heads(mass, 5))
    st.caption(ui.t("longctx.best_heads", best=best, u=f"{uniform:.3f}"))
    st.caption(ui.t("longctx.not_proof"))
    ui.badge("model", ui.t("longctx.badge_exact"))


def _sink(tr, lang: str) -> None:
    st.header(ui.t("longctx.h_sink"))
    st.markdown(ui.t("longctx.sink_intro"))
    layer = widgets.layer_slider("longctx", tr.n_layers)
    w = ui.site(tr, "attn_pattern", layer)
    if w is None:
        return
    x, y = longctx.binned(longctx.sink_by_query(w))
    presenter.chart(inside_fig.fig_sink_curve(x, y, layer, lang), width="stretch")
    share = longctx.sink_by_layer(tr.last_attn)
    readout = ui.t("longctx.sink_readout", l=layer, w=f"{share[layer]:.2f}", top=int(share.argmax()), wmax=f"{share.max():.2f}")
    step = int(x[1] - x[0]) if len(x) > 1 else 1
    st.caption(readout + (" " + ui.t("longctx.sink_binned", bin=step) if step > 1 else ""))  # never "means over 1 positions"
    ui.badge("model")


LOSS_AT_ONCE = 1024  # up to this many tokens the loss along the document is measured at once


def _loss(loaded, tr) -> None:
    """Seed 003's objective 3: the context limit seen from inside: the measured loss along the document, beside
    what the config says (the model's trained positions, the app's cut), each labelled as what it is."""
    st.header(ui.t("longctx.h_loss"))
    if tr.n_tokens > LOSS_AT_ONCE and not st.toggle(ui.t("longctx.loss_run", T=f"{tr.n_tokens:,}"), key="longctx_loss"):
        return  # the LM head over every position of a long document: seconds on a shared CPU, so on request
    logp = cache.next_token_logprob_of(tr)  # once per trace, not on every rerun
    rows = longctx.loss_table(logp)
    st.table({ui.t("longctx.loss_from"): [a for a, _, _ in rows], ui.t("longctx.loss_to"): [b for _, b, _ in rows],
              ui.t("longctx.loss_nats"): [f"{x:.3f}" for _, _, x in rows]})
    ui.badge("measured", ui.t("longctx.loss_badge", T=tr.n_tokens))
    st.caption(ui.t("longctx.loss_limits", trained=loaded.facts.max_positions or "—", T=tr.n_tokens))
    ui.badge("formula")


def _past(lang: str) -> None:
    """Seed 003's objective 3 past the training length, measured: the toy live (RoPE past its trained length and
    its config's max_positions), the embedded model from the measurement shipped in assets/past_training.json."""
    st.header(ui.t("pasttrain.h"))
    st.markdown(ui.t("pasttrain.intro"))
    tp = pasttrain.toy_past()  # deterministic: once per process
    words = pasttrain.toy_text(tp)
    st.markdown(ui.t("pasttrain.h_toy", **words))
    st.markdown(ui.t("pasttrain.toy_intro", **words))
    presenter.chart(inside_fig.fig_toy_past([a for a, _ in tp.bins], tp.loss_all, tp.loss_copy, tp.trained, tp.max_positions,
                                            pasttrain.CHANCE, lang), width="stretch")
    st.caption(ui.t("pasttrain.toy_readout", **words))
    st.caption(ui.t("pasttrain.toy_refusal", maxpos=words["maxpos"], err=pasttrain.toy_refusal()))
    ui.badge("toy", ui.t("pasttrain.toy_badge", **words))
    st.markdown(ui.t("pasttrain.h_real"))
    try:
        rec = pasttrain.load_reference()
    except (OSError, ValueError) as e:
        st.info(ui.t("pasttrain.no_reference", why=escape.md(f"{type(e).__name__}: {e}")))
        return
    words = pasttrain.real_text(rec)
    st.markdown(ui.t("pasttrain.real_intro", **words))
    presenter.chart(inside_fig.fig_real_past(rec, lang), width="stretch")
    st.caption(ui.t("pasttrain.real_readout", **words))
    if "control" in rec:
        gap = pasttrain.widest_gap(rec)
        if gap:
            st.caption(ui.t("pasttrain.real_gap", **gap))
        st.caption(ui.t("pasttrain.real_control_note", **words))
    st.caption("📦 " + ui.t("pasttrain.real_label", machine=escape.md(rec["machine"]), model=escape.md(rec["model"]),
                            doc=rec["document"].replace("`", "ˋ"), **words))  # made elsewhere, once: not this server's badge
    st.caption(ui.t("pasttrain.real_which"))


def render(loaded, tr) -> None:
    if tr.n_tokens < 2:
        st.info(ui.t("longctx.one_token"))
        return
    if tr.n_tokens < 256:
        st.info(ui.t("longctx.short_hint", T=tr.n_tokens))
    lang = ui.lang()
    _reader(loaded, tr, lang)
    _sink(tr, lang)
    _loss(loaded, tr)
    _past(lang)


page.run(render)
