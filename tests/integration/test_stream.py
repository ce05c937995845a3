"""Residual stream, logit lens, block internals, anatomy — and the three pages that show them."""

from __future__ import annotations

import floats
import numpy as np
import pytest
import torch
from helpers.stream import _assert_top_as_accurate, _check_lens_row, _check_mlp_steps, _head, _norm_error, _softmax, _sublayer_outputs

from conftest import ROOT
from core import backends
from core.engine import tokens
from core.engine.roles import find_sites
from core.gen.sampling import SamplingConfig, filter_steps
from core.stream import anatomy, lens
from core.stream import figures as stream_fig

PROMPT = "What is the capital of France?"
GATED = ("llama", "qwen2", "mistral")


@pytest.fixture(scope="module")
def smol_trace(smol):
    return backends.trace(smol, PROMPT)


@pytest.fixture(scope="module")
def smol_sublayers(smol_trace, eager_refs):
    """HF's own eager SmolLM2 on the trace's tokens: each sub-layer's output in float32 and in float64."""
    return tuple(_sublayer_outputs(eager_refs["smollm2"].model(dt), smol_trace.token_ids) for dt in ("float32", "float64"))


def _vector_allowance(v32: np.ndarray, v64: np.ndarray) -> float:
    """The same for vectors [..., d] in 2-norm: ROUTE_FACTOR × HF's float32 route's largest vector error
    + one float32 rounding of the largest vector."""
    return (floats.ROUTE_FACTOR * float(np.linalg.norm(v32 - v64, axis=-1).max())
            + floats.U32 * float(np.linalg.norm(v64, axis=-1).max()))


# ---------------------------------------------------------------------------------------------
# the logit lens


def _smol_twins(eager_refs):
    return eager_refs["smollm2"].model("float32"), eager_refs["smollm2"].model("float64")


def test_logit_lens_last_layer_is_the_model(smol, smol_trace, eager_refs):
    ids, probs = lens.logit_lens(smol, smol_trace)
    L, T = smol.facts.n_layers, smol_trace.n_tokens
    assert ids.shape == probs.shape == (L + 1, T)
    full = backends.full_logits(smol, smol_trace)  # [T, V] from HF's LM head on final_hidden
    ref = _softmax(full)
    # the lens reruns the final norm and the LM head on resid[L] (other matrix shapes): it and the model's own
    # prediction are two float32 routes to the same distribution, each as accurate as HF's own modules
    _check_lens_row(ids[-1], probs[-1], _smol_twins(eager_refs), smol_trace.resid[-1], "the lens's last row")
    _check_lens_row(ref.argmax(-1), ref.max(-1), _smol_twins(eager_refs), smol_trace.resid[-1], "the model's own prediction")
    # and the trace's own next-token candidates (the LM head on the traced final_hidden)
    np.testing.assert_array_equal(ids[-1], backends.next_tokens(smol, smol_trace).ids[:, 0])
    # the earliest rows are not the answer yet: the lens really reads different layers
    assert (ids[0] != ids[-1]).any()
    # "capital of France?" → the answer emerges: the model's top-1 at the last layer is Paris-ish or end of turn
    assert probs[-1].max() <= 1.0 and probs.min() > 0


def test_logit_lens_row_by_hand(smol, smol_trace, eager_refs):
    """Row l = softmax(lm_head(final_norm(resid[l]))), recomputed with numpy from the weights."""
    l = 10
    x = smol_trace.resid[l].astype(np.float64)  # [T, d]
    w = smol.model.model.norm.weight.detach().numpy().astype(np.float64)
    eps = smol.model.config.rms_norm_eps
    h = x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * w
    logits = h @ smol.model.lm_head.weight.detach().numpy().astype(np.float64).T  # [T, V]
    p = _softmax(logits)
    ids, probs = lens.logit_lens(smol, smol_trace)
    # the lens is a float32 route (norm, LM head, softmax); numpy's float64 one is the exact answer to its eyes
    z32, p32 = _head(_smol_twins(eager_refs)[0], x)
    floats.assert_greedy_choice(ids[l], z32, logits, f"the lens's row {l}")
    _assert_top_as_accurate(probs[l], p32, p, f"the lens's row {l}")


