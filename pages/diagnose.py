"""Diagnose a slow or wrong answer: the tutorial's symptom → root-cause table, each symptom located by a
measurement on the current model (core.gen.diagnose), the 2K → 20K exercise and one request's timeline."""

from __future__ import annotations

import time

import pandas as pd
import streamlit as st

from core.engine import budget
from core.engine.numbers import human_bytes, three_significant
from core.engine.timing import Timing, ms
from core.engine.tokens import readable_tokens
from core.engine.types import ConfigError, EmptyPromptError
from core.gen import diagnose as dg
from core.gen import figures as gen_fig
from core.gen import kvcalc, report
from core.web import cache, nav, presenter, ui, widgets

P = "diagnose"
SYMPTOMS = ("slow_first", "slow_answer", "oom", "temperature", "attention")
LONGEST = (256, 512, 1024, 2048, 4096)
ANSWERS = ("phase", "temperature", "output", "hardware")


def _machine() -> str:
    m = dg.machine()
    return ui.t("diagnose.machine", cpu=m["processor"], n=m["cpus"], threads=m["threads"])


def _bump(name: str, want: tuple) -> None:
    """Button callback. The first press asks for run 0, shared by every visitor of this server (the cache
    keys on it); pressing again asks for a run number no one has used, so it measures afresh."""
    done = st.session_state.get(f"{P}_{name}")
    again = done is not None and tuple(done[: len(want)]) == want
    st.session_state[f"{P}_{name}"] = (*want, time.time_ns() if again else 0)


def _tm(t: Timing | None) -> str:
    """A timing in the page's language: median, runs and spread (— when nothing was timed)."""
    return "—" if t is None else report.timing_phrase(t, ui.lang())


def _label(key: str):
    return lambda done, total, n: ui.t(key, done=done, total=total, n=n)


def _points(spec: str) -> list[dg.PrefillPoint] | None:
    got = st.session_state.get(f"{P}_prefill")
    if not got or got[0] != spec:
        return None
    return cache.diagnose_prefill(spec, got[1], got[2], _label=_label("diagnose.progress_prefill"))


def _decode(spec: str) -> dg.DecodeRun | None:
    got = st.session_state.get(f"{P}_decode")
    if not got or got[:4] != (spec, ui.prompt(), ui.chat(), got[3]) or not ui.prompt().strip():
        return None
    try:
        return cache.diagnose_decode(spec, got[1], got[2], got[3], got[4], _label=_label("diagnose.progress_decode"))
    except EmptyPromptError:
        return None


def _controls(spec: str, max_pos: int) -> None:
    """The two measurements, each on a button press (cached per server process; press again to re-measure)."""
    st.subheader(ui.t("diagnose.s_measure"))
    st.caption(ui.t("diagnose.measured_on", machine=_machine()))
    c1, c2 = st.columns(2)
    longest = c1.select_slider(ui.t("diagnose.longest"), LONGEST, 2048, key=f"{P}_longest", help=ui.t("diagnose.longest_help"))
    lengths = tuple(dg.curve_lengths(longest, max_pos))
    done = st.session_state.get(f"{P}_prefill")
    again = done is not None and done[:2] == (spec, lengths)
    c1.button(ui.t("diagnose.measure_again_prefill" if again else "diagnose.measure_prefill"), key=f"{P}_go_prefill",
              type="primary", on_click=_bump, args=("prefill", (spec, lengths)))
    n_out = c2.slider(ui.t("diagnose.n_out"), 4, 64, 24, key=f"{P}_n_out")
    done = st.session_state.get(f"{P}_decode")
    want = (spec, ui.prompt(), ui.chat(), n_out)
    c2.button(ui.t("diagnose.measure_again_decode" if done and done[:4] == want else "diagnose.measure_decode"),
              key=f"{P}_go_decode", type="primary", on_click=_bump, args=("decode", want))
    if not ui.prompt().strip():
        c2.info(ui.t("hint.empty_prompt"))
    if done and done[:4] != want:  # the prompt or the length changed since: measure what is asked now
        st.session_state.pop(f"{P}_decode")
    _points(spec)  # a measurement just asked for runs here, its progress bar under its button; later calls read the cache
    _decode(spec)


