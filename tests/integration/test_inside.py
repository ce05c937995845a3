"""Inside the real model: tokens & embeddings, same token in two contexts, attention heads, ablation.

Every number the four pages show is checked here against an independent computation (torch,
a hand-worked example, or a model whose weights were edited by hand)."""

from __future__ import annotations

import json

import floats
import numpy as np
import pytest
import torch
from helpers.inside import _no_hooks, _plain_probs

from conftest import ROOT
from core import backends
from core.engine import roles, tokens
from core.inside import ablation, embeddings, heads

PAGES = ("tokens", "context", "heads", "ablation")

# ---------------------------------------------------------------------------------------------
# embeddings


def _cos_bound(d: int) -> float:
    """How far two float64 routes of the cosine of two d-vectors can lie apart: the dot product is off
    by ≤ γ_d Σ|a·b| ≤ γ_d ‖a‖‖b‖ (Cauchy–Schwarz), each norm by ≤ γ_d/2 + u relative (a sum of d squares,
    a square root), then a product and a division: ≤ γ_{2d+4} on a cosine, per route."""
    return float(floats.sum_bound(1.0, 2 * d + 4, u=floats.U64))


def _pearson_bound(x: np.ndarray, y: np.ndarray, dy: float) -> float:
    """How far two float64 routes of Pearson's r of (x, y) can lie apart when their y differ by ≤ dy
    each. Moving every y by ≤ dy moves the centred y by ≤ 2dy, so S_xy by ≤ 2dy Σ|x−x̄| and S_yy by
    ≤ 4dy Σ|y−ȳ| (first order); each route rounds its centred sums by ≤ γ_n relative to Σ|x−x̄||y−ȳ|
    ≤ √(S_xx S_yy) and to S_xx, S_yy, and its means by ≤ γ_n mean|x|, which the centring turns into
    ≤ γ_n mean|x| / std(x) of r (same for y)."""
    xc, yc = x - x.mean(), y - y.mean()
    sxx, syy = (xc**2).sum(), (yc**2).sum()
    r = abs((xc * yc).sum()) / np.sqrt(sxx * syy)
    moved = 2 * dy * np.abs(xc).sum() / np.sqrt(sxx * syy) + r * 2 * dy * np.abs(yc).sum() / syy
    cond = 1 + np.abs(x).mean() / x.std() + np.abs(y).mean() / y.std()
    return float(moved + floats.sum_bound((1 + r) * cond, len(x) + 4, u=floats.U64))


def test_lookup_is_a_row_of_the_weight_matrix(smol):
    E = embeddings.embedding_matrix(smol)
    W = smol.model.get_input_embeddings().weight
    assert E.shape == (49152, 576) == tuple(W.shape)
    tr = backends.trace(smol, "苹果很好吃。")
    rows = embeddings.lookup(E, tr.token_ids)
    for k, i in enumerate(tr.token_ids):
        np.testing.assert_array_equal(rows[k], W[int(i)].detach().numpy())
    np.testing.assert_array_equal(rows, tr.embeddings)  # what the forward pass saw is exactly E[id]


def test_id_distance_study_matches_torch(smol):
    E = embeddings.embedding_matrix(smol)
    s = embeddings.id_distance_study(E, n_pairs=500, seed=3)
    Et = torch.from_numpy(E).double()
    cos = torch.nn.functional.cosine_similarity(Et[s.id_a], Et[s.id_b], dim=1).numpy()
    d_model = E.shape[1]
    floats.assert_within(s.cosine, cos, _cos_bound(d_model), what="cosines", why="two float64 routes of a cosine")
    assert np.all(s.id_a != s.id_b)
    np.testing.assert_array_equal(s.distance, np.abs(s.id_a - s.id_b))
    d = torch.tensor(s.distance, dtype=torch.float64)
    c = torch.tensor(cos)
    r = ((d - d.mean()) * (c - c.mean())).sum() / torch.sqrt(((d - d.mean()) ** 2).sum() * ((c - c.mean()) ** 2).sum())
    floats.assert_within(s.pearson, float(r), _pearson_bound(d.numpy(), cos, _cos_bound(d_model)), what="Pearson's r",
                         why="two float64 routes, on cosines that differ by two float64 routes")
    ex = torch.nn.functional.cosine_similarity(Et[1023], Et[1024], dim=0).item()
    assert s.example[:2] == (1023, 1024)
    floats.assert_within(s.example[2], ex, _cos_bound(d_model), what="the example's cosine", why="two float64 routes of a cosine")
    # the tutorial's claim, measured: adjacent IDs are not meaningfully more alike than random ones
    assert abs(s.mean_adjacent - s.mean_random) < 0.05
    assert s.example[2] < s.mean_random


