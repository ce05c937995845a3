"""Two prompts that differ in one fact: their tokens aligned, the most likely next tokens of each, and
the logit difference that the patching and attribution pages explain."""

from __future__ import annotations

from typing import Any

import numpy as np
import streamlit as st

from core.cause import figures as cause_fig
from core.cause import pair
from core.common import escape
from core.engine.tokens import visible
from core.web import cause, nav, page, presenter, ui

SAME, DIFFERENT = "✓", "✗"  # the alignment table's "same token" column
ELIDED = "⋮"  # a compact table's row that stands for identical positions left out


def _row(r: dict[str, Any] | pair.Elided, cols: dict[str, str], as_text: bool) -> dict[str, Any]:
    """One table row; text marks, not booleans: a table on the projector would print true / false, words of
    one language. ``as_text``: positions as text, so the column holds ⋮ too (one type per column)."""
    if isinstance(r, pair.Elided):
        return {cols["pos"]: ELIDED, cols["clean"]: ui.t("cause.align_elided", n=r.n, a=r.start, b=r.last),
                cols["corrupted"]: ELIDED, cols["same"]: SAME}
    return {cols[k]: (SAME if v else DIFFERENT) if k == "same" else str(v) if k == "pos" and as_text else v
            for k, v in r.items()}


def _alignment(pt: pair.PairTokens) -> None:
    st.header(ui.t("cause.align_title"))
    cols = {"pos": ui.t("cause.col_pos"), "clean": ui.t("cause.col_clean"), "corrupted": ui.t("cause.col_corrupted"),
            "same": ui.t("cause.col_same")}
    # a long pair: the differing positions in view at once, not below the table's fold; every row on request
    compact = pair.compact_alignment(pt)
    leaves_out = any(isinstance(r, pair.Elided) for r in compact)  # a short pair has every row: no checkbox
    every = leaves_out and st.checkbox(ui.t("cause.align_all_rows"), key="cpair_all_rows",
                                       help=ui.t("cause.align_all_rows_help", k=pair.CONTEXT))
    rows = [_row(r, cols, as_text=True) for r in compact] if leaves_out and not every else \
        [_row(r, cols, as_text=False) for r in pair.alignment(pt)]
    presenter.frame(rows, hide_index=True, width="stretch", height=min(35 * (len(rows) + 1) + 3, 420))
    diff = pt.differing()
    if not pt.same_length:
        st.warning(pair.PairError("counts", n_clean=len(pt.ids_clean), n_corrupted=len(pt.ids_corrupted)).markdown(ui.lang()))
    elif diff:
        st.markdown(ui.t("cause.align_same_n", n=pt.n_tokens, positions=", ".join(map(str, diff))))
    else:
        st.info(ui.t("cause.align_same_n_nodiff", n=pt.n_tokens))


def _next_logits(loaded, pt: pair.PairTokens, text: pair.PairText) -> tuple[np.ndarray, np.ndarray] | None:
    """Both prompts' next-token scores: from the recorded pair when it can be recorded, else each trace."""
    if pt.same_length:
        base = cause.baseline(loaded, pt)
        return None if base is None else (base.clean_logits(), base.corrupted_logits())
    trs = [ui.current_trace(p, chat_mode=False) for p in (text.clean, text.corrupted)]
    return None if None in trs else (trs[0].last_logits, trs[1].last_logits)


def _numbers(loaded, logits: tuple[np.ndarray, np.ndarray], ans: pair.Answers | None) -> None:
    st.header(ui.t("cause.top_title"))
    tops = [pair.top_tokens(loaded.tokenizer, lg) for lg in logits]
    presenter.chart(cause_fig.fig_top_tokens(*tops, ans.answer if ans else -1, ans.foil if ans else -1, ui.lang()), width="stretch")
    ui.badge("model")
    if ans is None:
        return
    c, r = (pair.logit_diff(lg, ans.answer, ans.foil) for lg in logits)
    m1, m2, m3 = st.columns(3)
    m1.metric(ui.t("cause.m_ld_clean"), f"{c:.3f}")
    m2.metric(ui.t("cause.m_ld_corrupted"), f"{r:.3f}")
    m3.metric(ui.t("cause.m_span"), f"{c - r:.3f}")
    st.markdown(ui.t("cause.ld_explain", a=cause.token_md(ans.answer_text), f=cause.token_md(ans.foil_text), c=f"{c:.3f}",
                     r=f"{r:.3f}"))


def render() -> None:
    text = cause.inputs("cpair")
    loaded = ui.loaded_model()
    pt = cause.encoded(loaded, text) if loaded is not None else None
    if pt is None:
        return
    _alignment(pt)
    logits = _next_logits(loaded, pt, text)
    if logits is None:
        return
    ans = cause.answers(loaded, text)
    tip = pair.suggest(loaded.tokenizer, *logits)
    if tip is not None and (ans is None or (ans.answer_text, ans.foil_text) != tip):
        st.button(ui.t("cause.use_top", pair=" / ".join(f"“{escape.md(visible(s))}”" for s in tip)), key="cpair_use_top",
                  on_click=cause.set_answers, args=("cpair", *tip))
    _numbers(loaded, logits, ans)
    st.markdown(ui.t("cause.measured_pair"))
    st.caption(ui.t("cause.next_pages"))
    nav.page_link("cause_patching", icon="🩹")
    nav.page_link("cause_attribution", icon="🎯")


page.run(render)
