"""The toy transformer: equal to HF where it copies HF, self-consistent everywhere, and it learned something."""

from __future__ import annotations

import copy
import dataclasses
import re

import floats
import numpy as np
import pytest
import torch
from floats import assert_rows_sum_to_one, attention64, softmax_error

from core import toy
from core.common import i18n
from core.toy import ByteTokenizer, ToyConfig, ToyTransformer
from core.toy import figures as toy_fig

V = 300
IDS = torch.randint(0, V, (1, 23), generator=torch.Generator().manual_seed(0))


def _randomise(model: torch.nn.Module, seed: int = 0) -> None:
    torch.manual_seed(seed)
    with torch.no_grad():  # bigger than init so attention is far from uniform and mistakes show
        for p in model.parameters():
            p.normal_(0, 0.15) if p.dim() >= 2 else p.uniform_(0.5, 1.5)


def _llama(**kw):
    from transformers import LlamaConfig, LlamaForCausalLM

    m = LlamaForCausalLM(LlamaConfig(vocab_size=V, max_position_embeddings=128, attn_implementation="eager", **kw)).eval()
    _randomise(m)
    return m


HF_CASES = {
    "llama_gqa_tied_theta500": lambda: _llama(hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=6,
                                              num_key_value_heads=2, rope_theta=500.0, tie_word_embeddings=True),
    "llama_mha_untied_bias": lambda: _llama(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                                            num_key_value_heads=4, tie_word_embeddings=False, attention_bias=True, mlp_bias=True),
    "llama_mqa_headdim": lambda: _llama(hidden_size=32, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=1, head_dim=16, tie_word_embeddings=False, rms_norm_eps=1e-6),
}


def _qwen2():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    m = Qwen2ForCausalLM(Qwen2Config(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                     num_key_value_heads=2, tie_word_embeddings=False, max_position_embeddings=128,
                                     attn_implementation="eager")).eval()
    _randomise(m)
    return m


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    m = GPT2LMHeadModel(GPT2Config(vocab_size=V, n_embd=48, n_layer=2, n_head=4, n_positions=64, bos_token_id=1, eos_token_id=2,
                                   attn_implementation="eager")).eval()
    _randomise(m)
    return m


HF_CASES["qwen2_qkv_bias"] = _qwen2
HF_CASES["gpt2"] = _gpt2
# The toy copies HF eager's Llama-family arithmetic op for op (same kernels on the same tensors): the same bits.
# GPT-2 takes other kernels — the tanh GELU as a formula vs F.gelu, ÷√dh vs ×dh^-½, fused Conv1D projections —
# so it is held to float32's error, measured against HF's float64 twin.
SAME_ROUTE = {"llama_gqa_tied_theta500", "llama_mha_untied_bias", "llama_mqa_headdim", "qwen2_qkv_bias"}


def _twin64(case: str, hf):
    """HF's model in float64 (the exact answer to float32's eyes), for the cases that take other kernels."""
    return None if case in SAME_ROUTE else copy.deepcopy(hf).double()


def _assert_equal_hf(ours, ref32, ref64, case: str, what: str) -> None:
    if case in SAME_ROUTE:
        floats.assert_same(ours, ref32, f"{case} {what}")
    else:
        floats.assert_as_accurate(ours, ref32, ref64, f"{case} {what}")


@pytest.mark.parametrize("case", sorted(HF_CASES))
def test_from_hf_logits_equal_hf(case):
    hf = HF_CASES[case]()
    model = ToyTransformer.from_hf(hf)
    twin = _twin64(case, hf)
    with torch.no_grad():
        ref = hf(IDS).logits
        ours, _ = model(IDS)
        ref64 = None if twin is None else twin(IDS).logits.numpy()
    assert ref.abs().max() > 0.5  # a real signal, not all zeros
    _assert_equal_hf(ours.numpy(), ref.numpy(), ref64, case, "logits")
    assert model.n_params() == hf.num_parameters()


