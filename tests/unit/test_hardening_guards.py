"""What one visitor's websocket can do to the server (issue 39): Streamlit's clear_cache keeps every shared
cache, a refused foreign origin makes no outside lookup, and two overlapping runs of one session (a language
switch while a sweep runs) end without an AttributeError."""

from __future__ import annotations

from types import SimpleNamespace

import streamlit as st
from streamlit import net_util
from streamlit.runtime.app_session import AppSession
from streamlit.web.server import server_util

from core.web import guards


def test_clear_cache_from_a_visitor_keeps_the_shared_caches():
    calls: list[int] = []

    @st.cache_resource
    def shared(x: int) -> list[int]:
        calls.append(x)
        return [x]

    @st.cache_data
    def data(x: int) -> int:
        calls.append(-x)
        return x

    assert guards.install_server_guards()
    first, _ = shared(1), data(1)
    cleared: list[bool] = []
    visitor = SimpleNamespace(_session_state=SimpleNamespace(clear=lambda: cleared.append(True)))
    AppSession._handle_clear_cache_request(visitor)  # what the websocket's clear_cache message runs
    assert shared(1) is first and data(1) == 1
    assert calls == [1, -1], "a visitor's clear_cache emptied a cache every session shares"
    assert cleared == [True]  # the asking session's own state is still cleared


def test_a_foreign_origin_is_refused_without_an_outside_lookup(monkeypatch):
    asked: list[str] = []
    monkeypatch.setattr(net_util, "_external_ip", None)
    monkeypatch.setattr(net_util, "_make_blocking_http_get", lambda url, timeout=None: asked.append(url))
    monkeypatch.setattr(net_util, "get_internal_ip", lambda: "10.0.0.1")
    assert guards.install_server_guards()
    assert not server_util.is_url_from_allowed_origins("http://evil.example.com")
    assert asked == [], f"the origin check looked up {asked}"
    assert server_util.is_url_from_allowed_origins("http://localhost:8501")


class _QP:
    """Stands for Streamlit's QueryParams: a dict of values and a sender (counted)."""

    def __init__(self) -> None:
        self._query_params: dict[str, str] = {"lang": "en"}
        self.sent: list[dict[str, str]] = []

    def _send_query_param_msg(self) -> None:
        self.sent.append(dict(self._query_params))


def test_two_overlapping_runs_of_one_session_end_cleanly(monkeypatch):
    qp = _QP()
    monkeypatch.setattr(guards, "_query_params", lambda: qp)
    old, new = guards.url_batch(), guards.url_batch()
    assert old.__enter__()  # the run waiting on a sweep …
    assert new.__enter__()  # … and the rerun a language switch asked for, started before the old one stopped
    qp._query_params["lang"] = "zh"
    old.__exit__(None, None, None)  # the old run stops first (its stop reached it)
    new.__exit__(None, None, None)
    assert "_send_query_param_msg" not in vars(qp)  # every holder removed: the class's sender is back
    assert qp.sent and qp.sent[-1] == {"lang": "zh"}
