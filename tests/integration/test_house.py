"""The concepts the house writes once, each checked against an independent reference: torch for
the numerics, the model's own forward pass and KV cache for the backends, hand computations for
the formulas, and both kinds of model (HF and the toy) for everything that serves both."""

from __future__ import annotations

import copy
import json

import floats
import numpy as np
import pytest
import torch

from core import backends
from core.engine import config as cfgread
from core.engine import roles, tokens
from core.engine.types import ConfigError, HeadGeometry, kv_bytes
from core.gen import generate, kvcalc
from core.stream import lens
from core.toy import ByteTokenizer

PROMPT = "The capital of France is"


def test_byte_table_is_gpt2s_and_shared_by_the_toy(smol):
    # GPT-2's table maps printable bytes to themselves and byte 32 (space) to 'Ġ'
    assert tokens.BYTE_CHARS[ord("A")] == "A" and tokens.BYTE_CHARS[32] == "Ġ" and len(set(tokens.BYTE_CHARS)) == 256
    tok = ByteTokenizer()
    ids = tok.encode("苹", add_special_tokens=False)  # 3 UTF-8 bytes
    assert tokens.readable_tokens(tok, ids) == ["⟨E8⟩", "⟨8B⟩", "⟨B9⟩"]
    ids = smol.tokenizer("苹果", add_special_tokens=False)["input_ids"]
    assert tokens.visible_tokens(smol.tokenizer, ids) == [tokens.visible(s) for s in tokens.readable_tokens(smol.tokenizer, ids)]


def test_readable_pieces_are_decoded_once_per_tokenizer_and_id(smol):
    """The pieces are kept per tokenizer: the same strings as decoding each id on its own, every time, and an id seen
    before is not decoded again (a trace of a repeated prompt decodes nothing)."""
    ids = smol.tokenizer("苹果 and 苹果, the the the\n\t€", add_special_tokens=False)["input_ids"]
    alone = []
    for i in ids:  # the independent reference: each id decoded on its own, bytes of a partial character spelled out
        s, r = smol.tokenizer.decode([i]), smol.tokenizer.convert_ids_to_tokens([i])[0]
        alone.append("⟨" + " ".join(f"{tokens.BYTE_OF[c]:02X}" for c in r) + "⟩" if "\ufffd" in s else s)

    class Counting:  # the same tokenizer, counting its single-id decodes
        def __init__(self) -> None:
            self.decoded: list[int] = []

        def decode(self, one):
            self.decoded += one
            return smol.tokenizer.decode(one)

        def convert_ids_to_tokens(self, some):
            return smol.tokenizer.convert_ids_to_tokens(some)

    tok = Counting()
    assert tokens.readable_tokens(tok, ids) == alone
    assert sorted(tok.decoded) == sorted(set(ids))  # a repeated id within one call: decoded once
    assert tokens.readable_tokens(tok, ids[::-1]) == alone[::-1] and len(tok.decoded) == len(set(ids))
    assert tokens.readable_tokens(smol.tokenizer, ids) == alone == tokens.readable_tokens(smol.tokenizer, ids)
    assert tokens.readable_tokens(ByteTokenizer(), []) == []


# ---------------------------------------------------------------------------------------------
# one head geometry, one KV formula, one config reader


def test_head_geometry_and_kv_bytes_against_the_real_cache(smol):
    g = smol.facts.geometry
    assert (g.kind, g.group_size, [g.kv_head_of(h) for h in (0, 2, 3, 8)]) == ("GQA", 3, [0, 0, 1, 2])
    assert smol.facts.value_bytes == 4 and smol.facts.kv_bytes_per_token() == kv_bytes(30, 3, 64, 1, 4) == 46_080
    ids = smol.tokenizer(PROMPT, add_special_tokens=False)["input_ids"]
    st = generate.run_with_cache(smol, ids, 3)
    real = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in backends.cache_layers(st.cache))
    assert real == g.kv_bytes(st.records[-1].kv_tokens) == st.records[-1].kv_bytes
    assert HeadGeometry("x", 2, 8, 8, 16).kind == "MHA" and HeadGeometry("x", 2, 8, 1, 16).kind == "MQA"
    with pytest.raises(ConfigError) as e:
        HeadGeometry("x", 2, 8, 3, 16)
    assert e.value.code == "bad_value" and "multiple" in e.value.detail


