"""A link reaches only what the server offers (issue 15, section 1, and two link items of section 3).

* the operator's setting (XRAY_MODELS, XRAY_ALLOW_LOCAL) is parsed and checked once, and a folder has
  one spelling (``<P>``, ``<P>/``, ``<P>/.`` are one model);
* a link's ``?model=`` names an offered id only: a path or an unknown id loads nothing, and gets one
  generic sentence that neither echoes nor probes the value;
* the free local-folder box exists only when the operator turns it on, and a folder never goes into
  the URL;
* a prompt arriving by a link is capped like a typed one, and the URL carries a prompt whole or not at all;
* ``/journey`` as a deep link opens the journey (the default page lives at ``/``).
"""

from __future__ import annotations

import pytest
from browser_helpers import CHROMIUM, chromium, h1, settle, streamlit_server

from core.common import settings


@pytest.fixture(autouse=True)
def _no_operator_setting(monkeypatch):
    """Each test starts from the default offer (embedded + toy, no local box), whatever the shell has."""
    monkeypatch.delenv(settings.MODELS, raising=False)
    monkeypatch.delenv(settings.ALLOW_LOCAL, raising=False)


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium executable installed (browser tests need one)")
def test_journey_deep_link_opens_the_journey_in_a_browser():
    # a fresh server of its own, started here (after the operator's setting is cleared), so that
    # /journey is the very first visit it gets
    with streamlit_server(8810) as app, chromium() as b:
        page = b.new_page()
        page.goto(f"{app.base}/journey?lang=en")
        settle(page, timeout=240)
        assert h1(page) == "The journey of a sentence"
        assert page.get_by_text("Page not found").count() == 0
        assert "/journey" in page.url
