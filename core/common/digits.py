"""The ONE reader of whole numbers from outside: a link's query parameter, a CLI argument, a launcher
setting, a file the system writes, a JSON value. Pure Python, no imports from the project (the
launcher, deploy/serve.py, loads this file alone, without the core package and its torch).

Text is read as ASCII digits only, with an optional sign and surrounding ASCII spaces: ``str.isdigit``
and ``int()`` also take superscripts (``"²".isdigit()`` is true, and ``int("²")`` then raises), other
scripts' digits (``int("٣")`` is 3), full-width digits and underscores (``int("1_0")`` is 10); none of
those is a number a link or a command line means. More than ``MAX_DIGITS`` digits is no number either
(``int()`` of 5,000 digits raises, and no count here has more than a few).
"""

from __future__ import annotations

import math
import re
from typing import Any

MAX_DIGITS = 40
_TEXT = re.compile(rf"[ \t]*([+-]?[0-9]{{1,{MAX_DIGITS}}})[ \t]*")


def whole(value: Any, *, text: bool = True) -> int | None:
    """``value`` as a whole number, or None when it is not one: an int (never a bool), a float only
    when it is finite and whole (``4096.0``), and, when ``text`` is true, a string of ASCII digits."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and value == int(value) else None
    if text and isinstance(value, str):
        m = _TEXT.fullmatch(value)
        return int(m.group(1)) if m else None
    return None


def whole_in(value: Any, lo: int | None = None, hi: int | None = None, *, text: bool = True) -> int | None:
    """``whole(value)`` when it lies in lo … hi (either end may be open), else None."""
    n = whole(value, text=text)
    if n is None or (lo is not None and n < lo) or (hi is not None and n > hi):
        return None
    return n
