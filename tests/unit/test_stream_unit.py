"""Residual stream, logit lens, block internals, anatomy — and the three pages that show them."""

from __future__ import annotations

import copy
import json

import floats
import numpy as np
import pytest
import torch
from helpers.stream import _check_lens_row, _check_mlp_steps, _norm_error, _softmax, _sublayer_outputs

from core import backends
from core.engine.roles import find_sites
from core.engine.types import UnsupportedArchitectureError
from core.stream import anatomy, lens


def _toy_twins(model):
    m = copy.deepcopy(model).eval()
    return m, copy.deepcopy(m).double()


def test_layernorm_matches_module(tiny_loaded):
    loaded = tiny_loaded["gpt2"]
    tr = backends.trace(loaded, "Layer norm, please")
    s = lens.block_norm_steps(loaded, tr, 1, 2, "attn")
    module = find_sites(loaded.model).block_norm(1, "attn")
    with torch.no_grad():
        ref = module(torch.tensor(tr.resid[1, 2])).numpy()
    assert s.kind == "LayerNorm"
    floats.assert_within(s.out, ref, _norm_error(module, tr.resid[1, 2]), what="LayerNorm by hand", why="one float32 LayerNorm")
    # centred in float64: the mean is off by ≤ γ_d mean|x|, and the centred vector's mean rounds its own d terms
    floats.assert_within(s.centred.mean(), 0.0, floats.sum_bound(np.abs(s.x).mean() + np.abs(s.centred).mean(), len(s.x) + 1, u=floats.U64, routes=1),
                         what="mean after centring", why="float64 rounding of two means")


def test_ungated_mlp_is_refused(tiny_loaded):
    loaded = tiny_loaded["gpt2"]
    tr = backends.trace(loaded, "no gate here")
    with pytest.raises(UnsupportedArchitectureError):
        lens.mlp_steps(loaded, tr, 0, 0)


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
    assert r.kv_bytes_per_token(2) == 2 * 24 * 2 * 64 * 2  # 12,288 B
    items = dict(r.checklist())
    assert items["num_key_value_heads"].startswith("2 → GQA") and items["norm"] == "RMSNorm, pre-norm"


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
# the toy transformer goes through the same functions


@pytest.mark.parametrize("kw", [{}, {"ffn": "gelu", "norm": "layernorm", "position": "learned"}, {"norm_placement": "post"}])
def test_toy_models(kw):
    from core import toy

    torch.manual_seed(0)
    loaded = toy.wrap(toy.ToyTransformer(toy.ToyConfig(**kw)), "test")
    tr = backends.trace(loaded, "hello toy")
    ids, probs = lens.logit_lens(loaded, tr)
    ref = _softmax(backends.full_logits(loaded, tr))
    twins = _toy_twins(loaded.model)
    _check_lens_row(ids[-1], probs[-1], twins, tr.resid[-1], "the lens's last row")
    _check_lens_row(ref.argmax(-1), ref.max(-1), twins, tr.resid[-1], "the model's own prediction")
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
        ref32, ref64 = (_sublayer_outputs(m, tr.token_ids, toy=True)["mlp_out"][1, 2] for m in _toy_twins(loaded.model))
        _check_mlp_steps(s, ref32, ref64, "layer 1, token 2")
        assert sum(anatomy.estimate_params(report).values()) == loaded.facts.n_params
