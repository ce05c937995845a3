"""The issue's phishing link, in a real browser (issue 29, item 1): a shared link whose answer is a Markdown
link and whose foil is an image puts neither a link nor an image to evil.example on the page."""

from __future__ import annotations

import urllib.parse

import pytest
from browser_helpers import CHROMIUM, chromium, settle, streamlit_server

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium executable installed (browser tests need one)")


def test_a_shared_link_puts_no_link_or_image_on_the_page():
    query = urllib.parse.urlencode({"lang": "en", "answer": "[Claim your grade](https://evil.example/login)",
                                    "foil": "![x](https://evil.example/pixel.png)"})
    with streamlit_server(8720) as app, chromium() as b:
        page = b.new_page()
        asked = []
        page.on("request", lambda r: asked.append(r.url) if "evil" in (urllib.parse.urlparse(r.url).hostname or "") else None)
        page.goto(f"{app.base}/cause_pair?{query}")
        settle(page, timeout=240)
        links, images = page.locator("a[href*=evil]").count(), page.locator("img[src*=evil]").count()
        assert (links, images) == (0, 0)
        assert "evil.example" in page.locator('[data-testid="stMain"]').inner_text()  # the answer is shown back, as text
        assert not asked, asked  # no request for the pixel
        page.close()
