"""Accessibility (issue 26, WCAG 2.1 AA), at the shared places: the palette's colours and inks, the hatch
over hidden cells, every figure's text alternative (name, summary, values as a table), the page look
that presenter.chart gives a figure, the style and script of core.web.a11y, and the pages' headings.
The browser tier runs axe-core on every page in both languages (tests/browser/test_browser.py)."""

from __future__ import annotations

import json
import re
from itertools import pairwise

import numpy as np
import plotly.graph_objects as go
import pytest

from conftest import ROOT
from core.common import i18n
from core.maths import figures as maths_fig
from core.plot import attnview, palette
from core.web import a11y, figtext, presenter

WHITE = "#ffffff"


# ---------------------------------------------------------------------------------------------
# colours


def test_text_inks_reach_aa_on_white_and_the_scale_low_end_stands_out():
    assert palette.contrast(palette.INK, WHITE) >= 4.5 and palette.contrast(palette.INK_SOFT, WHITE) >= 4.5  # 1.4.3
    assert palette.contrast(palette.CIVIDIS[0], WHITE) >= 3.0  # 1.4.11: a faint weight never vanishes into the page
    assert palette.contrast("#f7fbff", WHITE) < 1.1  # what "Blues" started at (the complaint)
    assert palette.contrast(a11y.FOCUS, WHITE) >= 3.0  # the focus ring against the page


@pytest.mark.parametrize("scale", [palette.SEQUENTIAL, palette.DIVERGING], ids=["sequential", "diverging"])
def test_the_ink_on_any_cell_of_a_scale_reads_at_aa(scale):
    xs = np.linspace(0, 1, 1001)
    worst = min(palette.contrast(palette.ink_on(palette.scale_at(scale, x)), palette.scale_at(scale, x)) for x in xs)
    assert worst >= 4.5, worst


def test_scale_at_interpolates_the_stops():
    assert palette.scale_at(palette.SEQUENTIAL, 0) == palette.CIVIDIS[0] and palette.scale_at(palette.SEQUENTIAL, 1) == palette.CIVIDIS[-1]
    assert palette.scale_at([[0, "#000000"], [1, "#ffffff"]], 0.5) == "#808080"


def test_series_stand_out_from_the_page_and_pairs_differ_beyond_colour():
    for role, (c, _dash, _symbol) in palette.SERIES.items():
        assert palette.contrast(c, WHITE) >= 3.0, role  # a line or a bar is a graphical object (1.4.11)
    for a, b in (("with", "without"), ("linear", "quadratic"), ("prefill", "decode"), ("main", "accent")):
        (_, da, ma), (_, db, mb) = palette.SERIES[a], palette.SERIES[b]
        assert da != db and ma != mb, (a, b)  # told apart by dash and marker, not by colour alone (1.4.1)
    assert all(palette.contrast(c, WHITE) >= 3.0 for c in palette.categorical(7))


def test_no_figure_module_keeps_the_old_colours():
    """The scales and the series come from the palette: no "Blues", no #2ca02c/#d62728 pair left."""
    for f in sorted((ROOT / "core").glob("*/figures.py")):
        src = f.read_text(encoding="utf-8")
        assert '"Blues"' not in src and "#2ca02c" not in src and "#d62728" not in src, f


def test_hatch_covers_exactly_the_hidden_cells():
    hidden = ~np.tril(np.ones((5, 5), dtype=bool))
    hidden[4, 0] = True  # a second run in a row
    h = palette.hatch(hidden)
    xs, ys = h["x"], h["y"]
    rects = [(xs[i:i + 5], ys[i:i + 5]) for i in range(0, len(xs), 6)]
    covered = np.zeros_like(hidden)
    for rx, ry in rects:
        j0, j1 = int(min(rx) + 0.5), int(max(rx) + 0.5)
        i0 = int(min(ry) + 0.5)
        covered[i0, j0:j1] = True
    np.testing.assert_array_equal(covered, hidden)
    assert h["fillpattern"]["shape"] == "x" and h["hoverinfo"] == "skip"
    assert palette.contrast(palette.HATCH_INK, palette.HIDDEN) >= 3.0


def test_a_big_mask_reads_by_pattern_and_lightness():
    """Above 900 cells the ✓/× are gone: the hidden part is hatched, and its grey differs from the
    visible blue in lightness (a colour-blind eye sees lightness)."""
    vis = np.tril(np.ones((40, 40), dtype=bool))
    fig = maths_fig.mask_figure(vis, "m", "en")
    assert fig.data[0].texttemplate is None  # 1,600 cells: no text
    hatch = [d for d in fig.data if d.type == "scatter" and d.fill == "toself"]
    assert len(hatch) == 1 and len(hatch[0].x) == 6 * 39  # one rectangle per row with hidden cells
    assert palette.contrast(maths_fig.VISIBLE, palette.HIDDEN) >= 2.0