def _zero_parts(fit: dg.Fit) -> str:
    """The caveat when the fit set the linear or the quadratic part to zero (noise or too short a range)."""
    zero = [k for k, v in (("linear", fit.b), ("quadratic", fit.c)) if v == 0]
    if not zero or fit.n_points < 2:
        return ""
    return " " + ui.t("diagnose.zero_part", part=ui.t(f"diagnose.part_{zero[0] if len(zero) == 1 else 'both'}"))


def _slow_first(spec: str) -> None:
    pts = _points(spec)
    if not pts:
        st.info(ui.t("diagnose.press_prefill"))
        return
    fit = dg.fit_points(pts)
    presenter.chart(gen_fig.prefill_curve(pts, fit, _machine(), ui.lang()), width="stretch")
    ui.badge("measured", ui.t("diagnose.reps_note", n=pts[0].prefill.n))
    top = pts[-1].n_tokens
    parts = fit.parts(top)
    st.markdown(ui.t("diagnose.fit_text", a=ms(fit.a), b=three_significant(fit.b * 1e6), c=three_significant(fit.c * 1e9), n=f"{top:,}",
                     fixed=ms(parts["fixed"]), lin=ms(parts["linear"]), quad=ms(parts["quadratic"]),
                     err=f"{fit.max_rel_error * 100:.0f}", k=fit.n_points, tok=ms(pts[-1].tokenise.median),
                     pre=ms(pts[-1].prefill.median)) + _zero_parts(fit))
    st.dataframe(pd.DataFrame({ui.t("diagnose.col_tokens"): [p.n_tokens for p in pts],
                               ui.t("diagnose.col_tokenise"): [_tm(p.tokenise) for p in pts],
                               ui.t("diagnose.col_prefill"): [_tm(p.prefill) for p in pts],
                               ui.t("diagnose.col_tpot"): [_tm(p.decode) for p in pts]}),
                 hide_index=True, width="stretch")
    if any(p.prefill.busy or p.tokenise.busy for p in pts):
        st.warning(report.busy_note(ui.lang()))


def _slow_answer(spec: str) -> None:
    d = _decode(spec)
    if d is None:
        st.info(ui.t("diagnose.press_decode"))
    else:
        presenter.chart(gen_fig.output_curve(d.cumulative(), d.tokenise.median + d.prefill.median, d.tpot, _machine(), ui.lang()),
                        width="stretch")
        ui.badge("measured", ui.t("diagnose.reps_note_medians", n=d.prefill.n, pre=_tm(d.prefill)))  # a curve without error bars
        st.markdown(ui.t("diagnose.decode_text", n_in=d.n_prompt, n_out=d.n_decode + 1, ttft=_tm(d.prefill),
                         tpot=_tm(d.decode), total=ms(float(d.cumulative()[-1]))))
        if d.busy:
            st.warning(report.busy_note(ui.lang()))
    _tpot_growth(spec)


def _tpot_growth(spec: str) -> None:
    """How TPOT grows with the cache: the decode steps timed after each prefill of the curve, a straight line through them."""
    pts = dg.tpot_points(_points(spec) or [])
    fit = dg.fit_tpot(pts)
    if fit is None:
        st.info(ui.t("diagnose.press_tpot"))
        return
    presenter.chart(gen_fig.tpot_curve(pts, fit, _machine(), ui.lang()), width="stretch")
    ui.badge("measured", ui.t("diagnose.tpot_note", n=pts[0].decode.n if pts[0].decode else 0))
    lo, hi = pts[0].n_tokens, pts[-1].n_tokens
    st.markdown(ui.t("diagnose.tpot_text", a=ms(fit.a), k=three_significant(fit.b * 1e6), per1k=ms(fit.b * 1000), lo=f"{lo:,}", hi=f"{hi:,}",
                     t_lo=ms(float(fit.predict(lo))), t_hi=ms(float(fit.predict(hi))), err=f"{fit.max_rel_error * 100:.0f}",
                     n=fit.n_points, out=dg.EXERCISE_OUTPUT, dec=ms(dg.EXERCISE_OUTPUT * float(fit.predict(hi)))))