def test_word_vectors_and_parse(smol):
    words = embeddings.parse_words(" cat, dog,,苹果\n cat")
    assert words == [" cat", " dog", "苹果"]
    E = embeddings.embedding_matrix(smol)
    vecs = embeddings.word_vectors(smol, E, words)
    assert len(vecs[0].ids) == 1 and vecs[0].ids == tuple(embeddings.word_ids(smol.tokenizer, " cat"))
    floats.assert_same(vecs[0].vector, E[vecs[0].ids[0]], "a one-token word's vector: its row")
    assert len(vecs[2].ids) == 4  # 苹 is three byte tokens, 果 one
    floats.assert_same(vecs[2].vector, E[list(vecs[2].ids)].astype(np.float64).mean(0), "a word's vector: the mean of its rows")


def test_token_sources_chat(smol):
    tok = smol.tokenizer
    enc = tokens.encode(tok, "Hi there 苹果", chat=True)
    src = embeddings.token_sources(tok, enc.text, "Hi there 苹果", enc.ids, chat=True)
    user = [i for i, s in zip(enc.ids, src) if s == "user"]
    assert tok.decode(user) == "Hi there 苹果"
    specials = [i for i, s in zip(enc.ids, src) if s == "special"]
    assert set(specials) == {1, 2} and src.count("template") > 5
    plain = tokens.encode(tok, "Hi there", chat=False)
    assert embeddings.token_sources(tok, plain.text, "Hi there", plain.ids, chat=False) == ["user"] * len(plain.ids)


# ---------------------------------------------------------------------------------------------
# same token, different context


def test_context_similarity_apple(smol):
    a, b, word = embeddings.CONTEXT_PAIRS["zh_ctx"]
    ta, tb = backends.trace(smol, a), backends.trace(smol, b)
    ia, ib = embeddings.default_positions(ta.token_ids, tb.token_ids, embeddings.word_ids(smol.tokenizer, word))
    assert (ia, ib) == (13, 12)  # not the 果 of 水果 at position 4
    assert ta.token_ids[ia] == tb.token_ids[ib] == 43774 and ta.tokens[ia] == "果"
    sim = embeddings.context_similarity(ta.resid, ia, tb.resid, ib)
    assert sim.shape == (31,)
    # same ID → same row of E: the cosine of a vector with itself, Σx² / (√Σx²)², is 1 up to the square
    # root's and the product's rounding (not always exactly: fl(√s)² need not be s)
    self_cos = floats.sum_bound(1.0, 2 * ta.resid.shape[-1] + 4, u=floats.U64, routes=1)
    floats.assert_within(sim[0], 1.0, self_cos, what="layer 0 (the embedding rows)", why="a float64 cosine of a vector with itself")
    ref = torch.nn.functional.cosine_similarity(torch.from_numpy(ta.resid[:, ia]).double(), torch.from_numpy(tb.resid[:, ib]).double(), dim=1)
    floats.assert_within(sim, ref.numpy(), _cos_bound(ta.resid.shape[-1]), what="cosines", why="two float64 routes of a cosine")
    assert sim[-1] < 0.99 and sim[1:].max() < 1.0

    one = backends.trace(smol, embeddings.CONTEXT_PAIRS["zh_one"][0])  # the tutorial's sentence, its two 苹果
    i, j = embeddings.default_positions(one.token_ids, one.token_ids, embeddings.word_ids(smol.tokenizer, "苹果"))
    assert (i, j) == (3, 14)
    s2 = embeddings.context_similarity(one.resid, i, one.resid, j)
    floats.assert_within(s2[0], 1.0, self_cos, what="layer 0 (the embedding rows)", why="a float64 cosine of a vector with itself")
    assert s2[-1] < 0.99


def _eager_stream(ref, ids, dtype: str) -> np.ndarray:
    """HF eager's residual stream of ``ids`` at every block boundary, [L+1, T, d] float64: its
    hidden_states before the final norm, and the final norm's input."""
    seen = {}
    norm = roles.find_sites(ref.model(dtype)).require_final_norm()
    h = norm.register_forward_pre_hook(lambda _m, args: seen.setdefault("x", args[0]))
    try:
        out = ref.run(ids, dtype, output_hidden_states=True)
    finally:
        h.remove()
    return np.stack([*(x[0].double().numpy() for x in out.hidden_states[:-1]), seen["x"][0].double().numpy()])


