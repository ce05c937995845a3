"""Long prompts: the byte-bounded cache, what a map figure draws (averaged overview or exact window),
the long-document presets and their planted facts, and the long-context page on a ~3,000-token
document (figures stay small, the exact last-row weights are what is drawn)."""

from __future__ import annotations

import threading
import time

import floats
import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from conftest import ROOT, title_of
from core import backends
from core.common.memo import ByteLRU
from core.inside import longctx
from core.learn import long_docs
from core.plot import attnview

APP = str(ROOT / "app.py")


class _Blob:
    def __init__(self, n: int) -> None:
        self.nbytes = n


# ---------------------------------------------------------------------------------------------
# the byte-bounded cache


def test_byte_lru_evicts_by_bytes_least_recently_used_first():
    c = ByteLRU(100)
    for k in "abcd":
        c.get(k, lambda: _Blob(30))
    assert c.stats()["bytes"] == 90 and len(c) == 3
    assert "a" not in c and all(k in c for k in "bcd")
    c.get("b", lambda: _Blob(30))  # b becomes the most recent
    c.get("e", lambda: _Blob(30))
    assert "c" not in c and "b" in c and c.total <= 100
    big = c.get("huge", lambda: _Blob(1000))  # bigger than the budget: returned, not kept
    assert big.nbytes == 1000 and "huge" not in c and c.total <= 100


