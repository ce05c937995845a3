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

import os
import subprocess
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from conftest import ROOT, all_text, app_run
from core import backends
from core.common import i18n, settings
from core.engine.types import EMBEDDED_ID, TOY_ID
from core.web import ui
from core.web.offer import LOCAL_ID, Offer, from_env

NOT_OFFERED = {lang: i18n.t("sb.model_not_offered", lang) for lang in i18n.LANGS}


@pytest.fixture(autouse=True)
def _no_operator_setting(monkeypatch):
    """Each test starts from the default offer (embedded + toy, no local box), whatever the shell has."""
    monkeypatch.delenv(settings.MODELS, raising=False)
    monkeypatch.delenv(settings.ALLOW_LOCAL, raising=False)


def _messages(at: AppTest) -> list[str]:
    """The sidebar's messages, and every error on the page."""
    side = at.sidebar
    return [*(m.value for kind in (side.error, side.warning, side.info) for m in kind), *(e.value for e in at.main.error)]


# ---------------------------------------------------------------------------------------------
# the operator's setting


def test_default_offer_is_the_embedded_model_and_the_toy():
    offer = from_env({})
    assert offer.ids == (EMBEDDED_ID, TOY_ID) and not offer.allow_local
    assert offer.spec("/etc") is None and offer.spec("~") is None and offer.spec(None) is None
    assert offer == Offer() and hash(offer) == hash(Offer())


def test_offered_models_are_parsed_with_ids_and_canonical_folders(tmp_path):
    qwen, other = tmp_path / "Qwen2.5-0.5B-Instruct", tmp_path / "other"
    qwen.mkdir()
    other.mkdir()
    text = f" qwen = {qwen}/ , {other}/. ,Qwen/Qwen2.5-0.5B-Instruct,, "
    offer = from_env({settings.MODELS: text, settings.ALLOW_LOCAL: "1"})
    assert offer.ids == (EMBEDDED_ID, TOY_ID, "qwen", "other", "Qwen/Qwen2.5-0.5B-Instruct")
    assert offer.models["qwen"] == str(qwen.resolve())
    assert offer.models["other"] == str(other.resolve())  # a bare folder's id is its name
    assert offer.models["Qwen/Qwen2.5-0.5B-Instruct"] == "Qwen/Qwen2.5-0.5B-Instruct"  # an HF cache id, kept
    assert offer.allow_local
    assert offer.id_for(str(qwen.resolve())) == "qwen"


