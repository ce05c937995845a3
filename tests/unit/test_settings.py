"""The operator's settings: the XRAY_* variables are read in one place (core.common.settings), once, into one
frozen object; a value the server cannot use is a sentence naming the variable."""

from __future__ import annotations

import ast
import dataclasses
import logging
import os
from pathlib import Path

import pytest

from conftest import ROOT
from core.common import settings
from core.common.settings import Settings, SettingsError


def test_no_module_but_settings_names_an_xray_variable():
    """Every reader goes through the object: no other module of core, pages or app.py holds an XRAY_* name
    outside its docstrings and comments (deploy/serve.py only sets two for its replicas, and imports nothing of core)."""
    found = []
    for path in [ROOT / "app.py", *(ROOT / "pages").glob("*.py"), *(ROOT / "core").rglob("*.py")]:
        if path == ROOT / "core" / "common" / "settings.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = {id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef))
                and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        found += [f"{path.relative_to(ROOT)}:{n.lineno}" for n in ast.walk(tree) if isinstance(n, ast.Constant)
                  and isinstance(n.value, str) and "XRAY_" in n.value and id(n) not in docs]
    assert not found, found


def test_every_variable_and_its_default():
    s = Settings.from_env({"XDG_CACHE_HOME": "/xdg"})
    assert s == Settings(models="", allow_local=False, cache_gb=1.5, memory_budget_gb=None, cache_dir=Path("/xdg/transformer-xray"),
                         measures_per_min=4, jobs=1, cache_idle_s=120.0, npz_mb=256, class_store="",
                         data_dir=Path(os.path.expanduser("~/.local/share/transformer-xray")), replica=None)
    s = Settings.from_env({settings.MODELS: "q=/models/q", settings.ALLOW_LOCAL: " Yes ", settings.CACHE_GB: "0.5",
                           settings.MEMORY_BUDGET_GB: "2.5", settings.CACHE_DIR: "/c", settings.MEASURES_PER_MIN: "9",
                           settings.JOBS: "2", settings.CACHE_IDLE_S: "30", settings.NPZ_MB: "0",
                           settings.CLASS_STORE: " redis://h:6379/0 ", settings.DATA_DIR: "/d",
                           settings.REPLICA: "2", settings.REPLICAS: "3"})
    assert s == Settings(models="q=/models/q", allow_local=True, cache_gb=0.5, memory_budget_gb=2.5, cache_dir=Path("/c"),
                         measures_per_min=9, jobs=2, cache_idle_s=30.0, npz_mb=0, class_store="redis://h:6379/0",
                         data_dir=Path("/d"), replica=(2, 3))
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.cache_gb = 9  # type: ignore[misc]


@pytest.mark.parametrize("value", ["maybe", "2", "ja"])
def test_an_on_off_value_that_is_neither_is_refused_naming_the_variable(value):
    with pytest.raises(SettingsError, match=rf"^XRAY_ALLOW_LOCAL='{value}': write 1 \(on\) or 0 \(off\)$"):
        Settings.from_env({settings.ALLOW_LOCAL: value})


@pytest.mark.parametrize(("name", "value", "field", "default"), [
    (settings.CACHE_GB, "lots", "cache_gb", 1.5), (settings.CACHE_GB, "-1", "cache_gb", 1.5),
    (settings.MEMORY_BUDGET_GB, "inf", "memory_budget_gb", None), (settings.MEASURES_PER_MIN, "²", "measures_per_min", 4),
    (settings.MEASURES_PER_MIN, "0", "measures_per_min", 4), (settings.REPLICA, "4", "replica", None),
])
def test_a_number_that_is_not_one_is_the_default_said_in_the_log(name, value, field, default, caplog):
    with caplog.at_level(logging.WARNING, logger="core.common.settings"):
        s = Settings.from_env({name: value, settings.REPLICAS: "3"})
    assert getattr(s, field) == default
    assert name in caplog.text and repr(value) in caplog.text


def test_read_once_then_kept_until_reloaded(monkeypatch):
    monkeypatch.setitem(os.environ, settings.MEASURES_PER_MIN, "7")  # setitem: the suite's setenv reloads (conftest)
    settings.reload()
    first = settings.get()
    monkeypatch.setitem(os.environ, settings.MEASURES_PER_MIN, "8")
    assert settings.get() is first and first.measures_per_min == 7  # read once: a later change is not seen
    settings.reload()
    assert settings.get().measures_per_min == 8


def test_the_suites_setenv_reads_the_settings_again(monkeypatch):
    monkeypatch.setenv(settings.CACHE_GB, "0.25")
    assert settings.get().cache_gb == 0.25
    monkeypatch.delenv(settings.CACHE_GB)
    assert settings.get().cache_gb == settings.CACHE_GB_DEFAULT
