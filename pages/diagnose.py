"""Diagnose a slow or wrong answer: the tutorial's symptom → root-cause table, each symptom located by a
measurement on the current model (core.gen.diagnose), the 2K → 20K exercise and one request's timeline."""

from __future__ import annotations

import time

import streamlit as st

from core.engine.tokens import readable_tokens
from core.engine.types import ConfigError, EmptyPromptError
from core.gen import diagnose as dg
from core.gen import figures as gen_fig
from core.gen import kvcalc, report, workloads
from core.web import cache, measure, nav, page, presenter, ui, widgets

P = "diagnose"


def _machine() -> str:
    return report.machine_text(dg.machine(), ui.lang())


def _bump(name: str, want: tuple) -> None:
    """Button callback. The first press asks for run 0 — this visitor's own (core.web.cache.measurement keys
    every live measurement on the visitor: one taken on a busy machine is never shown to another); pressing
    again asks for a new run number, so it measures afresh — but not while this session's measurement still
    runs (a second press then waits for the first)."""
    if measure.busy():
        return
    st.session_state[f"{P}_{name}"] = dg.next_request(st.session_state.get(f"{P}_{name}"), want, time.time_ns())


def _points(loaded, quiet: bool = True) -> list[dg.PrefillPoint] | None:
    """The prefill curve asked for (measured in a server thread: a rerun waits for it, never restarts it);
    ``quiet=False`` where it was asked for, which says so when the server refuses a fresh one."""
    got = st.session_state.get(f"{P}_prefill")
    if not got or got[0] != loaded.spec:
        return None
    return measure.show(cache.diagnose_prefill(loaded, got[1], got[2]), quiet=quiet)


def _decode(loaded, quiet: bool = True) -> dg.DecodeRun | None:
    got = st.session_state.get(f"{P}_decode")
    if not got or got[:4] != (loaded.spec, ui.prompt(), ui.chat(), got[3]) or not ui.prompt().strip():
        return None
    try:
        return measure.show(cache.diagnose_decode(loaded, got[1], got[2], got[3], got[4]), quiet=quiet)
    except EmptyPromptError:
        return None


def _controls(loaded, max_pos: int) -> None:
    """The two measurements, each on a button press (cached per server process; press again to re-measure)."""
    st.header(ui.t("diagnose.s_measure"))
    st.caption(ui.t("diagnose.measured_on", machine=_machine()))
    c1, c2 = st.columns(2)
    longest = c1.select_slider(ui.t("diagnose.longest"), dg.LONGEST_CHOICES, 2048, key=f"{P}_longest", help=ui.t("diagnose.longest_help"))
    lengths = tuple(dg.curve_lengths(longest, max_pos))
    again = dg.asked_again(st.session_state.get(f"{P}_prefill"), (loaded.spec, lengths))
    c1.button(ui.t("diagnose.measure_again_prefill" if again else "diagnose.measure_prefill"), key=f"{P}_go_prefill",
              type="primary", on_click=_bump, args=("prefill", (loaded.spec, lengths)))
    n_out = c2.slider(ui.t("diagnose.n_out"), 4, 64, 24, key=f"{P}_n_out")
    done = st.session_state.get(f"{P}_decode")
    want = (loaded.spec, ui.prompt(), ui.chat(), n_out)
    c2.button(ui.t("diagnose.measure_again_decode" if dg.asked_again(done, want) else "diagnose.measure_decode"),
              key=f"{P}_go_decode", type="primary", on_click=_bump, args=("decode", want))
    if not ui.prompt().strip():
        c2.info(ui.t("hint.empty_prompt"))
    if done and not dg.asked_again(done, want):  # the prompt or the length changed since: measure what is asked now
        st.session_state.pop(f"{P}_decode")
    _points(loaded, quiet=False)  # a measurement just asked for runs here, its progress bar under its button; later calls read the cache
    _decode(loaded, quiet=False)


def _slow_first(loaded) -> None:
    pts = _points(loaded)
    if not pts:
        st.info(ui.t("diagnose.press_prefill"))
        return
    lang, fit = ui.lang(), dg.fit_points(pts)
    presenter.chart(gen_fig.prefill_curve(pts, fit, _machine(), lang), width="stretch")
    ui.badge("measured", report.prefill_note(pts, lang))
    st.markdown(report.prefill_fit_text(pts, fit, lang))
    presenter.frame(report.prefill_table(pts, lang), hide_index=True, width="stretch")  # st.table on a projector
    if dg.curve_busy(pts):
        st.warning(report.busy_note(lang))


