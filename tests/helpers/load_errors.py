"""Helpers shared by the tiers of test_load_errors's tests (tests/*/test_load_errors*.py)."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import ROOT
from core.engine import hf

HOME = os.path.expanduser("~")


def _no_path(text: str, *folders: Path) -> None:
    """No server path in ``text``: not the installed packages, the app's checkout, the model cache, the
    server account's home folder, nor any of ``folders``."""
    leaks = ["/site-packages", str(ROOT), str(hf.cache_root()), *map(str, folders)]
    if HOME not in ("", "/", "~"):
        leaks.append(HOME)
    for leak in leaks:
        assert leak not in text, (leak, text[:2000])
