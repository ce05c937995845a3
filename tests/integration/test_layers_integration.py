"""The notebook API, imported as a notebook would in a fresh interpreter (the house's structure itself:
tests/unit/test_layers.py)."""

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