def test_context_identical_prefix_stays_identical(smol, eager_refs):
    a, b, word = embeddings.CONTEXT_PAIRS["zh_start"]
    ta, tb = backends.trace(smol, a), backends.trace(smol, b)
    ia, ib = embeddings.default_positions(ta.token_ids, tb.token_ids, embeddings.word_ids(smol.tokenizer, word))
    assert embeddings.same_prefix(ta.token_ids, ia, tb.token_ids, ib)
    # causal: 果 has not read 好吃 / 发布 yet: in both traces its stream is that of the shared prefix alone
    # (two traces of different lengths: other matrix shapes, so equal up to float32 rounding)
    ref32, ref64 = (_eager_stream(eager_refs["smollm2"], ta.token_ids[: ia + 1], dt)[:, -1] for dt in ("float32", "float64"))
    for tr, i in ((ta, ia), (tb, ib)):
        floats.assert_as_accurate(tr.resid[:, i], ref32, ref64, what="the stream at the end of the shared prefix")
    # so their cosine is 1 up to that: each vector within the allowance A per entry of the exact x, so
    # ‖x_a − x_b‖ ≤ 2A√d, and 1 − cos ≤ 2‖x_a − x_b‖² / (‖x‖ − A√d)² (‖x/‖x‖ − y/‖y‖‖ ≤ 2‖x − y‖/‖x‖),
    # + the float64 cosine's own rounding
    sim = embeddings.context_similarity(ta.resid, ia, tb.resid, ib)
    d = ref64.shape[-1]
    A = floats.allowed_error(ref32, ref64)
    norm = np.linalg.norm(ref64, axis=-1) - A * np.sqrt(d)
    floats.assert_within(sim, 1.0, 2 * (2 * A * np.sqrt(d)) ** 2 / norm**2 + _cos_bound(d), what="cosine over the shared prefix",
                         why="two float32 routes of one vector, each as accurate as HF's float32 eager route")
    base = embeddings.context_baseline(ta.resid, ia, tb.resid, ib)
    assert base[-1] < sim[-1]


def test_head_atlas_on_real_trace(smol):
    tr = backends.trace(smol, "The cat sat on the mat because it was tired.")
    w = backends.stacked_layers(smol, tr, with_pattern=True)["attn_pattern"].astype(np.float64)
    at = heads.head_atlas_of(iter(w))
    streamed = heads.head_atlas_of(tr.site("attn_pattern", i) for i in range(tr.n_layers))
    for name in ("entropy", "prev_token", "first_token", "max_weight"):  # the same weights through the same per-layer code
        floats.assert_same(getattr(streamed, name), getattr(at, name), f"the streamed atlas's {name}")
    l, h, T = 5, 4, tr.n_tokens
    assert at.prev_token[l, h] == np.mean([w[l, h, i, i - 1] for i in range(1, T)])  # the same numbers, the same mean
    assert at.first_token[l, h] == w[l, h, 1:, 0].mean()
    assert at.entropy.shape == (30, 9) and (at.entropy >= 0).all()
    assert heads.top_heads(at.prev_token, 1)[0][2] == at.prev_token.max()  # the value itself, read back
    assert at.first_token.max() > 0.5  # SmolLM2 has strong first-token sinks


def _logit_allowance(ref, ids) -> float:
    """How far a float32 route may lie from the exact next-token logits of ``ids``: ``floats.assert_as_accurate``'s
    allowance (ROUTE_FACTOR × HF's float32 eager route's distance from its float64 twin + one float32
    rounding of the largest logit), measured on the unablated run: an ablated run is the same network
    with one head's output zeroed."""
    z32, z64 = (ref.run(ids, dt).logits[0, -1].double().numpy() for dt in ("float32", "float64"))
    return floats.allowed_error(z32, z64)


def _kl_rounding(p: np.ndarray, q: np.ndarray) -> float:
    """One float64 route's rounding of KL(p ‖ q) = Σ p (log p − log q) over V terms: each log off by
    ≤ 2u |log| (libm's ulp), the subtraction and product by u each, the sum by γ_V Σ |term|."""
    m = p > 0
    lp, lq = np.log(p[m]), np.log(np.maximum(q[m], 1e-300))
    terms = np.abs(p[m] * (lp - lq))
    return float(2 * floats.U64 * (p[m] * (np.abs(lp) + np.abs(lq))).sum() + floats.sum_bound(terms.sum(), m.sum() + 2, u=floats.U64, routes=1))


