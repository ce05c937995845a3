"""Prefill & decode, one token at a time: the KV cache grows, each step is timed."""

from __future__ import annotations

import streamlit as st

from core.common import escape
from core.engine import tokens
from core.engine.tokens import position_label
from core.engine.types import LoadedModel
from core.gen import figures as gen_fig
from core.gen import generate, kvcalc, report
from core.web import generation as gen_ui
from core.web import page, presenter, ui, widgets
from core.web import receipt as why

P = "generation"


def _status(stp: generate.Stepper, pieces: list[str], text: str, pending: bool = False) -> None:
    """The generated text so far and why generation stopped, if it did."""
    st.markdown(ui.t("generation.sequence", n_prompt=len(stp.prompt_ids), n_gen=len(stp.generated)))
    st.code((text or "…"), language=None, wrap_lines=True)
    if pending:  # the step stopped inside a character: its first bytes wait for the next token
        st.caption(ui.t("generation.pending_bytes"))
    note = report.stop_note(stp, pieces, ui.lang())
    if note is not None:
        level, msg = note
        getattr(st, level)(msg)


def _pass(loaded: LoadedModel, rec: generate.StepRecord, step: int) -> None:
    """One pass: its top candidates, the token it chose, its time and the cache after it."""
    f = loaded.facts
    c1, c2 = st.columns([3, 2])
    with c1:
        labels = tokens.readable_tokens(loaded.tokenizer, rec.top_ids.tolist())
        presenter.chart(gen_fig.candidates(labels, rec.top_probs, rec.top_sample_probs, rec.top_index, ui.lang()), width="stretch")
        ui.badge("model")
    with c2:
        for label, value, note in report.step_metrics(rec, step, ui.lang()):
            st.metric(label, value)
            if note:
                st.caption(note)
        st.caption(ui.t("generation.kv_formula", **kvcalc.formula_terms(f.geometry, rec.kv_tokens, f.value_bytes)))
        ui.badge("measured")


def _attention(loaded: LoadedModel, stp: generate.Stepper, rec: generate.StepRecord, pieces: list[str]) -> None:
    """The chosen head's attention: the fed token's row over the cache, and the prefill's matrix."""
    f = loaded.facts
    layer, head = widgets.layer_head_pickers(P, f.n_layers, f.n_heads)
    n_vis = rec.kv_tokens
    start = widgets.map_window(P, n_vis, kind="row")  # one window for both figures (a long prompt: summed/averaged overview)
    a1, a2 = st.columns(2)
    if rec.attn is not None:
        title = ui.t("generation.fig_row", tok=escape.plot(position_label(pieces, n_vis - 1)), layer=layer, head=head, kv=f.geometry.kv_head_of(head))
        presenter.chart_in(a1, gen_fig.attention_row(rec.attn[layer, head], pieces[:n_vis], len(stp.prompt_ids), title, ui.lang(), start),
                           width="stretch")
    if stp.prefill_pattern is not None:
        title = ui.t("generation.fig_prefill", layer=layer, head=head)
        presenter.chart_in(a2, gen_fig.prefill_matrix(stp.prefill_pattern[layer, head], pieces, title, ui.lang(), start), width="stretch")
    else:
        a2.info(ui.t("generation.no_prefill_matrix", n=generate.MAX_PREFILL_PATTERN))
    ui.badge("model")


def _costs(stp: generate.Stepper, step: int) -> None:
    """The cache's growth and its bytes per layer, then every pass's time (TTFT, TPOTs) beside the
    one TPOT of this prompt, measured without recording (the same measure as the KV-cache page)."""
    kv_tok, kv_b, kv_layers = stp.kv_arrays()
    k1, k2 = st.columns(2)
    presenter.chart_in(k1, gen_fig.kv_growth(kv_tok, kv_b, ui.lang()), width="stretch")
    presenter.chart_in(k2, gen_fig.kv_layers(kv_layers[step], ui.lang()), width="stretch")
    ui.badge("measured", ui.t("generation.kv_source"))
    if not stp.tpots:  # only the prefill so far: no TPOT to show, no empty axis
        st.caption(report.timing_text(stp, ui.lang()))
        return
    gen_ui.remeasure_button(P, measured=st.session_state.get(f"{P}_tpot_asked") is not None)
    pure = gen_ui.pure_tpot(stp, P)  # only once asked for, in the background: a "Next token" never waits on it
    presenter.chart(gen_fig.timings([r.seconds for r in stp.records], ui.lang(), None if pure is None else pure.tpot),
                    width="stretch")
    st.caption(report.timing_text(stp, ui.lang()))
    if pure is None:
        st.caption(ui.t("generation.tpot_on_request"))
    else:
        st.markdown(report.pure_tpot_text(pure, stp, ui.lang()))
        if pure.busy:
            st.warning(report.busy_note(ui.lang()))
    ui.badge("measured")


def render(loaded) -> None:
    enc = ui.encoded_prompt(loaded, generate.MAX_PROMPT_TOKENS)
    if enc is None:
        return
    cfg, max_steps = gen_ui.sampling_widgets(P)
    stp = gen_ui.stepper(loaded, enc.ids, cfg, max_steps, P)
    gen_ui.controls(stp, P)
    if not stp.started:
        st.info(ui.t("generation.hint_start", n=len(enc.ids)))
        return
    pieces = tokens.readable_tokens(loaded.tokenizer, stp.all_ids)
    text = tokens.decoded_text(loaded.tokenizer, stp.generated)
    _status(stp, pieces, text, text != loaded.tokenizer.decode(stp.generated))
    step = gen_ui.pick_step(len(stp.records), P)
    _pass(loaded, stp.records[step], step)
    why.offer_step(loaded, stp.prompt_ids, stp.all_ids, step, stp.records[step].token_id, stp.records[step].token)
    _attention(loaded, stp, stp.records[step], pieces)
    _costs(stp, step)


page.run(render)