def test_the_setting_is_checked_before_the_server_starts(tmp_path):
    """`python -m core.web.offer` (what `make run` runs first): the offer, or the reason and exit 2."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop(settings.ALLOW_LOCAL, None)
    ok = subprocess.run([sys.executable, "-m", "core.web.offer"], cwd=ROOT, capture_output=True, text=True,
                        env={**env, settings.MODELS: f"mine={tmp_path}"}, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert "mine" in ok.stdout and EMBEDDED_ID in ok.stdout and "off" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "core.web.offer"], cwd=ROOT, capture_output=True, text=True,
                         env={**env, settings.MODELS: "mine="}, timeout=120)
    assert bad.returncode == 2 and "nothing after '='" in bad.stderr


# ---------------------------------------------------------------------------------------------
# a link names offered models only


@pytest.mark.parametrize("value", ["/etc", "~", "/no/such/folder/anywhere", "no-such-id", "../../etc", "__local__"])
def test_a_link_naming_no_offered_model_shows_the_embedded_model(value):
    at = app_run(model=value, lang="en")
    assert not at.exception, [e.value for e in at.exception]
    assert at.session_state["model_spec_ok"] == EMBEDDED_ID
    assert _messages(at) == [NOT_OFFERED["en"]]  # one generic sentence, nothing else
    page = all_text(at)
    for leak in {value, os.path.expanduser(value), str(Path(value).expanduser().resolve())} - {"~"}:
        assert leak not in page, leak
    assert at.query_params["model"] == EMBEDDED_ID  # the URL now names the model shown
    assert at.title[0].value == "The journey of a sentence"


def test_the_message_is_the_same_whether_the_path_exists_or_not(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "llama"}', encoding="utf-8")
    seen = {}
    for value in ("/etc", str(tmp_path), "/no/such/folder"):
        at = app_run(model=value, lang="zh")
        seen[value] = _messages(at)
    assert list(seen.values()) == [[NOT_OFFERED["zh"]]] * 3


def test_a_link_naming_an_offered_id_loads_it(tiny_dirs, monkeypatch):
    folder = tiny_dirs["llama"]
    monkeypatch.setenv(settings.MODELS, f"tiny={folder}/.")
    at = app_run(model="tiny", lang="en")
    assert not at.exception, [e.value for e in at.exception]
    assert at.session_state["model_spec_ok"] == str(folder.resolve())
    assert at.session_state["model_id"] == "tiny"
    assert not _messages(at)
    assert at.selectbox(key="model_pick").value == "tiny"
    assert at.query_params["model"] == "tiny"
    assert any("tiny" in c.value for c in at.caption)  # the badge names the model by its id …
    assert str(folder) not in all_text(at)  # … never by the operator's folder
    # the listed folder itself is not a name a link may use
    at = app_run(model=str(folder), lang="en")
    assert at.session_state["model_spec_ok"] == EMBEDDED_ID
    assert _messages(at) == [NOT_OFFERED["en"]]


def test_no_local_folder_box_unless_the_operator_turns_it_on(monkeypatch):
    local = i18n.t("sb.model_local", "en")
    at = app_run(lang="en")
    assert local not in at.selectbox(key="model_pick").options  # (AppTest lists the options' labels)
    with pytest.raises(ValueError):  # AppTest refuses a value the box does not offer
        at.selectbox(key="model_pick").set_value(LOCAL_ID).run()
    assert not any(w.key == "model_path" for w in at.text_input)
    assert not _messages(at)
    monkeypatch.setenv(settings.ALLOW_LOCAL, "1")  # the operator turns it on: the choice and then the box appear
    at = app_run(lang="en")
    assert local in at.selectbox(key="model_pick").options
    at.selectbox(key="model_pick").set_value(LOCAL_ID).run()
    assert any(w.key == "model_path" for w in at.text_input)


def test_a_local_folder_is_canonicalised_and_never_put_in_the_url(tiny_dirs, monkeypatch):
    monkeypatch.setenv(settings.ALLOW_LOCAL, "1")
    loads = []
    real = backends.load_model
    monkeypatch.setattr(backends, "load_model", lambda spec=None, progress=None: loads.append(spec) or real(spec, progress))
    folder = tiny_dirs["qwen2"]
    at = app_run(lang="en")
    at.selectbox(key="model_pick").set_value(LOCAL_ID).run()
    for spelling in (str(folder), f"{folder}/", f"{folder}/.", f"{folder.parent}//{folder.name}"):
        at.text_input(key="model_path").set_value(spelling).run()
        assert not at.exception, [e.value for e in at.exception]
        assert at.session_state["model_spec_ok"] == str(folder.resolve())
        assert "model" not in at.query_params
    assert len(loads) <= 1 and set(loads) <= {str(folder.resolve())}  # one cache entry for every spelling


# ---------------------------------------------------------------------------------------------
# a prompt from a link


def test_a_long_prompt_from_a_link_is_capped_with_a_notice():
    at = app_run(prompt="a" * 30_000, lang="en")
    assert not at.exception, [e.value for e in at.exception]
    assert len(at.session_state["prompt"]) == ui.MAX_PROMPT_CHARS == 20_000
    assert any("30,000" in w.value and "20,000" in w.value for w in at.sidebar.warning), _messages(at)
    assert "prompt" not in at.query_params  # a link does not carry a prompt this long …
    assert any("2,000" in c.value for c in at.caption)  # … and the sidebar says so


def test_the_url_carries_a_prompt_whole_or_not_at_all():
    at = app_run(prompt="b " * 1_500, lang="en")  # 3,000 characters: kept whole in the box, not in the URL
    assert at.session_state["prompt"] == "b " * 1_500
    assert not at.sidebar.warning
    assert "prompt" not in at.query_params
    at.text_area(key="prompt").set_value("short again").run()
    assert at.query_params["prompt"] == "short again"
    assert not any("2,000" in c.value for c in at.caption)
