"""Where the app's data files live, written once: ``assets/`` (the strings of both languages, the toy's
weights, the KV presets, the long documents, the serving workloads).

In a checkout, and in an editable install (``pip install -e .``), ``assets/`` sits beside ``core/``.
A wheel (``pip install .``) ships the same files as package data inside the package, as
``core/assets/`` (pyproject.toml maps the folder there), because nothing beside ``core/`` is installed
into site-packages. ``assets_dir`` tries the installed place first, then the checkout's.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

CORE = Path(__file__).resolve().parents[1]
CANDIDATES = (CORE / "assets", CORE.parent / "assets")  # installed wheel, then the checkout
MARKER = "i18n"  # every complete assets/ has its strings


class AssetsMissingError(FileNotFoundError):
    pass


@lru_cache(maxsize=1)
def assets_dir() -> Path:
    """The folder holding the app's data files (see the module's docstring)."""
    for c in CANDIDATES:
        if (c / MARKER).is_dir():
            return c
    raise AssetsMissingError("Transformer X-Ray's assets/ folder was not found (looked in "
                             + " and ".join(str(c) for c in CANDIDATES)
                             + "): run from the repository root, or install with `pip install .` / `pip install -e .` from a checkout.")


def asset(*parts: str) -> Path:
    """A path inside ``assets/``: ``asset("i18n")``, ``asset("model_presets.json")``."""
    return assets_dir().joinpath(*parts)
