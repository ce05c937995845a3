"""The one token-chip renderer: a prompt's tokens as coloured chips, the same on every page.

Each chip shows the token piece made visible by the one label rule (``core.engine.tokens.visible``:
␣ for a space, ⏎ for a newline, ⟨E8⟩ for a partial UTF-8 character), optionally its position
before it and its id under it. Text is always HTML-escaped. ``kinds`` colours a chip by where the
token came from: the user's text (rotating pastels, so neighbours are told apart), the chat
template (dotted grey) or a special token (dashed red).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import streamlit as st

from core.engine.tokens import visible

PASTELS = ("#fde68a", "#bfdbfe", "#bbf7d0", "#fbcfe8", "#ddd6fe", "#fed7aa", "#a5f3fc")
KIND_STYLE = {
    "user": "border:1px solid #00000022;",
    "template": "border:1px dotted #64748b;background:#e2e8f0;color:#334155;",
    "special": "border:2px dashed #b91c1c;background:#fee2e2;color:#7f1d1d;font-weight:600;",
}
BASE = "display:inline-block;margin:2px;padding:2px 6px;border-radius:6px;font-family:monospace;text-align:center;line-height:1.25;"
FRAME = "outline:2px solid #2ca02c;outline-offset:1px;"


def chips_html(pieces: Sequence[Any], ids: Sequence[int] | None = None, *, kinds: Sequence[str] | None = None,
               titles: Sequence[str] | None = None, positions: bool = False, framed_tail: int = 0,
               limit: int | None = None) -> str:
    """Tokens as HTML chips. ``ids``: shown under each piece; ``positions``: the index before it;
    ``kinds``: "user" | "template" | "special" per token; ``titles``: hover text per token;
    ``framed_tail``: frame the last n chips (e.g. the generation prompt); ``limit``: at most this
    many chips, then "… +N"."""
    pieces = list(pieces)
    n = len(pieces)
    shown = n if limit is None else min(n, limit)
    out = []
    for i in range(shown):
        piece = html.escape(visible(pieces[i]), quote=True)
        kind = kinds[i] if kinds is not None else "user"
        bg = f"background:{PASTELS[i % len(PASTELS)]};" if kind == "user" else ""
        frame = FRAME if i >= n - framed_tail else ""
        title = f' title="{html.escape(titles[i], quote=True)}"' if titles is not None else ""
        pos = f"<sub>{i}</sub> " if positions else ""
        under = f'<br><small style="color:#374151">{int(ids[i])}</small>' if ids is not None else ""
        out.append(f'<span class="xr-chip" data-piece="{piece}" dir="auto"{title} style="{BASE}{bg}{KIND_STYLE[kind]}{frame}">'
                   f"{pos}{piece}{under}</span>")
    more = f" … +{n - shown}" if shown < n else ""
    return '<div class="xr-chips" style="line-height:2.4">' + "".join(out) + "</div>" + more


def kinds_from_special(special: Sequence[bool]) -> list[str]:
    return ["special" if s else "user" for s in special]


def show(pieces: Sequence[Any], ids: Sequence[int] | None = None, *, where: Any = None, **kw: Any) -> None:
    """Draw the chips (``where``: a container; the main area by default)."""
    (where or st).markdown(chips_html(pieces, ids, **kw), unsafe_allow_html=True)
