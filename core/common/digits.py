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
from typing import Any, NamedTuple

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


# why a value is no number of the range asked for (``check``): each caller says it in its own words
# (an argparse sentence, a ConfigError code, a link's value clamped or dropped)
OK, NOT_WHOLE, NOT_FINITE, BELOW, ABOVE = "", "not_whole", "not_finite", "below", "above"


class Checked(NamedTuple):  # (a NamedTuple, not a dataclass: deploy/serve.py runs this file outside sys.modules)
    """What ``check`` found: ``n`` the whole number read (None when there is none; out of range it is
    kept), and ``why`` it is refused (``OK`` when it is a number in range)."""

    n: int | None
    why: str

    @property
    def ok(self) -> bool:
        return self.why == OK


def check(value: Any, lo: int | None = None, hi: int | None = None, *, text: bool = True) -> Checked:
    """``whole(value)`` checked against lo … hi (either end may be open): the ONE whole-number argument
    check of the CLI, the launcher, a model's config and a link."""
    n = whole(value, text=text)
    if n is None:
        finite = not isinstance(value, float) or math.isfinite(value)
        return Checked(None, NOT_WHOLE if finite else NOT_FINITE)
    if lo is not None and n < lo:
        return Checked(n, BELOW)
    if hi is not None and n > hi:
        return Checked(n, ABOVE)
    return Checked(n, OK)


def whole_in(value: Any, lo: int | None = None, hi: int | None = None, *, text: bool = True) -> int | None:
    """``whole(value)`` when it lies in lo … hi (either end may be open), else None."""
    c = check(value, lo, hi, text=text)
    return c.n if c.ok else None