def test_config_reader_reads_objects_dicts_and_aliases(smol):
    cfg = smol.model.config
    shape = lambda g: (g.n_layers, g.n_heads, g.n_kv_heads, g.dh, g.d_model)  # noqa: E731
    assert shape(cfgread.geometry(cfg)) == shape(cfgread.geometry(cfg.to_dict())) == (30, 9, 3, 64, 576)
    assert cfgread.get({"n_layer": 12}, "num_hidden_layers") == 12 and cfgread.get(cfg, "hidden_size") == 576
    assert cfgread.rope(cfg)[0] == smol.facts.rope_theta == 100000.0
    assert cfgread.geometry({"n_layer": 2, "n_head": 4, "n_embd": 64, "multi_query": True}).kind == "MQA"
    wrapped = {"model_type": "llava", "text_config": {"num_hidden_layers": 4, "num_attention_heads": 8, "hidden_size": 256}}
    assert cfgread.geometry(json.dumps(wrapped)).dh == 32
    for text, code in (("{", "json"), ("[]", "not_object"), ('{"num_attention_heads": 2}', "missing")):
        with pytest.raises(ConfigError) as e:
            cfgread.geometry(text)
        assert e.value.code == code
    terms = kvcalc.formula_terms(cfgread.geometry(cfg), 10, 2, 3)
    assert terms["total"] == terms["L"] * terms["kv"] * terms["dh"] * terms["b"] * terms["t"] * terms["r"] * 2


# ---------------------------------------------------------------------------------------------
# one role map, one hook helper


def test_role_map_serves_hf_and_toy(smol, toy):
    s = roles.find_sites(smol.model)
    assert len(s.blocks) == 30 and s.final_norm is smol.model.model.norm and s.lm_head is smol.model.lm_head
    assert s.block_norm(3, "mlp") is smol.model.model.layers[3].post_attention_layernorm
    assert roles.find_sites(smol.model) is s  # found once per model
    t = roles.find_sites(toy.model)
    assert t.embed is toy.model.embed_tokens and t.final_norm is toy.model.norm and t.mlps[1] is toy.model.layers[1].mlp


# ---------------------------------------------------------------------------------------------
# the backends: one forward step for both kinds, equal to the model's own forward


@pytest.mark.parametrize("kind", ["hf", "toy"])
def test_forward_step_matches_the_models_own_forward(kind, smol, toy, eager_refs):
    """A forward step is the model's own forward (bit for bit: the same call, the last position's logits
    asked for alone as generation asks); a prefill then a decode step with the cache gives the full
    forward's logits, as close to the exact (float64) ones as the model's float32 full forward is."""
    loaded = smol if kind == "hf" else toy
    ids = loaded.tokenizer(PROMPT, add_special_tokens=False)["input_ids"]
    x = torch.tensor([ids])
    with torch.inference_mode():
        if kind == "hf":
            own = loaded.model(input_ids=x, logits_to_keep=1).logits[0, -1].numpy()
            ref32, ref64 = (eager_refs["smollm2"].run(ids, dt).logits[0, -1].numpy() for dt in ("float32", "float64"))
        else:
            own = ref32 = loaded.model(x)[0][0, -1].numpy()
            ref64 = copy.deepcopy(loaded.model).double()(x)[0][0, -1].numpy()  # the toy's float64 twin
    full = backends.forward_step(loaded, ids, use_cache=False)
    floats.assert_same(full.last_logits, own, "forward step")
    pre = backends.forward_step(loaded, ids[:-1], record_attention=True)  # prefill, then one decode step
    step = backends.forward_step(loaded, ids[-1:], pre.cache, record_attention=True)
    floats.assert_as_accurate(step.last_logits, ref32, ref64, "prefill + decode step")
    assert step.attn.shape == (loaded.facts.n_layers, loaded.facts.n_heads, 1, len(ids))
    assert backends.is_hf(loaded) == (kind == "hf")


def test_logit_lens_text_is_the_label_rule(smol):
    tr = backends.trace(smol, PROMPT)
    ids, probs, text = lens.logit_lens_with_text(smol, tr)
    assert probs.shape == ids.shape
    # the last row is the model's own prediction, by another route: the final norm and the LM head on a batch
    # (each route's norm within γ_{d+4} of exact, the head's dot products within γ_d: logits within Δ) and a
    # float32 softmax over V (which moves p by ≤ p·(e^{2Δ}(1 + ε) − 1), ε its own rounding), stored as float32
    h = tr.final_hidden[-1].astype(np.float64)
    w = smol.model.lm_head.weight.detach().numpy().astype(np.float64)
    d, V = h.size, w.shape[0]
    delta = float((4 * floats.gamma(d + 4) * (np.abs(w) @ np.abs(h))).max())
    spread = float(tr.last_logits.max() - tr.last_logits.min())
    p = float(tr.last_probs().max())
    eps = 2 * floats.U32 * (spread + 4) + floats.gamma(V + 1)
    floats.assert_within(float(probs[-1, -1]), p, p * np.expm1(2 * delta + np.log1p(eps)) + floats.U32 * p, "lens top probability",
                         "two routes of the final norm and LM head + a float32 softmax over the vocabulary")
    assert len(text) == ids.size and text[-1] == tokens.visible_tokens(smol.tokenizer, [int(ids[-1, -1])])[0]
    assert int(ids[-1, -1]) == int(np.argmax(tr.last_logits))
