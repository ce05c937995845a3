"""Long prompts: the byte-bounded cache, what a map figure draws (averaged overview or exact window),
the long-document presets and their planted facts, and the long-context page on a ~3,000-token
document (figures stay small, the exact last-row weights are what is drawn)."""

from __future__ import annotations

import floats
import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from conftest import ROOT, title_of
from core import backends
from core.inside import longctx
from core.learn import long_docs
from core.plot import attnview

APP = str(ROOT / "app.py")


def test_long_documents_plant_their_fact_once_and_the_span_is_found(smol):
    from core.engine.tokens import encode

    expected = {"en": (80, 99), "zh": (151, 198)}  # measured in assets/long/README.md
    for key in long_docs.KEYS:
        doc = long_docs.load(key)
        assert long_docs.which(doc.text) == key and doc.text.count(doc.fact) == 1
        enc = encode(smol.tokenizer, doc.text)
        assert 2800 <= len(enc.ids) <= 3300
        a, b = long_docs.span_of(smol.tokenizer, enc.text, enc.ids, doc.fact)
        assert (a, b) == expected[key]
        assert doc.fact.strip(" 。.") in smol.tokenizer.decode(enc.ids[a : b + 1])
    assert long_docs.which("hello") is None


def test_the_english_document_is_answered_from_its_planted_fact(smol):
    """SmolLM2 retrieves the fact ~3,100 tokens back (README: ' green' at 0.44), and some heads at the
    last position put far more than a uniform share on the fact's tokens."""
    doc = long_docs.load("en")
    tr = backends.trace(smol, doc.text)
    assert smol.tokenizer.decode([int(tr.last_logits.argmax())]) == " green"
    mass = longctx.span_mass(tr.last_attn, 80, 99)
    assert mass.max() > 20 * longctx.uniform_share(80, 99, tr.n_tokens)


# ---------------------------------------------------------------------------------------------
# the page on a long document


def _chart_bytes(at) -> int:
    return sum(len(c.proto.spec) for c in at.get("plotly_chart"))


