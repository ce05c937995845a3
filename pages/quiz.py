"""Self-check: single-choice questions from the tutorials' checklists and misconceptions, scored,
each answer explained and linked to the page that shows it live."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from core.common import i18n
from core.learn import checklist, quiz
from core.web import nav, page, presenter, ui


def _seed() -> int:
    """This attempt's seed: kept in the session, taken from a link (``?quiz=``) when it is valid,
    new otherwise; always written back to the URL, so the link reproduces the order."""
    seed = st.session_state.get("quiz_seed")
    if seed is None:
        seed = quiz.parse_seed(st.query_params.get("quiz"))
        seed = quiz.new_seed() if seed is None else seed
        st.session_state["quiz_seed"] = seed
    ui.set_qp(quiz=seed)
    return seed


def _key(seed: int, q: quiz.Question) -> str:
    return f"quiz_{seed}_{q.id}"  # a new attempt has new widgets: no answer of the last one survives


def _reset() -> None:
    """Start over: forget this attempt's answers and draw a new order."""
    old = st.session_state.get("quiz_seed")
    for q in quiz.QUESTIONS:
        st.session_state.pop(_key(old, q), None)
    st.session_state.pop("quiz_checked", None)
    seed = quiz.new_seed()
    while seed == old:
        seed = quiz.new_seed()
    st.session_state["quiz_seed"] = seed


def _option(qid: str, lang: str):
    return lambda i: i18n.t(f"quiz.{qid}.o{i}", lang)


def render() -> None:
    st.markdown(ui.t("quiz.intro", n=len(quiz.QUESTIONS)))
    seed = _seed()
    st.caption(ui.t("quiz.attempt", seed=seed))
    with st.form("quiz_form"):
        for i, q in enumerate(quiz.QUESTIONS):
            st.radio(
                f"**{ui.t('quiz.qn', i=i + 1)}.** {ui.t(f'quiz.{q.id}.q')}",
                quiz.option_order(q, seed),  # the option indices in this attempt's order
                index=None,
                format_func=_option(q.id, ui.lang()),
                key=_key(seed, q),
            )
        if st.form_submit_button(ui.t("quiz.submit"), type="primary"):
            st.session_state["quiz_checked"] = True
    if not st.session_state.get("quiz_checked"):
        return

    answers = {q.id: st.session_state.get(_key(seed, q)) for q in quiz.QUESTIONS}
    result = quiz.score(answers)
    st.header(ui.t("quiz.score", right=result.correct, total=result.total, pct=round(result.percent)))
    st.progress(result.correct / result.total)
    if result.correct == result.total:
        st.success(ui.t("quiz.all_right"))
    for i, q in enumerate(quiz.QUESTIONS):
        verdict = result.verdicts[q.id]
        answer = ui.t(f"quiz.{q.id}.o{q.correct}")
        head = f"{i + 1}. {ui.t(f'quiz.{q.id}.q')}"
        with st.container(border=True, key=f"quiz_result_{q.id}"):
            st.markdown(f"**{head}**")
            if verdict:
                st.success(f"✅ {ui.t('quiz.right')}: {answer}")
            elif verdict is None:
                st.warning(f"➖ {ui.t('quiz.unanswered', answer=answer)}")
            else:
                st.error(f"❌ {ui.t('quiz.wrong', answer=answer)}")
            st.markdown(ui.t(f"quiz.{q.id}.why"))
            nav.see_page(q.page)
    if not presenter.is_on():
        table = pd.DataFrame({
            "#": list(range(1, result.total + 1)),
            ui.t("quiz.qn", i="").strip(): [ui.t(f"quiz.{q.id}.q") for q in quiz.QUESTIONS],
            "✓": ["✅" if v else ("➖" if v is None else "❌") for v in result.verdicts.values()],
        })
        st.dataframe(table, hide_index=True, key="quiz_table")
    ui.badge("formula", ui.t("quiz.score", right=result.correct, total=result.total, pct=round(result.percent)))
    st.button(ui.t("quiz.reset"), key="quiz_reset", on_click=_reset)


def _checklist() -> None:
    """The printable self-check list: each point with links to the pages that show it, and a download."""
    st.header(ui.t("checklist.h"))
    st.markdown(ui.t("checklist.intro"))
    for i, ((text, _), point) in enumerate(zip(checklist.rows(ui.t), checklist.POINTS), 1):
        with st.container(border=True, key=f"checklist_{point.key}"):
            st.markdown(f"☐ **{i}.** {text}")
            for col, stem in zip(st.columns(len(point.pages)), point.pages):
                nav.page_link(stem, where=col)
    st.download_button(ui.t("checklist.download"), data=checklist.markdown(ui.t), file_name=f"self-check-{ui.lang()}.md",
                       mime="text/markdown", key="checklist_download", on_click="ignore")


page.run(render)
_checklist()
