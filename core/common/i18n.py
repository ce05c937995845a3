"""English / 简体中文 strings, through one helper.

Strings live in ``assets/i18n/*.json``, one file per area of the app (``common.json``: the frame every page
shares; ``errors.json``: what a bad input or model is told), each a JSON object ``{key: {"en": …, "zh": …}}``.
A key's file says nothing about where it is used: its prefix does.
Keys are global; a test fails when a key lacks either language or two files define one key.
``str.format`` placeholders (``{n}``) must be the same in both languages.
"""

from __future__ import annotations

import json
import string
from functools import lru_cache

from core.common.paths import asset

LANGS = ("en", "zh")
LANG_NAMES = {"en": "English", "zh": "简体中文"}
I18N_DIR = asset("i18n")  # assets/ in a checkout, core/assets/ in an installed wheel


@lru_cache(maxsize=1)
def catalogue() -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for f in sorted(I18N_DIR.glob("*.json")):
        data = json.loads(f.read_text(encoding="utf-8"))
        for k, v in data.items():
            if k in out:
                raise ValueError(f"i18n key '{k}' is defined twice (again in {f.name})")
            out[k] = v
    return out


def problems() -> list[str]:
    """Every key lacking a language, or whose placeholders differ between languages."""
    errs = []
    fmt = string.Formatter()
    for k, v in catalogue().items():
        for lang in LANGS:
            if not isinstance(v, dict) or not str(v.get(lang, "")).strip():
                errs.append(f"{k}: missing '{lang}'")
        if isinstance(v, dict) and all(lang in v for lang in LANGS):
            fields = [sorted({f for _, f, _, _ in fmt.parse(v[lang]) if f}) for lang in LANGS]
            if fields[0] != fields[1]:
                errs.append(f"{k}: placeholders differ {fields}")
    return errs


def t(key: str, lang: str = "en", **kw: object) -> str:
    """The string for ``key`` in ``lang``; an unknown key shows itself (and a test catches it)."""
    entry = catalogue().get(key)
    if entry is None:
        return f"⟦{key}⟧"
    s = entry.get(lang) or entry.get("en") or key
    return s.format(**kw) if kw else s


def normalise_lang(value: str | None) -> str:
    """Map a browser locale or URL value ('zh-CN', 'zh', 'en-US' …) to one of LANGS."""
    if value and str(value).lower().startswith("zh"):
        return "zh"
    return "en"
