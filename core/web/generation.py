"""Session state for the generation stepper: one Stepper per browser session, kept in
``st.session_state`` (never on the shared model), rebuilt when the model, prompt or settings change.
"""

from __future__ import annotations

import uuid
from dataclasses import astuple

import streamlit as st

from core.engine.types import LoadedModel, Phrase
from core.gen import generate
from core.gen.sampling import SamplingConfig
from core.web import cache, measure, ui, widgets

KEY = "generation_stepper"


def sampling_widgets(prefix: str) -> tuple[SamplingConfig, int]:
    """Sampling settings and the step limit, as widgets; returns (SamplingConfig, max_steps)."""
    c = st.columns([1.5, 1, 1, 1, 1, 1.2])  # wider first column: "Greedy (argmax)" was cut on a projector; every setting is in the URL (validated there), so a shared link replays the same run
    greedy = widgets.toggle_url(ui.t("generation.greedy"), True, key=f"{prefix}_greedy", param="greedy", where=c[0])
    temp = widgets.slider_url(ui.t("generation.temperature"), 0.1, 2.0, 0.8, 0.1, key=f"{prefix}_temp", param="temp", where=c[1],
                              disabled=greedy)
    top_k = widgets.number_url(ui.t("generation.top_k"), 0, 1000, 50, key=f"{prefix}_topk", param="top_k", where=c[2], disabled=greedy)
    top_p = widgets.slider_url(ui.t("generation.top_p"), 0.05, 1.0, 0.95, 0.05, key=f"{prefix}_topp", param="top_p", where=c[3],
                               disabled=greedy)
    seed = widgets.number_url(ui.t("generation.seed"), 0, 2**31 - 1, 0, key=f"{prefix}_seed", param="seed", where=c[4], disabled=greedy)
    max_steps = widgets.number_url(ui.t("generation.max_steps"), 1, 256, 32, key=f"{prefix}_max", param="max", where=c[5])
    cfg = SamplingConfig(temperature=float(temp), top_k=int(top_k), top_p=float(top_p), greedy=bool(greedy), seed=int(seed))
    return cfg, int(max_steps)


def stepper(loaded: LoadedModel, ids: list[int], cfg: SamplingConfig, max_steps: int, prefix: str) -> generate.Stepper:
    """This session's Stepper; a new one (empty cache) whenever model, prompt or settings change.

    A link that carries ``step`` (a shared run) is replayed once, on this page's first visit in the
    session: prefill and decode up to that pass, so the link opens where it was shared, not at
    "Press Prefill". Later, a fresh Stepper starts empty and the URL's ``step`` is dropped."""
    sig = (loaded.spec, tuple(ids), astuple(cfg), max_steps)
    if st.session_state.get(KEY + "_sig") != sig or KEY not in st.session_state:
        cache.warmed_up(loaded)  # so the first TTFT shown is not a cold start
        st.session_state[KEY] = generate.Stepper(loaded, ids, cfg, max_steps)
        st.session_state[KEY + "_sig"] = sig
        st.session_state[KEY + "_n"] = st.session_state.get(KEY + "_n", 0) + 1  # this run's number (its TPOT is its own)
        st.session_state.pop(f"{prefix}_step_keep", None)  # a new run: follow its newest pass
    stp: generate.Stepper = st.session_state[KEY]
    if not st.session_state.get(f"{prefix}_link_read"):
        st.session_state[f"{prefix}_link_read"] = True
        want = ui.qp_int("step", -1, -1, max_steps - 1)
        if want >= 0 and not stp.started:
            with st.spinner(ui.t("generation.replaying", step=want)):
                _replay(stp, want, prefix)
    elif not stp.started:
        ui.set_qp(step=None)
    return stp


@st.cache_resource(show_spinner=False, max_entries=64, hash_funcs=cache.BY_KEY)
def _warmed(loaded: LoadedModel, n_tokens: int, record: bool, _ids: tuple[int, ...]) -> bool:
    """Once per process, model, prompt length and recording: ``generate.warm_prefill`` (untimed)."""
    generate.warm_prefill(loaded, _ids, record)
    return True


def warm_for(stp: generate.Stepper) -> None:
    """Before a Stepper's first (timed) prefill: the one-off costs of its shape paid untimed, so "This run:
    TTFT" is the prefill alone, in a fresh session too: a pass of the same length, run untimed once per process."""
    if not stp.started:
        _warmed(stp.loaded, len(stp.prompt_ids), bool(stp.record_attention), tuple(stp.prompt_ids))


def _replay(stp: generate.Stepper, step: int, prefix: str) -> None:
    """Prefill, then decode until pass ``step`` (or until the run stops); look at that pass."""
    try:
        warm_for(stp)
        stp.run(step + 1)
    except Exception as e:  # never a traceback: the page shows the reason
        st.session_state[f"{prefix}_error"] = f"{type(e).__name__}: {e}"
        return
    n = len(stp.records)
    st.session_state[f"{prefix}_step"] = st.session_state[f"{prefix}_step_keep"] = max(0, min(step, n - 1))


