"""One progress shape (issue 27): every long computation reports ``progress(done, total, words)``
(core.common.progress), whole numbers with done ≤ total ending at done == total, its words a sentence of the
catalogue said in both languages; the jobs and the byte-bounded cache pass the same three on to every
session that waits; and one bar (core.web.bar) draws them all, in the reader's language."""

from __future__ import annotations

import ast
import re
import threading

import pytest

from conftest import ROOT
from core import backends
from core.cause import attribution, pair, patching
from core.common.memo import ByteLRU
from core.common.progress import Progress, noop, share, span
from core.engine import hf
from core.engine.types import TOY_ID, Phrase
from core.gen import diagnose, generate, serving
from core.toy import load_trained
from core.toy import train as toy_train
from core.web import jobs

CODE = [ROOT / "app.py", *sorted((ROOT / "pages").glob("*.py")), *sorted((ROOT / "core").rglob("*.py"))]
CJK = re.compile(r"[\u4e00-\u9fff]")
HOME = "core/common/progress.py"
BAR = "core/web/bar.py"
# st.progress drawn outside the bar: a fixed position, not a computation's progress (the quiz's score, the tour's stage)
STILL_BARS = {"pages/quiz.py", "pages/tour.py"}
OLD_NAMES = {"ProgressFn", "StepCallback", "Progress"}  # a second progress type, under any of the names it had
OLD_PARAMS = {"on_step", "on_progress", "_label"}  # the callbacks of the old shapes


def _trees():
    for f in CODE:
        yield str(f.relative_to(ROOT)), ast.parse(f.read_text(encoding="utf-8"))


