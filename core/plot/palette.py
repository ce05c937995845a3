"""The app's colours, once: every figure takes its colour scales, series colours and text colours from
here, so they stay readable on a projector and for colour-blind eyes (WCAG 2.1 1.4.1, 1.4.3, 1.4.11).

``SEQUENTIAL`` is cividis (the same for common colour vision deficiencies, monotonic in lightness, its
low end dark enough to stand out on white); ``DIVERGING`` blue ↔ white ↔ vermillion for signed values;
``SERIES`` the Okabe–Ito palette, each with its own dash and marker (never colour alone); ``HIDDEN`` a
hatched light grey for masked cells; ``INK`` / ``INK_SOFT`` text on white, and ``ink_on`` the text colour
that contrasts more on a cell of any colour. No plotly here (``core/*/figures.py`` hands these on).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import numpy as np

CIVIDIS = ("#00224e", "#123570", "#3b496c", "#575d6d", "#707173", "#8a8678", "#a59c74", "#c3b369", "#e1cc55", "#fee838")
SEQUENTIAL: list[list[float | str]] = [[i / (len(CIVIDIS) - 1), c] for i, c in enumerate(CIVIDIS)]
DIVERGING: list[list[float | str]] = [[0.0, "#0072b2"], [0.25, "#7fb3d8"], [0.5, "#f7f7f7"], [0.75, "#eaa67f"], [1.0, "#d55e00"]]

# Okabe & Ito, "Color Universal Design" (2008): distinguishable with protanopia, deuteranopia and tritanopia.
# Orange (#e69f00, 2.25:1) and sky blue (#56b4e9, 2.31:1) are darkened, same hue, to stand at least 3:1 against
# the white page as a line or a bar must (1.4.11); yellow is left out (1.32:1).
OKABE_ITO = {"blue": "#0072b2", "orange": "#b87800", "green": "#009e73", "vermillion": "#d55e00", "purple": "#cc79a7",
             "sky": "#3a8fc4", "black": "#000000", "grey": "#666666"}
# role → (colour, dash, marker): a series is told apart by its line and its marker as well as its colour
SERIES: dict[str, tuple[str, str, str]] = {
    "prefill": (OKABE_ITO["blue"], "solid", "circle"),
    "decode": (OKABE_ITO["orange"], "dash", "diamond"),
    "with": (OKABE_ITO["green"], "solid", "circle"),
    "without": (OKABE_ITO["vermillion"], "dash", "x"),
    "linear": (OKABE_ITO["blue"], "dash", "circle"),
    "quadratic": (OKABE_ITO["vermillion"], "dot", "x"),
    "kv": (OKABE_ITO["purple"], "solid", "square"),
    "weights": (OKABE_ITO["grey"], "dot", "triangle-up"),
    "accent": (OKABE_ITO["vermillion"], "dash", "x"),
    "main": (OKABE_ITO["blue"], "solid", "circle"),
    "second": (OKABE_ITO["orange"], "dash", "diamond"),
    "third": (OKABE_ITO["green"], "dot", "square"),
}
ORDER = ("blue", "orange", "green", "vermillion", "purple", "sky", "black")  # categorical colours, in this order
HIDDEN = "#e8e8e8"  # a masked cell (and its pattern, ``hatch``)
HATCH_INK = "#6b6b6b"  # the × pattern over hidden cells: 4.3:1 against HIDDEN's grey
INK = "#1f2129"  # body text on white: 16.1:1
INK_SOFT = "#4d505a"  # secondary text (captions, tick labels, axis titles) on white: 8.0:1
GRID = "#d9d9d9"
BOX = "#eef3fa"  # a part of a diagram (the home page's overview): INK on it 14.4:1
BOX_WARM = "#fdf3dc"  # the diagram's repeated part (the blocks): INK on it 14.6:1


def colour(role: str) -> str:
    return SERIES[role][0]


def line(role: str, **extra: object) -> dict[str, object]:
    """A plotly ``line=`` dict for a series role: its colour and its dash."""
    c, dash, _ = SERIES[role]
    return {"color": c, "dash": dash, **extra}


def marker(role: str, **extra: object) -> dict[str, object]:
    """A plotly ``marker=`` dict for a series role: its colour and its symbol."""
    c, _, symbol = SERIES[role]
    return {"color": c, "symbol": symbol, **extra}


def categorical(n: int) -> list[str]:
    """``n`` colours for categories (KV groups, requests), Okabe–Ito first, repeating past seven."""
    return [OKABE_ITO[ORDER[i % len(ORDER)]] for i in range(n)]


# ---------------------------------------------------------------------------------------------
# contrast (WCAG 2.1's definitions)


def _rgb(hex_colour: str) -> tuple[float, float, float]:
    h = hex_colour.lstrip("#")
    return tuple(int(h[i:i + 2], 16) / 255 for i in (0, 2, 4))  # type: ignore[return-value]


def luminance(hex_colour: str) -> float:
    """WCAG's relative luminance of an sRGB colour."""
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in _rgb(hex_colour)]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def contrast(a: str, b: str) -> float:
    """WCAG's contrast ratio of two colours (1 … 21)."""
    la, lb = sorted((luminance(a), luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def ink_on(background: str) -> str:
    """Black or white text, whichever contrasts more with ``background`` (never below 4.58:1)."""
    return "#000000" if contrast("#000000", background) >= contrast("#ffffff", background) else "#ffffff"


def scale_at(scale: Sequence[Sequence[float | str]], x: float) -> str:
    """The colour a plotly colour scale gives the fraction ``x`` (0 … 1), interpolated in sRGB as plotly does."""
    x = min(1.0, max(0.0, float(x)))
    for (a, ca), (b, cb) in pairwise(scale):
        if x <= float(b):
            f = 0.0 if float(b) == float(a) else (x - float(a)) / (float(b) - float(a))
            ra, rb = np.array(_rgb(str(ca))), np.array(_rgb(str(cb)))
            r = np.rint((ra + f * (rb - ra)) * 255).astype(int)
            return "#" + "".join(f"{v:02x}" for v in r)
    return str(scale[-1][1])


def inks(z: np.ndarray, zmin: float, zmax: float, scale: Sequence[Sequence[float | str]] = SEQUENTIAL) -> np.ndarray:
    """Per cell of ``z``, the text colour that reads on the colour ``scale`` gives it (NaN: on HIDDEN)."""
    z = np.asarray(z, dtype=np.float64)
    span = (zmax - zmin) or 1.0
    out = np.empty(z.shape, dtype=object)
    for idx, v in np.ndenumerate(z):
        out[idx] = ink_on(HIDDEN) if not np.isfinite(v) else ink_on(scale_at(scale, (v - zmin) / span))
    return out


# ---------------------------------------------------------------------------------------------
# hidden cells, by pattern


def hatch(hidden: np.ndarray, x0: float = 0.0, y0: float = 0.0) -> dict[str, object]:
    """The keyword arguments of one plotly ``Scatter`` that lays a × pattern over the cells where
    ``hidden`` [rows, cols] is True, on a heatmap whose cell (i, j) is centred at (x0 + j, y0 + i): one
    rectangle per run of hidden cells in a row, all in one trace (a path with gaps), so a 4,096-row
    causal mask costs 4,096 rectangles, not 8 million cells."""
    hid = np.asarray(hidden, dtype=bool)
    xs: list[float | None] = []
    ys: list[float | None] = []
    for i, row in enumerate(hid):
        if not row.any():
            continue
        edges = np.flatnonzero(np.diff(np.concatenate(([0], row.astype(np.int8), [0]))))
        for a, b in zip(edges[::2], edges[1::2]):  # hidden columns a … b-1
            left, right, top, bottom = x0 + a - 0.5, x0 + b - 0.5, y0 + i - 0.5, y0 + i + 0.5
            xs += [left, right, right, left, left, None]
            ys += [top, top, bottom, bottom, top, None]
    return {"x": xs, "y": ys, "mode": "lines", "fill": "toself", "line": {"width": 0}, "fillcolor": HIDDEN,
            "fillpattern": {"shape": "x", "fgcolor": HATCH_INK, "bgcolor": HIDDEN, "size": 6, "solidity": 0.15},
            "hoverinfo": "skip", "hoveron": "points", "showlegend": False}


def text_layer(z: np.ndarray, text: np.ndarray, x: Sequence[float], y: Sequence[float], zmin: float, zmax: float,
               scale: Sequence[Sequence[float | str]] = SEQUENTIAL, size: int = 12) -> dict[str, object]:
    """The keyword arguments of one plotly ``Scatter`` that writes ``text`` [rows, cols] on a heatmap's
    cells, each in the ink that reads on its cell's colour (``inks``; plotly's own heatmap text picks its
    ink by a brightness threshold and reaches only about 3.9:1 near it). Decorative for the hover and the
    figure's table (``hoverinfo="skip"``): the heatmap under it carries the values."""
    z = np.asarray(z, dtype=np.float64)
    ink = inks(z, zmin, zmax, scale)
    xs, ys, ts, cs = [], [], [], []
    for (i, j), s in np.ndenumerate(np.asarray(text, dtype=object)):
        if s is None or s == "":
            continue
        xs.append(x[j])
        ys.append(y[i])
        ts.append(s)
        cs.append(ink[i, j])
    return {"x": xs, "y": ys, "text": ts, "mode": "text", "textfont": {"color": cs, "size": size},
            "hoverinfo": "skip", "showlegend": False}
