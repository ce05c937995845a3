"""Residual stream, logit lens, block internals, anatomy — and the three pages that show them."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from core import backends
from core.engine import tokens
from core.engine.roles import find_sites
from core.engine.types import UnsupportedArchitectureError
from core.gen.sampling import SamplingConfig, filter_steps
from core.stream import anatomy, lens
from core.stream import figures as stream_fig

PROMPT = "What is the capital of France?"
GATED = ("llama", "qwen2", "mistral")


@pytest.fixture(scope="module")
def smol_trace(smol):
    return backends.trace(smol, PROMPT)


def _softmax(x: np.ndarray) -> np.ndarray:
    z = x.astype(np.float64) - x.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


# ---------------------------------------------------------------------------------------------
# the logit lens


def test_logit_lens_last_layer_is_the_model(smol, smol_trace):
    ids, probs = lens.logit_lens(smol, smol_trace)
    L, T = smol.facts.n_layers, smol_trace.n_tokens
    assert ids.shape == probs.shape == (L + 1, T)
    ref = _softmax(backends.full_logits(smol, smol_trace))  # [T, V] from HF's LM head on final_hidden
    np.testing.assert_array_equal(ids[-1], ref.argmax(-1))
    np.testing.assert_allclose(probs[-1], ref.max(-1), rtol=1e-4, atol=1e-6)
    # and the trace's own next-token candidates (the LM head on the traced final_hidden)
    np.testing.assert_array_equal(ids[-1], backends.next_tokens(smol, smol_trace).ids[:, 0])
    # the earliest rows are not the answer yet: the lens really reads different layers
    assert (ids[0] != ids[-1]).any()
    # "capital of France?" → the answer emerges: the model's top-1 at the last layer is Paris-ish or end of turn
    assert probs[-1].max() <= 1.0 and probs.min() > 0


def test_logit_lens_row_by_hand(smol, smol_trace):
    """Row l = softmax(lm_head(final_norm(resid[l]))), recomputed with numpy from the weights."""
    l = 10
    x = smol_trace.resid[l].astype(np.float64)  # [T, d]
    w = smol.model.model.norm.weight.detach().numpy().astype(np.float64)
    eps = smol.model.config.rms_norm_eps
    h = x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * w
    logits = h @ smol.model.lm_head.weight.detach().numpy().astype(np.float64).T  # [T, V]
    p = _softmax(logits)
    ids, probs = lens.logit_lens(smol, smol_trace)
    np.testing.assert_array_equal(ids[l], p.argmax(-1))
    np.testing.assert_allclose(probs[l], p.max(-1), rtol=1e-3)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "mistral", "gpt2"])
def test_logit_lens_tiny(tiny_loaded, arch):
    loaded = tiny_loaded[arch]
    tr = backends.trace(loaded, "Hello there, tiny model")
    ids, probs = lens.logit_lens(loaded, tr)
    ref = _softmax(backends.full_logits(loaded, tr))
    np.testing.assert_array_equal(ids[-1], ref.argmax(-1))
    np.testing.assert_allclose(probs[-1], ref.max(-1), rtol=1e-4)


# ---------------------------------------------------------------------------------------------
# stream norms


def test_stream_and_sublayer_norms(smol, smol_trace):
    tr = smol_trace
    n = lens.stream_norms(tr)
    assert n.shape == (tr.n_layers + 1, tr.n_tokens)
    assert n[3, 2] == pytest.approx(float(np.sqrt((tr.resid[3, 2].astype(np.float64) ** 2).sum())))
    a, m = lens.sublayer_norms(tr)
    assert a.shape == m.shape == (tr.n_layers,)
    d5, d7 = backends.layer_detail(smol, tr, 5), backends.layer_detail(smol, tr, 7)
    assert a[5] == pytest.approx(np.mean([np.linalg.norm(d5.attn_out[t].astype(np.float64)) for t in range(tr.n_tokens)]), rel=1e-4)
    _a1, m1 = lens.sublayer_norms(tr, 4)
    assert m1[7] == pytest.approx(np.linalg.norm(d7.mlp_out[4].astype(np.float64)), rel=1e-4)
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
        np.testing.assert_allclose(s.out, ref, rtol=1e-5, atol=1e-5)
        assert s.kind == "RMSNorm"
        assert s.rms_normed == pytest.approx(1.0, abs=1e-3)  # the ÷ rms step resets the size to ≈ 1
        assert s.rms_in == pytest.approx(float(np.sqrt(np.mean(x.astype(np.float64) ** 2))))


def test_layernorm_matches_module(tiny_loaded):
    loaded = tiny_loaded["gpt2"]
    tr = backends.trace(loaded, "Layer norm, please")
    s = lens.block_norm_steps(loaded, tr, 1, 2, "attn")
    module = find_sites(loaded.model).block_norm(1, "attn")
    with torch.no_grad():
        ref = module(torch.tensor(tr.resid[1, 2])).numpy()
    assert s.kind == "LayerNorm"
    np.testing.assert_allclose(s.out, ref, rtol=1e-5, atol=1e-5)
    assert abs(s.centred.mean()) < 1e-9


def test_swiglu_recomputation_equals_trace(smol, smol_trace):
    for layer, pos in ((0, 0), (5, 3), (29, 6)):
        s = lens.mlp_steps(smol, smol_trace, layer, pos)
        assert s.prod.shape == (smol.facts.d_ff,)
        scale = np.abs(s.traced).max()
        assert s.max_abs_diff < 1e-4 * max(1.0, scale)
        np.testing.assert_allclose(s.act, s.gate / (1 + np.exp(-s.gate)), rtol=1e-9, atol=1e-12)
        top = s.top_neurons(5)
        k = s.n_for_mass(0.9)
        a = np.sort(np.abs(s.prod))[::-1]
        assert a[:k].sum() >= 0.9 * a.sum() > a[: k - 1].sum()
        assert np.abs(s.prod[top[0]]) == np.abs(s.prod).max()


@pytest.mark.parametrize("arch", GATED)
def test_swiglu_tiny(tiny_loaded, arch):
    loaded = tiny_loaded[arch]
    tr = backends.trace(loaded, "gate times up")
    s = lens.mlp_steps(loaded, tr, loaded.facts.n_layers - 1, tr.n_tokens - 1)
    assert s.max_abs_diff < 1e-4 * max(1.0, np.abs(s.traced).max())


def test_ungated_mlp_is_refused(tiny_loaded):
    loaded = tiny_loaded["gpt2"]
    tr = backends.trace(loaded, "no gate here")
    assert not lens.is_gated(loaded)
    with pytest.raises(UnsupportedArchitectureError):
        lens.mlp_steps(loaded, tr, 0, 0)


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


SHAPE = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=100,
             max_position_embeddings=64)


@pytest.mark.parametrize("model_type, extra", [
    ("qwen2", {"num_key_value_heads": 2, "attention_bias": False}),  # Qwen2's q/k/v biases are there whatever the flag says
    ("qwen3", {"num_key_value_heads": 2, "head_dim": 8}),  # + per-head q/k norms
    ("mixtral", {"num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 2}),  # every expert + the router
    ("stablelm", {"num_key_value_heads": 4}),  # gated MLP, LayerNorm with a bias
    ("gpt_neox", {}),  # rotary: no position table
    ("starcoder2", {"num_key_value_heads": 2}),
    ("opt", {"ffn_dim": 64, "word_embed_proj_dim": 32}),  # learned positions with OPT's 2 extra rows
])
def test_estimate_matches_more_families(model_type, extra):
    """The pasted-config estimate against a tiny random model built from the same config (all its tensors, tied ones once)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model(model_type, **SHAPE, **extra)
    real = sum(p.numel() for p in AutoModelForCausalLM.from_config(cfg).parameters())
    assert sum(anatomy.estimate_params(anatomy.analyse_config(cfg.to_dict())).values()) == real


