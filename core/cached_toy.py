"""Streamlit glue for the toy page: cached look-ups and the live training run.

The toy page always shows the *toy*, whatever model the sidebar holds, so it asks the shared
caches for spec "toy" directly (one trace per prompt, never recomputed when only the layer, head
or site changes).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import streamlit as st

from core import cached, tracing
from core.models import EMBEDDED_ID, TOY_ID
from core.trace import Trace

LIVE_SECONDS = 25.0  # a live run stops after this long, whatever the machine's speed
LIVE_EVERY = 10  # redraw the loss (and the pattern) every this many steps


def toy_trace(prompt: str, chat: bool) -> tuple[Trace | None, str | None]:
    """(trace, None), or (None, an i18n key / message) for the page to show."""
    if not prompt or not prompt.strip():
        return None, "hint.empty_prompt"
    try:
        return cached.get_trace(TOY_ID, prompt, chat), None
    except tracing.EmptyPromptError:
        return None, "hint.empty_prompt"
    except Exception as e:  # never a traceback on the page
        return None, f"{type(e).__name__}: {e}"


def real_facts() -> dict[str, Any] | None:
    """SmolLM2's facts for the comparison table (None if it cannot be loaded here)."""
    try:
        return cached.get_model(EMBEDDED_ID).facts.to_dict()
    except Exception:
        return None


@st.cache_data(show_spinner=False, max_entries=16)
def word_order(a: str, b: str) -> list[dict[str, Any]]:
    from core import toy

    return toy.word_order_demo(a, b)


@st.cache_data(show_spinner=False, max_entries=1)
def shipped_curve() -> dict[str, Any]:
    from core import toy

    return toy.load_loss_curve()


def run_live(steps: int, seed: int, bar: Any, loss_slot: Any, pattern_slot: Any, lang: str) -> dict[str, Any]:
    """Train a fresh toy for ``steps`` (≤ LIVE_SECONDS), redrawing the loss and the induction pattern."""
    import torch

    from core import plots_toy, train_toy
    from core.i18n import t
    from core.toy import ByteTokenizer

    ids = train_toy.repeated_sequence(12, 2, seed=3)
    tokens = tracing.readable_tokens(ByteTokenizer(), ids)
    ref = shipped_curve()["loss"]
    t0 = time.perf_counter()
    state: dict[str, Any] = {"weights": None}

    def draw(step: int, losses: list[float], model: Any) -> None:
        probes: dict[str, Any] = {}
        with torch.no_grad():
            model.eval()
            model(torch.tensor([ids]), probes=probes)
            model.train()
        w = probes["layers"][-1]["weights"].numpy()  # [H, T, T] of the last layer
        h = int(np.argmax([w[h_][13:, :].max(axis=1).mean() for h_ in range(w.shape[0])]))
        state["weights"], state["head"] = w[h], h
        loss_slot.plotly_chart(plots_toy.fig_loss(losses, lang, ref[: max(len(losses), 1)]), width="stretch")
        pattern_slot.plotly_chart(plots_toy.fig_pattern(w[h], tokens, t("toy.live_pattern", lang, step=step, head=h)), width="stretch")

    losses: list[float] = []

    def callback(step: int, loss: float, model: Any) -> bool:
        losses.append(loss)
        elapsed = time.perf_counter() - t0
        bar.progress(min(1.0, (step + 1) / steps), text=t("toy.live_progress", lang, step=step + 1, steps=steps, loss=f"{loss:.3f}"))
        if step % LIVE_EVERY == 0 or step == steps - 1:
            draw(step, losses, model)
        return elapsed < LIVE_SECONDS

    model, _ = train_toy.train(steps=steps, seed=seed, callback=callback)
    draw(len(losses) - 1, losses, model)
    report = train_toy.induction_report(model, seg_len=12, seed=3)
    return {"losses": losses, "seconds": time.perf_counter() - t0, "report": report}
