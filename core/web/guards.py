"""Guards around Streamlit for values a crafted browser message can send, installed once when core.web.ui
is imported (app.py and every page import it).

* A number input's value NaN or ±∞ (the browser's message carries a double; the page's own input never
  sends one): Streamlit reads it with ``int(value)`` for a whole-number input, which raises before the
  script runs — on this run and on every later one (the session keeps the value), so the session was
  broken for good. The guard reads such a value as "nothing sent": the input shows its default.

* Browser history: Streamlit's frontend pushes a history entry for every query-parameter message whose
  query string differs from the address bar's, and the server sends one such message per
  ``st.query_params`` write. A page view that wrote lang, model, prompt, chat, layer, head … one after the
  other pushed 4–10 entries, so Back needed as many presses to leave it. ``url_batch`` (around every
  script run: app.py) holds the run's writes and sends the URL once, at the run's end, if it changed;
  ``HISTORY_SCRIPT`` (run in the page with core.web.a11y's script) makes a push that only changes the
  query string of the page shown a replace: moving a slider or opening a page no longer adds entries of
  its own, and one Back leaves the page.

Streamlit's serde class and its query-parameter object are internal: ``install`` says whether the guard is in place (a test holds it) and
does nothing on a Streamlit without it rather than fail the import.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any
from urllib import parse

from streamlit.elements.widgets import number_input as _number_input
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


def install() -> bool:
    """Install the guards (once); whether the number-input guard is in place."""
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

    qp._send_query_param_msg = hold  # the instance's attribute shadows the class's sender
    try:
        yield True
    finally:
        del qp._send_query_param_msg
        if _url(qp) != before:
            qp._send_query_param_msg()
