"""Classroom pages: the guided tour, the self-check quiz, the references — data, numbers, pages.

The tour's numbers are checked against an independent computation with the HF model itself
(embedding matrix rows, hidden states, softmax of the logits, the sizes of HF's own KV cache).
"""

from __future__ import annotations

import re

import floats
import numpy as np
import pytest
from helpers.learn import _decode

from conftest import ROOT
from core import backends
from core.common import i18n
from core.engine import tokens
from core.engine.tokens import visible
from core.engine.types import kv_bytes
from core.learn import quiz, tour
from core.web import chips

APP = str(ROOT / "app.py")


def _num(shown: str) -> float:
    """A number as the tour shows it (thousands separated: "1,121.32") read back as a float."""
    return float(shown.replace(",", ""))


def _shown(decimals: int, value) -> np.ndarray:
    """How far a number shown to ``decimals`` decimals (correctly rounded, then read back as a float64)
    lies from its value: half a unit of the last decimal, + the float64 reading's rounding."""
    return 0.5 * 10.0**-decimals + 2 * floats.U64 * np.abs(np.asarray(value, dtype=np.float64))



def _softmax_moved(p, dz: float, V: int) -> np.ndarray:
    """How far probabilities ``p`` move when every logit moves by ≤ dz: log p by ≤ 2dz; and two float64
    softmaxes of V terms round by ≤ γ_{V+4} each."""
    return np.asarray(p, dtype=np.float64) * (np.expm1(2 * dz) + 2 * floats.gamma(V + 4, floats.U64))


# ---------------------------------------------------------------------------------------------
# the tour's numbers against the HF model itself


@pytest.fixture(scope="module")
def smol_ref(smol):
    """The tour's trace, and an independent HF forward pass (hidden states, logits, HF's KV cache)."""
    import torch

    prompt = "小明把书交给小红，因为她明天要考试。"
    tr = backends.trace(smol, prompt)
    ids = torch.tensor([tr.token_ids.tolist()])
    with smol.lock, torch.inference_mode():
        out = smol.model(input_ids=ids, output_hidden_states=True, use_cache=True)
    return tr, out