@pytest.mark.parametrize("case", ["llama_gqa_tied_theta500", "gpt2"])
def test_from_hf_kv_cache_equals_hf_cache(case):
    hf = HF_CASES[case]()
    model = ToyTransformer.from_hf(hf)
    twin = _twin64(case, hf)
    with torch.no_grad():
        out = hf(IDS, use_cache=True)
        _, kv = model(IDS, use_cache=True)
        out64 = None if twin is None else twin(IDS, use_cache=True)
    for layer, (k, v) in enumerate(kv):
        for what, x in (("keys", k), ("values", v)):
            ref32 = getattr(out.cache.layers[layer], what).numpy()
            ref64 = None if out64 is None else getattr(out64.cache.layers[layer], what).numpy()
            _assert_equal_hf(x.numpy(), ref32, ref64, case, f"L{layer} {what}")


@pytest.mark.parametrize("position,kv_heads,norm,placement", [
    ("rope", 2, "rmsnorm", "pre"), ("learned", 4, "layernorm", "pre"), ("sinusoidal", 1, "rmsnorm", "post"), ("none", 4, "layernorm", "pre")])
def test_cached_decoding_equals_full_forward(position, kv_heads, norm, placement):
    torch.manual_seed(1)
    cfg = ToyConfig(vocab_size=V, d_model=32, n_layers=2, n_heads=4, n_kv_heads=kv_heads, position=position, norm=norm,
                    norm_placement=placement, ffn="gelu" if norm == "layernorm" else "swiglu", d_ff=48, max_positions=64, tied=False)
    model = ToyTransformer(cfg).eval()
    _randomise(model, 3)
    with torch.no_grad():
        full, _ = model(IDS)
        _, kv = model(IDS[:, :7], use_cache=True)  # prefill 7 tokens, then decode one at a time
        steps = []
        for i in range(7, IDS.shape[1]):
            logit, kv = model(IDS[:, i : i + 1], past_kv=kv, use_cache=True)
            steps.append(logit)
        full64, _ = copy.deepcopy(model).double()(IDS)  # the exact answer to float32's eyes
    assert kv[0][0].shape == (1, kv_heads, IDS.shape[1], cfg.dh)
    floats.assert_as_accurate(torch.cat(steps, dim=1).numpy(), full[:, 7:].numpy(), full64[:, 7:].numpy(), "cached decoding")


def test_config_is_validated():
    for bad in (dict(n_heads=4, n_kv_heads=3), dict(position="alibi"), dict(norm="batchnorm"), dict(d_model=30, n_heads=4),
                dict(norm_placement="middle"), dict(ffn="relu"), dict(d_model=20, n_heads=4, position="rope")):
        with pytest.raises(ValueError):
            ToyConfig(**bad)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ToyConfig().d_model = 8  # frozen


def test_tokenizer_handles_any_text():
    tok = ByteTokenizer()
    for s in ("hello", "我喜欢你", "🙂 ok\n\t", "é"):
        ids = tok(s)["input_ids"]
        assert ids[0] == tok.bos_token_id and len(ids) == 1 + len(s.encode("utf-8"))
        assert tok.decode(ids, skip_special_tokens=True) == s
    from core.engine.tokens import readable_tokens

    assert readable_tokens(tok, tok("我a")["input_ids"]) == ["<bos>", "⟨E6⟩", "⟨88⟩", "⟨91⟩", "a"]
    assert len(tok) == 259 and tok.chat_template is None and tok.eos_token_id == 257


# ---------------------------------------------------------------------------------------------
# The trained toy and its trace


@pytest.fixture(scope="module")
def trained():
    from core.backends import load_model

    return load_model("toy")


@pytest.fixture(scope="module")
def tr(trained):
    from core.backends import trace

    return trace(trained, "小明把书交给小红。The cat sat on the mat, the cat sat.")


def test_trained_toy_loads_with_facts(trained):
    f = trained.facts
    assert trained.kind == "toy" and trained.spec == "toy" and f.n_layers == 2 and f.n_heads == 4 and f.n_kv_heads == 4
    assert f.attention_kind == "MHA" and f.position_type == "RoPE" and f.ffn_type == "SwiGLU" and f.tied_embeddings
    assert f.n_params == sum(p.numel() for p in trained.model.parameters()) < 200_000