def test_ablating_nothing_changes_nothing(smol):
    ids = tokens.encode(smol.tokenizer, "What is the capital of France?").ids
    p = ablation.next_token_probs(smol, ids, [])
    np.testing.assert_array_equal(p, _plain_probs(smol.model, ids))
    assert _no_hooks(smol.model)


def test_ablated_head_slice_is_zero_and_others_untouched(smol):
    ids = tokens.encode(smol.tokenizer, "苹果很好吃。").ids
    layer, head, dh = 3, 4, 64
    o = roles.find_sites(smol.model).attns[layer].o_proj
    seen = {}

    def grab(name):
        def pre(_m, args):
            seen[name] = args[0].clone()
        return pre

    with torch.inference_mode():
        h = o.register_forward_pre_hook(grab("plain"))
        try:
            smol.model(input_ids=torch.tensor([ids]), use_cache=False)
        finally:
            h.remove()
        with ablation.zero_heads(smol, [(layer, head)]):
            h = o.register_forward_pre_hook(grab("ablated"))  # runs after the zeroing hook
            try:
                smol.model(input_ids=torch.tensor([ids]), use_cache=False)
            finally:
                h.remove()
    x0, x1 = seen["plain"][0], seen["ablated"][0]  # [T, H*dh]
    sl = slice(head * dh, (head + 1) * dh)
    assert x0[:, sl].abs().sum() > 0 and torch.all(x1[:, sl] == 0)
    keep = torch.ones(x0.shape[-1], dtype=torch.bool)
    keep[sl] = False
    assert torch.equal(x0[:, keep], x1[:, keep])  # layers before are untouched, so are other heads
    assert _no_hooks(smol.model)


def test_sweep_equals_single_ablations_and_effect(tiny_loaded, eager_refs):
    loaded = tiny_loaded["llama"]
    ids = tokens.encode(loaded.tokenizer, "The cat sat on the mat.").ids
    sw = ablation.sweep_heads(loaded, ids, [0, 2], chunk=5)  # chunk 5 splits a layer: rows must still line up
    assert sw.shape == (2, loaded.facts.n_heads, loaded.facts.vocab_size)
    # batched vs one at a time: two float32 routes of the logits, each within the allowance A of the exact
    # ones, so ≤ 2A apart; a softmax moves log p by ≤ twice that (+ its own float64 rounding)
    moved = np.expm1(2 * 2 * _logit_allowance(eager_refs["llama"], ids)) + 2 * floats.gamma(loaded.facts.vocab_size + 4, floats.U64)
    for li, layer in enumerate([0, 2]):
        for h in range(loaded.facts.n_heads):
            single = ablation.next_token_probs(loaded, ids, [(layer, h)])
            floats.assert_within(sw[li, h], single, np.maximum(sw[li, h], single) * moved, what=f"head {layer}.{h} swept vs alone",
                                 why="softmax of two float32 routes of the logits")
    before = ablation.next_token_probs(loaded, ids)
    after = sw[1, 3]
    e = ablation.effect(before, after)
    kl = torch.nn.functional.kl_div(torch.tensor(after).log(), torch.tensor(before), reduction="sum").item()
    floats.assert_within(e.kl, kl, 2 * _kl_rounding(before, after), what="KL", why="two float64 routes of the KL sum")
    assert e.top_id == int(before.argmax()) and e.delta == after[e.top_id] - before[e.top_id]  # the same subtraction
    assert _no_hooks(loaded.model)


# ---------------------------------------------------------------------------------------------
# pages


def _app(stem: str, lang: str):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.session_state["lang"] = lang
    at.switch_page(f"pages/{stem}.py")
    at.run()
    return at


def _arr(v) -> np.ndarray:
    """A plotly array from a figure spec: a list, or a typed array {dtype, bdata (base64)}."""
    if isinstance(v, dict) and "bdata" in v:
        import base64

        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"])).astype(float)
    return np.asarray(v, dtype=float)


