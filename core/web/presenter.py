"""Classroom helpers for Streamlit: presenter mode, every chart, and the "Sources" boxes.

Presenter mode (URL ``?present=1``) is for a projector: the sidebar starts collapsed (app.py asks
``sidebar_state()`` before anything else), the page's type is enlarged, secondary controls
(downloads, expanders, table toolbars) are hidden, every figure's text is at least ``MIN_FONT`` px, and the
editable grids (``st.data_editor``, drawn on a canvas that CSS fonts cannot reach) are zoomed ×1.45 (13 → 19 px). Every page draws its plotly figures through ``chart`` / ``chart_in``: the one
place where the projector's font sizes are applied to a figure. Pages can ask ``is_on()`` to
leave out details.
"""

from __future__ import annotations

import html
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
import streamlit as st

from core.common import escape
from core.learn import references
from core.plot import palette
from core.web import figtext, ui

KEY = "present"

_CSS = """<style>
[data-testid="stMain"] [data-testid="stMarkdownContainer"] p,
[data-testid="stMain"] [data-testid="stMarkdownContainer"] li { font-size: 1.45rem !important; line-height: 1.5 !important; }
[data-testid="stMainBlockContainer"] { padding-top: 4.25rem !important; }
[data-testid="stMain"] h1 { font-size: 3.2rem !important; padding-top: 0 !important; }
[data-testid="stMain"] h2, [data-testid="stMain"] h3 { font-size: 2.3rem !important; }
[data-testid="stMain"] [data-testid="stMetricValue"],
[data-testid="stMain"] [data-testid="stMetricValue"] p { font-size: 2.8rem !important; line-height: 1.2 !important; }
[data-testid="stMain"] [data-testid="stMetricLabel"] p { font-size: 1.2rem !important; }
[data-testid="stMain"] button p { font-size: 1.3rem !important; }
[data-testid="stMain"] [data-testid="stSliderThumbValue"] p,
[data-testid="stMain"] [data-testid="stSliderTickBar"] p { font-size: 1.2rem !important; line-height: 1.2 !important; }
[data-testid="stMain"] [data-testid="stSliderThumbValue"] { bottom: 1.1rem !important; top: auto !important; }
[data-testid="stMain"] [data-testid="stSlider"] [data-orientation="horizontal"] { margin-top: 0.6rem; }
[data-testid="stMain"] .xr-chips { font-size: 1.4rem !important; }
[data-testid="stMain"] input, [data-testid="stMain"] textarea,
[data-testid="stMain"] [data-baseweb="select"] > div { font-size: 1.2rem !important; }
[data-testid="stMain"] [data-testid="stCode"] code { font-size: 1.15rem !important; }
[data-testid="stMain"] [data-testid="stCaptionContainer"],
[data-testid="stMain"] [data-testid="stCaptionContainer"] p { font-size: 1.15rem !important; }
[data-testid="stMain"] [data-testid="stTable"] td, [data-testid="stMain"] [data-testid="stTable"] th { font-size: 1.2rem !important; }
[data-testid="stMain"] [data-testid="stMarkdownContainer"] td,
[data-testid="stMain"] [data-testid="stMarkdownContainer"] th { font-size: 1.3rem !important; }
[data-testid="stMain"] [data-testid="stDataFrame"] { zoom: 1.45; width: calc(100% / 1.45) !important; }
[data-testid="stMain"] [data-testid="stDataFrame"] [data-testid="stDataFrameResizable"] { width: 100% !important; max-width: 100% !important; }
[data-testid="stMain"] [data-testid="stDownloadButton"],
[data-testid="stMain"] [data-testid="stExpander"],
[data-testid="stElementToolbar"] { display: none !important; }
</style>"""


PRESENT_FONT = 20  # px: a figure's base text on a projector (ticks, legends, axis titles inherit it)
MIN_FONT = 18  # px: no text in a projected figure is smaller
TITLE_FONT = 26  # px
TEMPLATE = "xray_present"
# The projector's type as a named plotly template (the figure keeps its own look; only sizes change).
pio.templates[TEMPLATE] = go.layout.Template(layout=dict(
    font=dict(size=PRESENT_FONT), title=dict(font=dict(size=TITLE_FONT)), legend=dict(font=dict(size=MIN_FONT)),
    hoverlabel=dict(font=dict(size=MIN_FONT)),
))


def _bigger(size: Any) -> int:
    return max(int(size), MIN_FONT) if size is not None else MIN_FONT


