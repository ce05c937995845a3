"""Streamlit side of the toy's live training run: the loop itself is ``core.toy.train.train_live``;
here it only redraws a progress bar (``core.web.bar``), the loss curve and the induction pattern into page slots."""

from __future__ import annotations

from typing import Any

from core.common.i18n import t
from core.engine.tokens import readable_tokens
from core.toy import figures as toy_fig
from core.toy import train as toy_train
from core.toy.tokenizer import ByteTokenizer
from core.web import cache, presenter
from core.web.bar import Bar

LIVE_SECONDS = toy_train.LIVE_SECONDS
LIVE_STEPS = toy_train.LIVE_STEPS


def run_live(steps: int, seed: int, bar: Any, loss_slot: Any, pattern_slot: Any, lang: str) -> dict[str, Any]:
    """Train a fresh toy for ``steps`` (≤ LIVE_SECONDS), redrawing the loss and the induction pattern."""
    tokens = readable_tokens(ByteTokenizer(), toy_train.live_sequence())
    ref = cache.shipped_curve()["loss"]

    def on_snapshot(step: int, losses: list[float], head: int, weights: Any) -> None:
        presenter.chart_in(loss_slot, toy_fig.fig_live_loss(losses, ref, lang), width="stretch")
        presenter.chart_in(pattern_slot, toy_fig.fig_pattern(weights, tokens, t("toy.live_pattern", lang, step=step + 1, head=head)), width="stretch")

    return toy_train.train_live(steps, seed, Bar(slot=bar, lang=lang), on_snapshot)
