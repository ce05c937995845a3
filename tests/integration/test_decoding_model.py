"""The decoding page's measurements on the embedded model (core.gen.speedups): speculation keeps plain greedy
decoding's tokens and leaves the shared model as it was; variants are gguf's round trips, one at a time, never
the shared model; kernels differ by rounding only (tests/floats.py's measured bound)."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch
from floats import ROUTE_FACTOR
from gguf import quants
from gguf.constants import GGMLQuantizationType

from core import backends
from core.gen import speedups as S


def _ids(smol, text):
    return backends.encode_prompt(smol, text, chat=True).ids


def _plain(smol, ids, n):
    """Plain greedy decoding by HF's generate, called here directly (the independent reference)."""
    x = torch.tensor([ids])
    with torch.no_grad():
        out = smol.model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False,
                                  eos_token_id=sorted(smol.eos_ids()), pad_token_id=2)
    return out[0, len(ids):].tolist()


@pytest.mark.parametrize("method,text", [("lookup", S.COPY_PROMPT), ("lookup", S.FREE_PROMPT), ("early_exit", S.COPY_PROMPT)])
def test_speculation_is_plain_greedy_token_for_token(smol, method, text):
    ids = _ids(smol, text)
    layers, gen_cfg = smol.model.config.num_hidden_layers, smol.model.generation_config.to_dict()
    r = S.speculate(smol, ids, method, 12)
    assert r.tokens == _plain(smol, ids, 12) == r.plain
    assert [t for rd in r.rounds for t in rd.kept] == r.tokens  # every token came out of a recorded pass
    for rd in r.rounds:
        assert rd.accepted <= len(rd.drafted) and list(rd.kept[:rd.accepted]) == list(rd.drafted[:rd.accepted])
        assert len(rd.kept) == rd.accepted + 1 or rd is r.rounds[-1]  # the last pass may be cut by eos / length
    assert r.verify_passes == len(r.rounds) and r.passes_saved == len(r.tokens) - len(r.rounds)
    # the shared model is left as it was: no wrapper, no cut layer count, the same generation settings
    assert "_get_candidate_generator" not in vars(smol.model)
    assert smol.model.config.num_hidden_layers == layers == smol.facts.n_layers
    assert smol.model.generation_config.to_dict() == gen_cfg
    if method == "lookup" and text == S.COPY_PROMPT:
        assert r.drafted > 0 and r.accepted > 0  # a list to copy: prompt lookup drafts, and some drafts hold


def test_variant_is_gguf_round_trip_and_leaves_the_shared_model(smol):
    m = smol.model
    q = m.model.layers[0].self_attn.q_proj.weight
    before = q.detach().clone()
    counted: list[int] = []
    with S.variant(smol, S._quantised("Q4_0", counted)) as twin:
        got = twin.model.layers[0].self_attn.q_proj.weight.detach().numpy()
        t = GGMLQuantizationType.Q4_0
        want = quants.dequantize(quants.quantize(before.numpy(), t), t)
        np.testing.assert_array_equal(got, want)
        assert twin.lm_head.weight is twin.model.embed_tokens.weight  # tied weights stay tied
        assert twin.model.embed_tokens.weight is not m.model.embed_tokens.weight
        assert twin.model.norm.weight.dtype == torch.float32
    assert torch.equal(m.model.layers[0].self_attn.q_proj.weight, before)  # never written
    n_params = sum(p.numel() for p in m.parameters())
    assert sum(counted) < n_params * 4 / 6  # 4.5-bit matrices (norms in float32): far under float32's bytes


def test_one_variant_in_memory_at_a_time(smol, monkeypatch):
    seen: list[int] = []
    own = S._logits_and_stream

    def spy(m, seq):
        gc.collect()
        seen.append(len(S.LIVE))
        return own(m, seq)

    monkeypatch.setattr(S, "_logits_and_stream", spy)
    pr = S.precision(smol, _ids(smol, S.FREE_PROMPT), ("Q8_0", "TQ1_0", "bf16"), n_new=4, reps=1)
    assert seen == [0, 1, 1, 1]  # the baseline (no variant), then each variant alone
    gc.collect()
    assert len(S.LIVE) == 0
    kl = {v.name: v.kl_mean for v in pr.variants}
    assert 0 < kl["Q8_0"] < kl["TQ1_0"]  # eight bits stay closer than ternary weights
    assert all(len(v.drift) == smol.facts.n_layers + 1 for v in pr.variants)
    assert pr.variants[1].drift[0] > 0  # the embeddings themselves are quantised (ternary: they move)


def test_kernels_differ_by_rounding_only(smol):
    k = S.kernels(smol, _ids(smol, "The capital of France is"), 6, reps=1)
    # different routes: each float32 kernel is no further from float64 than ROUTE_FACTOR × the other's distance
    assert k.max_abs["sdpa_vs_float64"] <= ROUTE_FACTOR * k.max_abs["eager_vs_float64"]
    assert k.max_abs["eager_vs_float64"] <= ROUTE_FACTOR * k.max_abs["sdpa_vs_float64"]
    assert 0 < k.max_abs["eager_vs_sdpa"] < 1e-2
    assert k.fork["float64"] is None and len(k.tokens["sdpa"]) == 6


def test_the_shipped_gguf_is_what_the_page_says(smol):
    """decoding.q41_note: every block matrix Q4_1, the token embedding Q8_0, the rest (norms) F32; and the
    embedding's Q8_0 round trip gives back the very values the baseline holds."""
    from gguf import GGUFReader

    from core.engine.hf import embedded_gguf_path

    types = {t.name: t.tensor_type.name for t in GGUFReader(str(embedded_gguf_path())).tensors}
    assert types.pop("token_embd.weight") == "Q8_0"
    assert {v for k, v in types.items() if k.startswith("blk.") and k.endswith(".weight") and "norm" not in k} == {"Q4_1"}
    assert {v for k, v in types.items() if "norm" in k} == {"F32"}
    emb = smol.model.model.embed_tokens.weight.detach().numpy()
    np.testing.assert_array_equal(S.quant_round_trip(emb[:64], "Q8_0")[0], emb[:64])
