"""Who is asking, for the server's fairness rules (core.web.jobs): whether this session's browser is still
connected, and which browser it is (one student's tabs share a browser)."""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st
from streamlit.runtime import Runtime
from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

# The cookie that names a browser: the launcher's affinity cookie behind nginx, else Streamlit's XSRF cookie
# (one per browser, shared by its tabs). A visitor who clears cookies becomes a new browser: the server's
# own limit per minute still holds.
BROWSER_COOKIES = ("xray_affinity", "_streamlit_xsrf")


def alive() -> Callable[[], bool]:
    """A check of whether this session still has its browser (its websocket open); always True where there is
    no server (AppTest, a bare script)."""
    ctx = get_script_run_ctx()
    if ctx is None or not Runtime.exists():
        return lambda: True
    sid, runtime = ctx.session_id, Runtime.instance()
    return lambda: runtime.is_active_session(sid)


def browser() -> str | None:
    """This session's browser, by its cookie (see ``BROWSER_COOKIES``); else the session itself; None without one."""
    try:
        cookies = st.context.cookies
        for name in BROWSER_COOKIES:
            value = cookies.get(name)
            if value:
                return f"{name}:{value[:64]}"
    except Exception:  # no websocket (AppTest, bare mode)
        pass
    ctx = get_script_run_ctx()
    return None if ctx is None else f"session:{ctx.session_id}"


def visitor() -> str | None:
    """This session's id (a live measurement belongs to the visitor who asked for it); None without a session."""
    ctx = get_script_run_ctx()
    return None if ctx is None else ctx.session_id