def test_qwen25_estimate():
    r = anatomy.analyse_config(anatomy.parse_config(json.dumps(anatomy.QWEN25_05B_CONFIG)))
    assert sum(anatomy.estimate_params(r).values()) == 494_032_768 == anatomy.QWEN25_05B_PARAMS
    assert r.attention_kind == "GQA" and r.num_attention_heads // r.num_key_value_heads == 7
    assert r.head_dim == 64 and r.tied_embeddings and r.rope_theta == 1_000_000
    assert r.kv_bytes_per_token(2) == 2 * 24 * 2 * 64 * 2 == 12288
    items = dict(r.checklist())
    assert items["num_key_value_heads"].startswith("2 → GQA") and items["norm"] == "RMSNorm, pre-norm"


def test_smol_checklist(smol):
    r = anatomy.analyse_config(anatomy.config_of(smol))
    assert (r.vocab_size, r.hidden_size, r.num_hidden_layers, r.num_attention_heads, r.num_key_value_heads) == (49152, 576, 30, 9, 3)
    assert (r.head_dim, r.intermediate_size, r.rope_theta) == (64, 1536, 100000.0)
    assert r.kv_bytes_per_token(4) == smol.facts.kv_bytes_per_token(4)


@pytest.mark.parametrize(
    "text,code,detail",
    [
        ('{"vocab_size": 10,', "json", "line 1"),
        ("[1, 2]", "not_object", "list"),
        ('{"vocab_size": 10, "num_hidden_layers": 2, "num_attention_heads": 2}', "missing", "hidden_size"),
        ('{"vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": "two"}', "not_integer", "num_attention_heads"),
        ('{"vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 3}', "not_multiple", "num_key_value_heads"),
        ('{"vocab_size": -5, "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 4}', "not_positive", "vocab_size"),
    ],
)
def test_bad_configs(text, code, detail):
    with pytest.raises(anatomy.ConfigError) as e:
        anatomy.analyse_config(anatomy.parse_config(text))
    assert e.value.code == code and detail in e.value.detail


