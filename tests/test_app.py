"""The app shell: every registered page runs in both languages, every string has both languages,
and looking at another layer reads the cached trace instead of running the model."""

from __future__ import annotations

import ast
import html
import itertools
import json
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from conftest import ROOT, all_text, app_run
from core import backends
from core.common import i18n
from core.web.nav import STEMS

APP = str(ROOT / "app.py")
LANGS = ("en", "zh")
# Every registered page (core.web.nav.PAGES, the router's own list) in both languages, one test each:
# ``pytest tests/test_app.py -k heads-zh`` re-runs one.
PAGE_RUNS = [pytest.param(stem, lang, id=f"{stem}-{lang}") for stem in STEMS for lang in LANGS]


def test_every_string_has_both_languages():
    assert not i18n.problems(), i18n.problems()


# ---------------------------------------------------------------------------------------------
# every i18n key the code names exists

CODE = [ROOT / "app.py", *sorted((ROOT / "pages").glob("*.py")), *sorted((ROOT / "core").rglob("*.py"))]
SECTIONS = {k.split(".")[0] for k in i18n.catalogue()}  # "journey", "sb", "load", … (a key's first part)
KEY_SHAPE = re.compile(r"[A-Za-z0-9_]+(?:\.[A-Za-z0-9_{}]+)+")
FILE_SUFFIXES = {".safetensors", ".json", ".gguf", ".py", ".txt", ".md", ".png", ".csv"}  # "toy.safetensors" is a file
T_CALLS = {"t", "_t", "Phrase"}  # ui.t, i18n.t, t, the figures' _t, Phrase: the first argument is a key


def _literal_strings(node: ast.AST) -> list[str] | None:
    """The strings a loop walks, when it walks a literal tuple or list of strings; None otherwise."""
    if isinstance(node, (ast.Tuple, ast.List)) and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return [e.value for e in node.elts]
    return None


def _loop_values(name: str, node: ast.AST, parents: dict[int, ast.AST]) -> list[str] | None:
    """The values ``name`` takes at ``node``: those of the nearest loop or comprehension binding it, when
    that loop walks a literal tuple of strings (``for k in ("calc", "scale")``); None when unknown."""
    while id(node) in parents:
        node = parents[id(node)]
        gens = node.generators if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)) else []
        loops = [(g.target, g.iter) for g in gens] + ([(node.target, node.iter)] if isinstance(node, ast.For) else [])
        for target, it in loops:
            if isinstance(target, ast.Name) and target.id == name:
                return _literal_strings(it)
    return None