def _memory(spec: str, loaded) -> None:
    c = st.columns(5)
    src = c[0].radio(ui.t("diagnose.mem_model"), ("current", "paste"), key=f"{P}_mem_src",
                     format_func=ui.fmt("diagnose.mem_src_{}", name=loaded.facts.name))
    bpv_name = c[1].selectbox(ui.t("kv_cache.bpv"), list(kvcalc.BYTES_PER_VALUE), index=0, key=f"{P}_bpv")
    ctx = int(c[2].number_input(ui.t("diagnose.mem_context"), 1, 10_000_000, 8192, key=f"{P}_ctx"))
    reqs = int(c[3].number_input(ui.t("diagnose.mem_requests"), 1, 100_000, 8, key=f"{P}_reqs"))
    raw = c[4].text_input(ui.t("diagnose.mem_budget"), "24", key=f"{P}_budget", help=ui.t("diagnose.mem_budget_help"))
    bpv = kvcalc.BYTES_PER_VALUE[bpv_name]
    try:
        if src == "paste":
            text = st.text_area(ui.t("kv_cache.paste_here"), '{"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, '
                                '"hidden_size": 4096, "intermediate_size": 14336, "vocab_size": 128256}', key=f"{P}_cfg")
            shape = dg.MemoryShape.of_config(text, bpv)
        else:
            shape = dg.MemoryShape.of_facts(loaded.facts, bpv)
    except ConfigError as e:
        widgets.config_error(e)
        return
    budget_b, why = dg.parse_budget_gb(raw)
    if budget_b is None:
        st.warning(ui.t(f"diagnose.budget_{why}", raw=widgets.code(raw)))
        return
    plan = dg.memory_plan(shape, ctx, reqs, budget_b)
    at, limit = plan.at, plan.limit
    presenter.chart(gen_fig.memory_plan(plan.requests, plan.weights, plan.kv, plan.activations, budget_b, limit, reqs, ui.lang()),
                    width="stretch")
    ui.badge("formula", ui.t("diagnose.mem_estimate"))
    g = shape.geometry
    st.markdown(ui.t("diagnose.mem_text", name=shape.name, t=f"{ctx:,}", r=f"{reqs:,}", w=budget.fmt_gb(at.weights), kv=budget.fmt_gb(at.kv),
                     act=budget.fmt_gb(at.activations), total=budget.fmt_gb(at.total), budget=budget.fmt_gb(budget_b),
                     L=g.n_layers, kvh=g.n_kv_heads, dh=g.dh, b=bpv))
    st.markdown(ui.t("diagnose.mem_fits" if plan.fits else "diagnose.mem_oom", n=limit))
    d = _decode(spec) if src == "current" else None
    if d is not None:
        formula, ok = dg.real_cache_check(loaded.facts, d)
        st.markdown(ui.t("diagnose.mem_real", t=f"{d.kv_tokens_end:,}", real=f"{d.kv_bytes:,}", formula=f"{formula:,}",
                         ok="✓" if ok else "✗", b=loaded.facts.value_bytes))


