"""The lessons page (issue 25): two 45-minute routes whose every link opens a registered page with
parameters that page really reads, values its own readers accept unchanged, and the view the teacher
prepared; the answers' numbers against the model; the self-study order covering every tutorial section,
cause and effect after the maths; the "covered" marker after a page is opened."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import parse_qsl, urlsplit

import numpy as np
import pytest

from conftest import ROOT, all_text, app_run
from core import encode_prompt, trace
from core.common import i18n
from core.inside import embeddings
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


# ---------------------------------------------------------------------------------------------
# the routes


def _split(link: str) -> tuple[str, dict[str, str]]:
    parts = urlsplit(link)
    return parts.path, dict(parse_qsl(parts.query, keep_blank_values=True))


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


@pytest.fixture
def fake_url(monkeypatch):
    url: dict[str, str] = {}
    monkeypatch.setattr(ui, "st", SimpleNamespace(query_params=url, session_state={}))
    return url


def _ranges(smol, route, step, q) -> dict[str, tuple[int, int]]:
    f = smol.facts
    T = len(encode_prompt(smol, q["prompt"], chat=q["chat"] == "1").ids)
    top = f.n_layers if step.page == "journey" else f.n_layers - 1  # the journey's slider runs over the boundaries 0 … L
    return {"layer": (0, top), "head": (0, f.n_heads - 1), "pos": (0, T - 1), "max": (1, 256)}


CHOICES = {"tab": ("calc", "scale", "cost", "relative"), "pair": tuple(embeddings.CONTEXT_PAIRS), "show": ("layer", "head")}
FLOATS = {("logits", "temp"): (0.05, 3.0, 0.05)}  # pages/logits.py's slider_url


def test_every_value_is_taken_unchanged_by_the_pages_readers(smol, fake_url):
    """Each value through the reader its page uses (ui.qp_int / qp_choice / qp_bool / qp_float with the
    page's own range): a value it would clamp or drop would open another view than the one prepared."""
    view = examples.best_view(*_she_layers(smol))
    for route in lessons.ROUTES.values():
        for step in route.steps:
            _, q = _split(lessons.href(route, step, view))
            fake_url.clear()
            fake_url.update(q)
            ranges = _ranges(smol, route, step, q)
            for name, raw in q.items():
                if name in ranges:
                    lo, hi = ranges[name]
                    assert ui.qp_int(name, -1, lo, hi) == int(raw), (route.key, step.key, name, raw, lo, hi)
                elif name in CHOICES:
                    assert ui.qp_choice(name, CHOICES[name], None) == raw, (step.key, name)
                elif name in ("chat", "hide", "greedy"):
                    assert ui.qp_bool(name, None) is (raw == "1")
                elif (step.page, name) in FLOATS:
                    assert ui.qp_float(name, -1.0, *FLOATS[(step.page, name)]) == float(raw)
                else:
                    assert name in ("lang", "prompt", "focus"), (step.key, name)


def _she_layers(smol):
    tr = trace(smol, examples.SHE.prompt, chat=False)
    return tr.tokens, [tr.attention(layer) for layer in range(tr.n_layers)]


def test_the_she_step_opens_at_the_models_own_view(smol):
    """Its layer, head and position are best_view's on the embedded model, and the answer's percentages are its weights."""
    view = examples.best_view(*_she_layers(smol))
    step = next(s for s in lessons.ZH.steps if s.view == "she")
    q = lessons.params(lessons.ZH, step, view)
    assert (q["layer"], q["head"], q["pos"]) == (str(view.layer), str(view.head), str(view.query_pos))
    assert q["chat"] == "0" and q["prompt"] == examples.SHE.prompt
    assert lessons.fill(step, view) == {"l": str(view.layer), "h": str(view.head), "t": f"{view.on_target:.0%}", "o": f"{view.on_other:.0%}"}
    assert "layer" not in lessons.params(lessons.ZH, step, None)  # unknown view: the heads page's own button finds it


# ---------------------------------------------------------------------------------------------
# a few steps opened as the teacher's link opens them


def _open(route_key: str, step_key: str, view=None):
    route = lessons.ROUTES[route_key]
    step = next(s for s in route.steps if s.key == step_key)
    page, q = _split(lessons.href(route, step, view))
    at = app_run(page, **q)
    assert not at.exception, [e.value for e in at.exception][:2]
    assert at.text_area(key="prompt").value == route.prompt_of(step)
    assert at.toggle(key="chat").value is route.chat_of(step)
    return at


def test_she_link_shows_the_view(smol):
    view = examples.best_view(*_she_layers(smol))
    at = _open("zh", "she", view)
    assert (at.slider(key="heads_layer").value, at.slider(key="heads_head").value, at.slider(key="heads_q").value) == \
        (view.layer, view.head, view.query_pos)


def test_journey_link_shows_its_layer(smol):
    at = _open("en", "flow")
    assert at.slider(key="journey_layer").value == 15


@pytest.mark.parametrize(("route", "pair"), [("en", "en"), ("zh", "zh_ctx")])
def test_context_link_shows_its_pair_and_the_answer_holds(smol, route, pair):
    """The pair the link names is the one shown, and the answer's claim: 1.000 at the embedding, lower deeper."""
    at = _open(route, "context" if route == "en" else "apple")
    assert at.selectbox(key="context_preset").value == pair
    assert not at.warning  # same IDs: no "different token IDs" warning
    m = {x.label: x.value for x in at.metric}
    assert m[i18n.t("context.m_embed", route)] == "1.000"
    assert float(m[i18n.t("context.m_min", route)]) < 1.0


def test_attention_lab_link_opens_the_calculator_on_the_worked_example(smol):
    at = _open("en", "formula")
    assert at.query_params["tab"] == ["calc"] or at.query_params["tab"] == "calc"
    assert at.radio(key="attention_lab_preset").value == "worked"


# ---------------------------------------------------------------------------------------------
# the answers' numbers


def test_the_answers_numbers_are_the_models(smol):
    f = smol.facts
    assert (f.n_layers, f.n_heads, f.n_kv_heads, f.d_model, f.vocab_size) == (30, 9, 3, 576, 49152)
    assert f.n_heads // f.n_kv_heads == 3 and 28 // 4 == 7  # GQA groups: SmolLM2's, the tutorial's Qwen2.5
    assert len(encode_prompt(smol, lessons.EN_PROMPT, chat=True).ids) == 37  # en flow: 37 IDs with the template
    raw = trace(smol, lessons.ZH_PROMPT, chat=False)
    assert (len(lessons.ZH_PROMPT), raw.n_tokens) == (7, 11)  # zh cost: 7 characters, 11 tokens
    for ch, n in (("2", 1), ("加", 1), ("3", 1), ("等", 2), ("于", 2), ("几", 2), ("？", 2)):
        assert len(examples.locate(raw.tokens, ch)) == n, ch
    chat = trace(smol, lessons.ZH_PROMPT, chat=True)
    assert smol.tokenizer.decode([int(np.argmax(chat.last_logits))]) == "2"  # zh flow: greedy picks "2"
    a = smol.tokenizer("小明批评了小红", add_special_tokens=False)["input_ids"]
    b = smol.tokenizer("小红批评了小明", add_special_tokens=False)["input_ids"]
    assert sorted(a) == sorted(b) and a != b  # zh order: the same tokens, another order


def test_the_worked_example_answer():
    """softmax([1, 0] / √2) ≈ [0.67, 0.33], output ≈ [1.34, 0.99]; unmasked, the output moves."""
    ex = A.worked_example(False)
    s = A.attention_steps(ex["q"], ex["k"], ex["v"], ex["mask"])
    np.testing.assert_array_equal(np.round(s.weights[0], 2), [0.67, 0.33, 0.0])
    np.testing.assert_array_equal(np.round(s.output[0], 2), [1.34, 0.99])
    ex2 = A.worked_example(True)
    s2 = A.attention_steps(ex2["q"], ex2["k"], ex2["v"], ex2["mask"])
    assert np.abs(s2.output[0] - s.output[0]).max() > 10


def test_the_sink_answer_layer_15(smol):
    """en "sink": in most of layer 15's heads the last query's largest weight is on the first token."""
    tr = trace(smol, lessons.EN_PROMPT, chat=True)
    w = tr.attention(15)[:, -1, :]  # [H, T]
    assert int((w.argmax(axis=1) == 0).sum()) > tr.n_heads // 2


def test_temperature_half_sharpens_and_keeps_the_ranking(smol):
    tr = trace(smol, lessons.ZH_PROMPT, chat=True)
    p1, p5 = tr.last_probs(1.0), tr.last_probs(0.5)
    assert p5.max() > p1.max() and int(p5.argmax()) == int(p1.argmax())
    assert np.array_equal(np.argsort(-p1)[:10], np.argsort(-p5)[:10])


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
    assert set(lessons.ORDER) == set(nav.STEMS) - {"lessons"}  # every other registered page has its place


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


def test_covered_marker_ticks_an_opened_page(smol):
    at = app_run("lessons", lang="en")
    assert not at.exception
    assert any("0 of" in i.value for i in at.info)
    at.switch_page("pages/tokens.py").run()
    at.switch_page("pages/lessons.py").run()
    assert not at.exception
    assert "tokens" in at.session_state["_pages_opened"]
    done = " ".join(s.value for s in at.success)
    assert "§A4" in done and "§B2.1" in done and "§A5" not in done  # A5 also needs the context page
    assert lessons.covered({"tokens"}) == tuple(s for s in lessons.SECTIONS if s.pages == ("tokens",))


def test_presenter_mode_shows_the_route_with_links_that_keep_it(smol):
    at = app_run("lessons", lang="zh", present="1", route="en")
    assert not at.exception
    text = all_text(at)
    assert "present=1" in text and "lang=en" in text
    assert i18n.t("lessons.self_title", "zh") not in [h.value for h in at.header]
