"""Browser Back leaves a page in one press (issue 29, item 12).

Streamlit's frontend pushes a history entry for every query-parameter message whose query string
differs from the address bar's, and the server sends one message per ``st.query_params`` write: a page
view that wrote lang, chat, model, prompt, layer … one after the other pushed 3–7 entries, so Back
needed as many presses. ``guards.url_batch`` (around every script run, in app.py) sends the run's changes
as one message at its end, and ``guards.HISTORY_SCRIPT`` makes a push that only changes the query string
of the page shown a replace. Counted here as ``history.length`` over page views, in a real browser.
"""

from __future__ import annotations

from urllib.parse import urlparse

import pytest
from browser_helpers import CHROMIUM, chromium, settle, streamlit_server

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium executable installed (browser tests need one)")


def _length(page) -> int:
    return int(page.evaluate("() => window.history.length"))


@pytest.fixture(scope="module")
def page():
    with streamlit_server(8690) as app, chromium() as b:
        p = b.new_page()
        p.goto(f"{app.base}/tour?step=1")
        settle(p, timeout=240)
        p.base = app.base
        yield p
        p.close()


@pytest.mark.parametrize("stem", ["heads", "residual", "logits", "cause_pair"])
def test_a_page_view_pushes_at_most_one_entry(page, stem):
    before = _length(page)
    page.goto(f"{page.base}/{stem}")  # a view of the page, as a link opens it: one entry of its own
    settle(page, timeout=240)
    pushed = _length(page) - before - 1
    assert pushed <= 1, (stem, pushed)  # at most one more, for the page's own URL state


def test_back_leaves_a_page_in_one_press(page):
    """Pages opened from the sidebar: one entry each, and one Back returns to the page before."""
    page.goto(f"{page.base}/tokens")
    settle(page, timeout=240)
    paths = []
    for stem in ("heads", "residual", "context"):
        before = _length(page)
        page.locator(f'[data-testid="stSidebarNav"] a[href*="/{stem}"]').first.click()
        settle(page, timeout=240)
        assert _length(page) - before <= 1, (stem, _length(page) - before)
        paths.append(urlparse(page.url).path)
    page.go_back()
    settle(page, timeout=240)
    assert urlparse(page.url).path == paths[-2], (paths, page.url)  # context → residual in one press


def test_a_slider_bound_to_the_url_adds_no_entry(page):
    page.goto(f"{page.base}/heads?lang=en&layer=0&head=0")
    settle(page, timeout=240)
    before = _length(page)
    slider = page.locator('.st-key-heads_layer input[type="range"]')
    slider.focus()
    slider.press("ArrowRight")
    settle(page, timeout=240)
    assert "layer=1" in page.url, page.url  # the URL follows the slider …
    assert _length(page) == before  # … in place: Back still leaves the page