@pytest.mark.parametrize("arch", ["llama", "qwen2", "mistral", "gpt2"])
def test_logit_lens_tiny(tiny_loaded, eager_refs, arch):
    loaded = tiny_loaded[arch]
    tr = backends.trace(loaded, "Hello there, tiny model")
    ids, probs = lens.logit_lens(loaded, tr)
    ref = _softmax(backends.full_logits(loaded, tr))
    twins = (eager_refs[arch].model("float32"), eager_refs[arch].model("float64"))
    _check_lens_row(ids[-1], probs[-1], twins, tr.resid[-1], "the lens's last row")
    _check_lens_row(ref.argmax(-1), ref.max(-1), twins, tr.resid[-1], "the model's own prediction")


# ---------------------------------------------------------------------------------------------
# stream norms


def test_stream_and_sublayer_norms(smol, smol_trace, smol_sublayers):
    tr = smol_trace
    d = tr.resid.shape[-1]
    n = lens.stream_norms(tr)
    assert n.shape == (tr.n_layers + 1, tr.n_tokens)
    # two float64 routes of a norm: the sum of d squares (γ_d relative) and a square root, each
    floats.assert_within(n[3, 2], np.sqrt((tr.resid[3, 2].astype(np.float64) ** 2).sum()), floats.sum_bound(n[3, 2], d + 2, u=floats.U64),
                         what="a stream norm", why="two float64 routes of a norm")
    a, m = lens.sublayer_norms(tr)
    assert a.shape == m.shape == (tr.n_layers,)
    # the trace's norms are of what the SDPA forward added; layer_detail replays the attention with eager
    # attention (and the MLP's part is the rest of the block's step): two float32 routes to each vector,
    # each as accurate as HF's own eager model (in 2-norm: ``_vector_allowance``); a norm taken in float32
    # adds γ_{d+2} of itself
    (ref32, ref64), T = smol_sublayers, tr.n_tokens
    d5, d7 = backends.layer_detail(smol, tr, 5), backends.layer_detail(smol, tr, 7)
    floats.assert_as_accurate(d5.attn_out, ref32["attn_out"][5], ref64["attn_out"][5], what="layer 5's replayed attention")
    replayed = np.mean([np.linalg.norm(d5.attn_out[t].astype(np.float64)) for t in range(T)])
    allow = 2 * _vector_allowance(ref32["attn_out"][5], ref64["attn_out"][5]) + floats.sum_bound(replayed, d + 2, routes=1)
    floats.assert_within(a[5], replayed, allow, what="layer 5's mean ‖attn_out‖", why="two float32 routes of the vectors")
    _a1, m1 = lens.sublayer_norms(tr, 4)
    replayed = np.linalg.norm(d7.mlp_out[4].astype(np.float64))
    allow = 2 * _vector_allowance(ref32["mlp_out"][7, 4], ref64["mlp_out"][7, 4]) + floats.sum_bound(replayed, d + 2, routes=1)
    floats.assert_within(m1[7], replayed, allow, what="‖mlp_out‖ at layer 7, token 4", why="two float32 routes of the vector")
    # SmolLM2 parks a huge vector on its first token (an attention sink): > 20× the others by mid-depth
    assert n[15, 0] > 20 * n[15, 1:].max()


# ---------------------------------------------------------------------------------------------
# norm and MLP by hand


@pytest.mark.parametrize("which", ["attn", "mlp"])
def test_rmsnorm_matches_module(smol, smol_trace, which):
    for layer, pos in ((0, 0), (7, 3), (29, 6)):
        s = lens.block_norm_steps(smol, smol_trace, layer, pos, which)
        module = find_sites(smol.model).block_norm(layer, which)
        x = smol_trace.resid[layer, pos] + (backends.layer_detail(smol, smol_trace, layer).attn_out[pos] if which == "mlp" else 0)
        with torch.no_grad():
            ref = module(torch.tensor(x, dtype=torch.float32)).numpy()
        # the module is one float32 route of the norm, norm_steps float64 (the exact answer to its eyes)
        floats.assert_within(s.out, ref, _norm_error(module, x), what="RMSNorm by hand", why="one float32 RMSNorm")
        assert s.kind == "RMSNorm"
        ms = float(np.mean(x.astype(np.float64) ** 2))
        assert s.rms_in == np.sqrt(ms)  # the same computation
        # the ÷ rms step resets the size to √(ms / (ms + eps)) ≈ 1 − eps / (2 ms): that closed form, up to
        # float64's rounding of the d squares' mean (twice: x's and the normed vector's) and a few operations
        floats.assert_within(s.rms_normed, np.sqrt(ms / (ms + s.eps)), floats.sum_bound(1.0, 2 * len(x) + 8, u=floats.U64, routes=1),
                             what="rms after the norm", why="float64 rounding")


