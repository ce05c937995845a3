"""The Chinese lesson (issue 25): a Chinese UI starts on a Chinese example, the stepper shows the bytes
still waiting instead of U+FFFD, the Chinese cause-and-effect pair fits SmolLM2's tokenizer, the zh
strings render their bold (CJK flanking), and the zh pages have no English left where the issue found it."""

from __future__ import annotations

import json

import numpy as np

from core.engine import tokens


def test_zh_ui_starts_on_a_chinese_example_and_says_why(smol):
    """A Chinese UI opens on the zh default (not "What is the capital of France?"), and the tokens page
    says SmolLM2 was trained mostly on English with the token counts of this tokenizer."""
    from conftest import all_text, app_run
    from core.common import i18n
    from core.web import ui

    at = app_run("tokens", lang="zh")
    assert not at.exception
    assert at.session_state["prompt"] == ui.DEFAULT_PROMPTS["zh"]
    zh_t, zh_c = tokens.tokens_per_char(smol.tokenizer, ui.DEFAULT_PROMPTS["zh"])
    en_t, en_c = tokens.tokens_per_char(smol.tokenizer, ui.ZH_SAME_IN_EN)
    assert (zh_t, zh_c) == (len(smol.tokenizer(ui.DEFAULT_PROMPTS["zh"])["input_ids"]), 7)
    infos = [i.value for i in at.info]
    want = i18n.t("ui.english_note", "zh", zh=ui.DEFAULT_PROMPTS["zh"], zh_t=zh_t, zh_c=zh_c, zh_r=f"{zh_t / zh_c:.2f}",
                  en=ui.ZH_SAME_IN_EN, en_t=en_t, en_c=en_c, en_r=f"{en_t / en_c:.2f}", x=f"{(zh_t / zh_c) / (en_t / en_c):.1f}")
    assert want in infos
    assert zh_t / zh_c > 2 * en_t / en_c  # the lesson point holds: a Chinese character costs many times an English one
    en = app_run("tokens", lang="en")
    assert en.session_state["prompt"] == ui.DEFAULT_PROMPT
    assert "SmolLM2-135M was trained mostly on English" not in all_text(en)


def test_zh_default_is_what_the_note_says_it_answers(smol):
    """The note says SmolLM2 answers the zh default "2 + 3 = 5." (greedy, inside the chat template)."""
    import torch

    from core.web import ui

    ids = tokens.encode(smol.tokenizer, ui.DEFAULT_PROMPTS["zh"], chat=True).ids
    x = torch.tensor([ids])
    with torch.no_grad():
        out = smol.model.generate(x, max_new_tokens=8, do_sample=False)
    assert smol.tokenizer.decode(out[0, len(ids):]).startswith("2 + 3 = 5.")


def test_chinese_pair_fits_smollm2_and_moves_the_answer(smol):
    """The Chinese pair SmolLM2's tokenizer takes: same token counts, one-digit answers, and the model's
    preference flips with the order of the Chinese numerals (the logit difference measured, not typed)."""
    import torch

    from core.cause import pair

    p = pair.preset("count_zh")
    assert pair.fits(smol.tokenizer, p)
    pt = pair.encode_pair(smol.tokenizer, p.clean, p.corrupted)
    ans = pair.answers(smol.tokenizer, p.answer, p.foil)
    lds = []
    for ids in (pt.ids_clean, pt.ids_corrupted):
        with torch.no_grad():
            lg = smol.model(torch.tensor([list(ids)])).logits[0, -1].float().numpy()
        lds.append(pair.logit_diff(lg, ans.answer, ans.foil))
        assert int(lg.argmax()) == (ans.answer if len(lds) == 1 else ans.foil)  # each prompt's top token is its answer
    assert lds[0] > 2 and lds[1] < -1


def test_chinese_pair_page_and_button_colon(smol):
    from conftest import app_run
    from core.cause import pair

    p = pair.preset("count_zh")
    at = app_run("cause_pair", lang="zh", clean=p.clean, corrupt=p.corrupted, answer="2", foil="5")
    assert not at.exception and not at.info, [i.value for i in at.info]  # the pair fits: no "does not fit" note
    label = at.button(key="cpair_use_top").label
    assert label.startswith("用两个提示各自最可能的下一个 Token：") and ": " not in label and "'" not in label
    assert "“3” / “1”" in label


