"""Which pages this browser session has opened, in the order first opened: the self-study order's
"you have covered §…" marker reads it. The router marks the page it is about to run (app.py); nothing
leaves the session, and a new session (a new tab) starts with none."""

from __future__ import annotations

import streamlit as st

KEY = "_pages_opened"


def mark(stem: str | None) -> None:
    """Note that page ``stem`` is being opened (None: no page answers there; nothing noted)."""
    if stem is None:
        return
    seen: list[str] = st.session_state.setdefault(KEY, [])
    if stem not in seen:
        seen.append(stem)


def opened() -> tuple[str, ...]:
    """The pages opened in this session, first opened first."""
    return tuple(st.session_state.get(KEY, ()))
