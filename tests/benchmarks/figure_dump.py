"""Every page's plotly figures as stable digests, to compare two trees (issue 38: "every page renders the same
figures as before"). A tool, not a test: it only needs streamlit and the tree's own pages, so that it runs
unchanged against an older tree (copy it there).

    .venv/bin/python tests/benchmarks/figure_dump.py OUT.json [--lang en] [--pages heads,masks] [--query site=z]
    .venv/bin/python tests/benchmarks/figure_dump.py --compare A.json B.json

The first opens each page of ``pages/`` as a link opens it (app.py's router and sidebar, AppTest, the embedded
model, the default prompt) and writes {page: [figure, …]}: per figure its title, axis titles, annotations and
traces (type, name, every array's shape and a hash of its values rounded to 4 significant digits, with its
min/max/sum to tell a rounding flip from a real change). The second prints per page: same, or the figures
added, removed and changed (what changed: shape, values, labels). Run it from the tree's root, with that
tree's venv; an older tree (``git worktree add``) takes a copy of this file at the same path.
"""

from __future__ import annotations

import argparse
import base64
import difflib
import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def _array(v):
    """A trace property as a numpy array (plotly's base64 typed arrays decoded), or None if it is not one."""
    if isinstance(v, dict) and "bdata" in v:
        a = np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"]))
        return a.reshape([int(s) for s in str(v["shape"]).split(",")]) if "shape" in v else a
    if isinstance(v, list):
        flat = json.dumps(v, default=str)
        try:
            return np.array(v, dtype=float)
        except (TypeError, ValueError):
            return np.array([flat])  # strings or ragged lists: compared as text
    return None


def _rounded(a) -> str:
    if a.dtype.kind in "fiub":
        return json.dumps([None if not np.isfinite(x) else float(f"{x:.4g}") for x in a.astype(float).ravel()])
    return json.dumps(a.tolist(), default=str)


def _h(s: str) -> str:
    return hashlib.sha1(s.encode()).hexdigest()[:12]


def _walk(obj, path: str, arrays: dict, props: dict) -> None:
    a = _array(obj)
    if a is not None:
        entry = {"shape": list(a.shape), "hash": _h(_rounded(a))}
        if a.dtype.kind in "fiub" and a.size and np.isfinite(a.astype(float)).any():
            f = a.astype(float)[np.isfinite(a.astype(float))]
            entry["stats"] = [float(f"{x:.6g}") for x in (f.min(), f.max(), f.sum())]
        arrays[path] = entry
    elif isinstance(obj, dict):
        for k, v in sorted(obj.items()):
            _walk(v, f"{path}.{k}" if path else k, arrays, props)
    elif isinstance(obj, (str, int, float, bool)) or obj is None:
        props[path] = obj


def _title(t) -> str | None:
    return t.get("text") if isinstance(t, dict) else t


def digest(spec: dict) -> dict:
    layout = spec.get("layout", {})
    traces = []
    for tr in spec.get("data", []):
        arrays, props = {}, {}
        _walk({k: v for k, v in tr.items() if k not in ("type", "name", "uid")}, "", arrays, props)
        traces.append({"type": tr.get("type", "scatter"), "name": tr.get("name"), "arrays": arrays, "props": props})
    axes = {k: _title(v.get("title")) for k, v in sorted(layout.items())
            if k.startswith(("xaxis", "yaxis")) and isinstance(v, dict) and v.get("title")}
    notes = [a.get("text") for a in layout.get("annotations", [])]
    return {"title": _title(layout.get("title")), "axes": axes, "annotations": _h(json.dumps(notes)),
            "traces": traces}


def dump(out: str, lang: str, only: list[str] | None, query: dict[str, str] | None = None) -> None:
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from streamlit.runtime.pages_manager import PagesManager
    from streamlit.testing.v1 import AppTest

    init = PagesManager.__init__

    def st_navigation_only(self, *a, **kw):  # as tests/conftest.py: pages/ are st.navigation pages, not a pages dir
        PagesManager.uses_pages_directory = False
        init(self, *a, **kw)

    PagesManager.__init__ = st_navigation_only
    stems = only or sorted(p.stem for p in (ROOT / "pages").glob("*.py"))
    result = {}
    for stem in stems:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
        for k, v in {**(query or {}), "lang": lang}.items():  # as a link's URL carries them
            at.query_params[k] = v
        at.switch_page(f"pages/{stem}.py")
        at.run()
        errors = [str(e.value)[:200] for e in at.exception]
        result[stem] = {"errors": errors, "figures": [digest(json.loads(c.proto.spec)) for c in at.get("plotly_chart")]}
        print(f"{stem:18s} figures={len(result[stem]['figures']):3d}" + (f"  ERRORS {errors}" if errors else ""), flush=True)
    Path(out).write_text(json.dumps(result, indent=1, ensure_ascii=False))