def _figs(at) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("stem", PAGES)
def test_pages_render(smol, stem, lang):
    at = _app(stem, lang)
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    assert len(at.get("plotly_chart")) >= 1
    text = " ".join(m.value for m in at.markdown)
    assert ("模型" in text or "注意力" in text or "Token" in text) if lang == "zh" else "the" in text
    assert "⟦" not in text  # no missing i18n key
    caps = " ".join(c.value for c in at.caption)
    assert ("数字来自真实模型" if lang == "zh" else "numbers from the real model") in caps


def test_context_page_numbers(smol):
    at = _app("context", "en")
    assert at.metric[0].value == "1.000"  # 3 decimals like the other two metrics
    assert all(len(m.value.split(".")[-1]) == 3 for m in at.metric)
    fig = _figs(at)[0]
    y = _arr(fig["data"][0]["y"])
    floats.assert_within(y[0], 1.0, floats.sum_bound(1.0, 2 * smol.facts.d_model + 4, u=floats.U64, routes=1), what="layer 0",
                         why="a float64 cosine of a vector with itself")
    assert y.min() < 0.99 and len(y) == 31


def test_heads_page_grid_and_jump(smol):
    at = _app("heads", "en")
    grid = _figs(at)[0]
    titles = [a["text"] for a in grid["layout"]["annotations"]]
    assert titles[:4] == ["h0 · KV0", "h1 · KV0", "h2 · KV0", "h3 · KV1"] and len(grid["data"]) == 9
    pick = at.selectbox(key="heads_jump_pick").value
    at.button(key="heads_jump_btn").click().run()
    assert not at.exception
    assert (at.slider(key="heads_layer").value, at.slider(key="heads_head").value) == (pick[0], pick[1])


def test_ablation_page_sweep_matches_core(smol, eager_refs):
    at = _app("ablation", "en")
    fig = _figs(at)[1]
    kl_page = _arr(fig["data"][0]["y"])
    ids = tokens.encode(smol.tokenizer, "What is the capital of France?", chat=True).ids  # the chat template is on by default
    before = ablation.next_token_probs(smol, ids)
    after = ablation.next_token_probs(smol, ids, [(0, 5)])
    # the page ablates the layer's heads in one batch, this run alone: two float32 routes of the logits,
    # ≤ 2A apart, so log(after) moves by ≤ 4A and KL(before ‖ after) = Σ before·(log before − log after)
    # by ≤ 4A (Σ before = 1); the page's "before" is this very computation; + each KL's float64 rounding
    bound = 4 * _logit_allowance(eager_refs["smollm2"], ids) + 2 * _kl_rounding(before, after)
    floats.assert_within(kl_page[5], ablation.kl_divergence(before, after), bound, what="the page's KL of head 0.5",
                         why="two float32 routes of the ablated logits")


def test_pages_on_a_tiny_local_model_with_full_sweep(tiny_dirs, monkeypatch):
    """A local model the operator offers (tiny Llama): every page renders, and the all-heads sweep matches core."""
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("XRAY_MODELS", f"tiny-llama={tiny_dirs['llama']}")  # links name offered ids, never paths
    for stem in PAGES:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
        at.query_params["model"] = "tiny-llama"
        at.switch_page(f"pages/{stem}.py")
        at.run()
        assert not at.exception and not at.error, (stem, at.exception, [e.value for e in at.error])
    at.toggle(key="ablation_all").set_value(True).run()
    assert not at.exception
    kl_all = _arr(_figs(at)[2]["data"][0]["y"])
    assert kl_all.shape == (3 * 6,) and (kl_all >= 0).all() and kl_all.max() > 0


def test_tokens_page_chat_template_zh(smol):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.session_state["lang"] = "zh"
    at.session_state["chat"] = True
    at.session_state["prompt"] = "苹果<b>很好吃</b>"
    at.switch_page("pages/tokens.py")
    at.run()
    assert not at.exception and not at.error
    chips = next(m.value for m in at.markdown if m.value.startswith("<div"))
    assert "&lt;" in chips and "<b>" not in chips and "</b>" not in chips  # markup shown, never rendered
    assert chips.count("特殊 Token") >= 5  # <|im_start|> ×3, <|im_end|> ×2
    assert "对话模板" in " ".join(i.value for i in at.info)


# ---------------------------------------------------------------------------------------------
# issue 14: widgets that keep their state, links that reopen the view, the whole word, readable maps


def _heads_app(lang: str = "en", **qp):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.session_state["lang"] = lang
    for k, v in qp.items():
        at.query_params[k] = v
    at.switch_page("pages/heads.py")
    at.run()
    return at


