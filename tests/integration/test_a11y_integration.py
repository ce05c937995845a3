"""Accessibility (issue 26, WCAG 2.1 AA), at the shared places: the palette's colours and inks, the hatch
over hidden cells, every figure's text alternative (name, summary, values as a table), the page look
that presenter.chart gives a figure, the style and script of core.web.a11y, and the pages' headings.
The browser tier runs axe-core on every page in both languages (tests/browser/test_browser.py)."""

from __future__ import annotations

import json

import pytest

from conftest import ROOT
from core.common import i18n


@pytest.mark.parametrize("lang", i18n.LANGS)
def test_every_figure_on_a_page_has_its_name_and_table(lang):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=240)
    at.query_params["lang"] = lang
    at.switch_page("pages/masks.py")
    at.run()
    assert not at.exception
    charts = at.get("plotly_chart")
    names = [m.value for m in at.markdown if 'class="xr-figtitle' in m.value]
    tables = [m.value for m in at.markdown if "<table>" in m.value]
    assert charts and len(names) == len(charts) and len(tables) == len(charts)
    for name, c in zip(names, charts):
        spec = json.loads(c.proto.spec)
        assert spec["layout"]["meta"]["title"] in name  # the text above is this figure's title
        assert 'data-label="' in name and i18n.t("a11y.sum_tables", lang) in name
    assert all(e.label.startswith("📋") for e in at.expander if "<table>" in "".join(m.value for m in e.markdown))
