"""Classroom helpers for Streamlit: presenter mode and the "Sources" boxes.

Presenter mode (URL ``?present=1``) enlarges the type for a projector and hides secondary
controls (downloads, expanders, table toolbars); pages can ask ``is_on()`` to leave out details.
"""

from __future__ import annotations

import streamlit as st

from core.learn import references
from core.web import ui

KEY = "present"

_CSS = """<style>
[data-testid="stMain"] [data-testid="stMarkdownContainer"] p,
[data-testid="stMain"] [data-testid="stMarkdownContainer"] li { font-size: 1.45rem !important; line-height: 1.5 !important; }
[data-testid="stMain"] h1 { font-size: 3.2rem !important; }
[data-testid="stMain"] h2, [data-testid="stMain"] h3 { font-size: 2.3rem !important; }
[data-testid="stMain"] [data-testid="stMetricValue"] { font-size: 2.8rem !important; }
[data-testid="stMain"] [data-testid="stMetricLabel"] p { font-size: 1.2rem !important; }
[data-testid="stMain"] button p { font-size: 1.3rem !important; }
[data-testid="stMain"] [data-testid="stDownloadButton"],
[data-testid="stMain"] [data-testid="stExpander"],
[data-testid="stElementToolbar"] { display: none !important; }
</style>"""


def is_on() -> bool:
    """True in presenter mode (the sidebar toggle, or ``?present=1`` in a shared link)."""
    if KEY in st.session_state:
        return bool(st.session_state[KEY])
    return st.query_params.get(KEY, "0") == "1"


def sidebar_toggle() -> None:
    """The presenter-mode toggle (call inside ``with st.sidebar``); keeps the URL in step."""
    if KEY not in st.session_state:
        st.session_state[KEY] = st.query_params.get(KEY, "0") == "1"
    st.toggle(ui.t("present.toggle"), key=KEY, help=ui.t("present.help"))
    ui.set_qp(present="1" if st.session_state[KEY] else None)


def apply_css() -> None:
    if is_on():
        st.markdown(_CSS, unsafe_allow_html=True)


def sources(concept: str) -> None:
    """A "Sources" expander with the references of ``concept`` (see core.learn.references.cite)."""
    with st.expander(f"📚 {ui.t('present.sources')}: {ui.t(f'references.c.{concept}')}"):
        for r in references.cite(concept):
            st.markdown(f"- [{r.label()}]({r.url})")
