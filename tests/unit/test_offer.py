"""A link reaches only what the server offers (issue 15, section 1, and two link items of section 3).

* the operator's setting (XRAY_MODELS, XRAY_ALLOW_LOCAL) is parsed and checked once, and a folder has
  one spelling (``<P>``, ``<P>/``, ``<P>/.`` are one model);
* a link's ``?model=`` names an offered id only: a path or an unknown id loads nothing, and gets one
  generic sentence that neither echoes nor probes the value;
* the free local-folder box exists only when the operator turns it on, and a folder never goes into
  the URL;
* a prompt arriving by a link is capped like a typed one, and the URL carries a prompt whole or not at all;
* ``/journey`` as a deep link opens the journey (the default page lives at ``/``).
"""

from __future__ import annotations

import pytest

from core.common import settings
from core.common.settings import SettingsError
from core.web import nav
from core.web.offer import OfferError, canonical_target, from_env, parse_models


@pytest.fixture(autouse=True)
def _no_operator_setting(monkeypatch):
    """Each test starts from the default offer (embedded + toy, no local box), whatever the shell has."""
    monkeypatch.delenv(settings.MODELS, raising=False)
    monkeypatch.delenv(settings.ALLOW_LOCAL, raising=False)


def test_a_folder_has_one_spelling(tmp_path, monkeypatch):
    p = tmp_path / "model"
    p.mkdir()
    (tmp_path / "link").symlink_to(p)
    monkeypatch.setenv("HOME", str(tmp_path))
    spellings = [str(p), f"{p}/", f"{p}/.", f"{tmp_path}//model", f"{p}/../model", "~/model", f"{tmp_path}/link"]
    assert {canonical_target(s) for s in spellings} == {str(p.resolve())}
    assert canonical_target("~") == str(tmp_path.resolve())


@pytest.mark.parametrize(
    "setting, words",
    [
        ("=%(P)s", "nothing before"),
        ("qwen=", "nothing after"),
        ("bad id!=%(P)s", "may only hold"),
        ("../up=%(P)s", "may only hold"),
        ("/abs=%(P)s", "may only hold"),
        ("%(long)s=%(P)s", "must have 1 to"),
        ("toy=%(P)s", "already taken"),
        ("a=%(P)s,a=%(P)s", "already taken"),
        ("a=%(P)s/missing", "no folder at"),
        ("%(P)s/missing", "no folder at"),
    ],
)
def test_a_malformed_setting_is_refused_with_a_clear_error(tmp_path, setting, words):
    (tmp_path / "with space").mkdir()
    text = setting % {"P": tmp_path, "long": "x" * 65}
    with pytest.raises(OfferError, match=words):
        parse_models(text)
    with pytest.raises(OfferError, match=settings.MODELS):
        from_env({settings.MODELS: text})


def test_a_bare_folder_whose_name_is_no_id_asks_for_one(tmp_path):
    (tmp_path / "with space").mkdir()
    with pytest.raises(OfferError, match="id=folder"):
        parse_models(str(tmp_path / "with space"))


@pytest.mark.parametrize("value, on", [("", False), ("0", False), ("off", False), ("1", True), ("true", True), ("YES", True)])
def test_allow_local_flag(value, on):
    assert from_env({settings.ALLOW_LOCAL: value}).allow_local is on


def test_a_malformed_flag_is_refused():
    with pytest.raises(SettingsError, match=settings.ALLOW_LOCAL):
        from_env({settings.ALLOW_LOCAL: "maybe"})


# ---------------------------------------------------------------------------------------------
# /journey as a deep link


def test_every_page_has_a_route_and_journey_has_two():
    assert nav.route("") == nav.route("/") == "journey"
    assert nav.route("/journey") == nav.route("journey") == "journey"
    assert all(nav.route(stem) == stem for stem in nav.STEMS)
    assert nav.route("etc") is None