def test_trace_fields_and_shapes(trained, tr):
    L, H, Hkv, dh, d, T = 2, 4, 4, 32, 64, tr.n_tokens
    assert 1 + len("小明把书交给小红。The cat sat on the mat, the cat sat.".encode()) == T
    assert tr.q.shape == (L, H, T, dh) and tr.k.shape == (L, Hkv, T, dh) and tr.resid.shape == (L + 1, T, d)
    assert tr.attn_pattern.dtype == np.float16 and tr.meta["model_kind"] == "toy" and tr.meta["facts"]["n_heads"] == H
    assert tr.site("scores_raw").shape == (L, H, T, T) and tr.site("act").shape == (L, T, 128) and tr.site("mask").shape == (T, T)
    emb = trained.model.embed_tokens.weight.detach().numpy()
    np.testing.assert_array_equal(tr.embeddings, emb[tr.token_ids])
    np.testing.assert_array_equal(tr.resid[0], tr.embeddings)  # RoPE adds nothing to the stream


def test_trace_invariants(trained, tr):
    w = tr.attn_pattern
    assert_rows_sum_to_one(w, "rows")
    assert np.abs(np.triu(w.astype(np.float64), 1)).max() == 0.0
    floats.assert_same(tr.resid[1:], tr.resid[:-1] + tr.attn_out + tr.mlp_out, "identity")  # the block's own two additions, in order
    # softmax(q kᵀ/√dh + mask) from the traced q and k, in float64, with the GQA head mapping
    for layer in range(tr.n_layers):
        q, k = tr.q[layer], tr.k[layer]
        p, s, live = attention64(q, k)
        floats.assert_within(w[layer], p, softmax_error(q, k, p, s, live) + floats.f16_rounding(w[layer]), f"L{layer}",
                             "float32 scores and softmax from these q, k + float16 storage")


def test_toy_sites_are_consistent(trained, tr):
    ex, dh = {name: tr.site(name) for name in tr.kept_sites}, tr.head_dim
    floats.assert_same(ex["scores_scaled"], ex["scores_raw"] * np.float32(dh ** -0.5), "scaled")  # one float32 product each
    np.testing.assert_array_equal(ex["mask"], np.triu(np.full(ex["mask"].shape, -np.inf, dtype=np.float32), 1))
    floats.assert_same(ex["scores_masked"], ex["scores_scaled"] + ex["mask"], "masked")
    g = trained.facts.group_size
    v_rep = np.repeat(tr.v, g, axis=1)  # [L, H, T, dh]
    p = tr.attn_pattern.astype(np.float64)
    # head_out = w·v in float32 vs the float16-stored weights times v: the weights' rounding through |v|, plus
    # two routes of each T-term dot product
    floats.assert_within(ex["head_out"], tr.attn_pattern.astype(np.float32) @ v_rep,
                         floats.f16_rounding(tr.attn_pattern) @ np.abs(v_rep) + floats.matmul_bound(p + floats.f16_rounding(p), v_rep),
                         "head_out", "float16 storage of the weights + two routes of w·v")
    L, H, T, _ = ex["head_out"].shape
    np.testing.assert_array_equal(ex["concat"], ex["head_out"].transpose(0, 2, 1, 3).reshape(L, T, H * dh))
    np.testing.assert_array_equal(ex["o_proj"], tr.attn_out)
    gate, up = ex["gate"].astype(np.float64), ex["up"].astype(np.float64)
    # silu(gate)·up by hand in float64 vs F.silu in float32: exp (≤ 2 ulps) and three more roundings
    # (1 + e, the division, the product), each relative to the result
    floats.assert_within(ex["act"], gate / (1 + np.exp(-gate)) * up, floats.gamma(7) * np.abs(gate / (1 + np.exp(-gate)) * up), "act",
                         "float32 silu(gate)·up: exp to 2 ulps + three roundings")
    wd = trained.model.layers[0].mlp.down_proj.weight.detach().numpy()
    floats.assert_within(tr.mlp_out[0], ex["act"][0].astype(np.float64) @ wd.T.astype(np.float64), floats.matmul_bound(ex["act"][0], wd.T),
                         "down", "two routes of each d_ff-term dot product")


