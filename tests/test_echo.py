"""What comes from outside is shown as text, never as markup (issue 29, item 1).

A link's parameters, a text box, a prompt, a token's text and a model's strings reach the page through
ONE escaping helper, ``core.common.escape``: ``md`` for Markdown (links, images, GFM autolinks and HTML
made inert), ``plot`` for plotly labels (``<b>``, ``<br>``, ``<i>`` shown as typed). Each echo point is
tried with a link, an image, bare autolinks and HTML: in AppTest the rendered Markdown bodies must hold
no live link syntax, and in the figure specs no label may carry a tag.
"""

from __future__ import annotations

import json
import re

import pytest

from conftest import app_run
from core.cause import pair
from core.common import escape
from core.engine.types import ModelLoadError, Phrase
from core.web import widgets
from core.web.offer import LOCAL_ID

LINK = "[Claim your grade](https://evil.example/login)"
IMAGE = "![x](https://evil.example/pixel.png)"
BARE = "https://evil.example/a"
WWW = "www.evil.example"
EMAIL = "victim@evil.example"
HTML = "<b>x</b><img src=https://evil.example/i.png>"
PAYLOADS = (LINK, IMAGE, BARE, WWW, EMAIL, HTML)

_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)*?\1", re.S)
_AUTOLINK = re.compile(r"(?i)https?://\S*evil|www\.evil|[-.\w+]+@evil")


def live_links(body: str) -> list[str]:
    """What in the Markdown ``body`` would render as a link, image, autolink or HTML tag pointing at
    evil.example (code spans render nothing, so they are left out). remark-gfm finds autolinks in the
    text left after backslash escapes are resolved, so that is where they are looked for."""
    text = _CODE_SPAN.sub("", body)
    if text.lstrip().startswith("<"):  # an HTML block (a page's own markup: chips, a figure's table): no Markdown in it
        return re.findall(r"(?i)<\s*(?:img|a)\b[^>]*evil|<b>x</b>", text)
    found = re.findall(r"(?<!\\)\]\s*\(\s*<?[^)]*evil", text)  # [a](…) and ![x](…)
    found += re.findall(r"(?i)<\s*(?:img|a)\b[^>]*evil|<b>x</b>", text)  # the payload's tags, raw (entities are text)
    plain = re.sub(r"\\(.)", r"\1", text)  # what the renderer reads as text
    found += _AUTOLINK.findall(plain)
    return found


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
# the helper itself


@pytest.mark.parametrize("payload", PAYLOADS)
def test_md_leaves_no_live_link(payload):
    s = escape.md(payload)
    assert live_links(s) == [], (payload, s)
    assert live_links(payload), "the checker sees the raw payload as live"  # it would catch the bug


def test_md_keeps_the_text_readable():
    s = escape.md(BARE)
    assert s.replace("\\", "").replace(escape.WJ, "") == BARE  # only invisible joiners and escapes added
    assert widgets.md is escape.md and widgets.code is escape.code  # one helper, under the names pages use


def test_plot_shows_tags_as_text():
    assert escape.plot("<b>x</b> & <br>") == "&lt;b&gt;x&lt;/b&gt; &amp; &lt;br&gt;"
    assert escape.plot_all(["<i>", ["<br>", 3]]) == ["&lt;i&gt;", ["&lt;br&gt;", 3]]


def test_a_coded_error_escapes_its_values_not_its_sentence():
    e = pair.PairError("answer_tokens", which="answer", text=LINK, n=14, pieces=IMAGE)
    assert live_links(e.text("en")), "the plain sentence (the CLI's) is the raw text"
    for lang in ("en", "zh"):
        assert live_links(e.markdown(lang)) == [], e.markdown(lang)
    nested = ModelLoadError("refused", parts=[Phrase("load.part_names_more", {"names": BARE, "more": 1})])
    assert live_links(nested.markdown("en")) == []


# ---------------------------------------------------------------------------------------------
# figure builders: token text and page-given labels never carry a tag

TOKS = ["<b>", "bold", "</b>", "<br>", "<i>", "&amp;"]


def _no_tag(fig, what: str) -> None:
    text = json.dumps(json.loads(fig.to_json()), ensure_ascii=False)
    for tag in ("<b>", "</b>", "<i>"):
        assert tag not in text, (what, tag)
    assert "&lt;b&gt;" in text, what


def test_builders_escape_token_labels():
    import numpy as np

    from core.cause import figures as cf
    from core.gen import figures as gf
    from core.inside import figures as inf
    from core.learn import figures as lf
    from core.maths import figures as mf
    from core.stream import figures as sf

    T = len(TOKS)
    w = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
    labels = [f"{i}·{t}" for i, t in enumerate(TOKS)]
    figs = {
        "pca": inf.fig_pca(TOKS, np.random.default_rng(0).normal(size=(T, 2)), np.array([0.5, 0.3]), "en"),
        "single_map": inf.fig_single_map(w, TOKS, "t", "en"),
        "query_bars": inf.fig_query_bars(w[-1], TOKS, T - 1, "en"),
        "context": inf.fig_context([np.ones(3), np.ones(3)], TOKS[:2], np.ones(3), "en"),
        "patch_grid": cf.fig_patch_grid(np.zeros((2, T)), np.zeros((2, T)), TOKS, "t", "en"),
        "attribution": cf.fig_attribution(TOKS, np.ones(T), np.ones(T), np.ones(T), 8, 0, "en"),
        "top_tokens": cf.fig_top_tokens([{"token": "<b>", "p": 0.5, "logit": 1.0, "id": 1}], [], 1, 2, "en"),
        "candidates": gf.candidates(TOKS, np.ones(T) / T, np.ones(T) / T, 0, "en"),
        "attention_row": gf.attention_row(w[-1], TOKS, 3, "t", "en"),
        "prefill_matrix": gf.prefill_matrix(w, TOKS, "t", "en"),
        "matrix": mf.matrix_figure(w, "t", labels, labels, "en"),
        "weights": mf.weights_figure(w, w == 0, "t", labels, labels, "en"),
        "compare_row": mf.compare_row_figure(w[-1], w[-1], labels, "en"),
        "stream_norms": sf.fig_stream_norms(np.ones((3, T)), TOKS, "en"),
        "lens": sf.fig_logit_lens(np.zeros((2, T), int), np.ones((2, T)) / 2, TOKS * 2, TOKS, "en"),
        "lens_candidates": sf.fig_candidates({"keep": np.ones(T, bool), "probs": np.ones(T), "probs_before": np.ones(T)}, TOKS,
                                             list(range(T)), "en"),
        "top_probs": lf.top_probs_figure(TOKS, [1 / T] * T, lambda k: k),
    }
    for name, fig in figs.items():
        _no_tag(fig, name)


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
