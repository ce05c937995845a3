"""Session state for the generation stepper: one Stepper per browser session, kept in
``st.session_state`` (never on the shared model), rebuilt when the model, prompt or settings change.
"""

from __future__ import annotations

from dataclasses import astuple

import streamlit as st

from core.engine.types import LoadedModel
from core.gen import generate
from core.gen.sampling import SamplingConfig
from core.web import cache, ui

KEY = "generation_stepper"


def sampling_widgets(prefix: str) -> tuple[SamplingConfig, int]:
    """Sampling settings and the step limit, as widgets; returns (SamplingConfig, max_steps)."""
    c = st.columns(6)
    greedy = c[0].toggle(ui.t("generation.greedy"), value=True, key=f"{prefix}_greedy")
    temp = c[1].slider(ui.t("generation.temperature"), 0.1, 2.0, 0.8, 0.1, key=f"{prefix}_temp", disabled=greedy)
    top_k = c[2].number_input(ui.t("generation.top_k"), 0, 1000, 50, key=f"{prefix}_topk", disabled=greedy)
    top_p = c[3].slider(ui.t("generation.top_p"), 0.05, 1.0, 0.95, 0.05, key=f"{prefix}_topp", disabled=greedy)
    seed = c[4].number_input(ui.t("generation.seed"), 0, 2**31 - 1, 0, key=f"{prefix}_seed", disabled=greedy)
    max_steps = c[5].number_input(ui.t("generation.max_steps"), 1, 256, 32, key=f"{prefix}_max")
    cfg = SamplingConfig(temperature=float(temp), top_k=int(top_k), top_p=float(top_p), greedy=bool(greedy), seed=int(seed))
    return cfg, int(max_steps)


def stepper(loaded: LoadedModel, ids: list[int], cfg: SamplingConfig, max_steps: int) -> generate.Stepper:
    """This session's Stepper; a new one (empty cache) whenever model, prompt or settings change."""
    sig = (ui.model_spec(), tuple(ids), astuple(cfg), max_steps)
    if st.session_state.get(KEY + "_sig") != sig or KEY not in st.session_state:
        cache.warmed_up(ui.model_spec())  # so the first TTFT shown is not a cold start
        st.session_state[KEY] = generate.Stepper(loaded, ids, cfg, max_steps)
        st.session_state[KEY + "_sig"] = sig
    return st.session_state[KEY]


def _act(prefix: str, action: str) -> None:
    """Button callback: runs before the page script, so everything drawn after shows the new state."""
    stp: generate.Stepper | None = st.session_state.get(KEY)
    if stp is None:
        return
    try:
        if action == "prefill":
            stp.prefill()
        elif action == "next":
            stp.step()
        elif action == "run":
            stp.run(int(st.session_state.get(f"{prefix}_n", 8)))
        else:
            stp.reset()
    except Exception as e:  # never a traceback: the page shows the reason
        st.session_state[f"{prefix}_error"] = f"{type(e).__name__}: {e}"
        return
    st.session_state.pop(f"{prefix}_error", None)
    # follow the newest pass: the step slider jumps to it (and the URL follows)
    st.session_state[f"{prefix}_step"] = max(0, len(stp.records) - 1)


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
        st.error(ui.t("err.trace", msg=st.session_state[f"{prefix}_error"]))