def test_tracing_changes_no_logit(trained, tr):
    from core.backends import full_logits, next_tokens

    with torch.no_grad():
        ref, _ = trained.model(torch.tensor([tr.token_ids.tolist()]))
    ref = ref[0].numpy()
    # the trace's own forward, and the LM head on its final hidden states: the same calls as the plain forward
    floats.assert_same(full_logits(trained, tr), ref, "full logits")
    floats.assert_same(tr.last_logits, ref[-1], "last logits")
    nt = next_tokens(trained, tr)
    np.testing.assert_array_equal(nt.ids[:, 0], ref.argmax(-1))
    r64 = ref.astype(np.float64)
    lse = np.log(np.exp(r64).sum(-1))
    spread = r64.max(-1) - r64.min(-1)
    # float64 arithmetic stored as float32 (half a float32 spacing), and the two float64 routes' own error: exp
    # (≤ 2 ulps) and a subtraction of the maximum, a V-term sum, the log
    floats.assert_within(nt.logsumexp, lse, floats.U32 * np.abs(lse) + 2 * (floats.gamma(r64.shape[-1] + 1, floats.U64)
                                                                          + floats.U64 * (spread + np.abs(lse) + 4)),
                         "lse", "float32 storage + two float64 routes")


def test_bad_prompts(trained):
    from core.backends import trace
    from core.engine.types import EmptyPromptError

    with pytest.raises(EmptyPromptError):
        trace(trained, "   ")
    long = trace(trained, "字" * 300, max_tokens=100)
    assert long.n_tokens == 100 and long.truncated_from == 901 and long.notes
    chat = trace(trained, "hi 🙂", chat=True)  # no chat template: plain text, with a note
    assert chat.notes and chat.n_tokens == 3 + 4


def test_post_norm_and_bidirectional_trace():
    torch.manual_seed(0)
    cfg = ToyConfig(d_model=32, n_heads=4, n_kv_heads=4, norm="layernorm", norm_placement="post", ffn="gelu", position="learned", causal=False)
    loaded = toy.wrap(ToyTransformer(cfg), "test")
    t = toy.trace_toy(loaded, "abcdef")
    assert any("Post-norm" in n for n in t.notes) and any("Bidirectional" in n for n in t.notes)
    gap = np.abs(t.resid[1:] - (t.resid[:-1] + t.attn_out + t.mlp_out)).max()
    assert gap > 1e-2  # the identity really fails for post-norm: the note is not decoration
    assert np.triu(t.attn_pattern[0, 0].astype(np.float32), 1).max() > 0.01  # future positions are seen
    floats.assert_same(t.resid[0], t.embeddings + t.site("pos"), "resid[0]")  # the model's one addition
    np.testing.assert_array_equal(t.site("mask"), 0.0)


# ---------------------------------------------------------------------------------------------
# Word order, training


def test_word_order_demo():
    rows = {(r["position"], r["causal"]): r for r in toy.word_order_demo("我喜欢你", "你喜欢我")}
    same = rows[("none", False)]
    assert same["pooled_diff"] < 1e-5 and same["permuted_diff"] < 1e-5 and not same["distinguishable"]
    for key in (("none", True), ("sinusoidal", False), ("rope", False), ("learned", False)):
        assert rows[key]["pooled_diff"] > 1e-3 and rows[key]["distinguishable"], key
    with pytest.raises(ValueError):
        toy.word_order_demo("我喜欢你", "我喜欢他")


@pytest.mark.parametrize("lang", i18n.LANGS)
def test_word_order_shows_translated_position_names(lang):
    """The table and the bars name each setting in the page's language; the rows keep the internal keys."""
    rows = toy.word_order_demo("我喜欢你", "你喜欢我")
    names = [i18n.t(f"toy.wo_pos.{r['position']}", lang) for r in rows]
    table = toy_fig.word_order_table(rows, lang)
    assert table[i18n.t("toy.wo_position", lang)].tolist() == names
    bars = list(toy_fig.fig_word_order(rows, lang).data[0].x)
    assert [b.split(" · ")[0] for b in bars] == names
    assert [r["position"] for r in rows] == ["none", "none", "sinusoidal", "rope", "learned"]
    if lang == "zh":  # no English method name left on the Chinese page (RoPE is a name)
        shown = " ".join([*names, *bars])
        assert not re.search(r"none|sinusoidal|learned|rope", shown), shown


def test_trained_toy_copies_from_context(trained):
    """The shipped toy has a previous-token head in layer 0 and an induction head in layer 1, at any segment length."""
    from core.toy.train import induction_report

    for seg_len in (10, 20, 40):
        rep = induction_report(trained.model, seg_len=seg_len, seed=7)
        assert rep["loss_first_copy"] > 3.0  # random letters: nothing to predict them from
        assert rep["loss_second_copy"] < 0.3 * rep["loss_first_copy"]  # the repeat is predicted from context
        assert rep["prev_token_head"]["layer"] == 0 and rep["prev_token_head"]["score"] > 0.5
        assert rep["induction_head"]["layer"] == 1 and rep["induction_head"]["score"] > 0.5
    curve = toy.load_loss_curve()
    assert curve["loss"][0] > 5.0 and np.mean(curve["loss"][-50:]) < 0.6 * curve["loss"][0]