def test_tour_numbers_match_hf(smol, smol_ref):
    import torch

    tr, out = smol_ref
    dec = _decode(smol)
    T, L = tr.n_tokens, smol.facts.n_layers
    # tokens: the tokenizer's own ids
    v = tour.stage_view("tokens", tr, dec)
    assert v.table["tour.col.id"] == smol.tokenizer(tr.prompt)["input_ids"]
    assert dict(v.metrics)["tour.m.n_tokens"] == str(T)
    # embeddings: the last token's row of the embedding matrix
    v = tour.stage_view("embeddings", tr, dec)
    row = smol.model.get_input_embeddings().weight[int(tr.token_ids[-1])].detach().numpy()
    floats.assert_within(v.table["tour.col.value"], row[:8], _shown(5, row[:8]), what="the row's first values", why="shown to 5 decimals")
    norm = np.linalg.norm(row.astype(np.float64))
    floats.assert_within(_num(dict(v.metrics)["tour.m.emb_norm"]), norm, _shown(4, norm), what="‖row‖", why="shown to 4 decimals")
    # blocks: HF hidden_states[l] is the stream entering block l (for l < L): the same forward pass, bit for bit
    v = tour.stage_view("blocks", tr, dec, layer=5)
    hs = out.hidden_states
    for key, layer in (("tour.m.resid_in", 5), ("tour.m.resid_out", 6)):
        floats.assert_same(tr.resid[layer, -1], hs[layer][0, -1].numpy(), f"the stream entering block {layer}")
        norm = np.linalg.norm(hs[layer][0, -1].numpy().astype(np.float64))
        floats.assert_within(_num(dict(v.metrics)[key]), norm, _shown(2, norm), what=key, why="shown to 2 decimals")
    assert len(v.chart["norms"]) == L + 1 and v.chart["layer"] == 5
    # hidden: HF's last hidden_states entry is after the final norm
    v = tour.stage_view("hidden", tr, dec)
    floats.assert_same(tr.final_hidden[-1], hs[-1][0, -1].numpy(), "the final norm's output")
    norm = np.linalg.norm(hs[-1][0, -1].numpy().astype(np.float64))
    floats.assert_within(_num(dict(v.metrics)["tour.m.final_norm"]), norm, _shown(2, norm), what="‖final hidden‖", why="shown to 2 decimals")
    # logits: top-5 of softmax(HF logits). The trace asked for the last position's logits only, HF's
    # forward for all of them: the same final hidden vector (above) through the LM head's product in
    # other shapes, so two float32 routes of that product, each within the head's allowance A of the exact
    z = out.logits[0, -1].double()
    moved = 2 * floats.head_allowance(smol, tr.final_hidden[-1])
    probs = torch.softmax(z, -1)
    ref_p, ref_i = probs.topk(5)
    ids, pieces, _, p = tour.top_next(tr, dec)
    assert ids == ref_i.tolist()
    floats.assert_within(p, ref_p.numpy(), _softmax_moved(np.maximum(p, ref_p.numpy()), moved, len(z)), what="top-5 probabilities",
                         why="softmax of two float32 routes of the LM head's product")
    assert pieces[0] == visible(smol.tokenizer.decode([ids[0]]))
    # sampling: temperature 0.5 sharpens, 1.5 flattens — checked against softmax(logits / T), shown to 4 decimals
    v = tour.stage_view("sampling", tr, dec)
    p_t = v.table["tour.col.p_top"]
    for temp, got in zip(tour.TEMPERATURES, p_t):
        want = torch.softmax(z / temp, -1).max().item()
        floats.assert_within(got, want, _shown(4, want) + _softmax_moved(want, moved / temp, len(z)), what=f"p at T = {temp}",
                             why="shown to 4 decimals; two float32 routes of the logits")
    assert p_t[0] > p_t[1] > p_t[2]
    # KV cache: the formula equals the bytes of HF's own cache (float32) and of the traced k/v
    hf_bytes = sum(lay.keys.numel() * 4 + lay.values.numel() * 4 for lay in out.past_key_values.layers)
    traced = sum(d.k.nbytes + d.v.nbytes for d in (backends.layer_detail(smol, tr, layer) for layer in range(L)))
    assert kv_bytes(L, smol.facts.n_kv_heads, smol.facts.head_dim, T, 4) == hf_bytes == traced
    v = tour.stage_view("kv_cache", tr, dec)
    assert dict(v.metrics)["tour.m.kv_total"] == f"{hf_bytes:,} B"
    assert dict(v.metrics)["tour.m.kv_per_token"] == f"{2 * 30 * 3 * 64 * 4:,} B"  # SmolLM2: 46,080 B per token
    # next token: greedy = argmax of HF's logits
    v = tour.stage_view("next_token", tr, dec)
    top = int(out.logits[0, -1].argmax())
    assert dict(v.metrics)["tour.m.next"] == tokens.label([*tr.tokens, *tokens.readable_tokens(smol.tokenizer, [top])], T)
    assert dict(v.metrics)["tour.m.new_len"] == str(T + 1)


SEPARATED = re.compile(r"\d{1,3}(,\d{3})*\.\d{2}")  # 718.91, 1,121.32 — never 1121.32


def test_tour_block_norms_have_thousands_separators(smol):
    """Every block's four norms read like the page's other numbers: a norm over 1,000 has its comma
    (the last blocks of SmolLM2 on the page's default prompt add more than 1,000 through the MLP)."""
    tr = backends.trace(smol, "What is the capital of France?", chat=True)
    dec, big = _decode(smol), 0
    for layer in range(tr.n_layers):
        shown = [value for _, value in tour.stage_view("blocks", tr, dec, layer=layer).metrics]
        assert all(SEPARATED.fullmatch(value) for value in shown), (layer, shown)
        big += sum(_num(value) >= 1000 for value in shown)
    assert big, "no norm above 1,000: this prompt no longer checks the separator"


@pytest.mark.parametrize("lang", i18n.LANGS)
def test_tour_units_are_in_the_translated_labels(smol_ref, smol, lang):
    """The RoPE angle and the entropy are bare numbers; their unit is part of the label, so the zh
    tour says 弧度 and 比特 instead of "rad" and "bit"."""
    tr, _ = smol_ref
    angle = dict(tour.stage_view("embeddings", tr, _decode(smol)).metrics)["tour.m.rope_slowest"]
    entropy = dict(tour.stage_view("sampling", tr, _decode(smol)).metrics)["tour.m.entropy"]
    for value in (angle, entropy):
        assert re.fullmatch(r"[\d.,e+-]+", value), value
    unit = {"en": ("rad", "bits"), "zh": ("弧度", "比特")}[lang]
    assert unit[0] in i18n.t("tour.m.rope_slowest", lang) and unit[1] in i18n.t("tour.m.entropy", lang)