def projector_sizes(f: go.Figure) -> go.Figure:
    """``f`` itself (a copy already, whose template has the projector's ``TEMPLATE`` on top: ``styled`` with
    ``projector``) with every text at least MIN_FONT px: every size the figure set explicitly (cell text, ticks,
    subplot titles, legends, colour bars) raised to it; taller, so the bigger text still fits."""
    f.update_layout(font_size=_bigger(f.layout.font.size if f.layout.font.size else PRESENT_FONT),
                    title_font_size=max(TITLE_FONT, f.layout.title.font.size or 0), legend_font_size=_bigger(f.layout.legend.font.size),
                    hoverlabel_font_size=_bigger(f.layout.hoverlabel.font.size))
    for name in f.layout:
        if name.startswith(("xaxis", "yaxis")):
            ax = f.layout[name]
            ax.tickfont.size = _bigger(ax.tickfont.size)
            ax.title.font.size = _bigger(ax.title.font.size or PRESENT_FONT)
    f.update_annotations(font_size=MIN_FONT)
    for a in f.layout.annotations:
        a.font.size = _bigger(a.font.size)
    for tr in f.data:
        if "textfont" in tr:
            tr.textfont.size = _bigger(tr.textfont.size)
        if "colorbar" in tr:
            tr.colorbar.tickfont.size = _bigger(tr.colorbar.tickfont.size)
            tr.colorbar.title.font.size = _bigger(tr.colorbar.title.font.size)
    if f.layout.coloraxis.colorbar is not None:
        f.layout.coloraxis.colorbar.tickfont.size = _bigger(f.layout.coloraxis.colorbar.tickfont.size)
        f.layout.coloraxis.colorbar.title.font.size = _bigger(f.layout.coloraxis.colorbar.title.font.size)
    if f.layout.height:
        f.layout.height = int(f.layout.height * 1.25)
    m = f.layout.margin
    f.update_layout(margin=dict(t=int((m.t if m.t is not None else 80) * 1.3) + 10, b=(m.b or 0) + 20))
    return f


# The page's figure look (WCAG 1.4.3 / 1.4.11): plotly_white with text in the palette's inks (tick labels and
# axis titles 8.0:1 on white; Streamlit's own plotly theme drew them at 3.72:1) and light grid lines.
LOOK = "xray"
_AXIS = dict(color=palette.INK_SOFT, gridcolor=palette.GRID, linecolor=palette.INK_SOFT, zerolinecolor=palette.GRID,
             tickfont=dict(color=palette.INK_SOFT), title=dict(font=dict(color=palette.INK_SOFT)))
pio.templates[LOOK] = go.layout.Template(pio.templates["plotly_white"])
pio.templates[LOOK].layout.update(font=dict(color=palette.INK), title=dict(font=dict(color=palette.INK)),
                                  legend=dict(font=dict(color=palette.INK)), xaxis=_AXIS, yaxis=_AXIS,
                                  colorscale=dict(sequential=palette.SEQUENTIAL, diverging=palette.DIVERGING),
                                  colorway=palette.categorical(7))
# plotly's toolbar cut to two buttons (download as PNG, reset the axes): fewer tab stops per figure; zoom by
# dragging still works, and every value is in the figure's table.
CONFIG = {"modeBarButtons": [["toImage", "resetScale2d"]], "displaylogo": False}
PROJECTOR_MAX_H = 600  # px: a figure and its title fit a 1280 × 720 projector without scrolling


def _top_is_free(f: go.Figure) -> bool:
    """No legend above the plot, no annotation (subplot titles) in the top margin. An axis drawn on top sits against
    the plot, under the title's band (the weights' and the masks' grids): that band was left empty above it, a
    projector's first screen lost 50 px of every such grid (issue 40)."""
    if f.layout.legend.y is not None and f.layout.legend.y >= 1:
        return False
    return not f.layout.annotations


_LOOKS: dict[tuple[bool, str], dict] = {}  # (projector, a figure's own template's layout as JSON) → the look, as a plotly spec


def _look_over(own: go.layout.Template | None, projector: bool = False) -> dict:
    """The page's look with the settings of a figure's own template on top (a builder's own template wins), made
    once per distinct template. A figure built without a template carries plotly's default one (Streamlit's,
    which Streamlit makes the default); only plotly's own "plotly" template counts as none. Merging the two
    and validating the copy again took 30 of the 32 ms ``styled`` took per figure, on every run of every page
    (17 figures on the masks page); a figure built from the spec of its already validated parts is the same
    figure (``test_a11y``). With ``projector``, the projector's sizes (``TEMPLATE``) on top of both."""
    layout = own.layout.to_plotly_json() if own is not None and own.layout is not None else {}
    key = (projector, pio.to_json(layout, validate=False, engine="json") if layout else "")
    if key not in _LOOKS:
        look = go.layout.Template(pio.templates[LOOK])
        if layout and layout != pio.templates["plotly"].layout.to_plotly_json():
            look.layout.update(own.layout)
        if projector:
            look.layout.update(pio.templates[TEMPLATE].layout)
        _LOOKS[key] = look.to_plotly_json()
    return _LOOKS[key]