def test_byte_lru_computes_a_key_once_for_concurrent_callers():
    c = ByteLRU(10**6)
    calls = []

    def slow():
        calls.append(1)
        time.sleep(0.2)
        return _Blob(10)

    out = []
    threads = [threading.Thread(target=lambda: out.append(c.get("k", slow))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(out) == 6 and all(o is out[0] for o in out)


def test_byte_lru_waiting_callers_see_the_computing_callers_progress():
    """A second session asking for a sweep already running sees that sweep's progress (not a frozen
    page), the first session its own bar as before; the progress is forgotten once the value is in."""
    c = ByteLRU(10**6)
    seen_by_waiter: list[tuple[int, int]] = []
    mine: list[tuple[int, int]] = []
    waiter_saw = {i: threading.Event() for i in (1, 2)}
    started = threading.Event()

    def waiter_progress(done, total, _words=None):
        seen_by_waiter.append((done, total))
        waiter_saw[done].set()

    def compute():
        report = c.reporter("k", lambda d, n, _w=None: mine.append((d, n)))
        started.set()
        for i in (1, 2):
            report(i, 3)
            assert waiter_saw[i].wait(10), f"the waiting caller never saw {i} of 3"
        report(3, 3)
        return _Blob(7)

    out = {}
    first = threading.Thread(target=lambda: out.setdefault("first", c.get("k", compute)))
    first.start()
    assert started.wait(10)
    second = threading.Thread(target=lambda: out.setdefault("second", c.get("k", lambda: _Blob(99), waiter_progress)))
    second.start()
    first.join(20)
    second.join(20)
    assert not first.is_alive() and not second.is_alive()
    assert out["first"] is out["second"] and out["first"].nbytes == 7  # computed once
    assert seen_by_waiter[:2] == [(1, 3), (2, 3)] and mine == [(1, 3), (2, 3), (3, 3)]
    assert not c._progress  # nothing left behind for the next computation of the key


def test_byte_lru_retries_after_a_failed_computation():
    c = ByteLRU(100)
    with pytest.raises(RuntimeError):
        c.get("k", lambda: (_ for _ in ()).throw(RuntimeError("boom")))
    assert c.get("k", lambda: _Blob(5)).nbytes == 5


# ---------------------------------------------------------------------------------------------
# what a map figure draws


def _f32_mean_bound(x: np.ndarray) -> float:
    """How far a float32 mean of the float64 values ``x`` (each rounded to float32, summed and divided,
    the result stored as float32) lies from their float64 mean: γ_{n+2} of mean|x|, + the float64 mean's
    own γ_n."""
    m = float(np.abs(x).mean())
    return float(floats.sum_bound(m, x.size + 2, routes=1) + floats.sum_bound(m, x.size, u=floats.U64, routes=1))


def _causal(T: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    w = np.tril(rng.random((T, T)))
    return w / w.sum(-1, keepdims=True)


def test_overview_is_exact_when_short_and_block_means_when_long():
    w = _causal(40)
    v = attnview.overview(w)
    assert v.exact and v.whole and np.array_equal(v.z, w.astype(np.float32))
    w = _causal(200)
    v = attnview.overview(w, cells=64)
    assert v.block == 4 and v.n == 50 and not v.exact
    floats.assert_within(v.z[3, 2], w[12:16, 8:12].mean(), _f32_mean_bound(w[12:16, 8:12]), what="a block's mean", why="a float32 mean")
    assert v.span(49) == (196, 199)


def test_overview_last_partial_block_averages_what_it_holds():
    w = _causal(130)
    v = attnview.overview(w, cells=64)  # block 3: 44 cells, the last one covers positions 129 only
    assert v.block == 3 and v.n == 44
    floats.assert_within(v.z[43, 43], w[129, 129], _f32_mean_bound(w[129:130, 129]), what="the 1 × 1 corner", why="a float32 copy")
    floats.assert_within(v.z[43, 0], w[129, 0:3].mean(), _f32_mean_bound(w[129, 0:3]), what="a 1 × 3 block", why="a float32 mean")


def test_window_is_exact_and_clamped():
    w = _causal(300)
    v = attnview.view(w, start=290, cells=64)
    assert v.exact and v.start == 236 and v.n == 64
    np.testing.assert_array_equal(v.z, w[236:300, 236:300].astype(np.float32))


# ---------------------------------------------------------------------------------------------
# long-context numbers


def test_pooled_keys_sum_to_the_row():
    rows = np.random.default_rng(1).random((3, 2, 1000))
    z, b = longctx.pooled_keys(rows, cells=256)
    assert b == 4 and z.shape == (3, 2, 250)
    # float64 sums of the same 1000 positive terms in two orders (by blocks, or along the row): ≤ 2γ_1000 Σ
    floats.assert_within(z.sum(-1), rows.sum(-1), floats.sum_bound(rows.sum(-1), 1000, u=floats.U64), what="pooled rows' totals",
                         why="two float64 summation orders")
    floats.assert_within(longctx.span_mass(rows, 10, 19)[1, 1], rows[1, 1, 10:20].sum(), floats.sum_bound(rows[1, 1, 10:20].sum(), 10, u=floats.U64),
                         what="span mass", why="two float64 summation orders")
    assert longctx.uniform_share(10, 19, 1000) == 0.01  # 10 / 1000, correctly rounded: the double nearest 0.01


def test_reader_map_colours_are_not_streamlit_placeholders():
    """Streamlit's frontend swaps the colours #000001 … #000040 (its theme placeholders) for theme colours in
    every figure; Magma's darkest stop "#000004" became a pale pink, so the strongest weights of the
    reader map looked washed out. The map's scale keeps Magma, with pure black as its darkest stop."""
    from plotly.colors import get_colorscale

    from core.inside import figures as inside_fig
    from core.inside.figures import _PLACEHOLDER

    z = np.zeros((3, 8))
    z[:, 0] = [0.2, 0.5, 0.85]  # the first-token sink: the map's largest weights
    tr = inside_fig.fig_reader_map(z, 1, 8, None, "en").data[0]
    colours = [c for _, c in tr.colorscale]
    assert not [c for c in colours if _PLACEHOLDER.fullmatch(c)], colours
    assert tr.reversescale and colours[0] == "#000000"  # reversed: black marks the largest weight
    assert colours[1:] == [c for _, c in get_colorscale("Magma")][1:]  # otherwise Magma as it is
    assert _PLACEHOLDER.fullmatch(get_colorscale("Magma")[0][1])  # the trap this guards against


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


# ---------------------------------------------------------------------------------------------
# issue 14 item 12: every attention figure and the token chips stay readable on a long prompt


def _row(T: int, seed: int = 0) -> np.ndarray:
    w = np.random.default_rng(seed).random(T) ** 8  # a few strong keys among many weak ones
    return w / w.sum()


def _toks(T: int) -> list[str]:
    return [f"t{i}" for i in range(T)]


def test_row_bars_overview_sums_blocks_and_a_window_is_exact():
    from core.engine.tokens import position_label

    row, toks = _row(3000), _toks(3000)
    rb = attnview.row_bars(row, lambda p: position_label(toks, p))
    b = rb.view.block
    assert rb.view.summed and len(rb.x) <= attnview.CELLS and rb.tickvals is None  # the axis numbers itself
    # summed blocks: the bars still add up to the row. Each bar is a float64 block sum stored as float32 (u of
    # itself), summed here in float32 (γ_n of the total); the row itself sums to 1 up to float64's rounding
    floats.assert_within(rb.y.sum(), 1.0, floats.sum_bound(1.0, len(rb.y) + 1, routes=1) + floats.sum_bound(1.0, len(row) + 2, u=floats.U64, routes=1),
                         what="the bars' total", why="float32 bars summed in float32")
    s = row[b : 2 * b].sum()
    floats.assert_within(rb.y[1], s, floats.U32 * s + floats.sum_bound(s, b, u=floats.U64), what="a bar", why="a float64 sum stored as float32")
    k = int(np.argmax(row[:b]))
    assert rb.hover[0] == f"keys 0–{b - 1}; strongest: {k}·t{k} ({row[k]:.3f})"  # hover: the block and its strongest key
    assert "all 3000 keys" in rb.note
    rb = attnview.row_bars(row, lambda p: position_label(toks, p), start=1000)
    assert rb.view.exact and rb.first[0] == 1000 and len(rb.x) == attnview.CELLS
    np.testing.assert_array_equal(rb.y, row[1000:1064].astype(np.float32))  # the window's values are the row's slice
    assert rb.hover == [f"{p}·t{p}" for p in range(1000, 1064)]  # every bar's token in the hover …
    assert len(rb.ticktext) <= attnview.TICKS and rb.ticktext[0] == "1000·t1000"  # … every k-th on the axis
    assert f"{1 - row[1000:1064].sum():.3f}" in rb.note  # the weight outside the window is said
    short = attnview.row_bars(row[:40] / row[:40].sum(), lambda p: f"k{p}")
    assert short.view.exact and short.view.whole and short.note == "" and len(short.x) == 40


def test_strip_averages_columns_and_tick_index_thins():
    x = np.random.default_rng(2).random((9, 3000))
    v = attnview.strip(x, how="mean")
    assert v.z.shape == (9, 64) and v.block == 47 and not v.summed and v.line  # ceil(3000 / 64) positions a column
    # a float64 mean of each block stored as float32: u of itself, + two float64 means' γ_n
    for col, block in ((2, x[:, 94:141]), (63, x[:, 2961:])):  # 63: the last, partial block: what it holds
        m = block.mean(-1)
        floats.assert_within(v.z[:, col], m, floats.U32 * np.abs(m) + floats.sum_bound(np.abs(block).mean(-1), block.shape[-1] + 1, u=floats.U64),
                             what=f"strip column {col}", why="a float64 mean stored as float32")
    assert "each column = mean of 47 positions" in attnview.note(v, "en")
    w = attnview.strip(x, start=5000, how="mean")  # clamped to the last full window
    assert w.start == 3000 - 64 and np.array_equal(w.z, x[:, -64:].astype(np.float32))
    assert attnview.tick_index(64, 24) == list(range(0, 64, 3)) and attnview.tick_index(10, 24) == list(range(10))


def test_long_row_figures_draw_few_bars_and_label_every_kth():
    from core.gen import figures as gen_fig
    from core.inside import figures as inside_fig
    from core.maths import figures as PM

    T, row, toks = 3000, _row(3000), _toks(3000)
    fig = inside_fig.fig_query_bars(row, toks, T - 1, "en")  # the heads page's one-query chart
    assert len(fig.data[0].x) <= attnview.CELLS and "Overview of all 3000 keys" in fig.layout.title.text
    fig = inside_fig.fig_query_bars(row, toks, T - 1, "zh", start=2000)
    np.testing.assert_array_equal(fig.data[0].y, row[2000:2064].astype(np.float32))
    assert len(fig.layout.xaxis.ticktext) <= attnview.TICKS and list(fig.data[0].customdata)[5] == "2005·t2005"
    fig = gen_fig.attention_row(row, toks, 2990, "t", "en")  # the stepper's attention row
    assert len(fig.data[0].x) <= attnview.CELLS and fig.data[0].marker.color[-1] == gen_fig.PALETTE["decode"]
    fig = gen_fig.attention_row(row, toks, 2990, "t", "en", start=2936)
    np.testing.assert_array_equal(fig.data[0].y, row[2936:].astype(np.float32))
    assert len(fig.layout.xaxis.ticktext) <= 12 and fig.data[0].marker.color[0] == gen_fig.PALETTE["prefill"]
    labels = [f"k{i}·t{i}" for i in range(T)]
    fig = PM.compare_row_figure(row, row, labels, "en", start=64)  # the calculator's real row
    assert all(len(d.x) == 64 for d in fig.data) and fig.data[1].customdata[0] == "k64·t64"
    assert len(fig.layout.xaxis.ticktext) <= attnview.TICKS


def test_long_map_figures_average_or_window_and_hover_every_cell():
    from core.gen import figures as gen_fig
    from core.maths import figures as PM

    w, toks = _causal(200), _toks(200)
    fig = gen_fig.prefill_matrix(w, toks, "t", "en")  # the stepper's prefill matrix: averaged overview
    z = np.asarray(fig.data[0].z)
    assert z.shape == (50, 50) and "each cell = mean of 4 × 4" in fig.layout.title.text
    fig = gen_fig.prefill_matrix(w, toks, "t", "en", start=50)
    exact, future = w[50:114, 50:114].astype(np.float32), np.triu(np.ones((64, 64), dtype=bool), 1)
    assert (exact[future] == 0).all()  # what the causal mask hides is exactly 0 …
    np.testing.assert_array_equal(np.asarray(fig.data[0].z, dtype=np.float32), np.where(future, np.nan, exact))  # … and drawn blank (NaN)
    assert fig.data[0].customdata[0][1] == "50·t50 → 51·t51" and len(fig.layout.xaxis.ticktext) <= 12
    norms = np.random.default_rng(3).random((9, 64))  # the multi-head page's [H, positions] map
    fig = PM.matrix_figure(norms, "n", [f"h{h}" for h in range(9)], [f"{p}·t{p}" for p in range(64)], "en",
                           xlabel_key="ui.position", ylabel_key="ui.head", note="Exact values")
    assert len(fig.layout.xaxis.ticktext) <= attnview.TICKS and len(fig.layout.yaxis.ticktext) == 9
    assert fig.data[0].customdata[2][63] == "h2 → 63·t63" and "Exact values" in fig.layout.title.text.split("<br>")[1]


def test_chip_pages_keep_positions_and_edge_characters():
    from core.engine.tokens import window
    from core.web import chips

    assert chips.page_bounds(3184, 0) == (0, 256) and chips.page_bounds(3184, 3100) == (3100, 3184)
    assert chips.page_bounds(3184, 99999) == (3183, 3184)
    pieces = ["a", "⟨E8⟩", "⟨8B⟩", "⟨B9⟩", "b"]  # 苹 = E8 8B B9, cut by a page starting at position 2
    html = chips.chips_html(window(pieces, 2, 5), positions=True, start=2)
    assert "<sub>2</sub>" in html and "<sub>0</sub>" not in html and "苹" in html


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


def test_toy_heatmaps_label_every_kth_position_and_hover_every_cell():
    from core.toy import figures as toy_fig

    T = 40
    toks = np.array([f"w{i}" for i in range(T)], dtype=object)
    fig = toy_fig.fig_pattern(np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None], toks, "pattern")
    assert len(fig.layout.xaxis.ticktext) <= toy_fig.TOY_TICKS and len(fig.layout.yaxis.ticktext) <= toy_fig.TOY_TICKS
    assert fig.data[0].customdata[7][31][0].endswith("w7") and fig.data[0].customdata[7][31][1].endswith("w31")


def test_toy_figures_keep_their_titles_and_plain_log_ticks():
    """issue 14: the live-training pattern's title was cut at the figure's right edge; the word-order
    figure's log axis read '1μ … 100μ … 0.01'."""
    from core.common.i18n import t
    from core.toy import figures as toy_fig

    for lang in ("en", "zh"):
        title = t("toy.live_pattern", lang, step=15, head=3)
        fig = toy_fig.fig_pattern(np.eye(6), [f"w{i}" for i in range(6)], title)
        lines = fig.layout.title.text.split("<br>")
        assert "".join(lines).replace(" ", "") == title.replace(" ", "") and len(lines) >= 2
        assert all(attnview.wrap(x, 44) == [x] for x in lines) and fig.layout.margin.t >= 24 * len(lines)
    rows = [{"position": "none", "causal": False, "pooled_diff": 1e-7, "permuted_diff": 1e-7, "distinguishable": False},
            {"position": "rope", "causal": False, "pooled_diff": 0.03, "permuted_diff": 0.1, "distinguishable": True}]
    y = toy_fig.fig_word_order(rows, "en").layout.yaxis
    assert y.type == "log" and y.exponentformat == "power"
    df = toy_fig.facts_table({"tied_embeddings": True, "n_params": 131584}, {"tied_embeddings": False, "name": "X"}, "zh")
    assert df.iloc[13, 1:].tolist() == [t("toy.yes", "zh"), t("toy.no", "zh")] and df.iloc[15, 1] == "131,584"


def test_calculator_real_row_on_a_long_prompt_shows_a_key_window(smol):
    at = _long_app("attention_lab")
    at.radio(key="attention_lab_preset").set_value("real").run()
    assert not at.exception
    from test_attention_lab import check_page_real_row

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