# ---------------------------------------------------------------------------------------------
# the pages, through AppTest, in both languages


def _app(stem: str, lang: str, **qp):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=120)
    at.session_state["lang"] = lang
    for k, val in qp.items():
        at.query_params[k] = val
    at.switch_page(f"pages/{stem}.py")
    return at


@pytest.mark.parametrize("lang", i18n.LANGS)
def test_tour_page_next_through_all_stages(smol, lang):
    prompt = "苹果很好吃。苹果发布了新系统。"
    at = _app("tour", lang)
    at.session_state["prompt"] = prompt
    at.session_state["chat"] = False  # the bare prompt's tokens (an instruct model's default is the chat template)
    at.run()
    assert not at.exception
    n_tok = len(smol.tokenizer(prompt)["input_ids"])
    seen = []
    for i, stage in enumerate(tour.STAGES):
        assert not at.exception, (stage.key, at.exception)
        assert at.query_params["step"] == [str(i)] or at.query_params["step"] == str(i)
        assert at.header[0].value == f"{i + 1}. {i18n.t(f'tour.{stage.key}.title', lang)}"
        assert at.metric, stage.key
        seen.append(stage.key)
        if stage.key == "tokens":
            assert at.metric[0].value == str(n_tok)
        if stage.key == "kv_cache":
            assert at.metric[0].value == f"{46080 * n_tok:,} B"
        at.button(key="tour_next_top").click().run()
    assert seen == [s.key for s in tour.STAGES]
    assert not at.exception and at.header[0].value.startswith("1. ")  # the last Next restarts the tour
    assert at.button(key="tour_back_bottom").disabled  # no Back from the first stage
    at.button(key="tour_next_bottom").click().run()
    at.button(key="tour_back_bottom").click().run()
    assert at.header[0].value.startswith("1. ") and not at.exception


def test_tour_page_url_state_and_presenter(smol):
    at = _app("tour", "zh", step="3", layer="7", present="1")
    at.run()
    assert not at.exception
    assert at.slider(key="tour_layer").value == 7
    assert at.header[0].value == "4. " + i18n.t("tour.blocks.title", "zh")
    assert len(at.dataframe) == 0  # presenter mode hides the details table …
    assert any("<style>" in m.value for m in at.markdown)  # … and enlarges the type
    at.slider(key="tour_layer").set_value(2).run()
    assert at.query_params["layer"] in ("2", ["2"])
    assert at.metric[0].label == i18n.t("tour.m.resid_in", "zh")


def test_kv_cache_comparison_table_is_a_projector_table(smol):
    """Presenter mode: the with/without-cache tokens are drawn as st.table (its text the presenter CSS
    enlarges), not as a dataframe canvas; outside it, as the sortable dataframe."""
    for present, tables, frames in (("1", 1, 0), ("0", 0, 1)):
        at = _app("kv_cache", "en", present=present)
        at.session_state["prompt"] = "Hi"
        at.run()
        at.slider(key="kv_cache_n").set_value(2)
        at.select_slider(key="kv_cache_len").set_value(0).run()
        at.button(key="kv_cache_measure").click().run()
        assert not at.exception
        rows = [t for t in at.table if "✓" in t.value.index]  # the comparison: rows with, without, ✓
        assert len(rows) == tables and len([d for d in at.dataframe if "✓" in d.value.index]) == frames
        if tables:  # one column per generated token, one row per run and the agreement row
            assert rows[0].value.shape == (3, 2) and set(rows[0].value.loc["✓"]) <= {"✓", "✗"}


