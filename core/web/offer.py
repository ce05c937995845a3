"""Which models this server offers, from the operator's setting (``core.common.settings``). Pure Python: no Streamlit.

A shared link may only *name* an offered model, by its id, never a path. ``XRAY_MODELS`` lists ``id=target``
or bare ``target`` entries (a folder, or an id in the Hugging Face cache; a bare entry's id is its folder
name or the cache id); the embedded SmolLM2 and the toy are always offered. ``XRAY_ALLOW_LOCAL=1`` adds a
free "local folder" box (for a laptop, not a shared server). Folders are canonicalised, so one model loads
once. A malformed setting raises ``OfferError``; ``python -m core.web.offer`` checks it and prints the offer.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType

from core.common import settings
from core.common.settings import SettingsError
from core.engine.types import EMBEDDED_ID, TOY_ID

LOCAL_ID = "__local__"  # the sidebar's "local folder" choice; never an offered id, never in a URL
MAX_ID_CHARS = 64
BUILT_IN: Mapping[str, str] = MappingProxyType({EMBEDDED_ID: EMBEDDED_ID, TOY_ID: TOY_ID})  # id → spec

# An offered id: short, letters, digits and . _ - / only; it starts with a letter or digit and has no
# empty, "." or ".." segment, so that it never reads as a path.
_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*")
# An id in the Hugging Face cache, as the loader reads one: org/name.
_HF_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")


class OfferError(SettingsError):
    """The operator's model setting cannot be read; the message says which entry and why."""


@dataclass(frozen=True)
class Offer:
    """What this server offers: ``models`` maps each id (in menu order) to the spec the loader
    takes (the built-in id, a canonical folder, or an HF cache id); ``allow_local`` turns on the free
    local-folder box."""

    models: Mapping[str, str] = field(default_factory=lambda: BUILT_IN, hash=False)
    allow_local: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "models", MappingProxyType(dict(self.models)))

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(self.models)

    def spec(self, model_id: object) -> str | None:
        """The spec of an offered id; None for anything else (a path, an unknown id, not a string)."""
        return self.models.get(model_id) if isinstance(model_id, str) else None

    def id_for(self, spec: str) -> str | None:
        """The first offered id whose spec is ``spec`` (None if that model is not offered)."""
        return next((i for i, s in self.models.items() if s == spec), None)


def is_hf_id(text: str) -> bool:
    """Whether ``text`` is spelled like a Hugging Face id (org/name)."""
    return _HF_ID_RE.fullmatch(text) is not None


def canonical_target(text: str) -> str:
    """The one spelling of a model target: an HF cache id as is (when no folder of that name exists
    here), anything else as an absolute folder with ``~``, ``.``, ``..``, doubled slashes and links
    resolved. Raises OfferError if it cannot be read as a path."""
    t = text.strip()
    if not t:
        raise OfferError("an empty model target")
    try:
        p = Path(t).expanduser()
        if is_hf_id(t) and not p.exists():
            return t
        return str(p.resolve())
    except (RuntimeError, ValueError, OSError) as e:  # no home folder for "~user", a NUL byte, a loop of links
        raise OfferError(f"'{t}' cannot be read as a folder ({e})") from None


def check_id(model_id: str) -> str:
    """``model_id`` if it is a valid offered id; OfferError otherwise."""
    if not model_id or len(model_id) > MAX_ID_CHARS:
        raise OfferError(f"the id '{model_id}' must have 1 to {MAX_ID_CHARS} characters")
    if _ID_RE.fullmatch(model_id) is None:
        raise OfferError(f"the id '{model_id}' may only hold letters, digits and . _ - / (starting with a letter or digit, "
                         "no empty, '.' or '..' part); write 'id=folder' to give the model another id")
    return model_id


def parse_models(text: str, *, must_exist: bool = True) -> dict[str, str]:
    """The operator's models from an ``XRAY_MODELS`` value: {id: spec}, in the order written.
    ``must_exist``: a listed folder must be a folder here (HF cache ids are checked when loaded)."""
    out: dict[str, str] = {}
    for n, raw in enumerate(text.split(","), 1):
        entry = raw.strip()
        if not entry:
            continue
        model_id, sep, target = entry.partition("=")
        model_id, target = model_id.strip(), target.strip()
        if not sep:
            model_id, target = "", entry
        where = f"{settings.MODELS} entry {n} ('{entry}')"
        if sep and not model_id:
            raise OfferError(f"{where}: nothing before '='")
        if sep and not target:
            raise OfferError(f"{where}: nothing after '='")
        try:
            spec = canonical_target(target)
            if not model_id:
                model_id = spec if is_hf_id(spec) else Path(spec).name
            check_id(model_id)
        except OfferError as e:
            raise OfferError(f"{where}: {e}") from None
        if model_id in BUILT_IN or model_id in out:
            raise OfferError(f"{where}: the id '{model_id}' is already taken; write 'other-id={target}'")
        if must_exist and not is_hf_id(spec) and not Path(spec).is_dir():
            raise OfferError(f"{where}: no folder at '{spec}'")
        out[model_id] = spec
    return out


@lru_cache(maxsize=8)
def parse(models_text: str = "", allow_local: bool = False) -> Offer:
    """The Offer of a setting (built-in models first); parsed once per distinct setting."""
    return Offer({**BUILT_IN, **parse_models(models_text)}, allow_local)


def from_env(env: Mapping[str, str] | None = None) -> Offer:
    """The Offer of this process's settings (or of the variables ``env``). Raises a SettingsError (an OfferError
    for the models) on a malformed setting."""
    s = settings.get() if env is None else settings.Settings.from_env(env)
    return parse(s.models, s.allow_local)


def main() -> int:
    """Check the setting before the server starts: print what is offered, or why it cannot be read."""
    try:
        offer = from_env()
    except SettingsError as e:
        print(f"Transformer X-Ray: the model setting cannot be read: {e}", file=sys.stderr)
        return 2
    for model_id, spec in offer.models.items():
        print(f"offered model  {model_id}" + ("" if spec == model_id else f"  ←  {spec}"))
    print(f"local-folder box: {'on' if offer.allow_local else 'off'} ({settings.ALLOW_LOCAL})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