def test_swiglu_recomputation_equals_trace(smol, smol_trace, smol_sublayers):
    ref32, ref64 = (r["mlp_out"] for r in smol_sublayers)
    for layer, pos in ((0, 0), (5, 3), (29, 6)):
        s = lens.mlp_steps(smol, smol_trace, layer, pos)
        assert s.prod.shape == (smol.facts.d_ff,)
        _check_mlp_steps(s, ref32[layer, pos], ref64[layer, pos], f"layer {layer}, token {pos}")
        # SiLU two float64 ways: x(1 + tanh(x/2))/2 is off by ≤ 2u|x| + 2u|act| (tanh, the sum, two products;
        # its cancellation for x ≪ 0 is absolute, not relative), x / (1 + e^−x) by ≤ 5u|act|; doubled for libm's ulp
        floats.assert_within(s.act, s.gate / (1 + np.exp(-s.gate)), 4 * floats.U64 * (np.abs(s.gate) + 2 * np.abs(s.act)),
                             what="SiLU", why="two float64 formulas")
        top = s.top_neurons(5)
        k = s.n_for_mass(0.9)
        a = np.sort(np.abs(s.prod))[::-1]
        assert a[:k].sum() >= 0.9 * a.sum() > a[: k - 1].sum()
        assert np.abs(s.prod[top[0]]) == np.abs(s.prod).max()


@pytest.mark.parametrize("arch", GATED)
def test_swiglu_tiny(tiny_loaded, eager_refs, arch):
    loaded = tiny_loaded[arch]
    tr = backends.trace(loaded, "gate times up")
    layer, pos = loaded.facts.n_layers - 1, tr.n_tokens - 1
    s = lens.mlp_steps(loaded, tr, layer, pos)
    ref32, ref64 = (_sublayer_outputs(eager_refs[arch].model(dt), tr.token_ids)["mlp_out"][layer, pos] for dt in ("float32", "float64"))
    _check_mlp_steps(s, ref32, ref64, f"layer {layer}, token {pos}")


# ---------------------------------------------------------------------------------------------
# anatomy


def test_breakdown_sums_to_num_parameters(smol, tiny_loaded):
    for loaded in [smol, *tiny_loaded.values()]:
        parts = anatomy.param_breakdown(loaded.model)
        assert sum(parts.values()) == loaded.model.num_parameters()
        assert "other" not in parts, parts
    parts = anatomy.param_breakdown(smol.model)
    assert parts["embed"] == 49152 * 576 and "lm_head" not in parts  # tied: counted once
    assert parts["attn_k"] == 30 * 192 * 576 and parts["mlp_gate"] == 30 * 1536 * 576
    assert parts["norm"] == (2 * 30 + 1) * 576
    assert "lm_head" in anatomy.param_breakdown(tiny_loaded["llama"].model)  # the tiny ones are untied


def test_estimate_matches_real_models(smol, tiny_loaded):
    for loaded in [smol, *tiny_loaded.values()]:
        report = anatomy.analyse_config(loaded.model.config.to_dict())
        assert sum(anatomy.estimate_params(report).values()) == loaded.model.num_parameters(), loaded.spec
        assert anatomy.estimate_params(report).keys() == anatomy.param_breakdown(loaded.model).keys()


def test_smol_checklist(smol):
    r = anatomy.analyse_config(anatomy.config_of(smol))
    assert (r.vocab_size, r.hidden_size, r.num_hidden_layers, r.num_attention_heads, r.num_key_value_heads) == (49152, 576, 30, 9, 3)
    assert (r.head_dim, r.intermediate_size, r.rope_theta) == (64, 1536, 100000.0)
    assert r.kv_bytes_per_token(4) == smol.facts.kv_bytes_per_token(4)


# ---------------------------------------------------------------------------------------------
# figures