def _temperature(loaded) -> None:
    c1, c2 = st.columns(2)
    q = c1.text_input(ui.t("diagnose.temp_q"), "The capital of Australia is", key=f"{P}_q")
    ev = c2.text_input(ui.t("diagnose.temp_ev"), "Canberra is the capital of Australia.", key=f"{P}_ev")
    tq = ui.current_trace(q, chat_mode=False)
    te = ui.current_trace(f"{ev.strip()} {q.strip()}", chat_mode=False) if tq is not None else None
    if tq is None or te is None:
        return
    demo = dg.temperature_demo(tq.last_logits, te.last_logits)
    toks = readable_tokens(loaded.tokenizer, demo.ids.tolist())
    presenter.chart(gen_fig.temperature_bars(toks, demo.temperatures, demo.question, demo.evidence, ui.lang()), width="stretch")
    ui.badge("model", ui.t("diagnose.temp_exact"))
    name = readable_tokens(loaded.tokenizer, [demo.top_question, demo.top_evidence])
    moved = demo.top_question != demo.top_evidence
    st.markdown(ui.t("diagnose.temp_text" if moved else "diagnose.temp_same", top=widgets.code(name[0]), top_ev=widgets.code(name[1]),
                     temps=", ".join(f"{T:g}" for T in demo.temperatures)))


def _symptom(spec: str, loaded) -> None:
    st.subheader(ui.t("diagnose.s_symptom"))
    st.session_state.setdefault(f"{P}_sym", ui.qp_choice("symptom", SYMPTOMS, SYMPTOMS[0]))  # a link reopens its symptom
    sym = st.radio(ui.t("diagnose.pick"), SYMPTOMS, key=f"{P}_sym", format_func=ui.fmt("diagnose.sym_{}"))
    ui.set_qp(symptom=sym)
    st.markdown(ui.t("diagnose.card", cause=ui.t(f"diagnose.{sym}.cause"), check=ui.t(f"diagnose.{sym}.check"),
                     fix=ui.t(f"diagnose.{sym}.fix")))
    {"slow_first": lambda: _slow_first(spec), "slow_answer": lambda: _slow_answer(spec), "oom": lambda: _memory(spec, loaded),
     "temperature": lambda: _temperature(loaded), "attention": lambda: st.markdown(ui.t("diagnose.attention_text"))}[sym]()
    for stem in {"slow_first": ("long_context", "kv_cache"), "slow_answer": ("generation",), "oom": ("kv_cache",),
                 "temperature": ("logits",), "attention": ("ablation", "cause_patching")}[sym]:
        nav.see_page(stem)


