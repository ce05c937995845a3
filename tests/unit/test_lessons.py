"""The lessons page (issue 25): two 45-minute routes whose every link opens a registered page with
parameters that page really reads, values its own readers accept unchanged, and the view the teacher
prepared; the answers' numbers against the model; the self-study order covering every tutorial section,
cause and effect after the maths; the "covered" marker after a page is opened."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from helpers.lessons import _split

from conftest import ROOT
from core.common import i18n
from core.learn import examples, lessons
from core.maths import attention as A
from core.web import nav, ui

STEPS = [pytest.param(r, s, id=f"{r.key}-{s.key}") for r in lessons.ROUTES.values() for s in r.steps]
SHARED = {"lang", "prompt", "chat", "model", "doc", "present"}  # read by the router and the sidebar (app.py, core.web.ui)
READERS = {"qp_int", "qp_choice", "qp_bool", "qp_float"}


# ---------------------------------------------------------------------------------------------
# which URL parameters a page reads, from its source (and the core.web helpers it calls)


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


@cache
def _defs(path: Path) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in ast.walk(_tree(path)) if isinstance(n, ast.FunctionDef)}


def _web_modules(tree: ast.Module) -> dict[str, Path]:
    """``from core.web import widgets, ui …`` → {name: file}."""
    out = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and n.module == "core.web":
            out.update({a.asname or a.name: ROOT / "core" / "web" / f"{a.name}.py" for a in n.names})
    return out


def _param_arg(call: ast.Call, fn: ast.FunctionDef) -> str | None:
    """The literal a call passes for the callee's argument named ``param`` (by keyword, position or default)."""
    names = [a.arg for a in fn.args.args]
    for kw in call.keywords:
        if kw.arg == "param" and isinstance(kw.value, ast.Constant):
            return kw.value.value
    if "param" in names:
        i = names.index("param")
        if i < len(call.args) and isinstance(call.args[i], ast.Constant):
            return call.args[i].value
    kwonly = [a.arg for a in fn.args.kwonlyargs]
    if "param" in kwonly:
        d = fn.args.kw_defaults[kwonly.index("param")]
        return d.value if isinstance(d, ast.Constant) else None
    if "param" in names:
        defaults = fn.args.defaults
        j = names.index("param") - (len(names) - len(defaults))
        if j >= 0 and isinstance(defaults[j], ast.Constant):
            return defaults[j].value
    return None


def _reads(path: Path, node: ast.AST, seen: set) -> set[str]:
    """The parameter names read under ``node`` of file ``path``: the first argument of the ui readers, a
    ``st.query_params.get("x")``, and what the functions it calls read (local ones, core.web ones)."""
    mods = _web_modules(_tree(path))
    out: set[str] = set()
    for n in ast.walk(node):
        if not isinstance(n, ast.Call):
            continue
        f = n.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
        first = n.args[0] if n.args else None
        if name in READERS and isinstance(first, ast.Constant):
            out.add(first.value)
        if (name == "get" and isinstance(f, ast.Attribute) and isinstance(f.value, ast.Attribute) and f.value.attr == "query_params"
                and isinstance(first, ast.Constant)):
            out.add(first.value)
        target = None
        if isinstance(f, ast.Name):
            target = (path, f.id)
        elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in mods:
            target = (mods[f.value.id], f.attr)
        if target is None or target[1] not in _defs(target[0]):
            continue
        fn = _defs(target[0])[target[1]]
        if (p := _param_arg(n, fn)) is not None:
            out.add(p)
        if target not in seen:
            seen.add(target)
            out |= _reads(target[0], fn, seen)
    return out


@cache
def page_params(stem: str) -> frozenset[str]:
    path = ROOT / "pages" / f"{stem}.py"
    return frozenset(_reads(path, _tree(path), set()))


def test_the_scan_finds_the_parameters_pages_are_known_to_read():
    """The scanner sees through the shared pickers: heads' layer/head/pos/show/hide, the context page's
    pair and positions (passed to its local picker), the attention lab's tab."""
    assert {"layer", "head", "pos", "show", "hide", "metric", "win", "qwin"} <= page_params("heads")
    assert {"pair", "pa", "pb"} <= page_params("context")
    assert {"tab", "pos", "layer", "head"} <= page_params("attention_lab")
    assert {"greedy", "temp", "max", "step"} <= page_params("generation")


