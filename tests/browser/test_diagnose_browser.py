"""The diagnose page: the fitted prefill curve holds its stated error, the extrapolation says what it
assumes, memory equals the calculator's formula and the bytes the real cache holds, the temperature demo is
exactly softmax(logits / T), and the page runs in both languages (1-token prompt, absurd budgets) without a
traceback. No assertion is on a time: the machine may be busy."""

from __future__ import annotations

import pytest

from core.common import i18n


def test_browser_link_reopens_its_symptom():
    """In a real browser: a link with ?symptom=oom opens that symptom (Chinese here), with no error;
    choosing another symptom writes it back to the URL."""
    import urllib.parse

    from browser_helpers import CHROMIUM, Watch, chromium, settle, streamlit_server

    if CHROMIUM is None:
        pytest.skip("no chromium executable installed")
    with streamlit_server(8640) as app, chromium() as b:
        page = b.new_page(viewport={"width": 1400, "height": 900})
        watch = Watch(page)
        page.goto(f"{app.base}/diagnose?lang=zh&symptom=oom")
        settle(page, timeout=300)
        assert not page.locator('[data-testid="stException"]').count()
        checked = page.locator('.st-key-diagnose_sym input[type="radio"]:checked')
        assert checked.count() == 1
        assert page.locator(".st-key-diagnose_budget").count() == 1  # the memory symptom's budget box is shown
        page.locator(".st-key-diagnose_sym label").filter(has_text=i18n.t("diagnose.sym_temperature", "zh")[:8]).first.click()
        settle(page, timeout=300)
        assert urllib.parse.parse_qs(urllib.parse.urlparse(page.url).query)["symptom"] == ["temperature"]
        assert not page.locator('[data-testid="stException"]').count() and not watch.real_errors()
