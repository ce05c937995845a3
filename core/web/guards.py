"""Guards around Streamlit for values a crafted browser message can send, installed once when core.web.ui
is imported (app.py and every page import it).

* A number input's value NaN or ±∞: Streamlit's ``int(value)`` would raise on every later run of the
  session; the guard reads it as "nothing sent" (the input shows its default).
* Browser history: ``url_batch`` (around every script run) sends the run's query-parameter writes once,
  at the end, and ``HISTORY_SCRIPT`` turns a push that only changes the query string into a replace, so
  one Back leaves a page.
* ``clear_cache``: Streamlit's "Clear cache" (which any visitor can send) clears the asking session's own
  state only, never the model, traces, jobs or rate limits every visitor shares.
* A websocket from a foreign origin is refused without Streamlit's lookup of this machine's address on
  the Internet.

Streamlit's serde class and query-parameter object are internal: ``install`` says whether the guard is in
place (a test holds it) and does nothing on a Streamlit without it rather than fail the import.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any
from urllib import parse

from streamlit import net_util as _net_util
from streamlit.elements.widgets import number_input as _number_input
from streamlit.runtime import app_session as _app_session
from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx
from streamlit.runtime.state.session_state_proxy import get_session_state

_MARK = "_xray_finite_guard"

# Installed once per page load (window.__xrHistory): a pushState to the address of the page shown (the same
# path: only its query string differs) becomes a replaceState; a new page (another path) is still pushed.
HISTORY_SCRIPT = """<script>
(() => {
  if (window.__xrHistory) return;
  window.__xrHistory = true;
  const push = history.pushState.bind(history);
  history.pushState = (state, title, url) => {
    try {
      if (url != null && new URL(url, location.href).pathname === location.pathname) return history.replaceState(state, title, url);
    } catch (e) { /* an address URL() cannot read: pushed as it was */ }
    return push(state, title, url);
  };
})();
</script>"""


def _finite_only(deserialize: Any) -> Any:
    def guarded(self: Any, ui_value: Any) -> Any:
        if isinstance(ui_value, float) and not math.isfinite(ui_value):
            ui_value = None  # read as nothing sent: the widget's default
        return deserialize(self, ui_value)

    setattr(guarded, _MARK, True)
    return guarded


def _clear_own_state_only(self: Any) -> None:
    """A session's "Clear cache": its own widgets and values only, never the caches every session shares."""
    self._session_state.clear()


setattr(_clear_own_state_only, _MARK, True)


def _no_external_ip() -> None:
    """This machine's address as seen from the Internet: not looked up (None)."""
    return None


def install_server_guards() -> bool:
    """The guards on what a visitor's websocket can do to the server (clear_cache, the origin check's
    lookup); installed before the server starts (core.web.server) and again on import. Whether in place."""
    session = getattr(_app_session, "AppSession", None)
    if session is None or not hasattr(session, "_handle_clear_cache_request") or not hasattr(_net_util, "get_external_ip"):
        return False
    session._handle_clear_cache_request = _clear_own_state_only
    _net_util.get_external_ip = _no_external_ip
    return True


def install() -> bool:
    """Install the guards (once); whether the number-input guard is in place."""
    install_server_guards()
    serde = getattr(_number_input, "NumberInputSerde", None)
    if serde is None or not hasattr(serde, "deserialize"):
        return False
    if not getattr(serde.deserialize, _MARK, False):
        serde.deserialize = _finite_only(serde.deserialize)
    return True


def _query_params() -> Any:
    """This session's query-parameter object, or None (no session, or a Streamlit whose object differs)."""
    try:
        with get_session_state().query_params() as qp:
            return qp if callable(getattr(qp, "_send_query_param_msg", None)) and isinstance(getattr(qp, "_query_params", None), dict) else None
    except Exception:  # no script run context (a bare import, a test without AppTest)
        return None


def _url(qp: Any) -> list[tuple[str, Any]]:
    return [(k, list(v) if isinstance(v, list) else v) for k, v in qp._query_params.items()]


@contextlib.contextmanager
def url_batch() -> Iterator[bool]:
    """Within the block, ``st.query_params`` writes change the URL the script reads but send nothing; at
    its end (a rerun or st.stop too) the URL goes to the browser once, if it changed: one history entry
    per run at most. Yields whether the batching is in place."""
    qp = _query_params()
    if qp is None:
        yield False
        return
    before = _url(qp)

    def hold() -> None:  # what the class's sender does, but the message: a rerun asked for now keeps the new URL
        ctx = get_script_run_ctx()
        if ctx is not None:
            ctx.query_string = parse.urlencode(qp._query_params, doseq=True)

    # the instance's attribute shadows the class's sender. Two runs of one session can overlap (a rerun asked
    # while the old run is still stopping, e.g. waiting on a sweep): each removes only its own holder, and sends
    # through the class's sender, never through the other run's holder.
    qp._send_query_param_msg = hold
    try:
        yield True
    finally:
        if vars(qp).get("_send_query_param_msg") is hold:
            del qp._send_query_param_msg
        if _url(qp) != before:
            type(qp)._send_query_param_msg(qp)