def _key(f: dict) -> str:
    """What a figure is, to align two pages' figures: its title, axes and first trace's type."""
    return json.dumps([f["title"], f["axes"], f["traces"][0]["type"] if f["traces"] else None], ensure_ascii=False)


def _label(f: dict) -> str:
    return json.dumps([f["title"], f["axes"], [(t["type"], t["name"]) for t in f["traces"]]], ensure_ascii=False)


def _exact(f: dict) -> str:
    """The figure without its arrays' min/max/sum: two figures are the same when their 4-digit hashes are."""
    traces = [{**t, "arrays": {k: (v["shape"], v["hash"]) for k, v in t["arrays"].items()}} for t in f["traces"]]
    return json.dumps({**f, "traces": traces}, sort_keys=True, ensure_ascii=False)


def _near(x: list | None, y: list | None) -> bool:
    """min, max and sum within 1e-4 relative: a value rounded across a 4th-digit boundary, not a change."""
    return bool(x and y) and all(abs(p - q) <= 1e-4 * max(abs(p), abs(q), 1e-6) for p, q in zip(x, y))


def _what(a: dict, b: dict) -> str:
    """How figure b differs from figure a: labels (titles, axes, annotations, names), props, shape, values."""
    said = []
    if (a["title"], a["axes"], a["annotations"]) != (b["title"], b["axes"], b["annotations"]):
        said.append("labels(title/axes/annotations)")
    if [(t["type"], t["name"]) for t in a["traces"]] != [(t["type"], t["name"]) for t in b["traces"]]:
        said.append(f"traces {[(t['type'], t['name']) for t in a['traces']]}→{[(t['type'], t['name']) for t in b['traces']]}")
    for i, (ta, tb) in enumerate(zip(a["traces"], b["traces"])):
        props = sorted(k for k in set(ta["props"]) | set(tb["props"]) if ta["props"].get(k) != tb["props"].get(k))
        if props:
            said.append(f"t{i}.props {props}")
        for k in sorted(set(ta["arrays"]) | set(tb["arrays"])):
            x, y = ta["arrays"].get(k), tb["arrays"].get(k)
            if x is None or y is None:
                said.append(f"t{i}.{k} {'added' if x is None else 'removed'}")
            elif x["shape"] != y["shape"]:
                said.append(f"t{i}.{k} shape {x['shape']}→{y['shape']}")
            elif x["hash"] != y["hash"]:
                near = " ≈ rounding only" if _near(x.get("stats"), y.get("stats")) else ""
                said.append(f"t{i}.{k} values{near} (min,max,sum {x.get('stats')}→{y.get('stats')})")
    return "; ".join(said)


def compare(path_a: str, path_b: str) -> None:
    a, b = json.loads(Path(path_a).read_text()), json.loads(Path(path_b).read_text())
    for page in sorted(set(a) | set(b)):
        if page not in a or page not in b:
            print(f"{page}: page {'added' if page not in a else 'removed'}")
            continue
        fa, fb = a[page]["figures"], b[page]["figures"]
        added, removed, changed = [], [], []
        blocks = difflib.SequenceMatcher(None, [_key(f) for f in fa], [_key(f) for f in fb], autojunk=False).get_opcodes()
        for op, i1, i2, j1, j2 in blocks:  # figures aligned in page order by what they are; then compared
            if op in ("equal", "replace") and i2 - i1 == j2 - j1:
                changed += [(f, g) for f, g in zip(fa[i1:i2], fb[j1:j2]) if _exact(f) != _exact(g)]
            else:
                removed += fa[i1:i2]
                added += fb[j1:j2]
        errs = [e for e in (a[page]["errors"], b[page]["errors"]) if e]
        if not (added or removed or changed or errs):
            print(f"{page}: same ({len(fa)} figures)")
            continue
        print(f"{page}: {len(fa)}→{len(fb)} figures" + (f"  ERRORS {errs}" if errs else ""))
        for f in added:
            print(f"  + added   {_label(f)}")
        for f in removed:
            print(f"  - removed {_label(f)}")
        for f, g in changed:
            print(f"  ~ changed #{fb.index(g)} {_label(g)}: {_what(f, g)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?")
    ap.add_argument("--lang", default="en")
    ap.add_argument("--pages", default="", help="comma-separated stems (default: every file in pages/)")
    ap.add_argument("--query", action="append", default=[], metavar="KEY=VALUE", help="a URL parameter for every page")
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"))
    args = ap.parse_args()
    if args.compare:
        compare(*args.compare)
    elif args.out:
        dump(args.out, args.lang, [p for p in args.pages.split(",") if p] or None, dict(q.split("=", 1) for q in args.query))
    else:
        ap.error("give OUT.json or --compare A.json B.json")


if __name__ == "__main__":
    main()