def _qp(at, name):
    v = at.query_params.get(name)
    return v[0] if isinstance(v, list) else v


def test_heads_go_to_head_moves_the_sliders_in_the_browser_too(smol):
    """"Go to head" must tell the browser to move the sliders (set_value), not only the server: a
    slider that still shows 0 would send 0 back on the next nudge and jump elsewhere."""
    at = _heads_app()
    at.radio(key="heads_metric").set_value("first_token").run()
    pick = at.selectbox(key="heads_jump_pick").value
    at.button(key="heads_jump_btn").click().run()
    layer, head = at.slider(key="heads_layer"), at.slider(key="heads_head")
    assert (layer.value, head.value) == (pick[0], pick[1])
    assert layer.proto.set_value and head.proto.set_value  # the browser is told the new value
    assert (_qp(at, "layer"), _qp(at, "head")) == (str(pick[0]), str(pick[1]))
    assert at.radio(key="heads_mode").value == "layer" and at.radio(key="heads_metric").value == "first_token"
    at.slider(key="heads_head").set_value((pick[1] + 1) % 9).run()  # the next nudge moves from the head we went to
    assert at.slider(key="heads_layer").value == pick[0]


def test_heads_show_mode_and_metric_survive_a_language_switch_and_relabelling(smol):
    """Streamlit remembers a radio's choice by its label; the labels here name the layer and change
    language, so the page holds the choice and gives it back (and the browser is told)."""
    at = _heads_app()
    at.radio(key="heads_mode").set_value("head").run()
    at.toggle(key="heads_hide").set_value(True).run()
    at.radio(key="heads_metric").set_value("entropy").run()
    at.slider(key="heads_layer").set_value(4).run()  # relabels the mode options ("… layer 4")
    assert at.radio(key="heads_mode").value == "head" and at.radio(key="heads_mode").proto.set_value
    at.session_state["lang"] = "zh"
    at.run()
    assert not at.exception
    assert at.radio(key="heads_mode").value == "head" and at.toggle(key="heads_hide").value is True
    assert at.radio(key="heads_metric").value == "entropy" and at.radio(key="heads_mode").proto.set_value
    assert (_qp(at, "show"), _qp(at, "hide"), _qp(at, "metric")) == ("head", "1", "entropy")


def test_heads_link_reopens_the_view_and_bad_values_are_dropped(smol):
    at = _heads_app(layer="7", head="2", show="head", hide="1", metric="prev_token", pos="3")
    assert not at.exception
    assert (at.slider(key="heads_layer").value, at.slider(key="heads_head").value) == (7, 2)
    assert at.radio(key="heads_mode").value == "head" and at.toggle(key="heads_hide").value is True
    assert at.radio(key="heads_metric").value == "prev_token" and at.slider(key="heads_q").value == 3
    at = _heads_app(layer="999", head="-4", show="<script>", hide="yes", metric="nope", pos="x")
    assert not at.exception and not at.error
    assert (at.slider(key="heads_layer").value, at.slider(key="heads_head").value) == (29, 0)  # clamped
    assert at.radio(key="heads_mode").value == "layer" and at.toggle(key="heads_hide").value is False  # dropped
    assert at.radio(key="heads_metric").value == heads.METRICS[0] and _qp(at, "show") == "layer"


def test_context_follows_every_token_of_the_word(smol):
    """苹果 is four tokens in SmolLM2 (苹 = three bytes, then 果): the page follows all of them."""
    at = _app("context", "en")
    assert not at.exception
    wid = embeddings.word_ids(smol.tokenizer, "苹果")
    assert len(wid) == 4 and at.slider(key="context_n_zh_one").value == 4
    fig = _figs(at)[0]
    curves = [d for d in fig["data"] if d.get("mode") == "lines+markers"]
    assert [d["name"] for d in curves] == ["0·苹‹E8› | 11·苹‹E8›", "1·苹‹8B› | 12·苹‹8B›", "2·苹‹B9› | 13·苹‹B9›", "3·果 | 14·果"]
    one = backends.trace(smol, embeddings.CONTEXT_PAIRS["zh_one"][0])
    for (i, j), d in zip(embeddings.follow_pairs(3, 14, 4), curves):
        floats.assert_same(_arr(d["y"]), embeddings.context_similarity(one.resid, i, one.resid, j), "a followed token's curve")
    table = at.dataframe[0].value  # the table of every followed token comes first
    assert len(table) == 4  # same ids → same embedding rows: each cosine 1 up to a float64 cosine's rounding
    floats.assert_within(table.iloc[:, 2].to_numpy(dtype=float), 1.0, floats.sum_bound(1.0, 2 * smol.facts.d_model + 4, u=floats.U64, routes=1),
                         what="layer 0 of each followed token", why="a float64 cosine of a vector with itself")
    assert embeddings.follow_pairs(1, 5, 4) == [(0, 4), (1, 5)]  # shortened where a prompt has fewer tokens before