def test_figures(smol, smol_trace):
    tr = smol_trace
    dot = stream_fig.block_dot(tr.meta["facts"], tr.n_tokens, "zh")
    assert "[7, 576]" in dot and "[9, 7, 64]" in dot and "[3, 7, 64]" in dot and "[7, 1536]" in dot and "残差" in dot
    steps = filter_steps(tr.last_logits, SamplingConfig(top_k=4))
    order = np.argsort(-steps["scaled"])[:30]
    fig = stream_fig.fig_candidates(steps, [str(i) for i in order], order, "en")
    colours = fig.data[1].marker.color
    assert list(colours[:4]) == [stream_fig.KEPT] * 4 and set(colours[4:]) == {stream_fig.REMOVED}
    # float64: the softmax over the 4 kept tokens (their sum, each division) and this sum of 4 round a few times
    floats.assert_within(np.sum(fig.data[1].y[:4]), 1.0, floats.sum_bound(1.0, 8, u=floats.U64, routes=1), what="kept probabilities",
                         why="float64 rounding")
    ids, probs = lens.logit_lens(smol, tr)
    f = stream_fig.fig_logit_lens(ids[:, 2:], probs[:, 2:], ["x"] * ids[:, 2:].size, list(tr.tokens[2:]), "en", offset=2)
    np.testing.assert_array_equal(np.asarray(f.data[0].z), probs[:, 2:])
    assert next(iter(f.data[0].x)) == 2 and f.layout.xaxis.ticktext[0].startswith("2·")
    fp = stream_fig.fig_params(anatomy.param_breakdown(smol.model), "zh")
    assert sum(fp.data[0].x) == smol.model.num_parameters() and "参数" in fp.layout.title.text


# ---------------------------------------------------------------------------------------------
# pages (AppTest), both languages


def _app(stem: str, lang: str):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.session_state["lang"] = lang
    at.switch_page(f"pages/{stem}.py")
    return at


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_residual_page(lang, smol):
    at = _app("residual", lang)
    at.run()
    assert not at.exception
    assert len(at.get("plotly_chart")) == 4
    assert at.success and ("1e-" in at.success[0].value or "e-0" in at.success[0].value)
    # the three RMS metrics are the norm steps of the chosen layer and token (x / rms(x) has rms ≈ 1:
    # test_rmsnorm_matches_module), the same computation on the same trace
    tr = backends.trace(smol, at.session_state["prompt"], chat=at.toggle(key="chat").value)
    ns = lens.block_norm_steps(smol, tr, at.slider(key="residual_layer").value, at.selectbox(key="residual_pos").value, "attn")
    assert [m.value for m in at.metric[:3]] == [v for _, v in lens.norm_metrics(ns)]
    passes = backends.FORWARD_PASSES
    at.slider(key="residual_layer").set_value(12).run()  # choosing a layer never re-runs the model
    assert not at.exception and passes == backends.FORWARD_PASSES


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_logits_page(lang, smol, smol_trace):
    at = _app("logits", lang)
    at.run()
    assert not at.exception
    greedy = at.metric[3].value
    assert at.toggle(key="chat").value  # an instruct model: the chat template is on by default …
    chat_trace = backends.trace(smol, at.session_state["prompt"], chat=True)  # the language's first prompt
    best = int(np.argmax(chat_trace.last_logits))
    assert best not in smol.eos_ids()  # … so the first screen answers instead of ending at once
    assert greedy == f"«{tokens.visible(tokens.readable_tokens(smol.tokenizer, [best])[0])}»"
    passes = backends.FORWARD_PASSES
    at.number_input(key="logits_topk").set_value(5).run()
    assert not at.exception and at.metric[0].value == "5"
    assert passes == backends.FORWARD_PASSES  # sampling controls read the cached trace
    a = at.metric[4].value
    at.number_input(key="logits_seed").set_value(0).run()
    assert at.metric[4].value == a  # same seed, same token


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_anatomy_page(lang):
    at = _app("anatomy", lang)
    at.run()
    assert not at.exception
    assert "134,515,008" in at.success[0].value
    assert any("494,032,768" in m.value for m in at.markdown)
    at.text_area(key="anatomy_json").set_value('{"vocab_size": 10,').run()
    assert not at.exception and at.error and ("JSON" in at.error[0].value)
    at.text_area(key="anatomy_json").set_value('{"vocab_size": 10, "num_hidden_layers": 2, "num_attention_heads": 2}').run()
    assert "hidden_size" in at.error[0].value
