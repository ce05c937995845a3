"""The ONE escaping helper: text from outside (a link's parameters, a text box, a prompt, a token's text,
a model's name or an error's message) shown as itself, never as markup.

* ``md``: inside Markdown (Streamlit's ``st.markdown``/``st.caption``/``st.warning`` …, widget labels and
  help): ``<``, ``>`` and ``&`` as entities (no HTML tag reaches the renderer), Markdown's active
  characters backslash-escaped (no link ``[a](b)``, image ``![x](y)``, emphasis, heading, table, maths,
  ``:colour[…]`` directive), line breaks as spaces, and GFM's *autolink literals* broken: Streamlit's
  renderer (remark-gfm) turns a bare ``https://…``, ``www.…`` or ``name@host.tld`` in plain text into a link
  after the backslashes are gone, so an invisible WORD JOINER (U+2060) goes after ``:`` of ``://``, between
  ``www`` and its dot, and after ``@``: the text reads and copies the same, but no link is made.
* ``code``: text quoted inside a Markdown `code span` (where nothing renders; a backtick would end it).
* ``plot``: text in a plotly label (tick labels, hover text, point labels, titles, annotations): plotly
  renders a subset of HTML there (``<b>``, ``<i>``, ``<br>``, ``<a href>``), so ``<``, ``>`` and ``&``
  become entities, which plotly shows as the characters.
* ``plot_all``: ``plot`` over a sequence (or a nested one) of labels.
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
