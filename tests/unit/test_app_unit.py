"""The app shell: every registered page runs in both languages, every string has both languages,
and looking at another layer reads the cached trace instead of running the model."""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

from conftest import ROOT
from core.common import i18n


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


def test_presenter_link_collapses_the_sidebar_and_fonts_are_one_helper():
    """app.py asks presenter.sidebar_state() before anything else; no page draws a plotly figure
    except through presenter.chart / chart_in (the one place that applies the projector's type)."""
    src = (ROOT / "app.py").read_text(encoding="utf-8")
    assert "initial_sidebar_state=presenter.sidebar_state()" in src
    bad = [f"{p.relative_to(ROOT)}:{i}" for p in [ROOT / "app.py", *(ROOT / "pages").glob("*.py"), *(ROOT / "core").rglob("*.py")]
           if p.name != "presenter.py"
           for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if ".plotly_chart(" in line]
    assert not bad, bad


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


def test_presenter_css_enlarges_markdown_tables():
    """issue 14: the references page's Markdown table stayed at body size on a projector, beside 1.45rem text."""
    from core.web import presenter

    assert '[data-testid="stMarkdownContainer"] td' in presenter._CSS and '[data-testid="stMarkdownContainer"] th' in presenter._CSS
