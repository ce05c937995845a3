"""Behind ``make serve`` (deploy/serve.py): which replica this is, and the notice a browser gets when the
process that held its session stopped. The reconnected session on another replica comes back from the
URL (page, language, model, prompt, layer, head, step); the rest starts again, and the first run says so.
``keep_alive`` adds an empty timed fragment behind the launcher, so the frontend redraws at once on reconnecting.
"""

from __future__ import annotations

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from core.common import settings
from core.web import ui

_CHECKED = "_replica_checked"
KEEP_ALIVE_S = 600  # the timed fragment's period: it draws nothing, it only has to exist


def number() -> tuple[int, int] | None:
    """(this replica's number, how many), when started by deploy/serve.py; None for ``make run``."""
    return settings.get().replica


def offered_session_id() -> str | None:
    """The session id the browser asked to resume: the third entry of the websocket's
    Sec-WebSocket-Protocol header (Streamlit's frontend sends "streamlit, <xsrf token>, <last session id>")."""
    try:
        raw = st.context.headers.get("Sec-WebSocket-Protocol") or ""
    except Exception:  # no websocket (AppTest, bare mode): nothing to resume
        return None
    entries = [e.strip() for e in raw.split(",")]
    return entries[2] if len(entries) >= 3 and entries[2] else None


def moved_notice() -> None:
    """On a session's first run: if the browser came back from a session this process does not hold (its
    replica stopped, or the one server restarted), say so once, above the page."""
    if st.session_state.get(_CHECKED):
        return
    st.session_state[_CHECKED] = True
    ctx = get_script_run_ctx()
    old = offered_session_id()
    if old is None or ctx is None or old == ctx.session_id:
        return
    where = number()
    if where is None:
        st.info(ui.t("serve.restarted"), icon="🔌")
    else:
        st.info(ui.t("serve.moved", n=where[0], total=where[1]), icon="🔌")


def keep_alive() -> None:
    """Behind the launcher only: an empty timed fragment in the sidebar (see the module's docstring)."""
    if number() is None:
        return
    with st.sidebar:
        _tick()


@st.fragment(run_every=KEEP_ALIVE_S)
def _tick() -> None:
    pass