def test_classify_names():
    assert anatomy.classify("transformer.h.0.attn.c_proj.weight") == "attn_o"
    assert anatomy.classify("transformer.h.0.mlp.c_proj.bias") == "mlp_down"
    assert anatomy.classify("transformer.h.0.ln_1.weight") == "norm"
    assert anatomy.classify("model.layers.3.self_attn.k_proj.weight") == "attn_k"


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
    np.testing.assert_allclose(fig.data[1].y[:4].sum(), 1.0)
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

    at = AppTest.from_file("../app.py", default_timeout=180)
    at.session_state["lang"] = lang
    at.switch_page(f"pages/{stem}.py")
    return at


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_residual_page(lang):
    at = _app("residual", lang)
    at.run()
    assert not at.exception
    assert len(at.get("plotly_chart")) == 4
    assert at.success and ("1e-" in at.success[0].value or "e-0" in at.success[0].value)
    rms = float(at.metric[1].value)
    assert rms == pytest.approx(1.0, abs=1e-2)  # x / rms(x) has rms ≈ 1
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
    chat_trace = backends.trace(smol, PROMPT, chat=True)
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


# ---------------------------------------------------------------------------------------------
# the toy transformer goes through the same functions


@pytest.mark.parametrize("kw", [{}, {"ffn": "gelu", "norm": "layernorm", "position": "learned"}, {"norm_placement": "post"}])
def test_toy_models(kw):
    from core import toy

    torch.manual_seed(0)
    loaded = toy.wrap(toy.ToyTransformer(toy.ToyConfig(**kw)), "test")
    tr = backends.trace(loaded, "hello toy")
    ids, probs = lens.logit_lens(loaded, tr)
    ref = _softmax(backends.full_logits(loaded, tr))
    np.testing.assert_array_equal(ids[-1], ref.argmax(-1))
    np.testing.assert_allclose(probs[-1], ref.max(-1), rtol=1e-4)
    parts = anatomy.param_breakdown(loaded.model)
    assert sum(parts.values()) == loaded.facts.n_params and "other" not in parts
    report = anatomy.analyse_config(anatomy.config_of(loaded))
    assert report.norm_placement == loaded.facts.norm_placement
    if kw.get("norm_placement") == "post":
        with pytest.raises(UnsupportedArchitectureError):
            lens.block_norm_steps(loaded, tr, 0, 0)
    elif kw.get("ffn") == "gelu":
        with pytest.raises(UnsupportedArchitectureError):
            lens.mlp_steps(loaded, tr, 1, 2)
    else:
        s = lens.mlp_steps(loaded, tr, 1, 2)
        assert s.max_abs_diff < 1e-5
        assert sum(anatomy.estimate_params(report).values()) == loaded.facts.n_params
