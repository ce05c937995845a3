"""KV cache: what it saves (timed both ways), what it costs (memory by formula), and which
phase dominates the tutorials' three request shapes (simulated from costs measured here)."""

from __future__ import annotations

import streamlit as st

from core.engine.types import ConfigError, EmptyPromptError, HeadGeometry, LoadedModel, ModelFacts, Phrase
from core.gen import figures as gen_fig
from core.gen import generate, kvcalc, report, workloads
from core.web import cache, contents, measure, nav, page, presenter, ui, widgets

P = "kv_cache"


def _shape(facts: ModelFacts) -> tuple[HeadGeometry | None, int, int, int]:
    """The calculator's inputs: the current model (first), a preset or a pasted config.json, bytes/value, tokens, requests."""
    current = ui.t("kv_cache.current", name=facts.name)
    presets = kvcalc.shape_choices(facts, current)
    shown = kvcalc.preset_text(ui.lang())  # a preset's name and source in the page's language
    c = st.columns(4)
    name = c[0].selectbox(ui.t("kv_cache.model"), [*presets, ui.t("kv_cache.paste")], key=f"{P}_preset",
                          format_func=lambda n: shown.get(n, (n,))[0], placeholder=ui.t("ui.choose"))
    bpv = kvcalc.BYTES_PER_VALUE[c[1].selectbox(ui.t("kv_cache.bpv"), list(kvcalc.BYTES_PER_VALUE), index=0, key=f"{P}_bpv",
                                                placeholder=ui.t("ui.choose"), help=ui.t("kv.default_note"))]  # float32: one default
    tokens = int(c[2].number_input(ui.t("kv_cache.tokens"), 1, 10_000_000, 4096, key=f"{P}_tokens"))
    reqs = int(c[3].number_input(ui.t("kv_cache.requests"), 1, 100_000, 1, key=f"{P}_reqs"))
    if name == current:
        st.caption(report.current_source(presets[name], ui.lang()))
        return presets[name], bpv, tokens, reqs
    if name in presets:
        st.caption(ui.t("kv_cache.source", src=shown.get(name, (name, presets[name].source))[1]))
        return presets[name], bpv, tokens, reqs
    text = st.text_area(ui.t("kv_cache.paste_here"), '{"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096}', key=f"{P}_cfg")
    try:
        return kvcalc.from_config(text, name="config.json"), bpv, tokens, reqs
    except ConfigError as e:
        widgets.config_error(e)
        return None, bpv, tokens, reqs


def _compare(loaded: LoadedModel, prompt: str, chat: bool, n: int, min_len: int, run: int) -> None:
    c = measure.show(cache.compare_cache(loaded, prompt, chat, n, min_len, run))  # in a server thread: a rerun waits for it
    if c is None:  # refused: said why and when to retry
        return
    st.caption(ui.t("kv_cache.prompt_len", t=c.n_prompt) + " " + ui.t("kv_cache.reps_note", reps=c.with_total.n))
    if stop := report.compare_stop_of(c, loaded.tokenizer, ui.lang()):
        st.info(stop)
    presenter.chart(gen_fig.cache_compare(c.with_lengths, c.with_seconds, c.without_lengths, c.without_seconds, ui.lang()), width="stretch")
    ui.badge("measured")
    st.markdown(report.compare_verdict(c, ui.lang()))
    # read-only: st.table on a projector (presenter CSS can enlarge it; a dataframe canvas it cannot)
    presenter.frame(report.compare_tokens(c, loaded.tokenizer, ui.lang()), width="stretch")
    st.markdown(report.compare_totals(c, ui.lang()))
    if c.busy:
        st.warning(report.busy_note(ui.lang()))


def _measure(want: tuple) -> None:
    """Button callback: every press measures afresh (a new run number for the cache) — except a press while
    this session's measurement still runs, which waits for that one instead of queueing another."""
    if measure.busy():
        return
    st.session_state[f"{P}_run"] = st.session_state.get(f"{P}_run", 0) + 1
    st.session_state[f"{P}_cmp"] = (*want, st.session_state[f"{P}_run"])


