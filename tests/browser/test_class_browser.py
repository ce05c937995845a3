"""Class mode across two app processes behind nginx (`make serve`, deploy/serve.py): one teacher and three
students in Chromium, the teacher on one replica and the students spread over both (one on a 390 px phone in
Chinese). They join by code, follow the teacher to another page, answer a next-token question that the teacher
then reveals, and the CSV the teacher downloads has one row per vote cast. The class lives only in the shared
SQLite store (XRAY_CLASS_STORE), so the replicas share nothing else."""

from __future__ import annotations

import contextlib
import csv
import io
import re
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import psutil
import pytest
from browser_helpers import CHROMIUM, chromium, settle

from conftest import ROOT
from core.common import i18n
from deploy import serve

pytestmark = pytest.mark.browser
NGINX = serve.find_nginx()
START_S = 360
FOLLOW_WAIT_S = 20  # generous on a shared 2-core machine; the benchmark measures the real delay


def _free_block(start: int, stop: int, n: int = 3) -> int:
    for p in range(start, stop):
        if all(serve.port_free("127.0.0.1", q) for q in range(p, p + n)):
            return p
    raise RuntimeError(f"no {n} free ports in {start}..{stop}")


@pytest.fixture(scope="module")
def hall(tmp_path_factory):
    if NGINX is None:
        pytest.skip("nginx is not installed (`make test` installs it)")
    if CHROMIUM is None:
        pytest.skip("no chromium executable installed (browser tests need one)")
    port = _free_block(8700, 8740)
    folder = tmp_path_factory.mktemp("class-hall")
    log = folder / "serve.log"
    env = {**__import__("os").environ, "XRAY_CLASS_STORE": f"sqlite:///{folder}/classes.sqlite3"}
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "deploy.serve", "--replicas", "2", "--port", str(port),
                                 "--host", "127.0.0.1", "--replica-port", str(port + 1)],
                                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + START_S
        while "serve: serving" not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"the hall did not start:\n{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.5)
        replicas = re.findall(r"replica \d+/2\s+http://(127\.0\.0\.1:\d+)", log.read_text())
        yield base, replicas, Path(log)
    finally:
        tree = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)] if proc.poll() is None else []
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            for pid in [proc.pid, *tree]:
                with contextlib.suppress(psutil.Error):
                    psutil.Process(pid).kill()


