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

from core.cause import pair
from core.common import escape
from core.engine.types import ModelLoadError, Phrase
from core.web import widgets

LINK = "[Claim your grade](https://evil.example/login)"
IMAGE = "![x](https://evil.example/pixel.png)"
BARE = "https://evil.example/a"
WWW = "www.evil.example"
EMAIL = "victim@evil.example"
HTML = "<b>x</b><img src=https://evil.example/i.png>"
PAYLOADS = (LINK, IMAGE, BARE, WWW, EMAIL, HTML)


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
