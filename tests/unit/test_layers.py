"""The house's structure (CONTRIBUTING.md, "What each floor may import", says it in prose), checked from
the source: ast only, nothing is imported or run."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

AREAS = ("gen", "maths", "inside", "stream", "learn", "cause")


def _modules() -> dict[str, Path]:
    files = [ROOT / "app.py", *sorted((ROOT / "pages").glob("*.py")), *sorted((ROOT / "core").rglob("*.py"))]
    out = {}
    for p in files:
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def _imports(path: Path) -> list[tuple[str, int, bool]]:
    """(imported dotted name, line, inside a function) for every import statement."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    pkg = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, in_func: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = in_func or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend((a.name, child.lineno, in_func) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - (child.level - 1)]
                    base = ".".join([*up, base]) if base else ".".join(up)
                found.append((base, child.lineno, in_func))
                found.extend((f"{base}.{a.name}", child.lineno, in_func) for a in child.names)
            visit(child, nested)

    visit(tree, False)
    return found


def _project_target(name: str) -> str | None:
    """The longest project module that ``name`` refers to."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _graph() -> dict[str, set[str]]:
    g: dict[str, set[str]] = {m: set() for m in MODULES}
    for mod, path in MODULES.items():
        for name, _, _ in _imports(path):
            t = _project_target(name)
            if t and t != mod:
                g[mod].add(t)
    return g


def _layer(mod: str) -> int:
    """Rank in the house: a module may import only modules of a lower or equal rank."""
    parts = mod.split(".")
    if parts[0] in ("app", "pages"):
        return 8
    if mod == "core" or mod == "core.__main__":
        return 7  # the notebook API and the CLI sit on top of core, below the web pages
    sub = parts[1] if len(parts) > 1 else ""
    return {"common": 0, "engine": 1, "plot": 2, "toy": 3, "backends": 4, **dict.fromkeys(AREAS, 5), "web": 6}[sub]


def test_no_import_circle():
    g = _graph()
    index, low, stack, on, circles = {}, {}, [], set(), []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in g:
        if v not in index:
            strong(v)
    assert not circles, circles


def test_dependencies_point_down():
    upward = [f"{m} → {t}" for m, deps in _graph().items() for t in deps if _layer(t) > _layer(m)]
    assert not upward, upward


def test_areas_do_not_import_each_other_upward():
    """Areas never import each other: what two areas share lives below them (core.engine, core.backends)."""
    allowed: set[tuple[str, str]] = set()
    bad = []
    for m, deps in _graph().items():
        pm = m.split(".")
        for t in deps:
            pt = t.split(".")
            if len(pm) > 1 and len(pt) > 1 and pm[1] in AREAS and pt[1] in AREAS and pm[1] != pt[1] and (pm[1], pt[1]) not in allowed:
                bad.append(f"{m} → {t}")
    assert not bad, bad


def _is_web(mod: str) -> bool:
    return mod == "app" or mod.startswith(("pages.", "core.web"))


def test_streamlit_only_in_the_web_layer():
    bad = [f"{m}:{line}" for m, p in MODULES.items() for name, line, _ in _imports(p)
           if name.split(".")[0] == "streamlit" and not _is_web(m)]
    assert not bad, bad


def test_plotly_only_in_figure_modules_and_the_web_layer():
    def ok(mod: str) -> bool:
        return mod.startswith("core.web") or mod.endswith(".figures")

    bad = [f"{m}:{line}" for m, p in MODULES.items() for name, line, _ in _imports(p)
           if name.split(".")[0] == "plotly" and not ok(m)]
    assert not bad, bad


def test_no_import_inside_a_function_without_a_reason():
    bad = []
    for m, p in MODULES.items():
        lines = p.read_text(encoding="utf-8").splitlines()
        for _, line, in_func in _imports(p):
            if in_func and "deferred:" not in lines[line - 1]:
                bad.append(f"{m}:{line}: {lines[line - 1].strip()}")
    assert not bad, sorted(set(bad))


def test_app_runs_only_through_main():
    """Importing app.py must not start the app (a top-level call other than under __main__)."""
    tree = ast.parse((ROOT / "app.py").read_text(encoding="utf-8"))
    calls = [n for n in tree.body if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)]
    assert not calls
    assert any(isinstance(n, ast.If) and "__main__" in ast.unparse(n.test) for n in tree.body)


def test_the_launcher_imports_nothing_of_the_house():
    """deploy/serve.py starts the replicas without torch: it imports no module of core, pages or app.py."""
    bad = [f"{p.name}:{line}: {name}" for p in sorted((ROOT / "deploy").glob("*.py"))
           for name, line, _ in _imports(p) if name.split(".")[0] in ("core", "pages", "app")]
    assert not bad, bad
