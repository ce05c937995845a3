"""The trace contract, checked against independent references: HF's own eager model (loaded
separately, no xray: ``conftest.eager_refs``), its KV cache and hidden states, and hand recomputation
from traced q/k.

The trace's forward runs SDPA and HF's reference runs eager attention, so from layer 1 on the two streams
differ by rounding: there each comparison is held to float32's error (``floats``). Layer 0 reads the same
embeddings by the same functions, so there the trace's k, v and weights are HF's bit for bit."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from typing import Any, NamedTuple

import floats
import numpy as np
import pytest
import torch
from floats import allowed_error, assert_f16_as_accurate, assert_greedy_choice, assert_rows_sum_to_one, attention64, softmax_error

from conftest import ROOT, TINY_ARCHS
from core import backends
from core.engine import roles, xray
from core.engine.trace import load_npz
from core.engine.types import EmptyPromptError, UnsupportedArchitectureError

PROMPT = "The quick brown fox jumps over the lazy dog, and 苹果很好吃。"


class Case(NamedTuple):
    name: str
    loaded: Any
    tr: Any  # the trace
    lay: dict  # backends.stacked_layers(…, with_pattern=True)
    o32: Any  # HF eager's outputs (hidden states, attentions, KV cache), float32
    o64: Any  # the same model in float64: the exact answer to float32's eyes


@pytest.fixture(scope="module")
def cases(tiny_loaded, smol, eager_refs):
    out = []
    loadeds = {**tiny_loaded, "smollm2": smol}
    kw = dict(output_hidden_states=True, output_attentions=True, use_cache=True)
    for name in (*TINY_ARCHS, "smollm2"):
        loaded = loadeds[name]
        tr = backends.trace(loaded, PROMPT)
        o32, o64 = (eager_refs[name].run(tr.token_ids, dt, **kw) for dt in ("float32", "float64"))
        out.append(Case(name, loaded, tr, backends.stacked_layers(loaded, tr, with_pattern=True), o32, o64))
    return out


def _np(x) -> np.ndarray:
    """An HF output tensor [1, …] as numpy, batch dropped."""
    return x[0].numpy()


def _lse(logits: np.ndarray) -> np.ndarray:
    m = logits.max(-1, keepdims=True)
    return (m + np.log(np.exp(logits - m).sum(-1, keepdims=True)))[..., 0]


def _attention_route_error(loaded, lay, layer: int) -> np.ndarray:
    """[T, d]: how far SDPA's attention output (the forward's) and eager's (the replay's) can lie apart,
    computed from the same q, k, v. Per route: the weights within ``softmax_error``; each head's output
    Σ_j w_j v_j a T-term sum (γ_{T+1} with the division by Σ); the output projection an H·dh-term dot product
    (γ_{H·dh+1} with its bias) on its route's input. Two routes: twice that."""
    q, k, v = (lay[x][layer] for x in ("q", "k", "v"))
    H, T, dh = q.shape
    w, s, live = attention64(q, k)
    vr = np.repeat(np.abs(v.astype(np.float64)), H // v.shape[0], axis=0)
    h = w @ vr  # [H, T, dh] ≥ |each head's output|
    eh = softmax_error(q, k, w, s, live) @ vr + floats.gamma(T + 1) * h
    proj = roles.out_proj(roles.find_sites(loaded.model).attns[layer])
    wo = np.abs(proj.weight.detach().numpy().astype(np.float64))
    wo = wo if isinstance(proj, torch.nn.Linear) else wo.T  # [d, H·dh] (GPT-2's Conv1D stores [in, out])
    bias = 0.0 if proj.bias is None else np.abs(proj.bias.detach().numpy().astype(np.float64))

    def side_by_side(x):  # [H, T, dh] → [T, H·dh], the projection's input
        return x.transpose(1, 0, 2).reshape(T, H * dh)

    return 2 * side_by_side(eh) @ wo.T + 2 * floats.gamma(H * dh + 1) * (side_by_side(h) @ wo.T + bias)


def test_shapes_follow_the_contract(cases):
    for name, loaded, tr, lay, _, _ in cases:
        f = loaded.facts
        T, L, H, Hkv, dh, d = tr.n_tokens, f.n_layers, f.n_heads, f.n_kv_heads, f.head_dim, f.d_model
        assert tr.tokens.shape == tr.token_ids.shape == (T,), name
        assert tr.embeddings.shape == (T, d)
        assert tr.resid.shape == (L + 1, T, d)
        assert tr.attn_out_norm.shape == tr.mlp_out_norm.shape == (L, T)
        assert (tr.n_heads, tr.n_kv_heads, tr.head_dim) == (H, Hkv, dh)
        # derived per layer on demand, never stored by an HF trace
        assert not (tr.keeps("q") or tr.keeps("attn_pattern") or tr.keeps("attn_out") or tr.keeps("mlp_out")), name
        assert lay["attn_out"].shape == lay["mlp_out"].shape == (L, T, d)
        assert lay["q"].shape == (L, H, T, dh)
        assert lay["k"].shape == lay["v"].shape == (L, Hkv, T, dh)
        assert lay["attn_pattern"].shape == (L, H, T, T)
        assert tr.final_hidden.shape == (T, d)
        assert tr.last_logits.shape == (f.vocab_size,)


def test_tracing_changes_no_logit(cases):
    """The traced model's logits are an untouched eager HF model's, at every position: as close to the
    exact (float64) logits as HF's own float32 route is (the trace ran SDPA, HF eager)."""
    for name, loaded, tr, _, o32, o64 in cases:
        ref32, ref64 = _np(o32.logits), _np(o64.logits)
        floats.assert_as_accurate(backends.full_logits(loaded, tr), ref32, ref64, f"{name} logits")
        floats.assert_as_accurate(tr.last_logits, ref32[-1], ref64[-1], f"{name} last logits")
        # the stored top-K and log-sum-exp give exact probabilities at every position
        nt = backends.next_tokens(loaded, tr)
        floats.assert_as_accurate(nt.logsumexp, torch.logsumexp(torch.from_numpy(ref32), -1).numpy(), _lse(ref64), f"{name} lse")
        assert_greedy_choice(nt.ids[:, 0], ref32, ref64, f"{name} top-1")


def test_attention_equals_hf_eager_output_attentions(cases):
    for name, _, _tr, lay, o32, o64 in cases:
        p = lay["attn_pattern"]
        floats.assert_same(p[0], _np(o32.attentions[0]).astype(np.float16), f"{name} L0")  # the same embeddings, the same eager function
        for layer, (a32, a64) in enumerate(zip(o32.attentions, o64.attentions)):
            assert_f16_as_accurate(p[layer], _np(a64), allowed_error(_np(a32), _np(a64)), f"{name} L{layer}")


def test_attention_rows_sum_to_one_and_are_causal(cases):
    for name, _, tr, lay, _, _ in cases:
        p = lay["attn_pattern"]
        T = tr.n_tokens
        assert_rows_sum_to_one(p, name)
        assert np.all(p[..., np.triu_indices(T, 1)[0], np.triu_indices(T, 1)[1]] == 0), name


def test_attention_recomputed_from_traced_q_and_k(cases):
    """softmax(q·kᵀ/√dh + causal mask), query head h reading KV head h // (H/Hkv), recomputed in float64:
    the traced (float32, stored float16) weights are within float32's rounding of it (``softmax_error``)."""
    for name, _loaded, tr, lay, _, _ in cases:
        for layer in range(tr.n_layers):
            q, k, p = lay["q"][layer], lay["k"][layer], lay["attn_pattern"][layer]
            w, s, live = attention64(q, k)
            floats.assert_within(p, w, softmax_error(q, k, w, s, live) + floats.f16_rounding(p), f"{name} L{layer}",
                                 "float32 scores and softmax from these q, k + float16 storage")


def test_k_v_equal_hf_kv_cache(cases):
    for name, _, tr, lay, o32, o64 in cases:
        for layer in range(tr.n_layers):
            for what, x in (("keys", lay["k"][layer]), ("values", lay["v"][layer])):
                ref32, ref64 = (_np(getattr(o.past_key_values.layers[layer], what)) for o in (o32, o64))
                if layer == 0:  # projected from the same embeddings by the same layer
                    floats.assert_same(x, ref32, f"{name} L0 {what}")
                floats.assert_as_accurate(x, ref32, ref64, f"{name} L{layer} {what}")


def test_residual_stream_identity_and_hidden_states(cases):
    """resid[l+1] = resid[l] + attn_out + mlp_out up to the additions' rounding; the kept norms are those of
    the replayed sub-layer outputs up to SDPA-vs-eager rounding of one attention; the stream is HF eager's
    hidden states, as close to the exact ones as HF's own float32 route."""
    for name, loaded, tr, lay, o32, o64 in cases:
        r0, r1 = tr.resid[:-1].astype(np.float64), tr.resid[1:].astype(np.float64)
        a, m = lay["attn_out"].astype(np.float64), lay["mlp_out"].astype(np.float64)
        # the replay's mlp_out is fl(fl(r1 − r0) − attn_out), and the test adds it back in two more operations:
        # four roundings, each ≤ u·|its result| (γ_2: with the second-order terms)
        floats.assert_within(tr.resid[:-1] + lay["attn_out"] + lay["mlp_out"], tr.resid[1:],
                             floats.gamma(2) * (np.abs(r1 - r0) + np.abs(r0 + a) + np.abs(m) + np.abs(r1)), f"{name} identity")
        d = r0.shape[-1]
        for layer in range(tr.n_layers):
            # the forward's attention (SDPA) and the replay's (eager) on the same resid[l]: |‖x‖ − ‖y‖| ≤ ‖x − y‖,
            # plus the float32 norm's own rounding (γ_{d+2} relative)
            e = _attention_route_error(loaded, lay, layer)
            floats.assert_within(tr.attn_out_norm[layer], np.linalg.norm(a[layer], axis=-1),
                                 np.linalg.norm(e, axis=-1) + floats.gamma(d + 2) * np.linalg.norm(a[layer], axis=-1),
                                 f"{name} L{layer} ‖attn_out‖", "SDPA vs eager attention on one input + the norm's rounding")
            # a derived mlp_out is the rest of the block's step once the (eager) attention is taken out: it
            # carries that attention's difference from SDPA's, and the four roundings of the identity above
            em = e + floats.gamma(2) * (np.abs(r0[layer] + a[layer]) + np.abs(r1[layer]) + np.abs(r1[layer] - r0[layer]) + np.abs(m[layer]))
            floats.assert_within(tr.mlp_out_norm[layer], np.linalg.norm(m[layer], axis=-1),
                                 np.linalg.norm(em, axis=-1) + floats.gamma(d + 2) * np.linalg.norm(m[layer], axis=-1),
                                 f"{name} L{layer} ‖mlp_out‖", "SDPA vs eager attention + the identity's roundings + the norm's")
        hs32, hs64 = o32.hidden_states, o64.hidden_states  # HF: embeddings(+positions), each block's output …, the last after the final norm
        floats.assert_same(tr.resid[0], _np(hs32[0]), f"{name} resid[0]")
        for layer in range(1, tr.n_layers):
            floats.assert_as_accurate(tr.resid[layer], _np(hs32[layer]), _np(hs64[layer]), f"{name} resid[{layer}]")
        floats.assert_as_accurate(tr.final_hidden, _np(hs32[-1]), _np(hs64[-1]), f"{name} final_hidden")


def test_embeddings_are_rows_of_the_embedding_matrix(cases):
    for name, loaded, tr, _, _, _ in cases:
        w = loaded.model.get_input_embeddings().weight.detach().numpy()
        np.testing.assert_array_equal(tr.embeddings, w[tr.token_ids], err_msg=name)


def test_logits_are_the_lm_head_of_final_hidden(cases):
    for name, loaded, tr, _, _, _ in cases:
        w = loaded.model.get_output_embeddings().weight.detach().numpy()
        fh = tr.final_hidden[-1:]
        floats.assert_within(fh.astype(np.float64) @ w.T.astype(np.float64), tr.last_logits[None], floats.matmul_bound(fh, w.T), name,
                             "one d-term dot product per logit, by two routes (γ_d)")


def _hook_state(model):
    return {name: (tuple(m._forward_hooks), tuple(m._forward_pre_hooks)) for name, m in model.named_modules()}


def test_no_hook_flag_or_record_is_left_on_the_model(cases):
    """Tracing leaves the shared model exactly as it found it (hooks transformers itself may have
    installed for output_hidden_states are its own, and stay the same)."""
    for name, loaded, *_ in cases:
        before = _hook_state(loaded.model)
        config_before = loaded.model.config.to_json_string()
        tr = backends.trace(loaded, "Another prompt, to trace once more.")
        backends.layer_detail(loaded, tr, 0)
        assert _hook_state(loaded.model) == before, name
        assert loaded.model.config.to_json_string() == config_before
        assert loaded.model.config._attn_implementation == xray.NAME
    assert getattr(xray._local, "record", None) is None


def test_eight_threads_each_get_their_own_trace(smol):
    """Each thread traces its prompt and derives one layer (a replay) at the same time as the others."""
    prompts = [f"Prompt number {i}: {w}" for i, w in enumerate(
        ["apples", "苹果很好吃。", "the capital of France", "成都今天适合跑步吗", "小明把书交给小红", "KV cache", "RoPE rotates", "🙂 emoji"])]
    alone = {p: backends.trace(smol, p) for p in prompts}
    alone_detail = {p: backends.layer_detail(smol, alone[p], i) for i, p in enumerate(prompts)}
    together: dict[str, object] = {}
    together_detail: dict[str, object] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(prompts))

    def work(i, p):
        try:
            barrier.wait()
            together[p] = backends.trace(smol, p)
            together_detail[p] = backends.layer_detail(smol, together[p], i)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i, p)) for i, p in enumerate(prompts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for p in prompts:
        a, b = alone[p], together[p]
        for key in ("token_ids", "resid", "attn_out_norm", "mlp_out_norm", "last_logits", "final_hidden"):
            np.testing.assert_array_equal(getattr(a, key), getattr(b, key), err_msg=f"{p}: {key}")
        for key in ("q", "k", "v", "attn_pattern", "attn_out", "mlp_out"):
            np.testing.assert_array_equal(getattr(alone_detail[p], key), getattr(together_detail[p], key), err_msg=f"{p}: {key}")


def test_empty_prompt_and_truncation(smol):
    with pytest.raises(EmptyPromptError):
        backends.trace(smol, "   \n ")
    tr = backends.trace(smol, "word " * 700, max_tokens=64)
    assert tr.n_tokens == 64 and tr.truncated_from and tr.truncated_from > 64
    assert any("64" in n for n in tr.notes)


def test_chat_template_tokens(smol):
    tr = backends.trace(smol, "What is the capital of France?", chat=True)
    assert "<|im_start|>" in list(tr.tokens) and tr.text.endswith("<|im_start|>assistant\n")
    assert smol.tokenizer.decode(int(tr.last_logits.argmax())).strip() == "The"


def test_export_npz_has_exactly_the_contract_keys(smol, tmp_path):
    tr = backends.trace(smol, "Paris is the capital of")
    p = tmp_path / "t.npz"
    backends.export_npz(smol, tr, p)
    z = load_npz(p)
    assert set(z) == {"tokens", "token_ids", "embeddings", "resid", "attn_out", "mlp_out", "q", "k", "v",
                      "attn_pattern", "final_hidden", "logits", "meta"}
    assert z["logits"].shape == (tr.n_tokens, 49152)
    assert list(z["tokens"]) == list(tr.tokens)
    assert z["meta"]["facts"]["n_layers"] == 30 and z["meta"]["logits_positions"] == "all"
    np.testing.assert_array_equal(z["q"][3], backends.layer_detail(smol, tr, 3).q)
    assert z["meta"]["omitted"] == {}


def test_cli_trace_writes_the_npz(tmp_path):
    out = tmp_path / "cli.npz"
    r = subprocess.run([sys.executable, "-m", "core", "trace", "Hello world", "-o", str(out)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    z = np.load(out)
    assert z["resid"].shape[0] == 31 and json.loads(str(z["meta"]))["prompt"] == "Hello world"
    r = subprocess.run([sys.executable, "-m", "core", "trace", "", "-o", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "empty" in r.stderr


def _ids(smol, n):
    ids: list[int] = []
    while len(ids) < n:
        ids += smol.tokenizer("The history of the transformer architecture begins in 2017. ")["input_ids"]
    return ids[:n]


def test_trace_memory_budget_and_honest_size(smol):
    """A 256-token SmolLM2 trace stays within 40 MB, and ``nbytes`` is what pickling it costs
    (st.cache_data would pickle it; the byte-bounded cache counts it)."""
    import pickle

    tr = backends.trace_ids(smol, _ids(smol, 256))
    assert tr.n_tokens == 256
    assert tr.nbytes < 40e6, tr.nbytes
    assert abs(len(pickle.dumps(tr)) - tr.nbytes) < 0.02 * tr.nbytes


def _run_keeping_attention(ref, ids, dtype: str, layers) -> tuple[Any, dict[int, np.ndarray]]:
    """HF eager's forward of ``ids`` (KV cache kept) with the attention weights of ``layers`` only: all 30
    layers' at 1,024 tokens would be 1.1 GB in float32 and 2.3 GB in float64."""
    model = ref.model(dtype)
    kept: dict[int, np.ndarray] = {}
    hooks = [model.model.layers[layer].self_attn.register_forward_hook(
        lambda _m, _a, out, layer=layer: kept.__setitem__(layer, _np(out[1]))) for layer in layers]
    try:
        return ref.run(ids, dtype, use_cache=True), kept
    finally:
        for h in hooks:
            h.remove()


def test_long_trace_attention_equals_hf_eager_at_1024_tokens(smol, eager_refs):
    """At 1,024 tokens (several bands of query rows), layers derived on demand equal HF eager's
    output_attentions, rows sum to 1, nothing above the diagonal, and k/v equal HF's KV cache."""
    ids = _ids(smol, 1024)
    tr = backends.trace_ids(smol, ids)
    layers = (0, 13, 29)
    (o32, a32), (o64, a64) = (_run_keeping_attention(eager_refs["smollm2"], ids, dt, layers) for dt in ("float32", "float64"))
    T = len(ids)
    upper = np.triu_indices(T, 1)
    for layer in layers:
        d = backends.layer_detail(smol, tr, layer)
        assert_f16_as_accurate(d.attn_pattern, a64[layer], allowed_error(a32[layer], a64[layer]), f"L{layer}")
        assert_rows_sum_to_one(d.attn_pattern, f"L{layer} rows")
        assert np.all(d.attn_pattern[:, upper[0], upper[1]] == 0)
        k32, k64 = (_np(o.past_key_values.layers[layer].keys) for o in (o32, o64))
        if layer == 0:  # projected from the same embeddings by the same layer
            floats.assert_same(d.k, k32, "L0 keys")
        floats.assert_as_accurate(d.k, k32, k64, f"L{layer} keys")
    floats.assert_as_accurate(tr.last_logits, o32.logits[0, -1].numpy(), o64.logits[0, -1].numpy(), "last logits")


def test_a_replay_that_does_not_reproduce_the_stream_is_refused(smol):
    """The replayed block must give back the kept resid[l+1]; a tampered trace is refused, not drawn."""
    import dataclasses

    tr = backends.trace(smol, "The capital of France is")
    resid = tr.resid.copy()
    resid[5] += 1.0
    bad = dataclasses.replace(tr, resid=resid, q=None, attn_pattern=None, attn_out=None, mlp_out=None)  # left to derive, not read off tr
    with pytest.raises(UnsupportedArchitectureError, match="did not reproduce"):
        backends.layer_detail(smol, bad, 5)
    backends.layer_detail(smol, bad, 6)  # layer 6 reads resid[6], untouched: fine


def test_last_position_attention_is_kept_exactly(cases):
    """The trace keeps the last query's weights of every layer (what the prediction reads) for free:
    equal to the derived layers' last row and to HF eager's."""
    for name, _, tr, lay, o32, o64 in cases:
        assert tr.last_attn.shape == (tr.n_layers, tr.n_heads, tr.n_tokens)
        for layer in range(tr.n_layers):
            # the same scores from the same q, k by two routes (eager on the last row alone, and on every row)
            q, k, p = lay["q"][layer], lay["k"][layer], lay["attn_pattern"][layer][:, -1]
            w, s, live = attention64(q, k)
            floats.assert_within(tr.last_attn[layer], p, softmax_error(q, k, w, s, live, routes=2)[:, -1] + floats.f16_rounding(p),
                                 f"{name} L{layer} vs its replay", "two float32 routes of one softmax + float16 storage")
            # vs HF's stream: float32's error measured on the whole layer's weights (one row can round luckily)
            a32, a64 = _np(o32.attentions[layer]), _np(o64.attentions[layer])
            floats.assert_within(tr.last_attn[layer], a64[:, -1], allowed_error(a32, a64), f"{name} L{layer} vs HF",
                                 "ROUTE_FACTOR × HF float32's own error on this layer's weights")