def test_long_context_page_on_a_long_document(smol):
    from core.engine.tokens import encode

    at = AppTest.from_file(APP, default_timeout=600)
    at.run()
    at.selectbox(key="preset_pick").set_value("long:en").run()
    assert not at.exception
    assert at.query_params.get("doc") == "en" and "prompt" not in at.query_params  # a link names the document
    at.switch_page("pages/long_context.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    span = next(s for s in at.slider if str(s.key).startswith("longctx_span"))
    enc = encode(smol.tokenizer, long_docs.load("en").text, chat=bool(at.session_state["chat"]))
    assert tuple(span.value) == long_docs.span_of(smol.tokenizer, enc.text, enc.ids, long_docs.load("en").fact)
    assert _chart_bytes(at) < 5e6
    assert any("Each point is the mean over" in c.value for c in at.caption)  # ~3,000 positions: the sink curve is binned
    for stem in ("heads", "masks"):
        at.switch_page(f"pages/{stem}.py")
        at.run()
        assert not at.exception, (stem, [e.value for e in at.exception])
        assert _chart_bytes(at) < 5e6, stem


def test_sink_readout_names_no_binning_when_there_is_none(smol):
    """issue 14: a short prompt's caption read 'Points are means over 1 query positions'."""
    at = AppTest.from_file(APP, default_timeout=600)
    at.switch_page("pages/long_context.py")
    at.run()
    assert not at.exception
    caps = [c.value for c in at.caption]
    assert any("on the first token; the most is layer" in c for c in caps)
    assert not any("mean over 1 query" in c or "means over" in c for c in caps)


# pages on a ~650-token prompt (not a document preset: quicker, and still far past every limit)
LONG_PROMPT = "The quick brown fox jumps over the lazy dog near the river bank. " * 50


def _long_app(page: str, prompt: str = LONG_PROMPT) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=600)
    at.session_state["lang"] = "en"
    at.session_state["prompt"] = prompt
    at.switch_page(f"pages/{page}.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _figs(at) -> list[dict]:
    import json

    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def _chips_drawn(at) -> int:
    """The chips of the prompt (the largest block of chips: the journey also shows its continuation's)."""
    return max(m.value.count('class="xr-chip"') for m in at.markdown)


@pytest.mark.parametrize("page", ["tokens", "journey"])
def test_token_chips_are_paged_on_a_long_prompt(smol, page):
    at = _long_app(page)
    assert _chips_drawn(at) == 256 and any(c.value.startswith("Showing tokens 0–255 of ") for c in at.caption)
    at.number_input(key=f"{page}_chips_start").set_value(256).run()  # the next page
    assert not at.exception and _chips_drawn(at) == 256 and at.query_params.get("chips") == "256"
    assert any("<sub>256</sub>" in m.value for m in at.markdown) and not any("<sub>255</sub>" in m.value for m in at.markdown)
    assert any(c.value.startswith("Showing tokens 256–511 of ") for c in at.caption)


def test_multihead_and_heads_figures_on_a_long_prompt(smol):
    at = _long_app("multihead")
    norms = next(f for f in _figs(at) if "‖head output‖" in title_of(f))
    assert len(norms["data"][0]["x"]) <= attnview.CELLS and "Overview of all" in title_of(norms)
    at.radio(key="multihead_mapmode").set_value("window").run()
    norms = next(f for f in _figs(at) if "‖head output‖" in title_of(f))
    assert len(norms["data"][0]["x"]) == attnview.CELLS and "Exact values of positions" in title_of(norms)
    assert len(norms["layout"]["xaxis"]["ticktext"]) <= attnview.TICKS
    at.switch_page("pages/heads.py")
    at.run()
    assert not at.exception
    bars = next(f for f in _figs(at) if f["data"][0]["type"] == "bar")
    assert len(bars["data"][0]["x"]) <= attnview.CELLS and "Overview of all" in title_of(bars)
    at.radio(key="heads_qwin_mapmode").set_value("window").run()  # the query's row: a window of exact keys
    bars = next(f for f in _figs(at) if f["data"][0]["type"] == "bar")
    assert not at.exception and len(bars["data"][0]["x"]) == attnview.CELLS and at.query_params.get("qwin") is not None


def test_calculator_real_row_on_a_long_prompt_shows_a_key_window(smol):
    at = _long_app("attention_lab")
    at.radio(key="attention_lab_preset").set_value("real").run()
    assert not at.exception
    from helpers.attention_lab import check_page_real_row

    check_page_real_row(at, smol)  # the page's number is the softmax over every key, within float16's rounding of the model's
    k_editor = next(e for e in at.dataframe if "attention_lab_k_" in (e.proto.id or ""))
    assert len(k_editor.value) == attnview.CELLS
    assert any("the softmax runs over all" in c.value for c in at.caption)
    cmp = next(f for f in _figs(at) if f["data"][0]["type"] == "bar")
    assert all(len(d["x"]) == attnview.CELLS for d in cmp["data"]) and "Exact weights of keys" in title_of(cmp)


def test_stepper_attention_figures_on_a_long_prompt(smol):
    at = _long_app("generation", "The quick brown fox jumps over the lazy dog. " * 18)  # ~200 tokens: a prefill matrix is kept
    at.button(key="generation_prefill").click().run()
    assert not at.exception and not at.error
    figs = _figs(at)
    row = next(f for f in figs if f["data"][0]["type"] == "bar" and "over the cache" in title_of(f))
    mat = next(f for f in figs if f["data"][0]["type"] == "heatmap" and "Prefill" in title_of(f))
    assert len(row["data"][0]["x"]) <= attnview.CELLS and len(mat["data"][0]["z"]) <= attnview.CELLS
    at.radio(key="generation_mapmode").set_value("window").run()
    figs = _figs(at)
    row = next(f for f in figs if f["data"][0]["type"] == "bar" and "over the cache" in title_of(f))
    assert len(row["data"][0]["x"]) == attnview.CELLS and len(row["layout"]["xaxis"]["ticktext"]) <= 12


def test_residual_norms_and_toy_sites_stay_small_on_long_prompts(smol):
    """bench_pages found the residual page's norm map (9.4 MB at 3,200 tokens) and the toy's site maps
    (11 MB at 512 tokens) drawing every position: both now draw ≤ 64 columns, exact values in a window."""
    from core.stream import figures as ps
    from core.stream import lens
    from core.toy import figures as toy_fig

    tr = backends.trace(smol, LONG_PROMPT)
    norms = lens.stream_norms(tr)
    n = np.linalg.norm(tr.resid[5, 7].astype(np.float64))
    floats.assert_within(norms[5, 7], n, floats.sum_bound(n, tr.resid.shape[-1] + 2, u=floats.U64), what="a stream norm",
                         why="two float64 routes of a norm (d squares summed, a square root)")
    over = ps.fig_stream_norms(norms, list(tr.tokens), "en")
    assert len(over.data[0].x) <= attnview.CELLS and "mean of" in over.layout.title.text
    win = ps.fig_stream_norms(norms, list(tr.tokens), "en", log=False, start=100)
    floats.assert_within(np.asarray(win.data[0].z, dtype=float), norms[:, 100:164], floats.U32 * norms[:, 100:164],
                         what="the window's norms", why="the figure holds float32 copies")
    assert len(over.to_json()) < 1_000_000
    toy = backends.trace(backends.load_model("toy"), LONG_PROMPT)
    assert toy.n_tokens > attnview.CELLS
    fig = toy_fig.fig_site(toy, "attn_pattern", 0, 0, "en", start=30)
    floats.assert_same(np.asarray(fig.data[0].z, dtype=float), toy.attn_pattern[0, 0, 30:94, 30:94], "the window's weights")
    assert "positions 30–93" in fig.layout.title.text and len(fig.to_json()) < 1_000_000


def test_loss_along_the_document_is_hfs_log_softmax(smol):
    """The measured per-position log p(next token) equals log_softmax of HF's own logits of one forward pass
    (two float32 routes of the LM head's product, each within its allowance A: log p moves by ≤ 2·2A)."""
    tr = backends.trace(smol, "The capital of France is Paris. The capital of Italy is Rome. The capital of Spain is")
    got = backends.next_token_logprob(smol, tr, chunk=5).logp  # chunks that cut the document
    with smol.lock, torch.inference_mode():
        z = smol.model(torch.from_numpy(tr.token_ids)[None]).logits[0].double()
    want = torch.log_softmax(z, -1)[torch.arange(tr.n_tokens - 1), torch.from_numpy(tr.token_ids[1:])].numpy()
    bound = np.array([2 * 2 * floats.head_allowance(smol, tr.final_hidden[t]) for t in range(tr.n_tokens - 1)])
    floats.assert_within(got, want, bound, what="log p(next token)", why="two float32 routes of the LM head's product")
    rows = longctx.loss_table(got, bins=4)
    assert rows[0][0] == 0 and rows[-1][1] == tr.n_tokens - 2
    assert sum(b - a + 1 for a, b, _ in rows) == len(got) and all(x == float(-got[a : b + 1].mean()) for a, b, x in rows)