def test_she_view_read_off_hf_eager_attention(smol):
    """The prepared view of 她 → 小红 is the head HF's own eager attention says it is (the reference:
    output_attentions on the model, not the trace), at the last byte token of 她."""
    from conftest import EagerReference, _smol_folder
    from core.learn import examples

    ex = examples.SHE
    ids = smol.tokenizer(ex.prompt, add_special_tokens=False)["input_ids"]
    pieces = tokens.readable_tokens(smol.tokenizer, ids)
    assert len(examples.locate(pieces, "她")) == 2  # two byte tokens
    out = EagerReference(_smol_folder()).run(ids, output_attentions=True)  # HF's own model, eager attention
    layers = [a[0].float().numpy() for a in out.attentions]
    v = examples.best_view(pieces, layers)
    q, ts = v.query_pos, list(v.target_positions)
    shares = np.array([[w[h, q, ts].sum() for h in range(w.shape[0])] for w in layers])
    assert (v.layer, v.head) == np.unravel_index(int(np.argmax(shares)), shares.shape)
    assert abs(v.on_target - shares[v.layer, v.head]) < 1e-3 and v.on_target > 2 * v.on_other
    assert "".join(tokens.token_labels(pieces)[p][0] for p in v.target_positions[::2]) == "小红"


def test_she_button_and_link_open_the_view(smol):
    from conftest import app_run
    from core.learn import examples

    at = app_run("heads", lang="zh")
    assert not at.exception
    at.button(key="heads_example_btn").click().run()
    assert not at.exception and at.session_state["prompt"] == examples.SHE.prompt and at.session_state["chat"] is False
    layer, head, pos = at.slider(key="heads_layer").value, at.slider(key="heads_head").value, at.slider(key="heads_q").value
    link = next(m.value for m in at.markdown if "🔗" in m.value)
    assert f"layer={layer}&head={head}&pos={pos}" in link and "chat=0" in link
    assert (at.query_params["layer"], at.query_params["head"], at.query_params["pos"]) == ([str(layer)], [str(head)], [str(pos)]) \
        or (at.query_params["layer"], at.query_params["head"], at.query_params["pos"]) == (str(layer), str(head), str(pos))
    # the link, opened in a fresh session, lands on the same view in one step
    fresh = app_run("heads", lang="zh", prompt=examples.SHE.prompt, chat="0", layer=str(layer), head=str(head), pos=str(pos))
    assert not fresh.exception
    assert (fresh.slider(key="heads_layer").value, fresh.slider(key="heads_head").value, fresh.slider(key="heads_q").value) == (layer, head, pos)
    assert any("🔗" in m.value for m in fresh.markdown)


def test_zh_kv_page_names_the_tutorial_preset_in_chinese(smol):
    from conftest import all_text, app_run
    from core.gen import kvcalc

    at = app_run("kv_cache", lang="zh")
    assert not at.exception
    box = at.selectbox(key="kv_cache_preset")
    assert "教程示例：28 个 Q 头 / 4 个 KV 头" in box.options and not any("Tutorial example" in o for o in box.options)
    assert box.proto.placeholder == "请选择" and at.selectbox(key="kv_cache_bpv").proto.placeholder == "请选择"
    box.set_value("Tutorial example: 28 Q / 4 KV heads").run()
    assert not at.exception and "教程中的 GQA 示例" in all_text(at) and "the tutorials' GQA example" not in all_text(at)
    assert kvcalc.preset_text("en")["Tutorial example: 28 Q / 4 KV heads"][0] == "Tutorial example: 28 Q / 4 KV heads"


def test_zh_tokens_page_rag_sentences_and_wording():
    from conftest import app_run
    from core.common import i18n
    from core.inside import embeddings

    at = app_run("tokens", lang="zh")
    assert not at.exception
    table = at.table[-1].value
    assert list(table.index) == list(embeddings.RAG_SENTENCES_ZH) or list(table.columns) == list(embeddings.RAG_SENTENCES_ZH)
    assert i18n.t("nav.start", "zh") != "从这里开始" and "质量" not in i18n.t("heads.metric_first_token", "zh")
    costs = i18n.t("kv_cache.costs", "zh", pre="1", dec="1", n=1, kv=1, model="m", page=i18n.t("page.generation", "zh"))
    assert "“Prefill 与 Decode 单步执行”页" in costs and "生成步进页" not in costs


def test_cost_tab_charts_reach_the_texts_4k_to_8k(monkeypatch):
    """The cost tab's text and table go 4K → 8K; its formula panel spans the table's lengths and the
    measured panel reaches 8K (the timer faked here: this test is about the axes)."""

    from conftest import app_run, plotly_array
    from core.maths import attention as A
    from core.web import cache

    seen = []

    def fake(lengths):
        seen.append(tuple(lengths))
        n = np.asarray(lengths, dtype=float)
        ms = n**2 / 1e6
        return {"n": n, "ms": ms, "q1": ms, "q3": ms, "min": ms, "max": ms, "elements": n**2, "reps": 1, "timings": [],
                "busy": False, "n_busy": 0}

    monkeypatch.setattr(A, "time_attention", fake)
    cache.attention_timing.clear()
    try:
        at = app_run("attention_lab")
        assert not at.exception
        fig = next(f for f in (json.loads(c.proto.spec) for c in at.get("plotly_chart"))
                   if f["layout"].get("yaxis2", {}).get("title", {}).get("text") == "ms")
        formula_n, measured_n = (list(plotly_array(fig["data"][i]["x"])) for i in (0, 1))
        assert formula_n == list(A.COST_LENGTHS) and {4096, 8192} <= set(formula_n)
        assert max(measured_n) == 8192 and 4096 in measured_n and seen == [cache.TIMING_LENGTHS]
    finally:
        cache.attention_timing.clear()