def keys_in(path: Path) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """The i18n keys a source file names: (line, key) for every literal key — the first argument of
    t / ui.t / i18n.t / _t / Phrase, and any other string shaped like a key of a known section (stored
    in a table, a tuple, a default) — and (line, regex) for every key built at run time: an f-string
    (f"quiz.{q.id}.q"), a format pattern ("heads.metric_{}") or a prefix ("load.err_"). An f-string whose
    every placeholder is a loop variable over literal strings is expanded into its keys instead."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    parents = {id(c): n for n in ast.walk(tree) for c in ast.iter_child_nodes(n)}
    skip: set[int] = set()  # docstrings, the pieces of f-strings, keys already counted
    for n in ast.walk(tree):
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body and isinstance(n.body[0], ast.Expr):
            skip.add(id(n.body[0].value))
        if isinstance(n, ast.JoinedStr):
            skip.update(id(v) for v in n.values)
    keys: list[tuple[int, str]] = []
    patterns: list[tuple[int, str]] = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            name = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", None)
            first = n.args[0] if n.args else None
            if name in T_CALLS and isinstance(first, ast.Constant) and isinstance(first.value, str) and "{" not in first.value:
                keys.append((n.lineno, first.value))  # whatever its shape: a misspelt section is caught too
                skip.add(id(first))
        elif isinstance(n, ast.JoinedStr):
            pieces = [v.value if isinstance(v, ast.Constant) else v for v in n.values]
            head = pieces[0] if pieces and isinstance(pieces[0], str) else ""
            if head.split(".")[0] not in SECTIONS or "." not in head:
                continue  # not a key (a path, a message…)
            names = [p.value.id if isinstance(p, ast.FormattedValue) and isinstance(p.value, ast.Name) and p.format_spec is None else None
                     for p in pieces if not isinstance(p, str)]
            values = [_loop_values(nm, n, parents) if nm else None for nm in names]
            if all(v is not None for v in values):
                for combo in itertools.product(*values):
                    it = iter(combo)
                    keys.append((n.lineno, "".join(p if isinstance(p, str) else next(it) for p in pieces)))
            else:
                patterns.append((n.lineno, "".join(re.escape(p) if isinstance(p, str) else ".+" for p in pieces)))
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip:
            s = n.value
            if s.split(".")[0] in SECTIONS and KEY_SHAPE.fullmatch(s) and Path(s).suffix not in FILE_SUFFIXES:
                if "{" in s or s.endswith("_"):  # ui.fmt("heads.metric_{}"), PREFIX = "load.err_"
                    patterns.append((n.lineno, re.sub(r"\\\{\w*\\\}", ".+", re.escape(s)) + (".+" if s.endswith("_") else "")))
                else:
                    keys.append((n.lineno, s))
    return keys, patterns


def test_every_key_used_in_code_exists():
    """Every key app.py, pages/ and core/ (all of it) name exists in the catalogue (in both languages:
    test_every_string_has_both_languages); a key built at run time has at least one key it can be."""
    known = i18n.catalogue()
    missing, unmatched, n_keys = [], [], 0
    for f in CODE:
        keys, patterns = keys_in(f)
        n_keys += len(keys)
        where = f.relative_to(ROOT)
        missing += [f"{where}:{line}: {key}" for line, key in keys if key not in known]
        unmatched += [f"{where}:{line}: {rx}" for line, rx in patterns if not any(re.fullmatch(rx, k) for k in known)]
    assert not missing, missing
    assert not unmatched, unmatched
    assert n_keys > 900, n_keys  # the scan reads every file (app, 24 pages, core's subpackages), not core's top level


def test_key_scan_sees_every_way_a_key_is_named(tmp_path):
    """The scan above finds a key however the code names it, and flags none of the look-alikes."""
    src = tmp_path / "sample.py"
    src.write_text('''"""A docstring naming ui.fmt and journey.nowhere is no key."""
ui.t("journey.a")
i18n.t("nowhere.b", lang)
_t("maths.c" if x else "maths.d", lang)
Phrase("load.e", {})
TABLE = {"x": "kv_cache.f"}
WEIGHTS = "toy.safetensors"
PREFIX = "load.err_"
fmt = ui.fmt("heads.metric_{}")
cols = [ui.t(f"positions.col_{c}") for c in ("method", "where")]
ui.t(f"quiz.{q.id}.q")
path = f"pages/{stem}.py"
''', encoding="utf-8")
    keys, patterns = keys_in(src)
    assert sorted(k for _, k in keys) == sorted(["journey.a", "nowhere.b", "maths.c", "maths.d", "load.e", "kv_cache.f",
                                                 "positions.col_method", "positions.col_where"])
    assert sorted(rx for _, rx in patterns) == sorted([r"load\.err_.+", r"heads\.metric_.+", r"quiz\..+\.q"])


# ---------------------------------------------------------------------------------------------
# every page runs


@pytest.mark.parametrize(("stem", "lang"), PAGE_RUNS)
def test_page_runs_without_exception(stem, lang):
    at = app_run(stem, lang=lang)
    assert not at.exception, (stem, lang, [e.value for e in at.exception][:2])
    if stem != "journey":
        assert at.title or at.header or at.markdown, f"{stem} rendered nothing"
    unknown = sorted(set(re.findall(r"⟦[^⟧]*⟧", all_text(at))))  # i18n.t shows a key it lacks as ⟦key⟧
    assert not unknown, (stem, lang, unknown)
    if lang == "zh":  # Streamlit's own placeholder ("Choose an option") shows where a choice list is given none
        shown = [w.proto.placeholder for w in (*at.selectbox, *at.multiselect)]
        assert all(shown) and "Choose an option" not in shown and "Choose an option" not in all_text(at), (stem, shown)


def test_journey_shows_the_real_trace_in_both_languages():
    at = app_run()
    text = " ".join(m.value for m in at.markdown)
    assert "3575" in text and "capital" in text  # the real token id of " capital" in SmolLM2's vocabulary
    assert at.title[0].value == "The journey of a sentence"
    at.session_state["lang"] = "zh"
    at.run()
    assert at.title[0].value == "一句话的旅程"


def test_choosing_a_layer_never_runs_the_model_again():
    at = app_run()
    before = backends.FORWARD_PASSES
    slider = at.slider(key="journey_layer")
    for layer in (0, 7, 29):
        slider.set_value(layer).run()
        assert not at.exception
        assert any(f"resid[{layer}]" in c.value for c in at.code)
    assert before == backends.FORWARD_PASSES


def test_empty_prompt_gives_a_hint_and_no_model_call():
    at = app_run()
    before = backends.FORWARD_PASSES
    at.text_area(key="prompt").set_value("   ").run()
    assert not at.exception
    assert any("prompt" in i.value.lower() for i in at.info)
    assert before == backends.FORWARD_PASSES


def test_wrong_model_folder_keeps_the_previous_model(tmp_path, monkeypatch):
    monkeypatch.setenv("XRAY_ALLOW_LOCAL", "1")  # the local-folder box exists only when the operator turns it on
    at = app_run()
    at.selectbox(key="model_pick").set_value("__local__").run()
    at.text_input(key="model_path").set_value(str(tmp_path / "missing")).run()
    assert not at.exception
    assert any("No folder" in e.value for e in at.error)
    assert at.session_state["model_spec_ok"] == "SmolLM2-135M-Instruct"
    assert at.title[0].value == "The journey of a sentence"


# ---------------------------------------------------------------------------------------------
# issue 14: one label rule on every page, a projector's type, links that reopen the view

LABEL_PROMPT = "我喜欢人工智能\n a  b"  # byte tokens, a newline, spaces
_POS_LABEL = re.compile(r"(?<![\w‹])(\d+)·((?:‹[0-9A-F ]+›|[^\s<|‹])+)")


def _strings(obj, out: list[str]) -> list[str]:
    """Every string inside a plotly spec (ticks, hover, custom data, names, titles)."""
    if isinstance(obj, str):
        out.append(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            _strings(v, out)
    elif isinstance(obj, list):
        for v in obj:
            _strings(v, out)
    return out


def _page(stem: str, **state):
    at = AppTest.from_file(APP, default_timeout=240)
    for k, v in state.items():
        at.session_state[k] = v
    at.switch_page(f"pages/{stem}.py")
    at.run()
    assert not at.exception, (stem, [e.value for e in at.exception])
    return at


def test_one_label_rule_on_every_figure_table_and_chip(smol):
    """A token reads the same everywhere: in the chips, the tables, every figure's ticks and hover text
    — whitespace made visible (never a blank), a byte token as its character and bytes (我‹E6 88›)."""
    from core.engine.tokens import readable_tokens, token_labels

    ids = smol.tokenizer(LABEL_PROMPT)["input_ids"]
    labels = token_labels(readable_tokens(smol.tokenizer, ids))
    assert labels[0] == "我‹E6 88›" and "⏎" in labels and any("␣" in lbl for lbl in labels)
    found: dict[str, int] = {}
    for stem in ("journey", "tokens", "heads", "residual", "logits", "multihead", "tour", "positions"):
        at = _page(stem, prompt=LABEL_PROMPT, chat=False)
        texts = [m.value for m in at.markdown] + [c.value for c in at.caption]
        texts += [s for c in at.get("plotly_chart") for s in _strings(json.loads(c.proto.spec), [])]
        texts += [str(x) for d in [*at.dataframe, *at.table] for x in d.value.astype(str).to_numpy().ravel()]
        texts += [str(o) for sb in at.selectbox for o in sb.options]
        for text in texts:
            assert "⟨" not in text, (stem, text[:200])  # bytes always drawn ‹E6 88›
            assert not re.search(r"‹[0-9A-F ]*␣", text), (stem, text[:200])  # never ‹E6␣88›
            for pos, lbl in _POS_LABEL.findall(text):
                if int(pos) < len(labels):
                    assert lbl == labels[int(pos)], (stem, pos, lbl, labels[int(pos)])
                    found[stem] = found.get(stem, 0) + 1
        chips_html = " ".join(m.value for m in at.markdown if 'class="xr-chip"' in m.value)
        if stem in ("journey", "tokens"):
            pieces = re.findall(r'data-piece="([^"]*)"', chips_html)[: len(labels)]
            assert [html.unescape(p) for p in pieces] == labels, stem
    assert {"heads", "residual", "logits", "multihead", "tokens"} <= set(found), found  # position labels were seen


@pytest.mark.parametrize("stem", ["heads", "attention_lab", "tour", "context", "positions", "logits"])
def test_presenter_mode_figures_use_projector_type(smol, stem):
    """?present=1: every figure's text is at least 18 px (one helper applies it), the sidebar starts
    collapsed."""
    from core.web import presenter

    at = app_run(stem, present="1", step="3")
    assert not at.exception
    figs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert figs, stem
    for spec in figs:
        lay = {k: v for k, v in spec["layout"].items() if k != "template"}
        assert lay["font"]["size"] >= presenter.MIN_FONT
        sizes = _font_sizes({"data": spec["data"], "layout": lay}, [])
        assert sizes and min(sizes) >= presenter.MIN_FONT, (stem, sorted(set(sizes)))
    at2 = app_run(stem)
    plain = [json.loads(c.proto.spec)["layout"].get("font", {}).get("size") for c in at2.get("plotly_chart")]
    assert all(s is None or s < presenter.MIN_FONT for s in plain)  # outside presenter mode, figures are as built


def _font_sizes(obj, out: list[float], inside_font: bool = False) -> list[float]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "size" and inside_font and isinstance(v, (int, float)):
                out.append(v)
            _font_sizes(v, out, inside_font or "font" in k)
    elif isinstance(obj, list):
        for v in obj:
            _font_sizes(v, out, inside_font)
    return out


def test_presenter_link_collapses_the_sidebar_and_fonts_are_one_helper():
    """app.py asks presenter.sidebar_state() before anything else; no page draws a plotly figure
    except through presenter.chart / chart_in (the one place that applies the projector's type)."""
    src = (ROOT / "app.py").read_text(encoding="utf-8")
    assert "initial_sidebar_state=presenter.sidebar_state()" in src
    bad = [f"{p.relative_to(ROOT)}:{i}" for p in [ROOT / "app.py", *(ROOT / "pages").glob("*.py"), *(ROOT / "core").rglob("*.py")]
           if p.name != "presenter.py"
           for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if ".plotly_chart(" in line]
    assert not bad, bad


def test_links_reopen_journey_sampling_and_stepper_settings(smol):
    """The journey's layer, the sampling settings and the stepper's run settings live in the URL; a
    link with bad values opens with them clamped or dropped, never a traceback."""
    at = app_run(layer="12")
    assert at.slider(key="journey_layer").value == 12
    at.slider(key="journey_layer").set_value(20).run()
    assert at.query_params["layer"] in ("20", ["20"])

    at = app_run("logits", temp="0.7", top_k="40", top_p="0.9", penalty="1.2", seed="7")
    assert not at.exception
    assert (at.slider(key="logits_temp").value, at.number_input(key="logits_topk").value) == (0.7, 40)
    assert (at.slider(key="logits_topp").value, at.slider(key="logits_pen").value, at.number_input(key="logits_seed").value) == (0.9, 1.2, 7)
    at.slider(key="logits_temp").set_value(1.5).run()
    assert at.query_params["temp"] in ("1.5", ["1.5"])

    at = app_run("logits", temp="nan", top_k="-3", top_p="7", penalty="abc", seed="1e99")
    assert not at.exception and not at.error
    assert (at.slider(key="logits_temp").value, at.number_input(key="logits_topk").value) == (1.0, 0)
    assert (at.slider(key="logits_topp").value, at.slider(key="logits_pen").value, at.number_input(key="logits_seed").value) == (1.0, 1.0, 0)

    at = app_run("generation", greedy="0", temp="1.3", top_k="20", top_p="0.8", seed="5", max="12")
    assert not at.exception
    assert at.toggle(key="generation_greedy").value is False and at.slider(key="generation_temp").value == 1.3
    assert [at.number_input(key=f"generation_{k}").value for k in ("topk", "seed", "max")] == [20, 5, 12]
    assert at.slider(key="generation_topp").value == 0.8

    at = app_run("generation", greedy="maybe", temp="-9", top_k="1e3", max="100000")
    assert not at.exception and not at.error
    assert at.toggle(key="generation_greedy").value is True and at.slider(key="generation_temp").value == 0.1
    assert [at.number_input(key=f"generation_{k}").value for k in ("topk", "max")] == [50, 256]


def test_logit_lens_cell_text_is_readable():
    """The lens writes each cell's token at 12 px at least (it was 9 px), in an ink that reads on the cell
    at 4.5:1 or more (issue 26: plotly's own pick reached 3.9:1 on mid-scale cells)."""
    import numpy as np

    from core.plot import palette
    from core.stream import figures as stream_fig

    probs = np.array([[0.0, 0.25], [0.5, 0.6], [0.75, 1.0]])
    fig = stream_fig.fig_logit_lens(np.zeros((3, 2), dtype=int), probs, ["a"] * 6, ["x", "y"], "en")
    text = next(d for d in fig.data if d.type == "scatter" and d.mode == "text")
    assert text.textfont.size >= 12 and list(text.text) == ["a"] * 6
    cells = [palette.scale_at(palette.SEQUENTIAL, p) for p in probs.ravel()]
    assert all(palette.contrast(ink, c) >= 4.5 for ink, c in zip(text.textfont.color, cells))


def test_presenter_css_enlarges_metric_values_inputs_and_tables():
    """The metric's value is markdown (a <p>) since Streamlit 1.4x: the rule for body text must not shrink
    it below the label; inputs and selects grow too; tables of numbers become st.table on a projector,
    the one kind of table the CSS reaches (st.dataframe draws on a canvas)."""
    from core.web import presenter

    css = presenter._CSS
    assert css.index('[data-testid="stMetricValue"] p') > css.index('[data-testid="stMarkdownContainer"] p')
    assert '[data-testid="stMain"] input' in css and '[data-baseweb="select"]' in css
    at = app_run("logits", present="1")
    assert not at.exception and len(at.dataframe) == 0 and len(at.table) >= 1
    at = app_run("logits")
    assert not at.exception and len(at.dataframe) >= 1


def test_presenter_css_enlarges_markdown_tables():
    """issue 14: the references page's Markdown table stayed at body size on a projector, beside 1.45rem text."""
    from core.web import presenter

    assert '[data-testid="stMarkdownContainer"] td' in presenter._CSS and '[data-testid="stMarkdownContainer"] th' in presenter._CSS
