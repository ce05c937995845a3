"""Issue 40's fold in a real browser: each of the ten key pages opens with its main picture on the first screen.

The key pages are the ones the two lessons and the journey lean on (``KEY``), each with its main picture named by
its element key (``st.plotly_chart(key=…)`` or a keyed container). At 1280 × 720, in presenter mode (the sidebar
collapsed, the projector's type) and in normal mode (the sidebar open), in English and in Chinese, the picture's
top is inside the window and at least ``SHOWN`` px of it (or all of it, if shorter) are above the fold. On a
phone (390 × 844, normal mode) Streamlit stacks every row of columns, so the controls beside a figure come above
it and the title wraps: there the picture starts within the first two screens (one flick of the thumb), with
``SHOWN`` px of it inside them. The default view of each page is what a link without ``?focus=`` opens.

One server and one browser for the module; a screenshot of each view goes to screenshots/ (not committed)."""

from __future__ import annotations

import pytest
from browser_helpers import CHROMIUM, SHOTS, painted, settle, warm_app

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(CHROMIUM is None, reason="no chromium executable installed (browser tests need one)")]

SHOWN = 240  # px of the picture (or all of it, if shorter) that must be above the fold
# page stem → the element key of its main picture
KEY = {
    "tokens": "tokens_view",
    "positions": "positions_fig_sin",
    "masks": "masks_fig_causal_grid",
    "attention_lab": "attention_lab_weights",
    "multihead": "multihead_fig_sharing",
    "residual": "residual_fig_norms",
    "norms": "norms_fig_vector",
    "logits": "logits_candidates",
    "kv_cache": "kv_cache_fig_variants",
    "decoding": "decoding_fig_kernels",
}
# (name, viewport, presenter mode, screens the picture may start within)
VIEWS = (("present", (1280, 720), True, 1), ("laptop", (1280, 720), False, 1), ("phone", (390, 844), False, 2))


@pytest.fixture(scope="module")
def browser():
    with warm_app(8830, "fold_server.log") as got:
        yield got


def drawn(page) -> None:
    """Wait until no element of the main area is still Streamlit's grey stand-in (an element's code loads after the
    run: a slider or a chart is a skeleton box of another height for a moment, and the screenshot would show it)."""
    left, _ = painted(lambda: page.locator('[data-testid="stMain"] [data-testid="stSkeleton"]').count(), 0, timeout=20)
    assert left == 0, f"{left} elements still drawn as skeletons"


def _box(page, name: str) -> dict | None:
    return page.evaluate("""(n) => { const el = document.querySelector('.st-key-' + n);
        if (!el || !el.getClientRects().length) return null; const r = el.getBoundingClientRect();
        return {top: r.top, height: r.height}; }""", name)


def above(box: dict | None, height: int, screens: int) -> bool:
    """The picture's top is on the page (not scrolled past) and its first ``SHOWN`` px are within ``screens``."""
    return box is not None and box["top"] >= 0 and box["top"] + min(box["height"], SHOWN) <= height * screens


@pytest.mark.parametrize("view", VIEWS, ids=[v[0] for v in VIEWS])
@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("stem", list(KEY))
def test_main_picture_above_the_fold(browser, stem, lang, view):
    base, b = browser
    name, (w, h), present, screens = view
    ctx = b.new_context(viewport={"width": w, "height": h})
    try:
        page = ctx.new_page()
        page.goto(f"{base}/{stem}?lang={lang}" + ("&present=1" if present else ""))
        settle(page, timeout=240)
        drawn(page)
        box, _ = painted(lambda: _box(page, KEY[stem]), True, timeout=8, same=lambda got, _: above(got, h, screens))
        page.screenshot(path=str(SHOTS / f"fold_{stem}_{lang}_{name}.png"))
        print(f"FOLD {stem} {lang} {name}: {box}")
        assert above(box, h, screens), f"{stem} ({lang}, {name}): {KEY[stem]} at {box}, window {w}×{h}"
    finally:
        ctx.close()


def test_contents_take_the_keyboard_to_a_section(browser):
    """A long page lists its sections in the sidebar (core.web.contents); a link, reached and followed with the
    keyboard, brings its section's header to the top of the window."""
    base, b = browser
    ctx = b.new_context(viewport={"width": 1280, "height": 720})
    try:
        page = ctx.new_page()
        page.goto(f"{base}/residual?lang=en")
        settle(page, timeout=240)
        links = page.locator('[data-testid="stSidebar"] a[href^="#"]')
        hrefs = links.evaluate_all("as => as.map(a => a.getAttribute('href'))")
        assert hrefs == ["#residual_h_norms", "#residual_h_sub", "#residual_h_norm", "#residual_h_mlp", "#block"], hrefs
        links.last.focus()
        page.keyboard.press("Enter")
        top, _ = painted(lambda: page.evaluate("() => document.getElementById('block')?.getBoundingClientRect().top"), True,
                         timeout=5, same=lambda got, _: got is not None and 0 <= got <= 160)
        page.screenshot(path=str(SHOTS / "fold_contents_residual.png"))
        assert top is not None and 0 <= top <= 160, top
    finally:
        ctx.close()