def _slow_answer(loaded) -> None:
    d, lang = _decode(loaded), ui.lang()
    if d is None:
        st.info(ui.t("diagnose.press_decode"))
    else:
        presenter.chart(gen_fig.output_curve(d.cumulative(), d.first_token, d.tpot, _machine(), lang), width="stretch")
        ui.badge("measured", report.medians_note(d, lang))  # a curve without error bars
        st.markdown(report.decode_text(d, lang))
        if d.busy:
            st.warning(report.busy_note(lang))
    _tpot_growth(loaded)


def _tpot_growth(loaded) -> None:
    """How TPOT grows with the cache: the decode steps timed after each prefill of the curve, a straight line through them."""
    pts = dg.tpot_points(_points(loaded) or [])
    fit = dg.fit_tpot(pts)
    if fit is None:
        st.info(ui.t("diagnose.press_tpot"))
        return
    presenter.chart(gen_fig.tpot_curve(pts, fit, _machine(), ui.lang()), width="stretch")
    ui.badge("measured", report.tpot_note(pts, ui.lang()))
    st.markdown(report.tpot_text(pts, fit, ui.lang()))


def _memory(loaded) -> None:
    c = st.columns(5)
    src = c[0].radio(ui.t("diagnose.mem_model"), ("current", "paste"), key=f"{P}_mem_src",
                     format_func=ui.fmt("diagnose.mem_src_{}", name=loaded.facts.name))
    bpv_name = c[1].selectbox(ui.t("kv_cache.bpv"), list(kvcalc.BYTES_PER_VALUE), index=0, placeholder=ui.t("ui.choose"), key=f"{P}_bpv")
    ctx = int(c[2].number_input(ui.t("diagnose.mem_context"), 1, 10_000_000, 8192, key=f"{P}_ctx"))
    reqs = int(c[3].number_input(ui.t("diagnose.mem_requests"), 1, 100_000, 8, key=f"{P}_reqs"))
    raw = c[4].text_input(ui.t("diagnose.mem_budget"), "24", key=f"{P}_budget", help=ui.t("diagnose.mem_budget_help"))
    bpv = kvcalc.BYTES_PER_VALUE[bpv_name]
    try:
        text = st.text_area(ui.t("kv_cache.paste_here"), dg.PASTE_EXAMPLE, key=f"{P}_cfg") if src == "paste" else ""
        shape = dg.memory_shape(src, text, loaded.facts, bpv)
    except ConfigError as e:
        widgets.config_error(e)
        return
    budget_b, why = dg.parse_budget_gb(raw)
    if budget_b is None:
        st.warning(ui.t(f"diagnose.budget_{why}", raw=widgets.md(raw)))
        return
    plan, lang = dg.memory_plan(shape, ctx, reqs, budget_b), ui.lang()
    presenter.chart(gen_fig.memory_plan(plan.requests, plan.weights, plan.kv, plan.activations, budget_b, plan.limit, reqs, lang),
                    width="stretch")
    ui.badge("formula", ui.t("diagnose.mem_estimate"))
    st.markdown(report.memory_text(shape, plan, lang))
    st.markdown(report.memory_verdict(plan, lang))
    d = _decode(loaded) if src == "current" else None
    if d is not None:
        st.markdown(report.real_cache_text(loaded.facts, d, lang))


def _temperature(loaded) -> None:
    c1, c2 = st.columns(2)
    q = c1.text_input(ui.t("diagnose.temp_q"), "The capital of Australia is", key=f"{P}_q")
    ev = c2.text_input(ui.t("diagnose.temp_ev"), "Canberra is the capital of Australia.", key=f"{P}_ev")
    tq = ui.current_trace(q, chat_mode=False)
    te = ui.current_trace(dg.with_evidence(ev, q), chat_mode=False) if tq is not None else None
    if tq is None or te is None:
        return
    demo = dg.temperature_demo(tq.last_logits, te.last_logits)
    toks = readable_tokens(loaded.tokenizer, demo.ids.tolist())
    presenter.chart(gen_fig.temperature_bars(toks, demo.temperatures, demo.question, demo.evidence, ui.lang()), width="stretch")
    ui.badge("model", ui.t("diagnose.temp_exact"))
    top, top_ev = (widgets.code(n) for n in readable_tokens(loaded.tokenizer, [demo.top_question, demo.top_evidence]))
    st.markdown(report.temperature_text(demo, top, top_ev, ui.lang()))