@pytest.mark.parametrize("lang", i18n.LANGS)
def test_quiz_page_answer_and_score(lang):
    at = _app("quiz", lang)
    at.run()
    assert not at.exception and len(at.main.radio) == len(quiz.QUESTIONS)
    seed = at.session_state["quiz_seed"]
    wrong = quiz.QUESTIONS[0]
    for q in quiz.QUESTIONS[1:]:
        at.radio(key=f"quiz_{seed}_{q.id}").set_value(q.correct)
    at.radio(key=f"quiz_{seed}_{wrong.id}").set_value((wrong.correct + 1) % wrong.n_options)
    at.button(key=f"FormSubmitter:quiz_form-{i18n.t('quiz.submit', lang)}").click().run()
    assert not at.exception
    n = len(quiz.QUESTIONS)
    assert at.header[0].value == i18n.t("quiz.score", lang, right=n - 1, total=n, pct=round(100 * (n - 1) / n))
    assert len(at.main.error) == 1 and len(at.main.success) == n - 1
    assert i18n.t(f"quiz.{wrong.id}.o{wrong.correct}", lang) in at.main.error[0].value
    at.button(key="quiz_reset").click().run()
    assert not at.exception and [h.value for h in at.header] == [i18n.t("checklist.h", lang)]  # the score is gone; the self-check list stays


@pytest.mark.parametrize("lang", i18n.LANGS)
def test_references_page(lang):
    at = _app("references", lang)
    at.run()
    assert not at.exception
    text = "\n".join(m.value for m in at.markdown)
    for arxiv in ("1706.03762", "2005.14165", "2104.09864", "2305.13245"):
        assert f"arXiv:{arxiv}" in text
    assert "TensorRT-LLM" in text and "SmolLM2" in text
    assert i18n.t("references.c.kv_cache", lang) in text
    assert at.header[-1].value == i18n.t("references.prov.title", lang)
    prov = at.table[-1].value
    assert "30" in prov.iloc[:, 1].tolist()  # n_layers of the embedded SmolLM2, read from the loaded model
    # issue 14: a Chinese list joins with 、, the year heading never wraps, no "computed from a formula" badge
    table = next(m.value for m in at.markdown if m.value.startswith("| "))
    assert ("、" in table) == (lang == "zh") and "\u2060".join(i18n.t("references.col.year", lang)) in table
    assert not any(i18n.t("badge.formula", lang) in c.value for c in at.caption)


# ---------------------------------------------------------------------------------------------
# issue 14: the tour's last stage, the quiz's attempts, one label rule


def test_tour_next_token_stage_numbers_every_chip_by_position(smol):
    """Stage 9 says "the sequence is now T + 1 tokens" above exactly T + 1 chips numbered 0 … T, the
    new token last (framed); a long prompt shows its tail, numbered by the real positions."""
    tr = backends.trace(smol, "The capital of France is")
    T = tr.n_tokens
    v = tour.stage_view("next_token", tr, _decode(smol))
    assert len(v.chips) == T + 1 == v.fill["T1"] and v.chips_start == 0 and v.chips_new == 1
    assert v.chips[:T] == [str(t) for t in tr.tokens] and v.fill["pos"] == T
    html = chips.chips_html(v.chips, positions=True, start=v.chips_start, framed_tail=v.chips_new)
    assert re.findall(r"<sub>(\d+)</sub>", html) == [str(i) for i in range(T + 1)]
    assert html.count("outline:2px solid") == 1  # only the appended token is framed
    long_tr = backends.trace(smol, " ".join(["apple"] * 40))
    v = tour.stage_view("next_token", long_tr, _decode(smol))
    assert v.chips_start == long_tr.n_tokens - tour.NEXT_TAIL and len(v.chips) == tour.NEXT_TAIL + 1
    html = chips.chips_html(v.chips, positions=True, start=v.chips_start, framed_tail=1)
    nums = [int(n) for n in re.findall(r"<sub>(\d+)</sub>", html)]
    assert nums == list(range(v.chips_start, long_tr.n_tokens + 1))
    body = i18n.t("tour.next_token.body", "en", **v.fill)
    assert f"{long_tr.n_tokens + 1} tokens long, numbered 0 … {long_tr.n_tokens}" in body


def test_tour_page_last_stage_shows_t_plus_one_chips(smol):
    at = _app("tour", "en", step="8")
    at.session_state["prompt"] = "我喜欢人工智能"
    at.session_state["chat"] = False
    at.run()
    assert not at.exception
    T = len(smol.tokenizer("我喜欢人工智能")["input_ids"])
    html = " ".join(m.value for m in at.markdown if "xr-chips" in m.value)
    assert html.count('class="xr-chip"') == T + 1
    assert f"now {T + 1} tokens" in " ".join(m.value for m in at.markdown)