@pytest.mark.parametrize("route", lessons.ROUTES.values(), ids=lambda r: r.key)
def test_a_lesson_is_45_minutes(route):
    assert route.minutes == lessons.LESSON_MINUTES == 45
    assert sum(s.minutes for s in route.steps) == 45
    assert len({s.key for s in route.steps}) == len(route.steps)


def test_the_zh_lesson_is_on_the_zh_default_prompt():
    assert lessons.ZH.prompt == ui.DEFAULT_PROMPTS["zh"] and lessons.EN.prompt == ui.DEFAULT_PROMPTS["en"]


@pytest.mark.parametrize(("route", "step"), STEPS)
def test_every_link_opens_a_registered_page_with_parameters_it_reads(route, step):
    view = examples.View(21, (20, 21), (12, 13), (0, 1), 1, 3, 0.5, 0.1) if step.view else None
    page, q = _split(lessons.href(route, step, view, present=True))
    assert page in nav.STEMS, page
    unread = set(q) - SHARED - page_params(page)
    assert not unread, (page, unread)
    assert q["lang"] == route.key and q["prompt"] == route.prompt_of(step) and q["present"] == "1"
    for part in ("title", "say", "ask", "answer"):
        for lang in i18n.LANGS:
            text = i18n.t(f"lessons.{route.key}.{step.key}.{part}", lang, **lessons.fill(step, view))
            assert text.strip() and "⟦" not in text and "{" not in text


def test_the_worked_example_answer():
    """softmax([1, 0] / √2) ≈ [0.67, 0.33], output ≈ [1.34, 0.99]; unmasked, the output moves."""
    ex = A.worked_example(False)
    s = A.attention_steps(ex["q"], ex["k"], ex["v"], ex["mask"])
    np.testing.assert_array_equal(np.round(s.weights[0], 2), [0.67, 0.33, 0.0])
    np.testing.assert_array_equal(np.round(s.output[0], 2), [1.34, 0.99])
    ex2 = A.worked_example(True)
    s2 = A.attention_steps(ex2["q"], ex2["k"], ex2["v"], ex2["mask"])
    assert np.abs(s2.output[0] - s.output[0]).max() > 10


# ---------------------------------------------------------------------------------------------
# the self-study order


def test_every_section_maps_to_registered_pages_in_the_order():
    assert len({s.id for s in lessons.SECTIONS}) == len(lessons.SECTIONS)
    for s in lessons.SECTIONS:
        assert s.pages and all(p in nav.STEMS and p in lessons.ORDER for p in s.pages), s
        for lang in i18n.LANGS:
            assert "⟦" not in i18n.t(s.key, lang)
    assert all(p in nav.STEMS for p in lessons.ORDER) and len(set(lessons.ORDER)) == len(lessons.ORDER)
    assert all(lessons.sections_at(p) for p in lessons.ORDER), [p for p in lessons.ORDER if not lessons.sections_at(p)]
    assert set(lessons.ORDER) == set(nav.STEMS) - {"lessons", "classroom"}  # every other registered page has its place (a class is run, not studied)


def test_cause_and_effect_comes_after_the_maths():
    maths = [i for i, p in enumerate(lessons.ORDER) if p in ("attention_lab", "masks", "multihead", "positions")]
    cause = [i for i, p in enumerate(lessons.ORDER) if p.startswith("cause_")]
    assert max(maths) < min(cause)
    sections = [row[0] if isinstance(row, tuple) else row.section for row in nav.PAGES]  # a row: (section, stem, icon) or its dataclass
    assert max(i for i, s in enumerate(sections) if s == "nav.maths") < min(i for i, s in enumerate(sections) if s == "nav.cause")


SEEDS = {"A": "000_5d6b5d4f0c902448.txt", "B": "003_78321a51a8e48845.txt"}
SEED_DIR = ROOT.parent / "shared" / "seeds"


@pytest.mark.skipif(not SEED_DIR.is_dir(), reason="the tutorials' text is not in this checkout")
def test_every_section_title_is_a_heading_of_its_tutorial():
    """The zh titles are the tutorials' own headings (so a student finds the section), and every
    heading of seed 000 (its top-level ones) is listed."""
    for s in lessons.SECTIONS:
        text = (SEED_DIR / SEEDS[s.id[0]]).read_text(encoding="utf-8")
        assert re.search(rf"^{re.escape(i18n.t(s.key, 'zh'))}$", text, re.M), s.id
