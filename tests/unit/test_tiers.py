"""The folder is the tier. A file in tests/unit touches no embedded model, no AppTest, no command-line
subprocess, no server and no browser (those are tests/integration's and tests/browser's), followed through the
fixtures its tests ask for and the helpers they call in tests/ (conftest.py, floats.py, helpers/). The tiny
random models are unit work: they borrow the embedded model's tokenizer (``_smol_tokenizer``), once a session."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT, TIERS

TESTS = ROOT / "tests"
FIXTURES_OF_A_HIGHER_TIER = {"smol", "eager_refs"}  # the embedded model, and HF's reference beside it
NAMES_OF_A_HIGHER_TIER = {"app_run", "AppTest", "_smol", "subprocess", "browser_helpers", "chromium", "streamlit_server",
                          "nginx", "playwright"}
MODULES_OF_A_HIGHER_TIER = ("streamlit.testing", "subprocess", "browser_helpers", "playwright")
BORROWED = {"_smol_tokenizer"}  # the tiny models' tokenizer: not followed


def _functions(path: Path) -> dict[str, ast.FunctionDef]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


def _shared() -> dict[str, ast.FunctionDef]:
    """The functions a test file may reach in tests/ beside itself (its fixtures and helpers)."""
    out: dict[str, ast.FunctionDef] = {}
    for path in [TESTS / "conftest.py", TESTS / "floats.py", *sorted((TESTS / "helpers").glob("*.py"))]:
        out.update(_functions(path))
    return out


def _takes_fixtures(func: ast.FunctionDef) -> bool:
    """A test or a fixture: its parameters are fixtures (a helper's are its caller's values)."""
    return func.name.startswith("test") or any("fixture" in ast.unparse(d) for d in func.decorator_list)


def higher_tier_uses(source: str, shared: dict[str, ast.FunctionDef]) -> list[str]:
    """What a unit file must not touch, as 'line: what' for each: imports of AppTest, subprocess or a browser,
    and, from every test function, the fixtures it asks for and the names its body, its fixtures' and the helpers
    they call use."""
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            found += [f"{node.lineno}: import {m}" for m in names if m.startswith(MODULES_OF_A_HIGHER_TIER)]
    own = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    table = {**shared, **own}
    todo = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("test")]
    seen: set[str] = set()
    while todo:
        func = todo.pop()
        where = f"{func.lineno}: {func.name}" if func.name in own or func.name.startswith("test") else f"(helper {func.name})"
        params = {a.arg for a in func.args.args + func.args.kwonlyargs} if _takes_fixtures(func) else set()
        found += [f"{where} asks for the fixture {a}" for a in sorted(params & FIXTURES_OF_A_HIGHER_TIER)]
        for node in ast.walk(func):
            if isinstance(node, ast.Name) and node.id in NAMES_OF_A_HIGHER_TIER:
                found.append(f"{where} uses {node.id}")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "load_model" and (
                    not node.args or (isinstance(node.args[0], ast.Constant) and node.args[0].value is None)):
                found.append(f"{where} loads the embedded model")
        called = {n.func.id for n in ast.walk(func) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        for name in (params | called) - FIXTURES_OF_A_HIGHER_TIER - seen - BORROWED:
            if name in table:
                seen.add(name)
                todo.append(table[name])
    return found


def test_unit_files_touch_no_model_apptest_or_browser():
    shared = _shared()
    bad = {p.name: uses for p in sorted((TESTS / "unit").glob("*.py")) if (uses := higher_tier_uses(p.read_text(encoding="utf-8"), shared))}
    assert not bad, f"tests/unit files that belong in tests/integration or tests/browser: {bad}"


def test_the_check_sees_a_higher_tier_through_a_fixture_and_a_helper():
    shared = {**_shared(), **_functions_of("def _page():\n    return app_run('heads')\n")}
    assert higher_tier_uses("def test_a(smol):\n    pass\n", shared) == ["1: test_a asks for the fixture smol"]
    assert "(helper _page) uses app_run" in higher_tier_uses("def test_b():\n    _page()\n", shared)
    assert higher_tier_uses("def test_c():\n    load_model(None)\n", shared) == ["1: test_c loads the embedded model"]
    assert higher_tier_uses("from streamlit.testing.v1 import AppTest\n", shared) == ["1: import streamlit.testing.v1"]
    assert higher_tier_uses("def test_d(tiny_loaded):\n    load_model('toy')\n", shared) == []  # tiny models and the toy: unit


def _functions_of(source: str) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)}


def test_every_test_file_lives_in_one_tier_folder_with_its_own_name():
    files = [p for p in TESTS.rglob("test_*.py") if "benchmarks" not in p.parts]
    assert files and not [p for p in files if p.relative_to(TESTS).parts[0] not in TIERS or len(p.relative_to(TESTS).parts) != 2]
    names = [p.name for p in files]
    assert len(names) == len(set(names)), "two test files share a name (pytest imports them by their base name)"