def test_tokens_page_long_text_tables_are_whole(smol):
    at = _app("tokens", "en")
    assert not at.exception
    texts = [t.value.to_string() for t in at.table]
    assert any("The cat sat on the mat." in x for x in texts)  # the RAG sentences, in full
    assert any(embeddings.compare_table("en").iloc[0, 1] in x for x in texts)  # the comparison table, not cut


def test_ablation_table_makes_whitespace_visible(smol):
    rows = ablation.top_table(smol.tokenizer, np.eye(1, 49152, 198)[0], np.eye(1, 49152, 198)[0], k=1)
    assert rows[0]["token"] == "⏎"  # id 198 is a newline: never a blank cell


def test_ablation_change_said_in_points_not_percent(smol):
    """issue 14: p going 15.22 % → 47.25 % was shown as '+32.04%' (it is +32 points, +210 %); no '-0.00'."""
    assert ablation.points(0.3204) == "+32.04" and ablation.points(-0.00001) == "0.00" and ablation.points(-0.0137) == "-1.37"
    assert ablation.points_text(0.3204, "zh") == "+32.04 个百分点"
    before, after = np.full(49152, 1 / 49152), np.full(49152, 1 / 49152)
    before[504], after[504] = 0.1522, 0.4725
    df = ablation.top_frame(smol.tokenizer, before, after, "en", k=1)
    assert df.columns.tolist()[-1] == "Δp (points)" and df.iloc[0].tolist()[-3:] == ["15.22%", "47.25%", "+32.03"]


def test_probe_inputs_have_the_tokenizers_ids_and_the_layers_rows(smol):
    """The exercise's table: IDs from the tokenizer itself, rows from the embedding layer's own forward."""
    E = embeddings.embedding_matrix(smol)
    table = embeddings.probe_table(smol.tokenizer, E, n_ids=1000)
    for (kind, text), row in zip(embeddings.PROBE_INPUTS, table.to_dict("records")):
        ids = smol.tokenizer(text, add_special_tokens=False)["input_ids"]
        assert row["n_ids"] == len(ids) and row["ids"] == str(list(ids)), kind
        if not ids:
            assert kind == "empty" and np.isnan(row["‖E[id0]‖"])
            continue
        with torch.inference_mode():
            layer = smol.model.get_input_embeddings()(torch.tensor(ids)).numpy()  # the layer's own forward
        assert row["E[id0][0]"] == float(layer[0, 0])
        assert row["‖E[id0]‖"] == float(np.linalg.norm(layer[0].astype(np.float64)))
    twice = table.set_index("kind")
    assert twice.loc["twice", "n_ids"] > twice.loc["normal", "n_ids"]


def test_first_deviation_of_one_extra_space(smol):
    tok, E = smol.tokenizer, embeddings.embedding_matrix(smol)
    a, b = embeddings.REGRESSION_PAIR
    ids_a, ids_b = tok(a, add_special_tokens=False)["input_ids"], tok(b, add_special_tokens=False)["input_ids"]
    dev = embeddings.first_deviation(ids_a, E[ids_a], ids_b, E[ids_b])
    want = next(p for p in range(min(len(ids_a), len(ids_b))) if ids_a[p] != ids_b[p])  # the reference, by hand
    assert dev.position == want and (dev.id_a, dev.id_b) == (ids_a[want], ids_b[want])
    assert dev.row_gap == float(np.abs(E[ids_a[want]] - E[ids_b[want]]).max()) > 0
    same = embeddings.first_deviation(ids_a, E[ids_a], list(ids_a), E[ids_a].copy())
    assert same.position is None and same.n_a == len(ids_a)
    short = embeddings.first_deviation(ids_a, E[ids_a], ids_a[:1], E[ids_a[:1]])  # B stops early: deviates at its end
    assert short.position == 1 and short.id_b is None and short.row_gap is None