def test_train_reduces_loss_and_callback_can_stop():
    from core.toy.train import train

    seen = []
    cfg = ToyConfig(d_model=32, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=32)
    _model, losses = train(cfg, steps=40, seed=0, callback=lambda s, loss, m: seen.append(s) or True, batch=8, seq_len=32)
    assert seen == list(range(40)) and np.mean(losses[-5:]) < losses[0] - 1.0
    _, short = train(cfg, steps=40, seed=0, callback=lambda s, loss, m: s < 4, batch=8, seq_len=32)
    assert len(short) == 5 and short == losses[:5]  # seeded: the same first steps


def test_live_budget_holds_the_default_run():
    """The default live run fits its time budget with room to spare on the machine that trained the
    shipped toy (2 cores): its recorded time per step × the default steps, three times over."""
    from core.toy import load_loss_curve
    from core.toy.train import LIVE_SECONDS, LIVE_STEPS

    curve = load_loss_curve()
    per_step = curve["seconds"] / len(curve["loss"])  # the shipped run: same config, batch and length
    assert 3 * LIVE_STEPS * per_step <= LIVE_SECONDS


def test_live_run_cut_short_is_a_warning_not_a_success():
    from core.toy import figures as toy_fig
    from core.toy import load_loss_curve
    from core.toy.train import train_live

    shipped = load_loss_curve()
    seen = []
    cut = train_live(50, 0, lambda s, n, loss: seen.append(s), lambda *a: None, seconds=0.0)  # no time at all: one step
    assert cut["steps_done"] == len(cut["losses"]) == len(seen) == 1 and not cut["completed"] and cut["stop"] == "time"
    assert cut["step_timing"]["median"] > 0 and cut["ui_seconds"] >= 0
    level, text = toy_fig.live_note(cut, shipped, "en")
    assert level == "warning" and text.startswith("Stopped after 1 of 50 steps: the 0 s time limit ran out")
    assert toy_fig.live_note(cut, shipped, "zh")[1].startswith("只训练了 50 步中的 1 步就停止了")
    full = train_live(3, 0, lambda *a: None, lambda *a: None, seconds=1e6)
    assert full["completed"] and full["stop"] == "done" and full["steps_done"] == 3
    level, text = toy_fig.live_note(full, shipped, "en")
    assert level == "success" and text.startswith("Trained all 3 steps in")


# ---------------------------------------------------------------------------------------------
# Plots and the page


def test_site_figure_spec(tr):
    from core.toy import figures as toy_fig

    fig = toy_fig.fig_site(tr, "mask", 0, 0, "zh")
    z = np.asarray(fig.data[0].z, dtype=float)
    assert np.isnan(z[0, 1]) and z[1, 0] == 0.0 and fig.data[0].text[0][1] == "−∞"
    assert "因果" in fig.layout.title.text and fig.data[0].customdata[1][0][0] == "1·小‹E5›"  # the character its byte belongs to
    assert len(fig.layout.yaxis.ticktext) <= toy_fig.TOY_TICKS  # every k-th position labelled, every cell in the hover
    fig = toy_fig.fig_site(tr, "attn_pattern", 1, 2, "en")
    np.testing.assert_array_equal(np.asarray(fig.data[0].z, dtype=float), tr.attn_pattern[1, 2].astype(np.float32))  # float16 → float: exact
    assert toy_fig.stage_array(tr, "act", 1, 0).shape == (tr.n_tokens, 128)


def test_facts_table(trained):
    from core.toy import figures as toy_fig

    df = toy_fig.facts_table(trained.facts.to_dict(), {"name": "SmolLM2", "n_layers": 30, "n_heads": 9, "n_params": 134515008}, "en")
    assert list(df.columns) == ["Field", "Toy", "SmolLM2"]
    row = df[df["Field"] == "query heads"].iloc[0]
    assert row["Toy"] == "4" and row["SmolLM2"] == "9"
