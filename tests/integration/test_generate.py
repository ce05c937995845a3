"""Generation, KV cache and chat template: every number checked against an independent reference
(HF generate, HF's own cache/trace, a hand computation), plus the three pages in both languages."""

from __future__ import annotations

import floats
import numpy as np
import pytest
from floats import allowed_error, assert_f16_as_accurate, assert_rows_sum_to_one
from helpers.generate import PROMPT, _hf_greedy, _ids

from conftest import ROOT
from core import backends
from core.common.i18n import t
from core.common.numbers import softmax
from core.engine import tokens
from core.engine.types import ConfigError, kv_bytes
from core.gen import chat_template, generate, kvcalc
from core.gen import figures as gen_fig
from core.gen.sampling import SamplingConfig

# ---------------------------------------------------------------------------------------------
# Stepper vs Hugging Face


def test_stepper_greedy_equals_hf_generate_smol(smol):
    ids = _ids(smol)
    st = generate.Stepper(smol, ids, None, max_steps=12)
    st.run()
    assert st.generated == _hf_greedy(smol, ids, 12)
    assert len(st.generated) == 12 and st.stop_reason == "max_steps"
    assert st.records[0].phase == "prefill" and st.records[0].n_input == len(ids)
    assert all(r.phase == "decode" and r.n_input == 1 for r in st.records[1:])