def test_long_context_free_span_leaves_out_the_sink(smol):
    """A free prompt's default span starts at 1; the ranking with position 0 in it reports the sink."""
    from conftest import app_run
    from core import backends
    from core.inside import longctx

    assert longctx.default_span(32) == (1, 10) and longctx.default_span(5) == (1, 4) and longctx.default_span(1) == (0, 0)
    at = app_run("long_context")
    assert not at.exception
    span = next(s for s in at.slider if str(s.key).startswith("longctx_span"))
    lo, _hi = span.value
    assert lo == 1
    tr = backends.trace(smol, at.session_state["prompt"], chat=bool(at.session_state["chat"]))
    with_sink, without = longctx.span_mass(tr.last_attn, 0, 9), longctx.span_mass(tr.last_attn, *span.value)
    sink = longctx.span_mass(tr.last_attn, 0, 0)
    top = np.unravel_index(int(with_sink.argmax()), with_sink.shape)
    assert sink[top] > 0.5 * with_sink[top]  # the old default's top head: most of its span's weight is the sink's
    assert without.shape == with_sink.shape


def test_cost_tab_shows_the_comparison_in_both_languages(fake_timing):
    from conftest import app_run
    from core.common import i18n

    for lang in ("en", "zh"):
        at = app_run("attention_lab", lang=lang)
        assert not at.exception
        table = next(t.value for t in at.table if i18n.t("attention_lab.impl_col_name", lang) in list(t.value.columns))
        assert len(table) == 3 and i18n.t("attention_lab.impl_tiled", lang) in list(table.iloc[:, 0])
        assert i18n.t("attention_lab.impl_title", lang) in [h.value for h in at.header]


def test_one_kv_default_float32_on_every_page(smol):
    """issue 25: the tour said 46,080 B per token (float32), multi-head 23,040 (fp16), the KV page 90 MiB at
    fp16. One default now: float32, the bytes the app's own cache holds."""
    from conftest import app_run
    from core.common import i18n

    f = smol.facts
    per_token = 2 * f.n_layers * f.n_kv_heads * f.head_dim * 4
    assert f"{per_token:,} B" in i18n.t("kv.default_note", "en") and f"{per_token:,} 字节" in i18n.t("kv.default_note", "zh")
    kv = app_run("kv_cache")
    assert kv.selectbox(key="kv_cache_bpv").value == "fp32"
    assert any(c.value == f"{per_token * 4096:,} B" for c in kv.caption)  # 4,096 tokens × 46,080 B
    mh = app_run("multihead")
    assert not mh.exception and mh.selectbox(key="multihead_bpv").value == 4


def test_context_link_keeps_the_pair_and_positions(smol):
    """issue 25: a shared link lost the context page's chosen pair and positions."""
    from conftest import app_run

    at = app_run("context", lang="zh")
    assert not at.exception
    at.selectbox(key="context_preset").set_value("zh_ctx").run()
    assert not at.exception and at.query_params["pair"] in ("zh_ctx", ["zh_ctx"])
    pick = next(s for s in at.selectbox if str(s.key).startswith("context_pa_zh_ctx"))
    pick.set_value(2).run()
    qp = {k: (v[0] if isinstance(v, list) else v) for k, v in at.query_params.items()}
    assert qp["pair"] == "zh_ctx" and qp["pa"] == "2"
    fresh = app_run("context", lang="zh", pair="zh_ctx", pa="2", pb=qp["pb"])
    assert not fresh.exception and fresh.selectbox(key="context_preset").value == "zh_ctx"
    assert next(s for s in fresh.selectbox if str(s.key).startswith("context_pa_zh_ctx")).value == 2


def test_tour_header_is_short_on_a_projector(smol):
    """issue 25: at 1280 × 720 the presenter tour's header took ~430 px. On a projector the tour leaves out
    the intro paragraph and the progress bar (the stage heading says 'i. name'); outside it, both stay."""
    from conftest import app_run
    from core.common import i18n

    for present, shown in (("1", False), ("0", True)):
        at = app_run("tour", lang="en", present=present)
        assert not at.exception
        intro = i18n.t("tour.intro", "en")
        assert any(m.value == intro for m in at.markdown) == shown
        assert bool(at.get("progress")) == shown


def test_attention_lab_link_opens_its_tab(fake_timing):
    """issue 25: a shared link lost the open tab. ?tab=cost opens the cost tab and the URL keeps it."""
    from conftest import app_run

    at = app_run("attention_lab", tab="cost")
    assert not at.exception
    assert at.query_params["tab"] in ("cost", ["cost"])
    tabs = at.tabs
    assert "attention_lab_tab" not in at.session_state or at.session_state["attention_lab_tab"] == tabs[2].label
