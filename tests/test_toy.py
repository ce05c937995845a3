"""The toy transformer: equal to HF where it copies HF, self-consistent everywhere, and it learned something."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from core import toy
from core.engine import i18n
from core.toy import ByteTokenizer, ToyConfig, ToyTransformer
from core.toy import figures as toy_fig

ROOT = Path(__file__).resolve().parent.parent
V = 300
IDS = torch.randint(0, V, (1, 23), generator=torch.Generator().manual_seed(0))


def _randomise(model: torch.nn.Module, seed: int = 0) -> None:
    torch.manual_seed(seed)
    with torch.no_grad():  # bigger than init so attention is far from uniform and mistakes show
        for p in model.parameters():
            p.normal_(0, 0.15) if p.dim() >= 2 else p.uniform_(0.5, 1.5)


def _llama(**kw):
    from transformers import LlamaConfig, LlamaForCausalLM

    m = LlamaForCausalLM(LlamaConfig(vocab_size=V, max_position_embeddings=128, **kw)).eval()
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
                                     num_key_value_heads=2, tie_word_embeddings=False, max_position_embeddings=128)).eval()
    _randomise(m)
    return m


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    m = GPT2LMHeadModel(GPT2Config(vocab_size=V, n_embd=48, n_layer=2, n_head=4, n_positions=64, bos_token_id=1, eos_token_id=2)).eval()
    _randomise(m)
    return m


HF_CASES["qwen2_qkv_bias"] = _qwen2
HF_CASES["gpt2"] = _gpt2


@pytest.mark.parametrize("case", sorted(HF_CASES))
def test_from_hf_logits_equal_hf(case):
    hf = HF_CASES[case]()
    model = ToyTransformer.from_hf(hf)
    with torch.no_grad():
        ref = hf(IDS).logits
        ours, _ = model(IDS)
    assert ref.abs().max() > 0.5  # a real signal, not all zeros
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-4)
    assert model.n_params() == hf.num_parameters()


@pytest.mark.parametrize("case", ["llama_gqa_tied_theta500", "gpt2"])
def test_from_hf_kv_cache_equals_hf_cache(case):
    hf = HF_CASES[case]()
    model = ToyTransformer.from_hf(hf)
    with torch.no_grad():
        out = hf(IDS, use_cache=True)
        _, kv = model(IDS, use_cache=True)
    for layer, (k, v) in enumerate(kv):
        hk, hv = out.past_key_values.layers[layer].keys, out.past_key_values.layers[layer].values
        torch.testing.assert_close(k, hk, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(v, hv, rtol=1e-5, atol=1e-5)


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
    assert kv[0][0].shape == (1, kv_heads, IDS.shape[1], cfg.dh)
    torch.testing.assert_close(torch.cat(steps, dim=1), full[:, 7:], rtol=1e-5, atol=1e-5)


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
    assert tr.extras["scores_raw"].shape == (L, H, T, T) and tr.extras["act"].shape == (L, T, 128) and tr.extras["mask"].shape == (T, T)
    emb = trained.model.embed_tokens.weight.detach().numpy()
    np.testing.assert_array_equal(tr.embeddings, emb[tr.token_ids])
    np.testing.assert_array_equal(tr.resid[0], tr.embeddings)  # RoPE adds nothing to the stream


def test_trace_invariants(trained, tr):
    w = tr.attn_pattern.astype(np.float64)
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=2e-3)
    assert np.abs(np.triu(w, 1)).max() == 0.0
    np.testing.assert_allclose(tr.resid[1:], tr.resid[:-1] + tr.attn_out + tr.mlp_out, atol=1e-5)
    # softmax(q kᵀ/√dh + mask) from the traced q and k, in float64, with the GQA head mapping
    T, dh = tr.n_tokens, tr.head_dim
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for layer in range(tr.n_layers):
        for h in range(tr.n_heads):
            s = tr.q[layer, h].astype(np.float64) @ tr.k[layer, tr.kv_head_of(h)].astype(np.float64).T / math.sqrt(dh) + mask
            p = np.exp(s - s.max(-1, keepdims=True))
            np.testing.assert_allclose(w[layer, h], p / p.sum(-1, keepdims=True), atol=1e-3)


def test_extras_are_consistent(trained, tr):
    ex, dh = tr.extras, tr.head_dim
    np.testing.assert_allclose(ex["scores_scaled"], ex["scores_raw"] / math.sqrt(dh), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(ex["mask"], np.triu(np.full(ex["mask"].shape, -np.inf, dtype=np.float32), 1))
    np.testing.assert_allclose(ex["scores_masked"], ex["scores_scaled"] + ex["mask"], atol=1e-6)
    g = trained.facts.group_size
    v_rep = np.repeat(tr.v, g, axis=1)  # [L, H, T, dh]
    np.testing.assert_allclose(ex["head_out"], tr.attn_pattern.astype(np.float32) @ v_rep, atol=2e-3)
    L, H, T, _ = ex["head_out"].shape
    np.testing.assert_array_equal(ex["concat"], ex["head_out"].transpose(0, 2, 1, 3).reshape(L, T, H * dh))
    np.testing.assert_array_equal(ex["o_proj"], tr.attn_out)
    silu = ex["gate"] / (1 + np.exp(-ex["gate"]))
    np.testing.assert_allclose(ex["act"], silu * ex["up"], rtol=1e-4, atol=1e-5)
    wd = trained.model.layers[0].mlp.down_proj.weight.detach().numpy()
    np.testing.assert_allclose(tr.mlp_out[0], ex["act"][0] @ wd.T, atol=1e-4)


def test_tracing_changes_no_logit(trained, tr):
    from core.backends import full_logits, next_tokens

    with torch.no_grad():
        ref, _ = trained.model(torch.tensor([tr.token_ids.tolist()]))
    ref = ref[0].numpy()
    full = full_logits(trained, tr)
    np.testing.assert_allclose(full, ref, atol=1e-5)
    np.testing.assert_allclose(tr.last_logits, ref[-1], atol=1e-5)
    nt = next_tokens(trained, tr)
    np.testing.assert_array_equal(nt.ids[:, 0], ref.argmax(-1))
    np.testing.assert_allclose(nt.logsumexp, np.log(np.exp(ref.astype(np.float64)).sum(-1)), atol=1e-4)


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
    np.testing.assert_allclose(t.resid[0], t.embeddings + t.extras["pos"], atol=1e-6)
    np.testing.assert_array_equal(t.extras["mask"], 0.0)


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
    assert LIVE_STEPS == 300 and 3 * LIVE_STEPS * per_step <= LIVE_SECONDS


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
    fig = toy_fig.fig_site(tr, "weights", 1, 2, "en")
    np.testing.assert_allclose(np.asarray(fig.data[0].z, dtype=float), tr.attn_pattern[1, 2].astype(np.float32))
    assert toy_fig.stage_array(tr, "act", 1, 0).shape == (tr.n_tokens, 128)


def test_facts_table(trained):
    from core.toy import figures as toy_fig

    df = toy_fig.facts_table(trained.facts.to_dict(), {"name": "SmolLM2", "n_layers": 30, "n_heads": 9, "n_params": 134515008}, "en")
    assert list(df.columns) == ["Field", "Toy", "SmolLM2"]
    row = df[df["Field"] == "query heads"].iloc[0]
    assert row["Toy"] == "4" and row["SmolLM2"] == "9"


def _apptest(lang: str, model: str | None = None):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.query_params["lang"] = lang
    if model:
        at.query_params["model"] = model
    at.switch_page("pages/toy.py")
    at.run()
    assert not at.exception, at.exception
    return at


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_page_renders(lang):
    at = _apptest(lang)
    title = "Toy transformer" if lang == "en" else "玩具 Transformer"
    assert at.title[0].value == title
    assert len(at.get("plotly_chart")) >= 3 and len(at.dataframe) == 2
    facts = at.dataframe[0].value
    assert facts.shape == (16, 3) and "30" in facts.iloc[:, 2].tolist()  # SmolLM2's 30 layers beside the toy's 2
    verdicts = at.dataframe[1].value.iloc[:, -1].tolist()
    assert verdicts[0] == ("cannot tell A from B" if lang == "en" else "无法区分 A 与 B") and len(set(verdicts)) == 2
    assert not [m for m in at.markdown if "⟦" in m.value]  # no missing i18n key


def test_page_with_toy_as_sidebar_model_and_empty_prompt():
    at = _apptest("en", model="toy")
    assert at.session_state["model_spec_ok"] == "toy"
    assert any(b.label == "Download trace (.npz)" for b in at.get("download_button"))
    at.session_state["prompt"] = "   "
    at.run()
    assert not at.exception and any("Type a prompt" in i.value for i in at.info)


def test_page_live_run_cut_short_warns(monkeypatch):
    """The page's live run, its time budget spent at once: a warning with steps done / requested, no success box."""
    import core.toy.train as toy_train

    at = _apptest("en")
    monkeypatch.setattr(toy_train, "LIVE_SECONDS", 0.0)
    at.slider(key="toy_train_steps").set_value(50).run()
    at.button(key="toy_train_go").click().run()
    assert not at.exception
    assert not at.success and any(w.value.startswith("Stopped after 1 of 50 steps") for w in at.warning)
    res = at.session_state["toy_live"]
    assert res["steps_done"] == 1 and not res["completed"]
    monkeypatch.setattr(toy_train, "LIVE_SECONDS", 1e6)  # a run that finishes: a success, and no chart drawn twice
    at.button(key="toy_train_go").click().run()
    assert not at.exception and at.success and not at.warning
    assert at.success[0].value.startswith("Trained all 50 steps in")


def test_toy_page_notes_are_in_the_page_language(smol):
    """With the chat switch on (SmolLM2's default), the toy's byte tokenizer has no template: the page says
    so in the reader's language (the trace's own note is English, for the export)."""
    from conftest import all_text, app_run

    at = app_run("toy", lang="zh", chat="1")
    text = all_text(at)
    assert not at.exception and "这个模型的分词器没有对话模板" in text and "This tokenizer has no chat template" not in text
