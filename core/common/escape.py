"""The ONE escaping helper: text from outside (a link's parameters, a text box, a prompt, a token's text,
a model's name or an error's message) shown as itself, never as markup.

* ``md``: inside Markdown (``st.markdown``, captions, widget labels): ``<``, ``>``, ``&`` as entities,
  Markdown's active characters backslash-escaped, line breaks as spaces, and GFM's autolink literals
  (``https://…``, ``www.…``, ``name@host``) broken by an invisible WORD JOINER (U+2060).
* ``code``: text quoted inside a Markdown `code span`.
* ``plot`` / ``plot_all``: text in plotly labels, which render a subset of HTML: ``<``, ``>``, ``&`` as entities.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

WJ = "\u2060"  # WORD JOINER: zero width, no line break, not a \w for the autolink patterns

# Markdown that acts (images, links, emphasis, headings, tables, strikethrough, maths, Streamlit's
# :colour[…] directives) starts with one of these; a backslash makes each a plain character.
_MD_SPECIAL = re.compile(r"([\\`*_\[\]()#!|~$:{}])")
_SCHEME = re.compile(r":(?=//)")  # https://, ftp://, javascript:// …
_WWW = re.compile(r"(?i)(?<=www)(?=\.)")
_AT = re.compile(r"@")


def unlink(text: str) -> str:
    """``text`` with GFM autolink literals broken by invisible word joiners (see the module's note)."""
    return _AT.sub("@" + WJ, _WWW.sub(WJ, _SCHEME.sub(":" + WJ, text)))


def md(text: Any) -> str:
    """``text`` shown as itself inside Markdown (see the module's note)."""
    s = str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = _MD_SPECIAL.sub(r"\\\1", unlink(s))
    s = re.sub(r"[\r\n]+", " ", s)
    return re.sub(r"^(\s*\d*)([-+=.)])", r"\1\\\2", s)  # "- x", "1. x" would start a list


def code(text: Any) -> str:
    """``text`` safe inside a `code span` (where nothing is rendered): a backtick would end the span,
    so it becomes ˋ; line breaks become spaces."""
    return re.sub(r"[\r\n]+", " ", str(text).replace("`", "ˋ"))


def plot(text: Any) -> str:
    """``text`` shown as itself in a plotly label (``<b>`` stays ``<b>``, not bold)."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def plot_all(items: Iterable[Any]) -> list[Any]:
    """``plot`` over labels (nested lists too, as a heatmap's hover text); numbers and None kept."""
    out: list[Any] = []
    for x in items:
        if isinstance(x, str):
            out.append(plot(x))
        elif isinstance(x, (list, tuple)):
            out.append(plot_all(x))
        else:
            out.append(x)
    return out
