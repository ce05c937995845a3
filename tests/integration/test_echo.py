"""What comes from outside is shown as text, never as markup (issue 29, item 1).

A link's parameters, a text box, a prompt, a token's text and a model's strings reach the page through
ONE escaping helper, ``core.common.escape``: ``md`` for Markdown (links, images, GFM autolinks and HTML
made inert), ``plot`` for plotly labels (``<b>``, ``<br>``, ``<i>`` shown as typed). Each echo point is
tried with a link, an image, bare autolinks and HTML: in AppTest the rendered Markdown bodies must hold
no live link syntax, and in the figure specs no label may carry a tag.
"""

from __future__ import annotations

import json

import pytest
from helpers.echo import live_links

from conftest import app_run
from core.web.offer import LOCAL_ID

LINK = "[Claim your grade](https://evil.example/login)"
IMAGE = "![x](https://evil.example/pixel.png)"
BARE = "https://evil.example/a"
WWW = "www.evil.example"
EMAIL = "victim@evil.example"
HTML = "<b>x</b><img src=https://evil.example/i.png>"


def _bodies(at) -> list[str]:
    kinds = ("markdown", "caption", "info", "warning", "error", "success", "subheader", "header", "title")
    out = [e.value for k in kinds for e in getattr(at, k)]
    out += [e.value for k in kinds for e in getattr(at.sidebar, k)]
    return out


def _figure_strings(at) -> list[str]:
    """Every string in every plotly figure the run drew (labels, hover, ticks, titles, names)."""
    out: list[str] = []

    def walk(v):
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    for c in at.get("plotly_chart"):
        walk(json.loads(c.proto.spec))
    return out


# ---------------------------------------------------------------------------------------------
# the pages, as a shared link or a typed box reaches them


def test_cause_pair_link_answer_and_foil(smol):
    """The issue's link: a Markdown link as the answer, an image as the foil."""
    at = app_run("cause_pair", lang="en", answer=LINK, foil=IMAGE)
    assert not at.exception, [e.value for e in at.exception]
    bodies = _bodies(at)
    assert any("evil" in b for b in bodies), "the answer is echoed (so the check means something)"
    assert [x for b in bodies for x in live_links(b)] == [], [b for b in bodies if live_links(b)]


@pytest.mark.parametrize("which", ["answer", "foil"])
@pytest.mark.parametrize("payload", [BARE, WWW, EMAIL, HTML])
def test_cause_pair_autolinks_and_html(smol, which, payload):
    at = app_run("cause_pair", lang="zh", **{which: payload})
    assert not at.exception, [e.value for e in at.exception]
    bodies = _bodies(at)
    assert any("evil" in b for b in bodies), bodies
    assert [x for b in bodies for x in live_links(b)] == [], [b for b in bodies if live_links(b)]


def test_pca_word_box(smol):
    at = app_run("tokens", lang="en")
    at.text_input(key="tokens_words").input(f"cat, dog, {BARE}, {WWW}, {EMAIL}, {HTML}").run()
    assert not at.exception, [e.value for e in at.exception]
    bodies = _bodies(at)
    assert any("evil" in b for b in bodies), "the multi-token words are listed under the map"
    assert [x for b in bodies for x in live_links(b)] == [], [b for b in bodies if live_links(b)]
    strings = [s for s in _figure_strings(at) if "evil" in s or "&lt;" in s]
    assert strings and not any("<b>" in s or "<img" in s for s in strings), strings


@pytest.mark.parametrize("stem", ["residual", "heads", "logits", "masks"])
def test_prompt_html_never_reaches_figure_labels(smol, stem):
    prompt = "<b>bold</b> <i>it</i><br>x " + LINK
    at = app_run(stem, lang="en", prompt=prompt)
    assert not at.exception, [e.value for e in at.exception]
    strings = _figure_strings(at)
    joined = "\n".join(strings)
    assert "&lt;" in joined, (stem, "the prompt's tokens are in the figure, escaped")
    for tag in ("<b>", "</b>", "<i>", "</i>"):
        assert tag not in joined, (stem, tag, [s for s in strings if tag in s][:3])
    bodies = _bodies(at)
    assert [x for b in bodies for x in live_links(b)] == [], [b for b in bodies if live_links(b)]


def test_local_folder_name_is_text(monkeypatch, tiny_dirs, tmp_path):
    """A local folder typed by the user is named in the sidebar and the badge: as text."""
    import shutil

    monkeypatch.setenv("XRAY_ALLOW_LOCAL", "1")
    folder = tmp_path / f"{WWW} [x](mailto:{EMAIL}) ![i](https:evil.example)"
    shutil.copytree(tiny_dirs["qwen2"], folder)
    at = app_run("tokens", lang="en")
    at.selectbox(key="model_pick").set_value(LOCAL_ID).run()
    at.text_input(key="model_path").set_value(str(folder)).run()
    assert not at.exception, [e.value for e in at.exception]
    bodies = _bodies(at)
    assert any("evil" in b for b in bodies), bodies
    assert [x for b in bodies for x in live_links(b)] == [], [b for b in bodies if live_links(b)]
