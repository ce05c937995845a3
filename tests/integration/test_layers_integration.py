"""The house's structure, checked from the source (ast only: nothing is imported or run).

* no import circle among the project's modules, counting imports inside functions;
* dependencies point one way: common → engine → plot → toy → backends → areas (gen, maths, inside,
  stream, learn, cause) → web → pages / app.py, and never back up;
* Streamlit only in app.py, pages/ and core/web/; plotly only in figure modules (core/<area>/figures.py)
  and core/web/;
* no import inside a function in core/, app.py or pages/ unless a comment on that line says why it is
  deferred ("deferred:").
"""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT


def test_notebook_api():
    """core/__init__.py's ``__all__`` (the notebook API its docstring shows) names only what ``from core import *``
    can bind — each name defined there or found by its lazy ``__getattr__`` (PEP 562) — load_model and trace among
    them; and ``import core`` alone imports neither torch nor transformers (a light entry point under ``core``,
    such as ``python -m core.web.offer``, must not pay for them)."""
    code = ("import sys, core; heavy = sorted(m for m in ('torch', 'transformers') if m in sys.modules); "
            "ns = {}; exec('from core import *', ns); "
            "print(heavy, sorted(set(core.__all__) - set(ns)), {'load_model', 'trace'} <= set(core.__all__))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[] [] True", out