def _args(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
    a = fn.args
    return [*a.posonlyargs, *a.args, *a.kwonlyargs]


def test_one_progress_type_one_bar_no_old_shapes():
    """The house keeps one shape: ``Progress`` is defined once (core/common/progress.py), every parameter
    called ``progress`` is one, every direct call of one passes exactly (done, total, words), no callback
    of the old shapes is left, and only core/web/bar.py draws a computation's bar."""
    found: list[str] = []
    for where, tree in _trees():
        for n in ast.walk(tree):
            if isinstance(n, (ast.Assign, ast.AnnAssign)) and where != HOME:
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                    if isinstance(t, ast.Name) and t.id in OLD_NAMES:
                        found.append(f"{where}:{n.lineno}: a second progress type {t.id}")
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for a in _args(n):
                    if a.arg in OLD_PARAMS:
                        found.append(f"{where}:{n.lineno}: {n.name}({a.arg}) is an old progress shape")
                    if a.arg == "progress" and a.annotation is not None and "Progress" not in ast.unparse(a.annotation):
                        found.append(f"{where}:{n.lineno}: {n.name}(progress: {ast.unparse(a.annotation)}) is not a Progress")
            if isinstance(n, ast.Call):
                name = n.func.id if isinstance(n.func, ast.Name) else None
                passed_on = len(n.args) == 1 and isinstance(n.args[0], ast.Starred)  # a kept (done, total, words), passed on
                if name == "progress" and not passed_on and (len(n.args) != 3 or n.keywords):
                    found.append(f"{where}:{n.lineno}: progress(…) called with {len(n.args)} arguments, not (done, total, words)")
                drawn = isinstance(n.func, ast.Attribute) and n.func.attr == "progress" and where.startswith(("core/web", "pages", "app"))
                if drawn and where != BAR and where not in STILL_BARS:
                    found.append(f"{where}:{n.lineno}: a bar drawn outside core.web.bar")
    assert not found, "\n".join(found)


def _recorded() -> tuple[list[tuple[int, int, object]], Progress]:
    calls: list[tuple[int, int, object]] = []
    return calls, lambda done, total, words: calls.append((done, total, words))


def _check(calls: list[tuple[int, int, object]], key: str | None = None) -> None:
    """(int done, int total, words): 0 ≤ done ≤ total, the last at done == total; each Phrase said in both
    languages (no placeholder left, Chinese in the zh sentence)."""
    assert calls, "no progress at all"
    for done, total, words in calls:
        assert type(done) is int and type(total) is int and 0 <= done <= total, (done, total)
        if words is not None:
            assert isinstance(words, Phrase), words
            en, zh = words.text("en"), words.text("zh")
            assert en and "{" not in en and "⟦" not in en and "{" not in zh and CJK.search(zh), (en, zh)
    assert calls[-1][0] == calls[-1][1], calls[-1]
    if key is not None:
        assert {w.key for *_, w in calls if w is not None} == {key}


def test_the_helpers():
    assert share(3, 4) == 0.75 and share(5, 4) == 1.0 and share(-1, 4) == 0.0 and share(0, 0) == 0.0
    calls, rec = _recorded()
    part = span(rec, 8, 60, 100)
    for d in (0, 1, 2, 4):
        part(d, 4, "w")
    assert calls == [(8, 100, "w"), (21, 100, "w"), (34, 100, "w"), (60, 100, "w")]
    assert noop(1, 2, None) is None


def test_the_loaders_progress(tiny_dirs):
    calls, rec = _recorded()
    hf.load_local(str(tiny_dirs["llama"]), rec)
    _check(calls)
    assert calls[-1] == (hf.LOAD_TOTAL, hf.LOAD_TOTAL, Phrase("load.ready"))
    calls, rec = _recorded()
    backends.load_model(TOY_ID, progress=rec)
    _check(calls)
    assert [w.key for *_, w in calls] == ["load.step_toy", "load.ready"]


@pytest.fixture(scope="module")
def toy_pair():
    toy = load_trained()
    pt = pair.encode_pair(toy.tokenizer, "kqzmwpkqzmw", "kqzmwrkqzmw")
    ans = pair.answers(toy.tokenizer, "p", "r")
    return toy, pt, ans


@pytest.mark.parametrize("site", patching.PATCHED)
def test_a_sweeps_progress_counts_its_runs(toy_pair, site):
    toy, pt, ans = toy_pair
    base = patching.capture(toy, pt.ids_clean, pt.ids_corrupted)
    calls, rec = _recorded()
    grid = patching.sweep(toy, base, site, ans.answer, ans.foil, progress=rec, chunk=3)
    _check(calls, "cause.progress")
    assert calls[-1][1] == grid.size  # one unit a patched run
    assert calls[-1][2] == patching.sweep_words(site, grid.size, grid.size)
    assert patching.sweep_words(site).text("en").endswith("0 of … runs")


def test_the_attributions_progress_counts_the_steps(toy_pair):
    toy, pt, ans = toy_pair
    calls, rec = _recorded()
    attribution.attribute(toy, pt.ids_clean, ans.answer, ans.foil, 16, progress=rec)
    _check(calls, "cause.progress_ig")
    assert calls[-1][:2] == (16, 16)


def test_the_measurements_progress(toy_pair):
    toy = toy_pair[0]
    calls, rec = _recorded()
    diagnose.measure_prefill_curve(toy, [4, 8], reps=1, warmup=0, progress=rec, tpot_steps=1)
    _check(calls, "diagnose.progress_prefill")
    assert [c[:2] for c in calls] == [(0, 2), (1, 2), (2, 2)]
    calls, rec = _recorded()
    diagnose.measure_decode(toy, "hello", False, n_decode=2, reps=2, warmup=1, progress=rec)
    _check(calls, "diagnose.progress_decode")
    assert [c[:2] for c in calls] == [(0, 3), (1, 3), (2, 3), (3, 3)]
    calls, rec = _recorded()
    generate.generate_record(toy, "hi", 5, warmup=False, progress=rec)
    _check(calls, "generation.progress_tokens")
    assert [c[:2] for c in calls] == [(i, 5) for i in range(1, 6)]


def test_the_toys_live_training_progress():
    calls, rec = _recorded()
    toy_train.train_live(3, 0, rec, lambda *a: None, seconds=1e6)
    _check(calls, "toy.live_progress")
    assert [c[:2] for c in calls] == [(1, 3), (2, 3), (3, 3)]


def test_a_serving_runs_progress(tiny_loaded):
    plain = serving.plain_model(tiny_loaded["llama"])
    calls, rec = _recorded()
    reqs = [serving.Request(f"q{i}", "Hello there", 2, 0.0, chat=False, line=i + 1) for i in range(2)]
    serving.run_workload(plain, reqs, page_size=16, progress=rec)
    _check(calls)
    assert {c[1] for c in calls} == {(serving.PROGRESS_ENGINE + 1) * 2}
    assert calls[0][2].key == "serving.step_start" and calls[-1][2].key == "serving.step_done"
    assert [d for d, *_ in calls] == sorted(d for d, *_ in calls)


def test_jobs_and_the_cache_pass_the_three_on_to_every_waiter():
    """A job's report is a Progress; two sessions waiting on one job both see its (done, total, words)."""
    gate, words = threading.Event(), Phrase("measure.running")

    def compute(job: jobs.Job) -> int:
        job.report(1, 2, words)
        gate.wait(10)
        job.report(2, 2, words)
        return 7

    j = jobs.Runner().start("k", compute)
    seen: dict[str, list] = {"a": [], "b": []}
    waiters = [threading.Thread(target=jobs.wait, args=(j, lambda d, t, w, who=who: seen[who].append((d, t, w))),
                                kwargs={"poll": 0.01}) for who in seen]
    for w in waiters:
        w.start()
    threading.Timer(0.3, gate.set).start()
    for w in waiters:
        w.join(10)
    assert jobs.wait(j) == 7
    for got in seen.values():
        assert got[0] == (1, 2, words)
    c = ByteLRU(10**6)
    calls, rec = _recorded()
    c.reporter("k", rec)(3, 4, words)
    assert calls == [(3, 4, words)] and c._progress["k"] == (3, 4, words)