def pick_step(n: int, prefix: str) -> int:
    """Which pass to look at (URL ``step``); follows the newest pass after each button, and keeps its
    place when the user leaves the page and comes back (Streamlit forgets a widget's value while its
    page is not shown, so a copy outside the widget's key remembers it)."""
    key, keep = f"{prefix}_step", f"{prefix}_step_keep"
    if key not in st.session_state:
        kept = st.session_state.get(keep)
        st.session_state[key] = max(0, min(n - 1, kept)) if isinstance(kept, int) else ui.qp_int("step", n - 1, 0, n - 1)
    step = widgets.int_slider(ui.t("generation.step"), 0, n - 1, key=key, help=ui.t("generation.step_help"))
    st.session_state[keep] = step
    ui.set_qp(step=step)
    return step


def pure_tpot(stp: generate.Stepper, prefix: str) -> generate.TpotMeasure | None:
    """The one TPOT of this prompt and these settings (``generate.measure_tpot``), once this visitor has asked
    for it (``remeasure_button``): measured in a server thread (``cache.tpot``: a job, never shared with
    another visitor), its bar drawn meanwhile; None before it is asked for or when the server refuses it.
    A "Next token" never waits on it: the stepper's own timed passes are shown at once."""
    session = st.session_state.setdefault(KEY + "_sid", uuid.uuid4().hex)  # this browser session's own measurement
    run = (st.session_state.get(f"{prefix}_tpot_run", 0), st.session_state.get(KEY + "_n", 0), session)
    if st.session_state.get(f"{prefix}_tpot_asked") != run:
        return None
    return measure.show(cache.tpot(stp.loaded, tuple(stp.prompt_ids), astuple(stp.cfg), run),
                        Phrase("generation.measuring_tpot"))


def _remeasure(prefix: str) -> None:
    if measure.busy():  # this visitor's measurement still runs: the press waits for it
        return
    run = st.session_state.get(f"{prefix}_tpot_run", 0) + 1
    st.session_state[f"{prefix}_tpot_run"] = run
    st.session_state[f"{prefix}_tpot_asked"] = (run, st.session_state.get(KEY + "_n", 0), st.session_state.get(KEY + "_sid"))


def remeasure_button(prefix: str, measured: bool) -> None:
    """'Measure TPOT without recording' (or 'again' once measured): a new run number, measured in the
    background for this visitor (the callback runs before the page)."""
    st.button(ui.t("generation.remeasure" if measured else "generation.measure_tpot_live"), key=f"{prefix}_tpot_again",
              on_click=_remeasure, args=(prefix,))


def _act(prefix: str, action: str) -> None:
    """Button callback: runs before the page script, so everything drawn after shows the new state."""
    stp: generate.Stepper | None = st.session_state.get(KEY)
    if stp is None:
        return
    try:
        if action in ("prefill", "next", "run"):
            warm_for(stp)  # its first pass is the timed prefill
        if action == "prefill":
            stp.prefill()
        elif action == "next":
            stp.step()
        elif action == "run":
            stp.run(int(st.session_state.get(f"{prefix}_n", 8)))
        else:
            stp.reset()
            st.session_state[KEY + "_n"] = st.session_state.get(KEY + "_n", 0) + 1
    except Exception as e:  # never a traceback: the page shows the reason
        st.session_state[f"{prefix}_error"] = f"{type(e).__name__}: {e}"
        return
    st.session_state.pop(f"{prefix}_error", None)
    # follow the newest pass: the step slider jumps to it (and the URL follows)
    st.session_state[f"{prefix}_step"] = st.session_state[f"{prefix}_step_keep"] = max(0, len(stp.records) - 1)


def controls(stp: generate.Stepper, prefix: str) -> None:
    """Prefill / Next token / Run N / Reset buttons acting on the session's Stepper."""
    c = st.columns([1, 1, 1, 1, 1])
    c[0].button(ui.t("generation.btn_prefill"), key=f"{prefix}_prefill", disabled=stp.started, type="primary",
                on_click=_act, args=(prefix, "prefill"))
    c[1].button(ui.t("generation.btn_next"), key=f"{prefix}_next", disabled=stp.done, on_click=_act, args=(prefix, "next"))
    n = c[3].number_input(ui.t("generation.run_n"), 1, 64, 8, key=f"{prefix}_n", label_visibility="collapsed")
    c[2].button(ui.t("generation.btn_run", n=int(n)), key=f"{prefix}_run", disabled=stp.done, on_click=_act, args=(prefix, "run"))
    c[4].button(ui.t("generation.btn_reset"), key=f"{prefix}_reset", on_click=_act, args=(prefix, "reset"))
    if st.session_state.get(f"{prefix}_error"):
        st.error(ui.t("err.trace", msg=widgets.md(st.session_state[f"{prefix}_error"])))
