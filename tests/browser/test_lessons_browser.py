"""The two lesson routes followed in a real browser, as a teacher does on the projector (issue 25, "A path
through it"): headless Chromium at 1280 × 720 in presenter mode opens the Lessons page, then every step's
link as the page gives it, and checks that the view is the step's own, read from core.learn.lessons's data
(not a second copy): the page's title in the lesson's language, the sidebar prompt and chat switch, every
slider or number the step sets (layer, head, position, temperature, max steps …) at the step's value, the
open tab, the step's parameters still in the address bar after the page ran (a page that ignored or
changed one would drop or rewrite it), and no exception, error box or page error.

One server and one browser for both routes; each step's settle time is printed (``-s`` shows it).
"""

from __future__ import annotations

import statistics
import time
from urllib.parse import parse_qsl, urlsplit

import pytest
from browser_helpers import CHROMIUM, SHOTS, chromium, h1, painted, settle, streamlit_server

from core.common import i18n
from core.learn import lessons

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(CHROMIUM is None, reason="no chromium executable installed (browser tests need one)")]

PROJECTOR = {"width": 1280, "height": 720}
# A step parameter that is a slider or a number input on its page, by the widget's key; the widget must
# show the step's value. (pos is the heads page's query slider; elsewhere a selectbox, checked in the URL.)
SLIDER = {"layer": "{page}_layer", "head": "{page}_head", "temp": "{page}_temp", "max": "{page}_max"}
SLIDER_AT = {("heads", "pos"): "heads_q"}
TABS = {"tab": {"calc": "attention_lab.tab_calc", "scale": "attention_lab.tab_scale", "cost": "attention_lab.tab_cost",
                "relative": "positions.tab_relative"}}


@pytest.fixture(scope="module")
def browser():
    SHOTS.mkdir(exist_ok=True)
    with open(SHOTS / "lessons_server.log", "w") as log, streamlit_server(8770, log=log) as app, chromium() as b:
        p = b.new_page()
        p.goto(f"{app.base}/?lang=en")  # the model's first load, outside any step's timing
        settle(p, timeout=240)
        p.close()
        yield app.base, b


def _widget_value(page, key: str) -> str | None:
    loc = page.locator(f'.st-key-{key} input[type="range"], .st-key-{key} input[type="number"], .st-key-{key} [role="slider"]')
    if not loc.count():
        return None
    el = loc.first
    return el.input_value() if el.evaluate("e => e.tagName") == "INPUT" else el.get_attribute("aria-valuenow")


def _same(a: str, b: str) -> bool:
    try:
        return float(a) == float(b)
    except ValueError:
        return a == b


@pytest.mark.parametrize("key", list(lessons.ROUTES))
def test_every_step_opens_its_view(browser, key):
    base, b = browser
    route = lessons.ROUTES[key]
    ctx = b.new_context(viewport=PROJECTOR)
    failures, times = [], []
    try:
        lp = ctx.new_page()
        lp.goto(f"{base}/lessons?lang={key}&route={key}&present=1")
        settle(lp, timeout=240)
        assert not lp.locator('[data-testid="stException"]').count()
        hrefs = lp.eval_on_selector_all('[data-testid="stMain"] a[href]', "as => as.map(a => a.getAttribute('href'))")
        lp.close()
        links = [h for h in hrefs if "?" in h and h.split("?")[0] in {s.page for s in route.steps}]
        assert len(links) == len(route.steps), links
        for i, (step, link) in enumerate(zip(route.steps, links, strict=True), start=1):
            name = f"{key}{i}:{step.key}"
            path, q = urlsplit(link).path, dict(parse_qsl(urlsplit(link).query))
            want = lessons.params(route, step, None, present=True)
            assert path == step.page, (name, link)
            assert {k: q[k] for k in want} == want, (name, q, want)  # the link carries the step's state
            if step.view == "she":  # the prepared view: layer, head and position read off the model by the page
                assert set(lessons.SHE_VIEW) <= set(q), (name, q)
            page = ctx.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
            t0 = time.time()
            page.goto(f"{base}/{link}")
            settle(page, timeout=240)
            times.append(time.time() - t0 - 1.5)  # settle waits 1.5 s of quiet after the run ends
            print(f"{name}: {times[-1]:.1f} s")
            bad = []
            if page.locator('[data-testid="stException"]').count():
                bad.append("exception: " + page.locator('[data-testid="stException"]').first.inner_text()[:300])
            if page.locator('[data-testid="stAlertContentError"]').count():
                bad.append("error box: " + page.locator('[data-testid="stAlertContentError"]').first.inner_text()[:300])
            bad += [f"page error: {e}" for e in errors]
            if h1(page) != i18n.t(f"page.{step.page}", key):
                bad.append(f"title {h1(page)!r}")
            box, before = painted(page.locator(".st-key-prompt textarea").input_value, q["prompt"])
            if box != q["prompt"]:
                bad.append(f"prompt {box!r}")
            elif before:  # painted late: said, not failed (the reader sees the step's prompt)
                print(f"{name}: the prompt box read {before!r} before the step's prompt")
            checked, _ = painted(page.locator('.st-key-chat input[type="checkbox"]').is_checked, q["chat"] == "1")
            if checked != (q["chat"] == "1"):
                bad.append("chat switch")
            shown = dict(parse_qsl(urlsplit(page.url).query))
            for k, v in q.items():
                if not _same(shown.get(k, ""), v):
                    bad.append(f"URL {k}={shown.get(k)!r}, the step says {v!r}")
                widget = SLIDER_AT.get((step.page, k)) or SLIDER.get(k, "").format(page=step.page)
                if widget and (got := _widget_value(page, widget)) is not None and not _same(got, v):
                    got, _ = painted(lambda widget=widget, page=page: _widget_value(page, widget), v, same=lambda a, b: a is not None and _same(a, b))
                    if got is None or not _same(got, v):
                        bad.append(f"{widget} shows {got}, the step says {k}={v}")
                if k in TABS:
                    tab = page.locator('[data-testid="stMain"] [role="tab"][aria-selected="true"]')
                    name_of_tab, _ = painted(lambda tab=tab: tab.first.inner_text().strip() if tab.count() else None, i18n.t(TABS[k][v], key))
                    if name_of_tab != i18n.t(TABS[k][v], key):
                        bad.append(f"open tab {name_of_tab!r}, the step says {v}")
            for k in ("layer", "head"):  # a slider the step names must exist on its page
                if k in q and _widget_value(page, SLIDER_AT.get((step.page, k)) or SLIDER[k].format(page=step.page)) is None:
                    bad.append(f"no {k} slider")
            page.screenshot(path=str(SHOTS / f"lesson_{key}_{i:02d}_{step.key}.png"))
            failures += [f"{name}: {m}" for m in bad]
            page.close()
    finally:
        ctx.close()
    if times:
        print(f"{key}: {len(times)} steps, settle median {statistics.median(times):.1f} s, max {max(times):.1f} s")
    assert not failures, "\n".join(failures)
