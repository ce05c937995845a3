"""The operator's settings: the ``XRAY_*`` environment variables, read once, into one typed object.

| variable | field | what | default |
|---|---|---|---|
| ``XRAY_MODELS`` | ``models`` | the offered models, ``id=folder-or-cache-id`` entries (``core.web.offer`` parses them) | none |
| ``XRAY_ALLOW_LOCAL`` | ``allow_local`` | the sidebar's free local-folder box: 1/true/yes/on or 0/false/no/off | off |
| ``XRAY_CACHE_GB`` | ``cache_gb`` | the trace cache of all sessions together, decimal GB | 1.5 |
| ``XRAY_MEMORY_BUDGET_GB`` | ``memory_budget_gb`` | the most one model's float32 weights may take, decimal GB | 40 % of the memory |
| ``XRAY_CACHE_DIR`` | ``cache_dir`` | where the embedded model's converted weights are kept | ~/.cache/transformer-xray |
| ``XRAY_MEASURES_PER_MIN`` | ``measures_per_min`` | fresh timing measurements a server starts a minute | 4 |
| ``XRAY_JOBS`` | ``jobs`` | heavy jobs (sweeps, attributions, measurements, receipts) one server runs at a time | 1 |
| ``XRAY_CACHE_IDLE_S`` | ``cache_idle_s`` | seconds a cached trace may go unread before the server drops it | 120 |
| ``XRAY_NPZ_MB`` | ``npz_mb`` | the largest .npz download the server builds, MiB (0: no download) | 256 |
| ``XRAY_CLASS_STORE`` | ``class_store`` | where class mode keeps its classes: ``redis://…``, ``sqlite:///path`` | SQLite in ``data_dir`` |
| ``XRAY_DATA_DIR`` | ``data_dir`` | the app's data folder (class mode's SQLite file) | ~/.local/share/transformer-xray |
| ``XRAY_REPLICA``, ``XRAY_REPLICAS`` | ``replica`` | (this process's number, how many), set by deploy/serve.py | none |

``get()`` reads them on first use (a server's start) and keeps the object. An on/off value that is neither
is refused (``SettingsError``, naming the variable); a number that is not a positive number is ignored with a
sentence in the server log, as a replica number that does not fit is. Tests that set a variable read them
again with ``reload()``.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

MODELS = "XRAY_MODELS"
ALLOW_LOCAL = "XRAY_ALLOW_LOCAL"
CACHE_GB = "XRAY_CACHE_GB"
MEMORY_BUDGET_GB = "XRAY_MEMORY_BUDGET_GB"
CACHE_DIR = "XRAY_CACHE_DIR"
MEASURES_PER_MIN = "XRAY_MEASURES_PER_MIN"
JOBS = "XRAY_JOBS"
CACHE_IDLE_S = "XRAY_CACHE_IDLE_S"
NPZ_MB = "XRAY_NPZ_MB"
CLASS_STORE = "XRAY_CLASS_STORE"
DATA_DIR = "XRAY_DATA_DIR"
REPLICA = "XRAY_REPLICA"
REPLICAS = "XRAY_REPLICAS"
_ON = frozenset({"1", "true", "yes", "on"})
_OFF = frozenset({"", "0", "false", "no", "off"})


class SettingsError(ValueError):
    """A setting the server cannot run with; the message names the variable and says what to write."""


CACHE_GB_DEFAULT = 1.5
MEASURES_PER_MIN_DEFAULT = 4
JOBS_DEFAULT = 1
CACHE_IDLE_S_DEFAULT = 120
NPZ_MB_DEFAULT = 256


@dataclass(frozen=True)
class Settings:
    models: str  # the text; core.web.offer reads the entries (an id is checked against the built-in ones)
    allow_local: bool
    cache_gb: float
    memory_budget_gb: float | None  # None: a share of the machine's memory (core.engine.budget)
    cache_dir: Path
    measures_per_min: int
    jobs: int
    cache_idle_s: float
    npz_mb: int
    class_store: str
    data_dir: Path
    replica: tuple[int, int] | None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """The settings of ``env`` (the process environment when None), checked."""
        env = os.environ if env is None else env
        home = env.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
        data_home = env.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
        npz = env.get(NPZ_MB, "").strip()
        return cls(
            models=env.get(MODELS, ""),
            allow_local=_flag(env, ALLOW_LOCAL),
            cache_gb=_gb(env, CACHE_GB) or CACHE_GB_DEFAULT,
            memory_budget_gb=_gb(env, MEMORY_BUDGET_GB),
            cache_dir=Path(env.get(CACHE_DIR) or os.path.join(home, "transformer-xray")),
            measures_per_min=_whole(env, MEASURES_PER_MIN) or MEASURES_PER_MIN_DEFAULT,
            jobs=_whole(env, JOBS) or JOBS_DEFAULT,
            cache_idle_s=float(_whole(env, CACHE_IDLE_S) or CACHE_IDLE_S_DEFAULT),
            npz_mb=0 if npz == "0" else (_whole(env, NPZ_MB) or NPZ_MB_DEFAULT),
            class_store=env.get(CLASS_STORE, "").strip(),
            data_dir=Path(env.get(DATA_DIR) or os.path.join(data_home, "transformer-xray")),
            replica=_replica(env),
        )


def _flag(env: Mapping[str, str], name: str) -> bool:
    raw = env.get(name, "")
    v = raw.strip().lower()
    if v in _ON or v in _OFF:
        return v in _ON
    raise SettingsError(f"{name}='{raw}': write 1 (on) or 0 (off)")


def _gb(env: Mapping[str, str], name: str) -> float | None:
    """A positive number of decimal GB, or None (unset; or not such a number, said in the log)."""
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        gb = float(raw)
    except ValueError:
        gb = math.nan
    if math.isfinite(gb) and gb > 0:
        return gb
    log.warning("%s=%r is not a positive number of GB; using the default", name, raw)
    return None


def _whole(env: Mapping[str, str], name: str) -> int | None:
    """A positive whole number written in ASCII digits, or None (unset; or not such a number, said in the log)."""
    raw = env.get(name, "").strip()
    if raw.isascii() and raw.isdigit() and int(raw) > 0:
        return int(raw)
    if raw:
        log.warning("%s=%r is not a positive whole number; using the default", name, raw)
    return None


def _replica(env: Mapping[str, str]) -> tuple[int, int] | None:
    """(number, how many) when deploy/serve.py started this process as one of its replicas."""
    n, total = env.get(REPLICA, ""), env.get(REPLICAS, "")
    if not n and not total:
        return None
    if n.isascii() and n.isdigit() and total.isascii() and total.isdigit() and 1 <= int(n) <= int(total):
        return int(n), int(total)
    log.warning("%s=%r of %s=%r is not a replica's number; taken as no replica", REPLICA, n, REPLICAS, total)
    return None


_current: Settings | None = None


def get() -> Settings:
    """This process's settings: read from the environment on first use, then kept."""
    global _current
    if _current is None:
        _current = Settings.from_env()
    return _current


def reload() -> None:
    """Let the next ``get()`` read the environment again (tests that set a variable; the app never changes its
    settings)."""
    global _current
    _current = None