def test_cache_size_and_bytes(smol):
    ids = _ids(smol)
    T, n = len(ids), 5
    st = generate.Stepper(smol, ids, None, max_steps=50)
    st.prefill()
    for _ in range(n):
        st.step()
    f = smol.facts
    last = st.records[-1]
    assert generate.cache_length(st.cache) == last.kv_tokens == T + n
    expected = 2 * 30 * 3 * 64 * (T + n) * 4  # by hand: SmolLM2 float32
    assert last.kv_bytes == expected == kv_bytes(f.n_layers, f.n_kv_heads, f.head_dim, T + n, 4)
    assert last.kv_bytes_layers.shape == (30,) and set(last.kv_bytes_layers.tolist()) == {expected // 30}
    toks, tot, _per = st.kv_arrays()
    assert toks.tolist() == list(range(T, T + n + 1))  # grows by one position per decode step
    assert np.all(np.diff(tot) == f.kv_bytes_per_token(4))
    k, v = _cache_kv(st, 0)
    assert k.shape == (3, T + n, 64) and v.shape == (3, T + n, 64)


def _cache_kv(st: generate.Stepper, layer: int) -> tuple[np.ndarray, np.ndarray]:
    """The stepper's cached K and V of one layer as numpy, [Hkv, T, dh] each."""
    k, v = backends.cache_layers(st.cache)[layer]
    return k[0].float().numpy(), v[0].float().numpy()


def test_prompt_kv_equal_trace(smol, eager_refs):
    """The prefill's KV cache is the trace's. A prefill that records no weights runs the trace's own route
    (SDPA in every layer), so it holds the trace's keys and values bit for bit; one that records them runs
    eager attention in every layer, HF's eager model's route, so it holds HF's (and its weights are HF's)."""
    ids = _ids(smol, "苹果很好吃。苹果发布了新系统。")
    tr = backends.trace_ids(smol, ids)
    fast = generate.Stepper(smol, ids, None, max_steps=3, record_attention=False)
    fast.prefill()
    for layer in range(smol.facts.n_layers):
        k, v = _cache_kv(fast, layer)
        floats.assert_same(k, tr.k[layer], f"L{layer} keys")
        floats.assert_same(v, tr.v[layer], f"L{layer} values")
    for layer in (0, 13, 29):  # a replayed layer projects the same kept resid[l] the same way
        d = backends.layer_detail(smol, tr, layer)
        floats.assert_same(d.k, tr.k[layer], f"L{layer} replayed keys")
        floats.assert_same(d.v, tr.v[layer], f"L{layer} replayed values")
    st = generate.Stepper(smol, ids, None, max_steps=3)  # records the prefill's weights
    st.prefill()
    o32, o64 = (eager_refs["smollm2"].run(ids, dt, output_attentions=True, use_cache=True) for dt in ("float32", "float64"))
    for layer in range(smol.facts.n_layers):
        k, v = _cache_kv(st, layer)
        floats.assert_same(k, o32.cache.layers[layer].keys[0].numpy(), f"L{layer} recorded keys")
        floats.assert_same(v, o32.cache.layers[layer].values[0].numpy(), f"L{layer} recorded values")
    a32 = np.stack([a[0].numpy() for a in o32.attentions])
    floats.assert_same(st.prefill_pattern, a32.astype(np.float16), "the prefill's recorded weights")
    # … and the trace's attention pattern (derived on the SDPA stream) is those weights, up to float16
    # storage and float32 rounding no larger than HF's own
    for layer in range(smol.facts.n_layers):
        a64 = o64.attentions[layer][0].numpy()
        assert_f16_as_accurate(tr.attn_pattern[layer], a64, allowed_error(a32[layer], a64), f"L{layer} trace pattern")


def _hf_decode_rows(ref, ids, new) -> np.ndarray:
    """HF eager's own loop with its own cache: a prefill of ``ids``, then ``new`` one token at a time; the
    last step's attention rows over the cache, [L, H, Tk] float32."""
    import torch

    model = ref.model("float32")
    with torch.inference_mode():
        out = model(torch.tensor([ids]), use_cache=True)
        for tok in new:
            out = model(torch.tensor([[tok]]), cache=out.cache, use_cache=True, output_attentions=True)
    return np.stack([a[0, :, -1].numpy() for a in out.attentions])


def test_decode_attention_row_equals_full_forward(smol, eager_refs):
    """The new token's row over the cache equals the last row of a full forward over the same ids: the
    stepper's decode row is HF eager's cached decode's bit for bit (the same route), and that row is as
    close to the full forward's exact (float64) last row as HF's float32 full forward is."""
    ids = _ids(smol)
    st = generate.Stepper(smol, ids, None, max_steps=10)
    st.run(4)  # prefill + 3 decode steps
    rec = st.records[-1]
    fed = st.all_ids[: rec.kv_tokens]
    assert rec.attn.shape == (30, 9, len(fed))
    ref = eager_refs["smollm2"]
    cached = _hf_decode_rows(ref, ids, st.generated[:3])
    floats.assert_same(rec.attn, cached.astype(np.float16), "decode row vs HF's cached decode")
    o32, o64 = (ref.run(fed, dt, output_attentions=True) for dt in ("float32", "float64"))
    for layer in range(30):
        a32, a64 = o32.attentions[layer][0].numpy(), o64.attentions[layer][0].numpy()
        # float32's error measured on the whole layer's weights (one row alone can round luckily)
        floats.assert_within(cached[layer], a64[:, -1], allowed_error(a32, a64), f"L{layer} cached vs full",
                             "ROUTE_FACTOR × HF float32's own error on this layer's weights")
    assert_rows_sum_to_one(rec.attn, "decode rows")
    # the chosen token is the argmax of the full forward's last logits (greedy): logits within the allowed
    # error of the exact ones prefer no id whose exact logit is short of the maximum by more than twice that
    l32, l64 = o32.logits[0, -1].numpy(), o64.logits[0, -1].numpy()
    allowed = allowed_error(l32, l64)
    assert l64.max() - l64[rec.token_id] <= 2 * allowed
    # its probability: a logit error ≤ Δ moves a probability p by ≤ p·(e^{2Δ} − 1); stored as float32
    p64 = softmax(l64)[rec.token_id]
    floats.assert_within(rec.top_probs[0], p64, p64 * np.expm1(2 * allowed) + floats.U32 * p64, "top probability",
                         "the logits' allowed error through softmax + float32 storage")


def test_with_and_without_cache_same_tokens_smol(smol):
    ids = _ids(smol)
    with_c = generate.run_with_cache(smol, ids, 8)
    without = generate.run_without_cache(smol, ids, 8)
    assert without.token_ids == with_c.generated
    assert without.lengths == list(range(len(ids), len(ids) + 8))
    assert len(without.seconds) == 8 and all(s > 0 for s in without.seconds)


def test_one_tpot_measurement(smol):
    """measure_tpot is the one TPOT: warm-up runs untimed, then every decode step of every timed run."""
    ids = _ids(smol)
    m = generate.measure_tpot(smol, ids, n_decode=3, reps=2, warmup=1)
    assert m.n_prompt == len(ids) and m.n_decode == 3
    assert m.prefill.n == 2 and m.prefill.warmup == 1 and m.decode.n == 6  # 2 runs × 3 decode steps
    assert m.tpot == m.decode.median and m.prefill_per_token == m.prefill.median / len(ids)  # the same division
    costs = generate.measure_costs(smol, n_prefill=16, n_decode=2, reps=2)  # the KV page's Section 3: the same method
    assert costs.n_prompt == 16 and costs.decode.n == 4


def test_compare_with_without_repeats_and_agrees(smol):
    ids = generate.extended_prompt_ids(smol.tokenizer, PROMPT, False, 24)
    assert len(ids) >= 24
    c = generate.compare_with_without(smol, ids, 4, reps=2, warmup=1)
    assert c.same and c.n_done == 4 and c.stop_reason == "max_steps"
    assert c.with_total.n == c.without_total.n == 2
    assert len(c.with_seconds) == len(c.without_seconds) == 4
    assert c.without_lengths == list(range(len(ids), len(ids) + 4)) == c.with_lengths
    assert c.verdict.ratio >= 1.0 and c.verdict.faster in ("a", "b", "same")


def test_chat_prompt_extended_inside_the_template(smol):
    """Repeating a chat prompt repeats the question inside one user turn, not the whole template."""
    tok = smol.tokenizer
    ids = generate.extended_prompt_ids(tok, "What is the capital of France?", True, 128)
    text = tok.decode(ids)
    assert len(ids) >= 128 and text.count("<|im_start|>assistant") == 1 and text.count("<|im_start|>user") == 1
    assert generate.extended_prompt_ids(tok, "Hi", False, 0) == _ids(smol, "Hi")


def test_stops_at_end_token(smol):
    ids = _ids(smol, "What is the capital of France?", chat=True)
    st = generate.Stepper(smol, ids, None, max_steps=40)
    st.run()
    assert st.stop_reason == "eos" and st.generated[-1] == 2 and st.records[-1].token == "<|im_end|>"
    assert "Paris" in smol.tokenizer.decode(st.generated)
    assert st.step() is None  # nothing after the end token
    st2 = generate.Stepper(smol, ids, None, max_steps=3)
    st2.run()
    assert st2.stop_reason == "max_steps" and len(st2.generated) == 3


def test_sampling_seed_reproducible_and_applied(smol):
    ids = _ids(smol)
    cfg = SamplingConfig(temperature=1.3, top_k=0, top_p=1.0, seed=7)
    a = generate.run_with_cache(smol, ids, 6, cfg).generated
    b = generate.run_with_cache(smol, ids, 6, cfg).generated
    assert a == b
    others = [generate.run_with_cache(smol, ids, 6, SamplingConfig(temperature=1.3, seed=s)).generated for s in (1, 2)]
    assert any(o != a for o in others)  # the seed really drives the draw
    greedy = generate.run_with_cache(smol, ids, 6).generated
    top1 = generate.run_with_cache(smol, ids, 6, SamplingConfig(temperature=1.3, top_k=1, seed=5)).generated
    assert top1 == greedy  # top-k = 1 leaves only the argmax: the settings are applied
    # the same seed without the cache draws the same tokens
    assert generate.run_without_cache(smol, ids, 6, cfg).token_ids == a


def test_kvcalc_from_config(smol):
    s = kvcalc.from_config('{"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096}')
    assert (s.n_layers, s.n_kv_heads, s.head_dim) == (32, 8, 128)
    gpt2 = kvcalc.from_config({"n_layer": 12, "n_head": 12, "n_embd": 768})
    assert gpt2.n_kv_heads == 12 and gpt2.head_dim == 64 and gpt2.kind == "MHA"
    # the embedded model's own config gives the same bytes as its facts and its real cache
    smol_cfg = smol.model.config.to_dict()
    assert kvcalc.from_config(smol_cfg).kv_bytes_per_token(4) == smol.facts.kv_bytes_per_token(4)
    for bad in ("not json", "[1, 2]", '{"hidden_size": 64}', '{"num_hidden_layers": 2, "num_attention_heads": 6, "num_key_value_heads": 4, "hidden_size": 48}'):
        with pytest.raises(ConfigError):
            kvcalc.from_config(bad)


# ---------------------------------------------------------------------------------------------
# Chat template


def test_chat_rendering(smol):
    tok = smol.tokenizer
    r = chat_template.render(tok, [{"role": "user", "content": "What is the capital of France?"}])
    assert r.ids == tokens.encode(tok, "What is the capital of France?", chat=True).ids  # same as the tracer's chat mode
    assert r.generation_prompt == "<|im_start|>assistant\n"
    assert r.ids[-r.n_generation_prompt_tokens:] == tok("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    assert r.end_token == "<|im_end|>" and r.end_token_id == 2
    assert r.system_added  # SmolLM2's template adds its default system turn
    assert "".join(s for s, _ in r.segments) == r.text
    assert [s for s, sp in r.segments if sp].count("<|im_end|>") == r.ids.count(2) == 2
    assert sum(r.special) == r.ids.count(1) + r.ids.count(2)  # <|im_start|> = 1, <|im_end|> = 2
    r2 = chat_template.render(tok, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], add_generation_prompt=False)
    assert not r2.system_added and r2.generation_prompt == "" and r2.ids[-2:] == [2, tok("\n", add_special_tokens=False)["input_ids"][0]]
    with pytest.raises(ValueError):
        chat_template.render(tok, [{"role": "narrator", "content": "x"}])


def test_plot_specs_carry_the_numbers(smol):
    ids = _ids(smol)
    st = generate.Stepper(smol, ids, None, max_steps=4)
    st.run()
    toks, tot, _per = st.kv_arrays()
    fig = gen_fig.kv_growth(toks, tot, "zh")
    np.testing.assert_array_equal(fig.data[0].y, tot / 1024)
    assert list(fig.data[1].y) == toks.tolist() and "KV Cache" in fig.layout.title.text
    fig = gen_fig.timings([r.seconds for r in st.records], "en")
    np.testing.assert_array_equal(fig.data[0].y, np.array([r.seconds for r in st.records]) * 1000)
    rec = st.records[-1]
    fig = gen_fig.attention_row(rec.attn[5, 2], tokens.readable_tokens(smol.tokenizer, st.all_ids), len(ids), "t", "en")
    np.testing.assert_array_equal(fig.data[0].y, rec.attn[5, 2].astype(np.float32))  # float16 → float64: exact
    fig = gen_fig.prefill_matrix(st.prefill_pattern[0, 0], tokens.readable_tokens(smol.tokenizer, ids), "t", "en")
    z, n = np.asarray(fig.data[0].z, dtype=np.float64), len(ids)
    assert z.shape == (n, n) and (st.prefill_pattern[0, 0][np.triu_indices(n, 1)] == 0).all()  # the future: weight 0 …
    assert np.isnan(z[np.triu_indices(n, 1)]).all() and not np.isnan(z[np.tril_indices(n)]).any()  # … drawn blank (issue 26)


# ---------------------------------------------------------------------------------------------
# Pages


def _app(page: str, lang: str, prompt: str = PROMPT):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.session_state["lang"] = lang
    at.session_state["prompt"] = prompt
    at.switch_page(f"pages/{page}.py")
    at.run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    return at


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_generation_page(smol, lang):
    at = _app("generation", lang)
    assert at.toggle(key="chat").value  # SmolLM2 has a chat template: the stepper starts with it on
    ids = _ids(smol, chat=True)
    T = len(ids)
    at.button(key="generation_prefill").click().run()
    assert not at.exception and not at.error
    # one pass: no TPOT yet, said in words, and no empty timing axis
    assert any(("no decode step yet" if lang == "en" else "还没有 Decode 步骤") in c.value for c in at.caption)
    assert not any("0 decode steps" in c.value or "TPOT 0.0" in c.value for c in at.caption)
    n_charts = len(at.get("plotly_chart"))
    at.button(key="generation_next").click().run()
    assert not at.exception and not at.error
    assert len(at.get("plotly_chart")) == n_charts + 1  # the timing chart appears with the first decode step
    text = " ".join(c.value for c in at.caption) + " ".join(m.value for m in at.markdown)
    assert "TPOT" in text and ("attention" in text if lang == "en" else "注意力" in text)  # what else the passes recorded
    assert at.session_state["generation_stepper"].record_attention
    metrics = [m.value for m in at.metric]
    assert f"{T + 1} · {2 * 30 * 3 * 64 * (T + 1) * 4:,} B" in metrics  # the cache after one decode step
    expected = _hf_greedy(smol, ids, 2)
    assert at.session_state["generation_stepper"].generated == expected
    assert expected[0] not in smol.eos_ids()  # the first screen answers (no <|im_end|> at once)
    assert all(not m.proto.delta for m in at.metric)  # "id 2" is a caption, not a metric's ↑ delta
    assert any(c.value == f"id {expected[-1]}" for c in at.caption)
    assert len(at.get("plotly_chart")) >= 5
    at.button(key="generation_reset").click().run()
    assert not at.exception and not at.session_state["generation_stepper"].started
    assert "step" not in at.query_params


def test_generation_step_kept_and_linked_run_replayed(smol):
    """Leaving the stepper and coming back keeps the pass looked at; a link with step=3 replays the run."""
    at = _app("generation", "en")
    at.button(key="generation_run").click().run()  # prefill + 7 decode steps (Run 8)
    assert len(at.session_state["generation_stepper"].records) == 8
    at.slider(key="generation_step").set_value(2).run()
    at.switch_page("pages/logits.py")
    at.run()
    at.query_params.pop("step", None)  # a browser drops the page's URL state when it navigates away
    at.switch_page("pages/generation.py")
    at.run()
    assert not at.exception and at.slider(key="generation_step").value == 2
    from streamlit.testing.v1 import AppTest

    link = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    link.query_params.update({"step": "3", "prompt": PROMPT, "chat": "1"})
    link.switch_page("pages/generation.py")
    link.run()
    assert not link.exception and not link.error
    stp = link.session_state["generation_stepper"]
    assert len(stp.records) == 4 and link.slider(key="generation_step").value == 3
    assert stp.generated == _hf_greedy(smol, _ids(smol, chat=True), 4)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_kv_cache_page(lang):
    at = _app("kv_cache", lang)
    at.slider(key="kv_cache_n").set_value(4).run()
    at.button(key="kv_cache_measure").click().run()
    assert not at.exception and not at.error
    assert any(m.value.startswith("✓") for m in at.markdown)
    text = " ".join(m.value for m in at.markdown)
    verdicts = ("× faster", "× slower", "About the same") if lang == "en" else ("快了", "慢了", "差不多")
    assert sum(v in text for v in verdicts) == 1  # said once, the right way round
    assert ("median of" if lang == "en" else "次的中位数") in text  # totals and Section 3's costs: medians of repeated runs
    assert at.button(key="kv_cache_measure").label == ("Measure again" if lang == "en" else "重新测量")
    first = at.session_state["kv_cache_cmp"]
    at.button(key="kv_cache_measure").click().run()  # every press measures afresh
    assert not at.exception and at.session_state["kv_cache_cmp"][:5] == first[:5] and at.session_state["kv_cache_cmp"][5] == first[5] + 1
    at.button(key="kv_cache_costs_again").click().run()
    assert not at.exception and at.session_state["kv_cache_costs_run"] == 1
    assert all(not m.proto.delta for m in at.metric)
    at.selectbox(key="kv_cache_preset").set_value("Llama-3-8B").run()
    at.number_input(key="kv_cache_tokens").set_value(1).run()
    assert any("262,144" in c.value for c in at.caption)  # 2 × 32 layers × 8 KV heads × 128 × 4 B (float32, the default) × 1 token
    at.selectbox(key="kv_cache_preset").set_value(at.selectbox(key="kv_cache_preset").options[-1]).run()
    at.text_area(key="kv_cache_cfg").set_value("{oops").run()
    assert not at.exception and at.error  # a clear message, no traceback


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_chat_page(lang):
    at = _app("chat", lang)
    codes = [c.value for c in at.code]
    assert "<|im_start|>assistant⏎" in codes and any("id 2" in c for c in codes)
    # issue 14: the legend names the special chips' real look (the chip CSS: a dashed red frame), not "orange"
    from core.web import chips

    assert "dashed #b91c1c" in chips.KIND_STYLE["special"]
    legend = t("chat.legend", lang)
    assert any(legend == c.value for c in at.caption) and legend.startswith(("Red dashed", "红色虚线"))


def test_pages_empty_prompt():
    for page in ("generation", "kv_cache", "chat"):
        at = _app(page, "en", prompt="   ")
        assert not at.exception


def test_generation_page_toy():
    pytest.importorskip("core.toy")
    if not (ROOT / "assets" / "toy").is_dir():
        pytest.skip("the trained toy is not in assets/toy")
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.query_params["model"] = "toy"
    at.session_state["prompt"] = PROMPT
    at.switch_page("pages/generation.py")
    at.run()
    at.button(key="generation_prefill").click().run()
    at.button(key="generation_next").click().run()
    assert not at.exception and not at.error
    stp = at.session_state["generation_stepper"]
    assert stp.loaded.kind == "toy" and stp.records[-1].kv_tokens == len(stp.prompt_ids) + 1
    f = stp.loaded.facts
    assert stp.records[-1].kv_bytes == 2 * f.n_layers * f.n_kv_heads * f.head_dim * (len(stp.prompt_ids) + 1) * 4
    chat = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    chat.query_params["model"] = "toy"
    chat.switch_page("pages/chat.py")
    chat.run()
    assert not chat.exception and chat.warning  # "no chat template", said clearly


def test_chat_template_on_by_default_for_instruct_models(smol):
    """A model with a chat template starts with the switch on (its first answer is an answer, not
    <|im_end|>), the switch is explained in one line; a link's chat=0 and the toy start with it off."""
    from streamlit.testing.v1 import AppTest

    def app(**qp):
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
        at.query_params.update(qp)
        at.switch_page("pages/chat.py")
        at.run()
        assert not at.exception
        return at

    at = app(lang="en")
    assert at.toggle(key="chat").value and "1" in at.query_params["chat"]  # and the link says so
    assert any(c.value.startswith("On by default for a model with a chat template") for c in at.sidebar.caption)
    assert not app(lang="en", chat="0").toggle(key="chat").value
    assert not app(lang="en", model="toy").toggle(key="chat").value  # the toy's tokenizer has no template
    bare = tokens.encode(smol.tokenizer, "What is the capital of France?", chat=False).ids
    assert generate.run_with_cache(smol, bare, 1).generated[0] in smol.eos_ids()  # why: bare, it ends at once