def test_quiz_start_over_clears_every_answer_and_draws_a_new_order():
    at = _app("quiz", "en", quiz="1234")
    at.run()
    assert not at.exception and at.session_state["quiz_seed"] == 1234
    for q in quiz.QUESTIONS:  # the link's seed decides the order shown
        r = at.radio(key=f"quiz_1234_{q.id}")
        assert r.options == [i18n.t(f"quiz.{q.id}.o{i}", "en") for i in quiz.option_order(q, 1234)]
        r.set_value(q.correct)
    at.button(key=f"FormSubmitter:quiz_form-{i18n.t('quiz.submit', 'en')}").click().run()
    n = len(quiz.QUESTIONS)
    assert at.header[0].value == i18n.t("quiz.score", "en", right=n, total=n, pct=100)
    at.button(key="quiz_reset").click().run()
    assert not at.exception and [h.value for h in at.header] == [i18n.t("checklist.h", "en")]  # no score left
    seed = at.session_state["quiz_seed"]
    assert seed != 1234 and at.query_params["quiz"] in (str(seed), [str(seed)])
    assert all(at.radio(key=f"quiz_{seed}_{q.id}").value is None for q in quiz.QUESTIONS)  # no answer kept


@pytest.mark.parametrize("bad", ["abc", "-5", "1e9", "99999999999999"])
def test_quiz_link_with_a_bad_seed_gets_a_fresh_one(bad):
    at = _app("quiz", "zh", quiz=bad)
    at.run()
    assert not at.exception
    seed = at.session_state["quiz_seed"]
    assert 0 <= seed < quiz.SEED_MAX and at.query_params["quiz"] in (str(seed), [str(seed)])


def test_label_rule_on_smollm2_chinese():
    """我喜欢人工智能 is 15 tokens in SmolLM2, mostly bytes: each byte token reads as its character and
    its bytes (我‹E6 88›), the bytes of one character form one group, and the rule is one function."""
    from core.backends import load_model

    tok = load_model(None).tokenizer
    ids = tok("我喜欢人工智能")["input_ids"]
    pieces = tokens.readable_tokens(tok, ids)
    labels = tokens.token_labels(pieces)
    assert len(ids) == 15 and labels[0] == "我‹E6 88›" and labels[1] == "我‹91›" and "人" in labels
    assert "".join(dict.fromkeys(lbl[0] for lbl in labels)) == "我喜欢人工智能"  # every label starts with its character
    assert [g[2] for g in tokens.byte_groups(pieces)] == ["我", "喜", "欢", "工", "智"]
    assert [tokens.label(pieces, i) for i in range(15)] == labels == tokens.sequence_labels(tok, ids)
    assert tokens.position_labels(pieces)[2] == tokens.position_label(pieces, 2) == "2·喜‹E5›"
    w = tokens.window(pieces, 1, 4)  # a window keeps its neighbours: 我‹91›, not a bare ‹91›
    assert tokens.token_labels(w) == labels[1:4] and tokens.position_label(w, 0, 1) == "1·我‹91›"
    assert tokens.visible(labels[0]) == labels[0] and tokens.visible("⟨E6 88⟩") == "‹E6 88›"  # idempotent, no ␣ inside
    assert tokens.visible_tokens(tok, ids[:1]) == ["‹E6 88›"]  # a candidate alone has no neighbours
    html = chips.chips_html(pieces, ids)
    assert html.count('class="xr-group"') == 5 and 'data-piece="我‹E6 88›"' in html


def test_tour_text_stage_counts_with_thousands_separators(smol):
    tr = backends.trace(smol, "abcde" * 300)
    v = tour.stage_view("text", tr, _decode(smol))
    m = dict(v.metrics)
    assert m["tour.m.chars"] == "1,500" == v.fill["chars"] and m["tour.m.text_chars"] == f"{len(tr.text):,}"
    assert dict(tour.stage_view("tokens", tr, _decode(smol)).metrics)["tour.m.n_tokens"] == f"{tr.n_tokens:,}"
