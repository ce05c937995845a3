"""The app in a real browser (headless Chromium via playwright), against a real `streamlit run`.

* every page registered in core.web.nav.PAGES (the router's list) renders in both languages with no
  Streamlit exception, no browser console error and no WCAG 2.1 A/AA violation that axe-core finds
  (the whole page on screen); a screenshot of each goes to screenshots/;
* a shared URL (?lang=zh&prompt=…&layer=3&step=3) restores language, prompt, layer and stage;
* the language switch changes the text; on the heads page a new layer redraws the heatmap; on
  the generation page a decode step grows the KV-cache plot;
* 8 browser sessions with different prompts at once each see only their own tokens.

Skipped only when no Chromium is installed. The server, the browser and the waits are
tests/browser_helpers.py's (shared with the other browser tests and the benchmarks).
"""

from __future__ import annotations

import time
import urllib.parse

import pytest
from browser_helpers import CHROMIUM, SHOTS, Watch, axe_violations, chromium, grow, h1, painted, settle, shoot, streamlit_server, url_path

from core.common import i18n
from core.web.nav import STEMS

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium executable installed (browser tests need one)")


@pytest.fixture(scope="module")
def server():
    SHOTS.mkdir(exist_ok=True)
    with open(SHOTS / "server.log", "w") as log, streamlit_server(8610, log=log) as app:
        yield app.base


@pytest.fixture(scope="module")
def browser(server):
    with chromium() as b:
        # The very first visit of a fresh server is a deep link, as when a teacher's shared
        # link is the first thing opened: the router (app.py) must run, sidebar included —
        # core/web/server.py stops Streamlit from treating pages/ as its old automatic folder.
        page = b.new_page()
        page.goto(f"{server}/tour?step=1")
        settle(page, timeout=180)
        assert page.get_by_text("Language / 语言").count() >= 1, "deep link opened without the router's sidebar"
        page.goto(f"{server}/")
        settle(page, timeout=180)
        page.close()
        yield b


@pytest.mark.parametrize("lang", i18n.LANGS)
def test_every_page_renders_without_errors(browser, server, lang):
    SHOTS.mkdir(exist_ok=True)
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    failures = []
    try:
        for stem in STEMS:
            page = ctx.new_page()
            watch = Watch(page)
            t0 = time.time()
            page.goto(f"{server}/{url_path(stem)}?lang={lang}")
            settle(page)
            print(f"{stem}/{lang}: {time.time() - t0:.1f} s")
            exc = page.locator('[data-testid="stException"]')
            if exc.count():
                failures.append(f"{stem}/{lang}: exception {exc.first.inner_text()[:300]}")
            if watch.real_errors():
                failures.append(f"{stem}/{lang}: console {watch.real_errors()[:3]}")
            nav = page.locator('[data-testid="stSidebarNav"]').inner_text()
            if i18n.t("nav.start", lang) not in nav:  # the navigation speaks the chosen language
                failures.append(f"{stem}/{lang}: nav lacks '{i18n.t('nav.start', lang)}'")
            if not page.locator('[data-testid="stMain"] h1').count():
                failures.append(f"{stem}/{lang}: no title")
            grow(page)  # the whole page on screen, as axe and the screenshot see it
            failures += [f"{stem}/{lang}: {v}" for v in axe_violations(page)]
            shoot(page, f"{stem}_{lang}")
            page.close()
    finally:
        ctx.close()
    assert not failures, "\n".join(failures)


def test_shared_url_restores_state(browser, server):
    prompt = "小明把书交给小红，因为她明天要考试。"
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    watch = Watch(page)
    page.goto(f"{server}/tour?lang=zh&step=3&layer=3&prompt={urllib.parse.quote(prompt)}")
    settle(page)
    assert h1(page) == i18n.t("page.tour", "zh")
    assert painted(page.locator(".st-key-prompt textarea").input_value, prompt)[0] == prompt
    assert painted(page.locator('.st-key-tour_layer input[type="range"]').input_value, "3")[0] == "3"
    assert i18n.t("tour.blocks.title", "zh") in page.locator('[data-testid="stMain"] h2').first.inner_text()
    qs = urllib.parse.parse_qs(urllib.parse.urlparse(page.url).query)
    assert qs["lang"] == ["zh"] and qs["layer"] == ["3"] and qs["step"] == ["3"] and qs["prompt"] == [prompt]
    # Next moves the stage and the URL with it
    page.locator(".st-key-tour_next_top button").click()
    settle(page)
    assert urllib.parse.parse_qs(urllib.parse.urlparse(page.url).query)["step"] == ["4"]
    assert not watch.real_errors()
    page.close()