def _symptom(loaded) -> None:
    st.header(ui.t("diagnose.s_symptom"))
    st.session_state.setdefault(f"{P}_sym", ui.qp_choice("symptom", dg.SYMPTOMS, dg.SYMPTOMS[0]))  # a link reopens its symptom
    sym = st.radio(ui.t("diagnose.pick"), dg.SYMPTOMS, key=f"{P}_sym", format_func=ui.fmt("diagnose.sym_{}"))
    ui.set_qp(symptom=sym)
    st.markdown(report.symptom_card(sym, ui.lang()))
    {"slow_first": lambda: _slow_first(loaded), "slow_answer": lambda: _slow_answer(loaded), "oom": lambda: _memory(loaded),
     "temperature": lambda: _temperature(loaded), "attention": lambda: st.markdown(ui.t("diagnose.attention_text"))}[sym]()
    for stem in dg.SEE_ALSO[sym]:
        nav.see_page(stem)
    if sym in workloads.SYMPTOM_SHAPE:  # the same request shape, run for real on the serving lab
        nav.serving_link(workloads.SYMPTOM_SHAPE[sym])


def _exercise(loaded) -> None:
    st.header(ui.t("diagnose.s_exercise"))
    st.markdown(ui.t("diagnose.ex_q"))
    ans = st.radio(ui.t("diagnose.ex_pick"), dg.EXERCISE_ANSWERS, index=None, key=f"{P}_ex", format_func=ui.fmt("diagnose.ex_{}"))
    if ans is None:
        return
    right = ans == dg.EXERCISE_RIGHT
    (st.success if right else st.error)(ui.t("diagnose.ex_right" if right else "diagnose.ex_wrong"))
    st.markdown(ui.t("diagnose.ex_why"))
    lang = ui.lang()
    st.markdown(report.exercise_kv_text(loaded.facts, lang))
    pts = _points(loaded)
    if not pts:
        st.info(ui.t("diagnose.press_prefill"))
        return
    ex = dg.exercise(pts, loaded.facts.max_positions)
    presenter.chart(gen_fig.prefill_curve(pts, ex.fit, _machine(), lang, extend_to=dg.EXERCISE_TO), width="stretch")
    ui.badge("measured", report.extrapolated_note(ex, lang))
    st.markdown(report.exercise_prefill_text(ex, lang))
    decode = report.exercise_decode_text(ex, lang)  # the 100 output tokens, from the TPOT line (none without it)
    if decode is not None:
        st.markdown(decode)
    st.markdown(report.assumptions_text(ex, loaded.facts, lang))


def _streaming(loaded) -> None:
    st.header(ui.t("diagnose.s_stream"))
    st.markdown(ui.t("diagnose.stream_intro"))
    d = _decode(loaded)
    if d is None:
        st.info(ui.t("diagnose.press_decode"))
        return
    presenter.chart(gen_fig.request_timeline(d.tokenise.median, d.prefill.median, d.step_medians, _machine(), ui.lang()), width="stretch")
    ui.badge("measured", report.medians_note(d, ui.lang()))  # segments, no error bars
    st.markdown(report.stream_text(d, ui.lang()))


def render() -> None:
    loaded = ui.loaded_model()
    if loaded is None:
        return
    st.info(ui.t("diagnose.rule"))
    st.table(report.symptom_table(dg.SYMPTOMS, ui.lang()), hide_index=True)  # words, not numbers: st.table in both modes
    _controls(loaded, int(loaded.facts.max_positions or 0))
    _symptom(loaded)
    _exercise(loaded)
    _streaming(loaded)
    with st.expander(ui.t("diagnose.s_apps")):
        st.markdown(ui.t("diagnose.apps_text"))


page.run(render)