def test_attention_maps_leave_the_future_blank():
    w = np.tril(np.full((6, 6), 0.5, dtype=np.float32))
    z = attnview.hide_future(w)
    assert np.isnan(z[np.triu_indices(6, 1)]).all() and np.array_equal(z[np.tril_indices(6)], w[np.tril_indices(6)])
    view = attnview.view(np.tril(np.ones((200, 200), dtype=np.float32)))  # averaged blocks of 4
    fut = attnview.future(view)
    assert fut.shape == (view.n, view.n) and not fut.diagonal().any() and fut[0, 1] and not fut[1, 0]


# ---------------------------------------------------------------------------------------------
# a figure in words and numbers


def _heat(n: int, title: str = "Weights") -> go.Figure:
    z = np.arange(n * n, dtype=float).reshape(n, n) / (n * n)
    fig = go.Figure(go.Heatmap(z=z, x=list(range(n)), y=list(range(n))))
    fig.update_xaxes(tickmode="array", tickvals=list(range(n)), ticktext=[f"k{i}" for i in range(n)])
    fig.update_layout(title=title)
    return fig


@pytest.mark.parametrize("lang", i18n.LANGS)
def test_a_heatmap_is_named_summed_up_and_tabled(lang):
    text = figtext.describe(_heat(4), lang)
    assert text.name == "Weights" and text.label.startswith("Weights. ")
    frame = text.tables[0].frame
    assert frame.shape == (4, 4) and list(frame.columns) == ["k0", "k1", "k2", "k3"]
    assert frame.iloc[3, 3] == f"{15 / 16:.4g}"
    assert "k3" in text.summary and f"{15 / 16:.4g}" in text.summary  # where the largest value is, in the sentence
    assert i18n.t("a11y.sum_tables", lang) in text.summary


def test_a_big_heatmap_lists_its_largest_cells_and_says_so():
    text = figtext.describe(_heat(60), "en")
    tb = text.tables[0]
    assert len(tb.frame) == figtext.TOP and tb.note == i18n.t("a11y.note_top", "en", top=figtext.TOP, cells=3600)
    assert tb.frame.iloc[0, 2] == f"{3599 / 3600:.4g}" and tb.frame.iloc[0, 1] == "k59"


def test_bars_lines_and_hidden_cells():
    fig = go.Figure([go.Bar(x=["a", "b"], y=[1, 3], name="with"), go.Scatter(x=[1, 2, 3], y=[4, 5, 6], name="line"),
                     go.Scatter(**palette.hatch(np.eye(2, dtype=bool)))])
    text = figtext.describe(fig, "en")
    assert len(text.tables) == 2  # the hatch decorates: no table of it
    assert text.tables[0].frame.values.tolist() == [["a", "1"], ["b", "3"]]
    assert "with: 2 values, the largest at b (3)." in text.summary
    z = np.where(np.tril(np.ones((3, 3), bool)), 0.5, np.nan)
    assert i18n.t("a11y.sum_hidden", "en", n=3) in figtext.describe(go.Figure(go.Heatmap(z=z)), "en").summary


def test_the_table_is_real_markup_and_shows_outside_text_as_text():
    from core.common import escape

    # labels as every builder hands them to plotly (escape.plot): a typed <b> is text, not bold
    fig = go.Figure(go.Bar(x=escape.plot_all(["<b>x</b>", "[a](https://evil.example)"]), y=[1, 2], name="<i>n</i>"))
    fig.update_layout(title="T &amp; <br>U")
    text = figtext.describe(fig, "en")
    out = figtext.to_html(text)
    assert text.name == "T & U"
    assert "<table>" in out and "<caption>" in out and '<th scope="col">' in out
    assert "<b>x</b>" not in out and "&lt;b&gt;x&lt;/b&gt;" in out and "https://evil" not in out  # no tag, no live link
    assert text.tables[0].caption == "n"  # plotly's own markup in a trace name is read as plain text


# ---------------------------------------------------------------------------------------------
# the look a drawn figure gets


def test_styled_figure_has_the_look_its_title_above_and_keeps_the_builder():
    fig = _heat(3)
    fig.update_layout(margin=dict(t=90), height=333)
    f, text = presenter.styled(fig)
    assert f.layout.template.layout.xaxis.tickfont.color == palette.INK_SOFT and f.layout.template.layout.font.color == palette.INK
    assert f.layout.title.text is None and f.layout.meta["title"] == "Weights" and f.layout.margin.t == 50
    assert f.layout.height == 333 and fig.layout.title.text == "Weights"  # the cached figure is untouched
    assert text.name == "Weights"
    assert presenter.CONFIG["modeBarButtons"] == [["toImage", "resetScale2d"]]  # 2 tab stops per figure, not 8


def test_styled_gives_the_titles_band_back_above_a_top_axis_but_not_under_a_top_legend():
    """A grid with its keys on top (the weights, the masks) keeps no empty band where its title was; a legend
    drawn above the plot keeps the room it sits in."""
    fig = _heat(3)
    fig.update_xaxes(side="top")
    fig.update_layout(margin=dict(t=105))
    assert presenter.styled(fig)[0].layout.margin.t == 65
    fig.update_layout(legend=dict(y=1.02, yanchor="bottom"))
    assert presenter.styled(fig)[0].layout.margin.t == 105