def _keys(base: str, replicas: list[str]) -> dict[str, str]:
    """An affinity cookie for each replica (nginx's hash decides)."""
    keys: dict[str, str] = {}
    for i in range(300):
        req = urllib.request.Request(base + "/_stcore/health", headers={"Cookie": f"xray_affinity=class-{i}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            keys.setdefault(r.headers["X-Replica"], f"class-{i}")
        if len(keys) == len(replicas):
            return keys
    raise AssertionError(f"every key landed on {list(keys)}")


def _page(browser, base: str, key: str, width: int = 1300, height: int = 900):
    ctx = browser.new_context(viewport={"width": width, "height": height}, accept_downloads=True)
    ctx.add_cookies([{"name": "xray_affinity", "value": key, "url": base}])
    ctx.set_default_timeout(120_000)  # a shared 2-core machine with two replicas and four browsers
    return ctx.new_page()


def _path(page) -> str:
    return urllib.parse.urlparse(page.url).path.strip("/")


def _wait(cond, timeout: float, what: str, page) -> float:
    """Wait for ``cond`` while playwright handles the browsers' events (a plain sleep would block them)."""
    t0 = time.time()
    while not cond():
        if time.time() - t0 > timeout:
            raise AssertionError(f"{what} within {timeout} s (at {page.url})")
        page.wait_for_timeout(200)
    return time.time() - t0


def test_a_class_across_two_processes(hall):
    base, replicas, log = hall
    keys = _keys(base, replicas)
    a, b = replicas
    t = lambda key, lang="en", **kw: i18n.t(key, lang, **kw)  # noqa: E731
    with chromium() as browser:
        try:
            teacher = _page(browser, base, keys[a])
            teacher.goto(base + "/classroom?lang=en")
            settle(teacher)
            teacher.get_by_role("button", name=t("class.start")).click()
            teacher.locator(".xr-classcode").wait_for(timeout=60_000)
            code = teacher.locator(".xr-classcode").inner_text().strip()
            assert re.fullmatch(r"[2-9A-Z]{4}-[2-9A-Z]{4}", code), code

            students = [(_page(browser, base, keys[b]), "en", "Ann"),
                        (_page(browser, base, keys[a]), "en", "<b>bold</b>"),
                        (_page(browser, base, keys[b], 390, 844), "zh", "小明")]
            for page, lang, nick in students:
                page.goto(base + f"/classroom?lang={lang}&join={code.replace('-', '')}")
                settle(page)
                page.get_by_label(t("class.nickname", lang)).fill(nick)
                page.get_by_role("button", name=t("class.join", lang)).click()
                page.get_by_text(t("class.joined", lang, code=code)).wait_for(timeout=60_000)
            assert teacher.evaluate("() => document.documentElement.scrollWidth") <= 1300
            phone = students[2][0]
            assert phone.evaluate("() => document.documentElement.scrollWidth") <= 390  # no sideways scrolling on a phone

            # the teacher opens the tokens page (inside the app: her session keeps the class): every student follows
            teacher.locator('[data-testid="stSidebarNav"] a[href$="/tokens"]').click()
            _wait(lambda: _path(teacher) == "tokens", 60, "the teacher reached the tokens page", teacher)
            settle(teacher)
            for page, lang, _ in students:
                _wait(lambda p=page: _path(p) == "tokens", FOLLOW_WAIT_S + 60, "a student followed the teacher", page)
                assert urllib.parse.parse_qs(urllib.parse.urlparse(page.url).query).get("lang") == [lang]

            # a next-token question on the teacher's prompt, answered by all three
            teacher.get_by_role("button", name=t("class.ask_next")).click()
            close = teacher.get_by_role("button", name=t("class.close", i=1))
            close.wait_for(timeout=240_000)
            guesses = ["Paris", "<img src=x onerror=alert(1)>", "巴黎"]
            for (page, lang, _), guess in zip(students, guesses):
                box = page.get_by_label(t("class.your_answer", lang))
                box.wait_for(timeout=(FOLLOW_WAIT_S + 60) * 1000)
                box.fill(guess)
                page.get_by_role("button", name=t("class.send", lang)).click()
                page.get_by_text(t("class.sent", lang)).first.wait_for(timeout=30_000)
            assert not students[1][0].locator("img[src=x]").count()

            # reveal: close the question, open the class page's results, download the CSV
            close.click()
            close.wait_for(state="detached")  # closed (a page switch at once would cut the run that closes it)
            teacher.get_by_role("link", name=t("class.results")).click()
            teacher.get_by_text(re.compile(r"of 3 answers guessed the model's top token")).wait_for(timeout=90_000)
            assert teacher.locator("main b", has_text="bold").count() == 0
            with teacher.expect_download(timeout=60_000) as dl:
                teacher.get_by_role("button", name=t("class.csv")).click()
            rows = list(csv.reader(io.StringIO(Path(dl.value.path()).read_text(encoding="utf-8"))))
            assert rows[0] == ["question", "kind", "answer"]
            assert sorted(r[2] for r in rows[1:]) == sorted(guesses) and all(r[0] == "1" for r in rows[1:])
            assert "Traceback" not in log.read_text(errors="replace")
        except Exception:  # what each browser showed, for the reader of the failure (screenshots/ is not committed)
            (ROOT / "screenshots").mkdir(exist_ok=True)
            for i, ctx in enumerate(browser.contexts):
                for page in ctx.pages:
                    page.screenshot(path=str(ROOT / "screenshots" / f"class-{i}.png"), full_page=True)
            raise
