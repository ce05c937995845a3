"""Every page's plotly figures as stable digests, to compare two trees (issue 38: "every page renders the same
figures as before"). A tool, not a test: it only needs streamlit and the tree's own pages, so that it runs
unchanged against an older tree (copy it there).

    .venv/bin/python tests/benchmarks/figure_dump.py OUT.json [--lang en] [--pages heads,masks]
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
        traces.append({"type": tr.get("type", "scatter"), "name": tr.get("name"), "arrays": arrays,
                       "props": _h(json.dumps(props, sort_keys=True, default=str))})
    axes = {k: _title(v.get("title")) for k, v in sorted(layout.items())
            if k.startswith(("xaxis", "yaxis")) and isinstance(v, dict) and v.get("title")}
    notes = [a.get("text") for a in layout.get("annotations", [])]
    return {"title": _title(layout.get("title")), "axes": axes, "annotations": _h(json.dumps(notes)),
            "traces": traces}


def dump(out: str, lang: str, only: list[str] | None) -> None:
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
        at.query_params["lang"] = lang
        at.switch_page(f"pages/{stem}.py")
        at.run()
        errors = [str(e.value)[:200] for e in at.exception]
        result[stem] = {"errors": errors, "figures": [digest(json.loads(c.proto.spec)) for c in at.get("plotly_chart")]}
        print(f"{stem:18s} figures={len(result[stem]['figures']):3d}" + (f"  ERRORS {errors}" if errors else ""), flush=True)
    Path(out).write_text(json.dumps(result, indent=1, ensure_ascii=False))


def _label(f: dict) -> str:
    return json.dumps([f["title"], f["axes"], [(t["type"], t["name"]) for t in f["traces"]]], ensure_ascii=False)


def _what(a: dict, b: dict) -> str:
    """How figure b differs from figure a: labels (titles, axes, names, props), shape, values."""
    said = []
    if (a["title"], a["axes"], a["annotations"]) != (b["title"], b["axes"], b["annotations"]):
        said.append("labels(title/axes/annotations)")
    if [(t["type"], t["name"]) for t in a["traces"]] != [(t["type"], t["name"]) for t in b["traces"]]:
        said.append(f"traces {len(a['traces'])}→{len(b['traces'])}")
    for i, (ta, tb) in enumerate(zip(a["traces"], b["traces"])):
        if ta["props"] != tb["props"]:
            said.append(f"t{i}.props")
        for k in sorted(set(ta["arrays"]) | set(tb["arrays"])):
            x, y = ta["arrays"].get(k), tb["arrays"].get(k)
            if x is None or y is None:
                said.append(f"t{i}.{k} {'added' if x is None else 'removed'}")
            elif x["shape"] != y["shape"]:
                said.append(f"t{i}.{k} shape {x['shape']}→{y['shape']}")
            elif x["hash"] != y["hash"]:
                said.append(f"t{i}.{k} values (min,max,sum {x.get('stats')}→{y.get('stats')})")
    return "; ".join(said)


def compare(path_a: str, path_b: str) -> None:
    a, b = json.loads(Path(path_a).read_text()), json.loads(Path(path_b).read_text())
    for page in sorted(set(a) | set(b)):
        if page not in a or page not in b:
            print(f"{page}: page {'added' if page not in a else 'removed'}")
            continue
        fa, fb = a[page]["figures"], b[page]["figures"]
        left, right = list(fa), list(fb)
        for f in fa:  # identical figures, wherever they stand
            if f in right:
                right.remove(f)
                left.remove(f)
        changed = []
        for f in list(left):  # the same figure (title, axes, traces' types and names) with other data
            twin = next((g for g in right if _label(g) == _label(f)), None)
            if twin is not None:
                changed.append((f, twin))
                left.remove(f)
                right.remove(twin)
        while left and right and len(left) == len(right):  # what is left, paired in order
            changed.append((left.pop(0), right.pop(0)))
        errs = [e for e in (a[page]["errors"], b[page]["errors"]) if e]
        if not (left or right or changed or errs):
            print(f"{page}: same ({len(fa)} figures)")
            continue
        print(f"{page}: {len(fa)}→{len(fb)} figures" + (f"  ERRORS {errs}" if errs else ""))
        for f in right:
            print(f"  + added   {_label(f)}")
        for f in left:
            print(f"  - removed {_label(f)}")
        for f, g in changed:
            print(f"  ~ changed {_label(g)}: {_what(f, g)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?")
    ap.add_argument("--lang", default="en")
    ap.add_argument("--pages", default="", help="comma-separated stems (default: every file in pages/)")
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"))
    args = ap.parse_args()
    if args.compare:
        compare(*args.compare)
    elif args.out:
        dump(args.out, args.lang, [p for p in args.pages.split(",") if p] or None)
    else:
        ap.error("give OUT.json or --compare A.json B.json")


if __name__ == "__main__":
    main()