def test_language_switch_changes_text(browser, server):
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(f"{server}/tour?lang=en&step=0")
    settle(page)
    assert h1(page) == i18n.t("page.tour", "en")
    page.locator('[data-testid="stSidebar"] label').filter(has_text="简体中文").first.click()
    settle(page)
    assert h1(page) == i18n.t("page.tour", "zh")
    assert i18n.t("tour.next", "zh") in page.locator(".st-key-tour_next_top").inner_text()
    assert "lang=zh" in page.url
    page.close()


def _chart_data(page, index: int = 0) -> str:
    return page.evaluate(
        "(i) => { const p = document.querySelectorAll('[data-testid=\"stMain\"] .js-plotly-plot')[i];"
        " return p ? JSON.stringify(p.data.map(t => t.z || t.y)) : null }", index)


def test_heads_new_layer_redraws_heatmap(browser, server):
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(f"{server}/heads?lang=en&layer=0&head=0")
    settle(page)
    page.wait_for_selector('[data-testid="stMain"] .js-plotly-plot')
    before = _chart_data(page)
    slider = page.locator('.st-key-heads_layer input[type="range"]')
    slider.focus()
    slider.press("ArrowRight")
    settle(page)
    assert slider.input_value() == "1"
    assert "layer=1" in page.url
    after = _chart_data(page)
    assert before and after and before != after
    page.close()


def test_generation_decode_step_grows_kv_plot(browser, server):
    title = i18n.t("generation.fig_kv", "en")
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    watch = Watch(page)
    page.goto(f"{server}/generation?lang=en&prompt={urllib.parse.quote('The capital of France is')}")
    settle(page)
    page.locator(".st-key-generation_prefill button").click()
    settle(page)
    js = ("(t) => { for (const p of document.querySelectorAll('.js-plotly-plot')) {"
          " const tt = p.layout && p.layout.title; const m = p.layout && p.layout.meta && p.layout.meta.title;"
          " const s = m || (typeof tt === 'string' ? tt : (tt && tt.text));"  # drawn titles live in meta (presenter.chart)
          " if (s && s.includes(t)) return p.calcdata[0].length; } return null }")  # points drawn
    # under load the browser may paint the figure after the script run ends: wait for it (60 s at most)
    page.wait_for_function(f"(t) => ({js})(t) !== null", arg=title, timeout=60_000)
    n0 = page.evaluate(js, title)
    assert n0 == 1, n0  # after the prefill: one pass
    page.locator(".st-key-generation_next button").click()
    settle(page)
    page.wait_for_function(f"(t) => ({js})(t) === {n0 + 1}", arg=title, timeout=60_000)
    assert page.evaluate(js, title) == n0 + 1
    assert not page.locator('[data-testid="stException"]').count() and not watch.real_errors()
    page.close()


NAMES = ("Alice", "Bernard", "Chiara", "Dmitri", "Esther", "Farouk", "Greta", "Hiroshi")


def test_eight_concurrent_sessions_see_only_their_own_prompt(browser, server):
    contexts, pages = [], []
    try:
        for i, name in enumerate(NAMES):
            ctx = browser.new_context(viewport={"width": 1200, "height": 900})
            page = ctx.new_page()
            prompt = f"Yesterday {name} counted {i + 2} zebras."
            page.goto(f"{server}/tour?lang=en&step=1&chat=0&prompt={urllib.parse.quote(prompt)}", wait_until="commit")
            contexts.append(ctx)
            pages.append(page)
        for i, (name, page) in enumerate(zip(NAMES, pages)):
            settle(page, timeout=180)
            # the chips arrive in the same script run as their container, but under load the
            # browser may paint the container first: wait for the chips themselves
            page.wait_for_function("() => document.querySelectorAll('.st-key-tour_tokens .xr-chip').length > 0", timeout=120_000)
            # the chips, joined back into text (each chip carries its visible piece; spaces shown as ␣)
            text = page.evaluate("() => Array.from(document.querySelectorAll('.st-key-tour_tokens .xr-chip'))"
                                 ".map(s => s.dataset.piece).join('')").replace("␣", " ")
            assert text == f"Yesterday {name} counted {i + 2} zebras.", (name, text)
            assert not page.locator('[data-testid="stException"]').count()
        shoot(pages[0], "concurrent_tour_0")
    finally:
        for ctx in contexts:
            ctx.close()
