"""The one token-chip renderer: a prompt's tokens as coloured chips, the same on every page.

Each chip shows the token's label by the one label rule (``core.engine.tokens.token_labels``), optionally
its position and id; the byte tokens of one character are framed together under it. Text is always
HTML-escaped. ``kinds`` colours a chip by its source: the user's text, the chat template or a special token.
A long prompt is shown a page at a time (``show_page``: ``PAGE`` chips from a start kept in the URL as ``chips``).
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from typing import Any

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from core.engine.tokens import TokenWindow, byte_groups, is_byte_label, token_labels, visible
from core.engine.tokens import window as token_window
from core.web import ui, widgets

PAGE = 256  # the most chips one page shows: a 4,096-token prompt is 16 pages, never one wall of chips

PASTELS = ("#fde68a", "#bfdbfe", "#bbf7d0", "#fbcfe8", "#ddd6fe", "#fed7aa", "#a5f3fc")
KIND_STYLE = {
    "user": "border:1px solid #00000022;",
    "template": "border:1px dotted #64748b;background:#e2e8f0;color:#334155;",
    "special": "border:2px dashed #b91c1c;background:#fee2e2;color:#7f1d1d;font-weight:600;",
    "typed_special": "border:2px solid #b91c1c;background:#fee2e2;color:#7f1d1d;font-weight:600;",  # a control token the user typed
}
BASE = "display:inline-block;margin:2px;padding:2px 6px;border-radius:6px;font-family:monospace;text-align:center;line-height:1.25;"
FRAME = "outline:2px solid #2ca02c;outline-offset:1px;"


_COLOUR = re.compile(r"#[0-9a-fA-F]{3,8}|rgba?\([0-9., ]+\)")  # what ``colours`` may hold: never CSS from elsewhere

GROUP = ("display:inline-block;margin:2px 3px;padding:0 2px 2px;border:2px solid #7c3aed;border-top:none;"
         "border-radius:0 0 8px 8px;vertical-align:bottom;text-align:center;")
GROUP_HEAD = "display:block;font-size:0.8em;color:#5b21b6;line-height:1.1;"


def _chip_text(piece: object, label: str) -> str:
    """A chip's inner HTML: the label, with a byte token's bytes in small type after its character."""
    raw = str(piece)
    shown = visible(raw)  # ‹E8 8B›
    if is_byte_label(raw) and label.endswith(shown):
        return f"{html.escape(label[: -len(shown)])}<small style=\"opacity:.75\">{html.escape(shown)}</small>"
    return html.escape(label)


def chips_html(pieces: Sequence[Any], ids: Sequence[int] | None = None, *, kinds: Sequence[str] | None = None,
               titles: Sequence[str] | None = None, positions: bool = False, framed_tail: int = 0,
               limit: int | None = None, start: int = 0, colours: Sequence[str] | None = None,
               notes: Sequence[str] | None = None) -> str:
    """Tokens as HTML chips. ``ids``: shown under each piece; ``positions``: the index before it
    (``start`` + i, for a window of a longer sequence); ``kinds``: "user" | "template" | "special"
    per token; ``titles``: hover text per token; ``framed_tail``: frame the last n chips (e.g. the
    generation prompt, or the token just appended); ``limit``: at most this many chips, then "… +N".
    Neighbouring byte tokens of one character are framed together under that character. ``colours``: a
    background per token (``#rrggbb`` or ``rgba(…)``) instead of the pastels, e.g. a score's colour; ``notes``: a
    short text written under each piece (a score's value), else ``titles`` are also given to screen readers."""
    seq = pieces if isinstance(pieces, TokenWindow) else list(pieces)  # a window keeps its neighbours for the labels
    n = len(seq)
    shown = n if limit is None else min(n, limit)
    labels = token_labels(seq[: min(n, shown + 3)])[:shown]  # 3 more: a character cut by the limit still decodes
    pieces = list(seq)
    groups = {a: (b, text) for a, b, text in byte_groups(pieces[:shown])}
    out: list[str] = []
    end_group = -1
    for i in range(shown):
        if i in groups:
            end_group, text = groups[i]
            out.append(f'<span class="xr-group" title="{html.escape(text, quote=True)}" style="{GROUP}">'
                       f'<span style="{GROUP_HEAD}">{html.escape(text)}</span>')
        label = labels[i]
        kind = kinds[i] if kinds is not None else "user"
        bg = f"background:{PASTELS[i % len(PASTELS)]};" if kind == "user" else ""
        if colours is not None and _COLOUR.fullmatch(str(colours[i])):  # a value's colour (attributions), not the pastel
            bg = f"background:{colours[i]};"
        frame = FRAME if i >= n - framed_tail else ""
        title = f' title="{html.escape(titles[i], quote=True)}"' if titles is not None else ""
        pos = f"<sub>{start + i}</sub> " if positions else ""
        under = f'<br><small style="color:#374151">{int(ids[i])}</small>' if ids is not None else ""
        if notes is not None:  # a value under its token, in text: not only a colour or a hover (WCAG 1.1.1, 1.4.1)
            under += f'<br><small style="color:#1f2129">{html.escape(str(notes[i]))}</small>'
        elif titles is not None:  # the hover text, for a screen reader too (a title= alone is read by few)
            under += f'<span class="xr-sr"> ({html.escape(titles[i])})</span>'

        out.append(f'<span class="xr-chip" data-piece="{html.escape(label, quote=True)}" dir="auto"{title} '
                   f'style="{BASE}{bg}{KIND_STYLE[kind]}{frame}">{pos}{_chip_text(pieces[i], label)}{under}</span>')
        if i == end_group - 1:
            out.append("</span>")
    if shown < end_group:
        out.append("</span>")
    more = f" … +{n - shown}" if shown < n else ""
    return '<div class="xr-chips" style="line-height:2.4">' + "".join(out) + "</div>" + more


def kinds_from_special(special: Sequence[bool]) -> list[str]:
    return ["special" if s else "user" for s in special]


def show(pieces: Sequence[Any], ids: Sequence[int] | None = None, *, where: DeltaGenerator | None = None, **kw: Any) -> None:
    """Draw the chips (``where``: a container; the main area by default)."""
    (where or st).markdown(chips_html(pieces, ids, **kw), unsafe_allow_html=True)


def page_bounds(n: int, start: int, size: int = PAGE) -> tuple[int, int]:
    """The page [a, b) of ``n`` tokens that starts at ``start`` (clamped into the sequence; the last page may be short)."""
    a = max(0, min(int(start), n - 1))
    return a, min(n, a + max(1, int(size)))


def _cut(values: Sequence[Any] | None, a: int, b: int) -> list[Any] | None:
    return None if values is None else list(values[a:b])


def show_page(pieces: Sequence[Any], ids: Sequence[int] | None = None, *, key: str, where: DeltaGenerator | None = None, size: int = PAGE,
              param: str = "chips", kinds: Sequence[str] | None = None, titles: Sequence[str] | None = None,
              colours: Sequence[str] | None = None, notes: Sequence[str] | None = None, framed_tail: int = 0,
              **kw: Any) -> tuple[int, int]:
    """The chips of a sequence of any length: all of them up to ``size``; beyond, ``size`` at a time
    from a start the user picks (a number input, in the URL as ``param``) and a line "tokens a–b of N".
    Positions are numbered in the whole sequence; per-token lists (ids, kinds, titles, colours) are cut
    to the page, and ``framed_tail`` still frames the sequence's last chips. Returns the page [a, b)."""
    n = len(pieces)
    box = where or st
    if n <= size:
        show(pieces, ids, where=box, kinds=kinds, titles=titles, colours=colours, notes=notes, framed_tail=framed_tail, **kw)
        return 0, n
    c1, c2 = box.columns([1, 2], vertical_alignment="bottom")
    first = widgets.number_url(ui.t("chips.start"), 0, n - 1, 0, key=f"{key}_chips_start", param=param, where=c1, step=size)
    a, b = page_bounds(n, first, size)
    kw["positions"] = True  # a page of a longer sequence: each chip says where it stands
    c2.caption(ui.t("chips.range", a=f"{a:,}", b=f"{b - 1:,}", T=f"{n:,}"))
    show(token_window(pieces, a, b), _cut(ids, a, b), where=box, kinds=_cut(kinds, a, b), titles=_cut(titles, a, b),
         colours=_cut(colours, a, b), notes=_cut(notes, a, b), framed_tail=max(0, framed_tail - (n - b)), start=a, **kw)
    return a, b