def _exercise(spec: str, loaded) -> None:
    st.subheader(ui.t("diagnose.s_exercise"))
    st.markdown(ui.t("diagnose.ex_q"))
    ans = st.radio(ui.t("diagnose.ex_pick"), ANSWERS, index=None, key=f"{P}_ex", format_func=ui.fmt("diagnose.ex_{}"))
    if ans is None:
        return
    (st.success if ans == "phase" else st.error)(ui.t("diagnose.ex_right" if ans == "phase" else "diagnose.ex_wrong"))
    st.markdown(ui.t("diagnose.ex_why"))
    facts = loaded.facts
    g = facts.geometry
    st.markdown(ui.t("diagnose.ex_kv", t=f"{dg.EXERCISE_TO:,}", fp32=human_bytes(g.kv_bytes(dg.EXERCISE_TO, 4)),
                     fp16=human_bytes(g.kv_bytes(dg.EXERCISE_TO, 2)), small=human_bytes(g.kv_bytes(dg.EXERCISE_FROM, 4)),
                     t0=f"{dg.EXERCISE_FROM:,}", name=facts.name))
    pts = _points(spec)
    if not pts:
        st.info(ui.t("diagnose.press_prefill"))
        return
    fit = dg.fit_points(pts)
    top = pts[-1].n_tokens
    presenter.chart(gen_fig.prefill_curve(pts, fit, _machine(), ui.lang(), extend_to=dg.EXERCISE_TO), width="stretch")
    ui.badge("measured", ui.t("diagnose.extrapolated_badge", n=f"{top:,}"))
    lo, hi = (dg.extrapolate(fit, n, top, facts.max_positions) for n in (dg.EXERCISE_FROM, dg.EXERCISE_TO))
    st.markdown(ui.t("diagnose.ex_extrap", t0=f"{dg.EXERCISE_FROM:,}", s0=ms(lo.seconds), kind0=ui.t("diagnose.kind_extrap" if lo.is_extrapolation
                     else "diagnose.kind_interp"), t1=f"{dg.EXERCISE_TO:,}", s1=ms(hi.seconds), x=f"{hi.seconds / max(lo.seconds, 1e-12):.1f}",
                     top=f"{top:,}", factor=f"{hi.factor:.1f}", quad=f"{100 * hi.parts['quadratic'] / max(hi.seconds, 1e-12):.0f}")
                + (" " + ui.t("diagnose.no_quad") if fit.c == 0 else ""))
    line = dg.fit_tpot(pts)
    if line is not None:  # the 100 output tokens: N × TPOT at each length, from the TPOT line
        d0, d1 = (dg.EXERCISE_OUTPUT * float(line.predict(n)) for n in (dg.EXERCISE_FROM, dg.EXERCISE_TO))
        st.markdown(ui.t("diagnose.ex_decode", out=dg.EXERCISE_OUTPUT, t0=f"{dg.EXERCISE_FROM:,}", t1=f"{dg.EXERCISE_TO:,}", d0=ms(d0), d1=ms(d1),
                         dd=ms(max(0.0, d1 - d0)), top=f"{dg.tpot_points(pts)[-1].n_tokens:,}", s0=ms(lo.seconds), s1=ms(hi.seconds),
                         ds=ms(max(0.0, hi.seconds - lo.seconds))))
    st.markdown(ui.t("diagnose.assume_head") + "\n" + "\n".join(
        f"- {ui.t(f'diagnose.assume_{a}', ctx=format(facts.max_positions or 0, ','), name=facts.name)}" for a in hi.assumptions))


def _streaming(spec: str) -> None:
    st.subheader(ui.t("diagnose.s_stream"))
    st.markdown(ui.t("diagnose.stream_intro"))
    d = _decode(spec)
    if d is None:
        st.info(ui.t("diagnose.press_decode"))
        return
    presenter.chart(gen_fig.request_timeline(d.tokenise.median, d.prefill.median, d.step_medians, _machine(), ui.lang()), width="stretch")
    ui.badge("measured", ui.t("diagnose.reps_note_medians", n=d.prefill.n, pre=_tm(d.prefill)))  # segments, no error bars
    first = d.tokenise.median + d.prefill.median
    st.markdown(ui.t("diagnose.stream_text", first=ms(first), total=ms(float(d.cumulative()[-1])), n=d.n_decode + 1,
                     share=f"{100 * first / max(float(d.cumulative()[-1]), 1e-12):.0f}"))


def render() -> None:
    ui.header("page.diagnose", "diagnose.intro")
    loaded = ui.loaded_model()
    if loaded is None:
        return
    spec = ui.model_spec()
    st.info(ui.t("diagnose.rule"))
    st.table(pd.DataFrame([{ui.t("diagnose.col_symptom"): ui.t(f"diagnose.sym_{s}"), ui.t("diagnose.col_cause"): ui.t(f"diagnose.{s}.cause"),
                            ui.t("diagnose.col_check"): ui.t(f"diagnose.{s}.check"), ui.t("diagnose.col_fix"): ui.t(f"diagnose.{s}.fix")}
                           for s in SYMPTOMS]), hide_index=True)
    _controls(spec, int(loaded.facts.max_positions or 0))
    _symptom(spec, loaded)
    _exercise(spec, loaded)
    _streaming(spec)
    with st.expander(ui.t("diagnose.s_apps")):
        st.markdown(ui.t("diagnose.apps_text"))


render()
presenter.sources("kv_cache")