@pytest.mark.parametrize("own", [None, "plotly", "builder"])
def test_styled_is_the_figure_plotlys_validating_route_gives(own):
    """``styled`` builds its copy from the spec of already validated parts (no second validation) and keeps one
    merged look per template: the figure must be the one plotly's own route gives (copy, assign the look, the
    figure's template's layout on top), and drawing it for the projector must not change the kept look."""
    import plotly.io as pio

    fig = _heat(3)
    if own == "plotly":
        fig.layout.template = pio.templates["plotly"]
    elif own == "builder":
        fig.layout.template = go.layout.Template(layout=dict(font=dict(family="serif"), paper_bgcolor="#fafafa"))
    ref = go.Figure(fig)
    ref_own = ref.layout.template
    ref.layout.template = pio.templates[presenter.LOOK]
    if ref_own.layout.to_plotly_json() != pio.templates["plotly"].layout.to_plotly_json():
        ref.layout.template.layout.update(ref_own.layout)
    ref.layout.meta, ref.layout.title.text, ref.layout.margin.t = {"title": "Weights"}, None, 40
    ref_big = go.Figure(ref)  # the projector's sizes the validating way: a copy, the projector's template on top
    ref_big.layout.template.layout.update(pio.templates[presenter.TEMPLATE].layout)
    presenter.projector_sizes(ref_big)
    for _ in range(2):  # the second time from the kept looks
        f, _text = presenter.styled(fig)
        assert json.loads(pio.to_json(f)) == json.loads(pio.to_json(ref))
        big, _text = presenter.styled(fig, projector=True)
        assert json.loads(pio.to_json(big)) == json.loads(pio.to_json(ref_big))
        big.layout.template.layout.font.size = f.layout.template.layout.font.size = 99  # the kept looks stay as made
    assert (f.layout.template.layout.font.family == "serif") == (own == "builder")


def test_the_style_sets_caption_contrast_focus_and_section_size():
    assert palette.INK_SOFT in a11y.CSS and "opacity: 1" in a11y.CSS
    assert re.search(r"focus-visible[^{]*\{[^}]*outline: 3px solid", a11y.CSS)
    assert "stHeadingWithActionElements\"] h2" in a11y.CSS
    assert "__LANG__" in a11y.SCRIPT and 'role", "list"' in a11y.SCRIPT and 'role", "figure"' in a11y.SCRIPT and "aria-hidden" in a11y.SCRIPT


def test_pages_use_h2_sections_not_h3():
    """Every page goes h1 (its title) → h2 (st.header): 16 pages jumped from h1 to h3 (st.subheader)."""
    for f in sorted((ROOT / "pages").glob("*.py")) + sorted((ROOT / "core" / "web").glob("*.py")):
        assert "subheader(" not in f.read_text(encoding="utf-8"), f


# Machado, Oliveira & Fernandes (2009), severity 1.0, applied to linear RGB
_CVD = {
    "protanopia": np.array([[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216], [-0.003882, -0.048116, 1.051998]]),
    "deuteranopia": np.array([[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413], [-0.011820, 0.042940, 0.968881]]),
    "tritanopia": np.array([[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602], [0.004733, 0.691367, 0.303900]]),
}


def _seen(hex_colour: str, kind: str) -> str:
    rgb = np.array([int(hex_colour.lstrip("#")[i:i + 2], 16) / 255 for i in (0, 2, 4)])
    lin = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    out = np.clip(_CVD[kind] @ lin, 0, 1)
    srgb = np.where(out <= 0.0031308, 12.92 * out, 1.055 * out ** (1 / 2.4) - 0.055)
    return "#" + "".join(f"{round(c * 255):02x}" for c in srgb)


@pytest.mark.parametrize("kind", sorted(_CVD))
def test_what_colour_blind_eyes_still_see(kind):
    """Under a simulated colour vision deficiency: the sequential scale still rises in lightness at every
    stop (its order survives), a mask's visible and hidden cells still differ in lightness, and the
    masked triangle of an attention map (blank) stands out from the scale's low end."""
    lum = [palette.luminance(_seen(c, kind)) for c in palette.CIVIDIS]
    assert all(b > a for a, b in pairwise(lum)), lum
    assert palette.contrast(_seen(maths_fig.VISIBLE, kind), _seen(palette.HIDDEN, kind)) >= 2.0
    assert palette.contrast(_seen(palette.CIVIDIS[0], kind), WHITE) >= 3.0


def test_small_multiples_stay_small_and_position_zero_is_named():
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=3)
    for i in range(3):
        z = np.zeros((37, 37))
        z[5, 0] = 1.0  # the largest at column 0: its label is "0", not empty
        fig.add_trace(go.Heatmap(z=z), 1, i + 1)
    text = figtext.describe(fig, "en")
    assert [len(t.frame) for t in text.tables] == [figtext.TOP] * 3  # 4,107 cells in all: each lists its largest
    assert "row 5 and column 0 hold" in text.summary