def styled(fig: go.Figure, projector: bool = False) -> tuple[go.Figure, figtext.FigureText]:
    """A copy of ``fig`` in the page's look (``LOOK``), its title taken out to be drawn as text above it,
    and the figure in words and numbers (``figtext.describe``), in the page's language; with ``projector``,
    also sized for a projector (``projector_sizes``, in the same copy)."""
    text = figtext.describe(fig, ui.lang())
    spec = fig.to_plotly_json()  # a deep copy: a cached figure is never changed
    spec["layout"]["template"] = _look_over(fig.layout.template, projector)
    f = go.Figure(spec, _validate=False)  # already valid: fig was built by plotly's validators, the look is one of its Templates
    if text.name:  # drawn as text above the figure; the spec keeps it as layout.meta.title (conftest.title_of)
        f.layout.meta = {**(f.layout.meta if isinstance(f.layout.meta, dict) else {}), "title": f.layout.title.text}
        f.layout.title.text = None
        if _top_is_free(f):  # nothing else lives in the title's band: give its room back
            m = f.layout.margin.t
            f.layout.margin.t = max(24, (m if m is not None else 80) - 40)
    return (projector_sizes(f) if projector else f), text


def chart(fig: go.Figure, **kw: Any) -> Any:
    """Draw a plotly figure (every page's charts come through here): in the page's look, its title as
    text above it, named for a screen reader by its title and summary (``core.web.a11y`` sets the
    name), its values in a table under it; in presenter mode with the projector's type and at most
    PROJECTOR_MAX_H px tall. Takes st.plotly_chart's arguments; the width stretches by default."""
    return chart_in(st, fig, **kw)


def chart_in(where: Any, fig: go.Figure, **kw: Any) -> Any:
    """``chart`` inside a container or column (``where``: what would have called .plotly_chart)."""
    kw.setdefault("width", "stretch")
    kw.setdefault("config", CONFIG)
    kw.setdefault("theme", None)  # the look is ours (LOOK), not Streamlit's plotly theme
    on = is_on()
    f, text = styled(fig, projector=on)
    if on and f.layout.height and f.layout.height > PROJECTOR_MAX_H:
        f.layout.height = PROJECTOR_MAX_H
    label = html.escape(text.label, quote=True)
    where.markdown(f'<p class="xr-figtitle" data-label="{label}">{html.escape(text.name)}</p>' if text.name else
                   f'<p class="xr-figtitle xr-sr" data-label="{label}">{html.escape(text.summary)}</p>', unsafe_allow_html=True)
    out = where.plotly_chart(f, **kw)
    if text.tables and not on:  # presenter mode hides expanders; the projector shows the figure
        with where.expander("📋 " + (ui.t("a11y.table_of", name=escape.md(text.name)) if text.name else ui.t("a11y.table_untitled"))):
            st.markdown(figtext.to_html(text), unsafe_allow_html=True)
    return out


def frame(data: Any, **kw: Any) -> Any:
    """A table of numbers: st.dataframe (sortable, scrollable) as built; on a projector st.table, whose
    text the presenter CSS enlarges (a dataframe is drawn on a canvas that CSS cannot reach)."""
    return frame_in(st, data, **kw)


def frame_in(where: Any, data: Any, **kw: Any) -> Any:
    """``frame`` inside a container or column (``where``: what would have called .dataframe)."""
    if is_on():
        return where.table(data, hide_index=kw.get("hide_index"))
    return where.dataframe(data, **kw)


def sidebar_state() -> str:
    """The sidebar's first state for st.set_page_config: collapsed for a projector (a ``?present=1``
    link), Streamlit's own choice otherwise."""
    return "collapsed" if st.query_params.get(KEY, "0") == "1" else "auto"


def is_on() -> bool:
    """True in presenter mode (the sidebar toggle, or ``?present=1`` in a shared link)."""
    if KEY in st.session_state:
        return bool(st.session_state[KEY])
    return st.query_params.get(KEY, "0") == "1"


def sidebar_toggle() -> None:
    """The presenter-mode toggle (call inside ``with st.sidebar``); keeps the URL in step."""
    if KEY not in st.session_state:
        st.session_state[KEY] = st.query_params.get(KEY, "0") == "1"
    st.toggle(ui.t("present.toggle"), key=KEY, help=ui.t("present.help"))
    ui.set_qp(present="1" if st.session_state[KEY] else None)


def apply_css() -> None:
    if is_on():
        st.markdown(_CSS, unsafe_allow_html=True)


def sources(concept: str) -> None:
    """A "Sources" expander with the references of ``concept`` (see core.learn.references.cite)."""
    with st.expander(f"📚 {ui.t('present.sources_of', concept=ui.t(f'references.c.{concept}'))}"):  # a full-width colon in Chinese
        for r in references.cite(concept):
            st.markdown(f"- [{r.label()}]({r.url})")
