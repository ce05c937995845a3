"""Issue 40 in a real browser: every lesson step's link, as the Lessons page gives it, opens at 1280 × 720 in
presenter mode with the step's view on the first screen (its element's box inside the viewport, read off the
page: the header anchor or the element key the step names), on both routes; and the calculator's tabs take
every click (each second one was lost: the tab read from the URL was part of the widget's identity).

One server and one browser for the module; screenshots of each landing go to screenshots/ (not committed)."""

from __future__ import annotations

import pytest
from browser_helpers import CHROMIUM, SHOTS, painted, settle, warm_app

from core.common import i18n
from core.learn import lessons

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(CHROMIUM is None, reason="no chromium executable installed (browser tests need one)")]

W, H = 1280, 720
SHOWN = 240  # px of the view (or all of it, if shorter) that must be on the first screen


@pytest.fixture(scope="module")
def browser():
    with warm_app(8790, "lesson_focus_server.log") as got:
        yield got


def _box(page, name: str) -> dict | None:
    return page.evaluate("""(n) => { const el = document.getElementById(n) || document.querySelector('.st-key-' + n);
        if (!el || !el.getClientRects().length) return null; const r = el.getBoundingClientRect();
        return {top: r.top, bottom: r.bottom, height: r.height}; }""", name)


def _on_first_screen(box: dict | None) -> bool:
    return box is not None and box["top"] >= 0 and box["top"] + min(box["height"], SHOWN) <= H


@pytest.mark.parametrize("key", list(lessons.ROUTES))
def test_every_step_lands_at_its_view(browser, key):
    base, b = browser
    route = lessons.ROUTES[key]
    ctx = b.new_context(viewport={"width": W, "height": H})
    failures = []
    try:
        lp = ctx.new_page()
        lp.goto(f"{base}/lessons?lang={key}&route={key}")  # the teacher's laptop, not in presenter mode
        settle(lp, timeout=240)
        hrefs = lp.eval_on_selector_all('[data-testid="stMain"] a[href*="focus="]', "as => as.map(a => a.getAttribute('href'))")
        lp.close()
        assert len(hrefs) == len(route.steps), hrefs
        for i, (step, link) in enumerate(zip(route.steps, hrefs, strict=True), start=1):
            assert link.startswith(f"{step.page}?") and "present=1" in link and f"focus={step.focus}" in link, link
            page = ctx.new_page()
            page.goto(f"{base}/{link}")
            settle(page, timeout=240)
            box, _ = painted(lambda page=page, step=step: _box(page, step.focus), True, timeout=8,
                             same=lambda got, _want: _on_first_screen(got))
            page.screenshot(path=str(SHOTS / f"lesson_focus_{key}_{i:02d}_{step.key}.png"))
            if not _on_first_screen(box):
                failures.append(f"{key}{i}:{step.key} ({step.page}#{step.focus}): {box}")
            page.close()
    finally:
        ctx.close()
    assert not failures, "\n".join(failures)


def test_calculator_tabs_take_every_click(browser):
    base, b = browser
    ctx = b.new_context(viewport={"width": W, "height": H})
    try:
        page = ctx.new_page()
        page.goto(f"{base}/attention_lab?lang=en")
        settle(page, timeout=240)
        for k in ("scale", "cost", "calc", "cost", "scale"):
            name = i18n.t(f"attention_lab.tab_{k}", "en")
            page.locator('[data-testid="stMain"] [role="tab"]', has_text=name).first.click()
            settle(page, timeout=240)
            sel = page.locator('[data-testid="stMain"] [role="tab"][aria-selected="true"]').first
            shown, _ = painted(lambda sel=sel: sel.inner_text().strip(), name)
            assert shown == name, (k, shown)
            assert f"tab={k}" in page.url, page.url
    finally:
        ctx.close()