def _with_and_without(loaded: LoadedModel, prompt: str, chat: bool) -> None:
    """Section 2: the same tokens with and without the cache, timed (repeated runs), once the button asks."""
    contents.section("kv_cache.s1", anchor="compare")
    c1, c2 = st.columns(2)
    n = c1.slider(ui.t("kv_cache.n_steps"), 2, 32, 12, key=f"{P}_n")
    min_len = c2.select_slider(ui.t("kv_cache.min_len"), [0, 32, 64, 128, 256], 128, key=f"{P}_len", help=ui.t("kv_cache.min_len_help"))
    want = (loaded.spec, prompt, chat, n, min_len)
    done = st.session_state.get(f"{P}_cmp")  # the button's callback has run already: a press shows at once
    shown = done is not None and done[:5] == want
    label = ui.t("kv_cache.measure_again") if shown else ui.t("kv_cache.measure")
    st.button(label, key=f"{P}_measure", type="primary", on_click=_measure, args=(want,))
    if not prompt.strip():
        st.info(ui.t("hint.empty_prompt"))
    elif shown:
        try:
            _compare(loaded, prompt, chat, n, min_len, done[5])
        except EmptyPromptError:
            st.info(ui.t("hint.empty_prompt"))
    else:
        st.info(ui.t("kv_cache.press_measure", reps=generate.TPOT_REPS))


def _calculator(facts: ModelFacts) -> None:
    """Section 1: the cache's bytes by formula, for the current model or any model shape, as MHA / GQA / MQA."""
    contents.section("kv_cache.s2")
    picture = st.container()  # the picture first, on the first screen; the shape that sets it under it
    shape, bpv, tokens, reqs = _shape(facts)
    if shape is None:
        return
    kv = report.kv_total(shape, tokens, bpv, reqs, ui.lang())
    presenter.chart_in(picture, gen_fig.kv_variants(kv.kinds, kv.totals, ui.lang()), width="stretch", key=f"{P}_fig_variants")
    st.metric(kv.label, kv.value)
    st.caption(kv.exact)
    st.caption(kv.formula)
    presenter.frame(kv.table, hide_index=True, width="stretch")
    ui.badge("formula")


def _measure_costs() -> None:
    """Button callback: measure the costs afresh, unless this session's measurement still runs."""
    if measure.busy():
        return
    st.session_state[f"{P}_costs_run"] = st.session_state.get(f"{P}_costs_run", 0) + 1


def _workloads(loaded: LoadedModel) -> None:
    """Section 3: the three request shapes, simulated from the per-token costs measured here."""
    contents.section("kv_cache.s3")
    facts = loaded.facts
    run = st.session_state.get(f"{P}_costs_run", 0)
    m = measure.show(cache.measured_costs(loaded, run), Phrase("kv_cache.measuring"))  # in a server thread
    if m is None:  # refused (one in flight, or the server's cap): the notice says when to try again
        return
    costs, rows = kvcalc.workload_rows(facts, m.prefill_per_token, m.tpot)
    st.markdown(report.costs_text(m, costs, facts.name, ui.lang()))
    if m.busy:
        st.warning(report.busy_note(ui.lang()))
    st.button(ui.t("kv_cache.remeasure_costs"), key=f"{P}_costs_again", on_click=_measure_costs)
    st.table(report.workload_table(rows, ui.lang()).style.format(precision=2, thousands=","), hide_index=True)  # every column whole
    presenter.chart(gen_fig.workloads(report.workload_names(rows, ui.lang()), rows, ui.lang()), width="stretch")
    ui.badge("measured", ui.t("kv_cache.simulated"))
    for shape in workloads.LAB_PART:  # simulated here; run for real, many requests at once, on the serving lab
        nav.serving_link(shape)


def render(loaded) -> None:
    _calculator(loaded.facts)  # first: its picture needs no measurement
    _with_and_without(loaded, ui.prompt(), ui.chat())  # the shared prompt's own ids (extended), timed: no trace
    _workloads(loaded)


page.run(render)
