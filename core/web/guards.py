"""Guards around Streamlit for values a crafted browser message can send, installed once when core.web.ui
is imported (app.py and every page import it).

* A number input's value NaN or ±∞ (the browser's message carries a double; the page's own input never
  sends one): Streamlit reads it with ``int(value)`` for a whole-number input, which raises before the
  script runs — on this run and on every later one (the session keeps the value), so the session was
  broken for good. The guard reads such a value as "nothing sent": the input shows its default.

Streamlit's serde class is internal: ``install`` says whether the guard is in place (a test holds it) and
does nothing on a Streamlit without it rather than fail the import.
"""

from __future__ import annotations

import math
from typing import Any

from streamlit.elements.widgets import number_input as _number_input

_MARK = "_xray_finite_guard"


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
