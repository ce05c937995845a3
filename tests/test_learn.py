"""Classroom pages: the guided tour, the self-check quiz, the references — data, numbers, pages.

The tour's numbers are checked against an independent computation with the HF model itself
(embedding matrix rows, hidden states, softmax of the logits, the sizes of HF's own KV cache).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from core import backends
from core.engine import i18n, tokens
from core.engine.tokens import visible
from core.engine.types import kv_bytes
from core.learn import quiz, references, tour
from core.web import chips
from core.web.nav import STEMS as NAV_STEMS

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")


def app_page_stems() -> list[str]:
    """The stems the router registers (core.web.nav.PAGES)."""
    return list(NAV_STEMS)


STEMS = app_page_stems()


def _decode(loaded):
    return lambda ids: tokens.readable_tokens(loaded.tokenizer, ids)


# ---------------------------------------------------------------------------------------------
# data: stages, questions, references


def test_pages_list_parsed():
    assert {"tour", "quiz", "references", "journey"} <= set(STEMS)


@pytest.mark.parametrize("lang", i18n.LANGS)
def test_tour_stages_have_text_and_valid_pages(lang):
    cat = i18n.catalogue()
    assert tour.STAGE_KEYS == ("text", "tokens", "embeddings", "blocks", "hidden", "logits", "sampling", "kv_cache",
                               "next_token")
    for s in tour.STAGES:
        for part in ("title", "body"):
            assert cat[f"tour.{s.key}.{part}"][lang].strip()
        assert s.pages and set(s.pages) <= set(STEMS), s
        assert s.concept in references.CONCEPTS
    assert not [p for p in i18n.problems() if p.split(":")[0].startswith(("tour.", "quiz.", "references.", "present."))]


def test_quiz_questions_complete_and_linked():
    cat = i18n.catalogue()
    assert len(quiz.QUESTIONS) >= 12
    assert len({q.id for q in quiz.QUESTIONS}) == len(quiz.QUESTIONS)
    for q in quiz.QUESTIONS:
        assert q.page in STEMS, f"{q.id} links to unknown page {q.page}"
        assert q.concept in references.CONCEPTS
        for k in [f"quiz.{q.id}.q", f"quiz.{q.id}.why", *(f"quiz.{q.id}.o{i}" for i in range(q.n_options))]:
            assert cat[k]["en"].strip() and cat[k]["zh"].strip(), k
        assert f"quiz.{q.id}.o{q.n_options}" not in cat  # no stray options beyond n_options
    # the right answer is not always in the same place
    assert len({q.correct for q in quiz.QUESTIONS}) == 3


def test_quiz_scoring_by_hand():
    qs = quiz.QUESTIONS
    perfect = quiz.score({q.id: q.correct for q in qs})
    assert (perfect.correct, perfect.answered, perfect.total, perfect.percent) == (len(qs), len(qs), len(qs), 100.0)
    empty = quiz.score({})
    assert (empty.correct, empty.answered) == (0, 0) and set(empty.verdicts.values()) == {None}
    # by hand: first right, second wrong, third unanswered, fourth out of range, plus an unknown id
    a, b, c, d = qs[:4]
    s = quiz.score({a.id: a.correct, b.id: (b.correct + 1) % 3, d.id: 7, "nope": 0})
    assert s.correct == 1 and s.answered == 3
    assert s.verdicts[a.id] is True and s.verdicts[b.id] is False and s.verdicts[c.id] is None and s.verdicts[d.id] is False
    assert s.percent == pytest.approx(100 / len(qs))
    with pytest.raises(ValueError):
        quiz.Question("bad", 3, 3, "tour", "attention")


def test_references_data_and_cite():
    arx = {r.arxiv for r in references.REFERENCES.values()}
    assert {"1706.03762", "2005.14165", "2104.09864", "2305.13245"} <= arx
    assert references.cite("kv_cache")[0].key == "trtllm_kv"
    assert references.cite("positions")[0].label().startswith("Su et al. (2021). RoFormer")
    assert references.cite("gqa")[0].url == "https://arxiv.org/abs/2305.13245"
    assert {"allal2025", "wolf2020"} <= {r.key for c in ("model", "library") for r in references.cite(c)}
    for c in references.CONCEPTS:
        assert i18n.catalogue()[f"references.c.{c}"]["zh"]
    with pytest.raises(KeyError):
        references.cite("nonsense")
    rows = dict(references.provenance_rows({"name": "X", "n_layers": 30, "tied_embeddings": True}, "/here"))
    assert rows["n_layers"] == "30" and rows["tied_embeddings"] == "True" and rows["source"] == "/here"


def test_visible_and_chips_escape():
    assert visible("a b\n\x00\x07") == "a␣b⏎␀␇"
    h = chips.chips_html(["<script>", "x"], positions=True)
    assert "&lt;script&gt;" in h and "<script>" not in h
    assert chips.chips_html(["t"] * 5, positions=True, limit=2).endswith("… +3")


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
    np.testing.assert_allclose(v.table["tour.col.value"], np.round(row[:8], 5), atol=1e-5)
    assert float(dict(v.metrics)["tour.m.emb_norm"]) == pytest.approx(np.linalg.norm(row), abs=1e-3)
    # blocks: HF hidden_states[l] is the stream entering block l (for l < L)
    v = tour.stage_view("blocks", tr, dec, layer=5)
    hs = out.hidden_states
    assert float(dict(v.metrics)["tour.m.resid_in"]) == pytest.approx(hs[5][0, -1].norm().item(), abs=0.01)
    assert float(dict(v.metrics)["tour.m.resid_out"]) == pytest.approx(hs[6][0, -1].norm().item(), abs=0.01)
    assert len(v.chart["norms"]) == L + 1 and v.chart["layer"] == 5
    # hidden: HF's last hidden_states entry is after the final norm
    v = tour.stage_view("hidden", tr, dec)
    assert float(dict(v.metrics)["tour.m.final_norm"]) == pytest.approx(hs[-1][0, -1].norm().item(), abs=0.01)
    # logits: top-5 of softmax(HF logits)
    probs = torch.softmax(out.logits[0, -1].double(), -1)
    ref_p, ref_i = probs.topk(5)
    ids, pieces, _, p = tour.top_next(tr, dec)
    assert ids == ref_i.tolist()
    np.testing.assert_allclose(p, ref_p.numpy(), atol=1e-5)
    assert pieces[0] == visible(smol.tokenizer.decode([ids[0]]))
    # sampling: temperature 0.5 sharpens, 1.5 flattens — checked against softmax(logits / T)
    v = tour.stage_view("sampling", tr, dec)
    p_t = v.table["tour.col.p_top"]
    for temp, got in zip(tour.TEMPERATURES, p_t):
        assert got == pytest.approx(torch.softmax(out.logits[0, -1].double() / temp, -1).max().item(), abs=1e-4)
    assert p_t[0] > p_t[1] > p_t[2]
    # KV cache: the formula equals the bytes of HF's own cache (float32) and the trace's k/v
    hf_bytes = sum(lay.keys.numel() * 4 + lay.values.numel() * 4 for lay in out.past_key_values.layers)
    assert kv_bytes(L, smol.facts.n_kv_heads, smol.facts.head_dim, T, 4) == hf_bytes == tr.k.nbytes + tr.v.nbytes
    v = tour.stage_view("kv_cache", tr, dec)
    assert dict(v.metrics)["tour.m.kv_total"] == f"{hf_bytes:,} B"
    assert dict(v.metrics)["tour.m.kv_per_token"] == f"{2 * 30 * 3 * 64 * 4:,} B"  # SmolLM2: 46,080 B per token
    # next token: greedy = argmax of HF's logits
    v = tour.stage_view("next_token", tr, dec)
    assert dict(v.metrics)["tour.m.next"] == visible(smol.tokenizer.decode([int(out.logits[0, -1].argmax())]))
    assert dict(v.metrics)["tour.m.new_len"] == str(T + 1)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_tour_every_stage_on_tiny_models(tiny_loaded, arch):
    loaded = tiny_loaded[arch]
    tr = backends.trace(loaded, "Hello `world` $x$ <b>")
    for key in tour.STAGE_KEYS:
        v = tour.stage_view(key, tr, _decode(loaded), layer=99)  # an out-of-range layer is clamped
        assert v.metrics
        for s in v.fill.values():
            assert "`" not in str(s)
        body = i18n.t(f"tour.{key}.body", "zh", **v.fill)  # every placeholder is filled
        assert "{" not in body
    v = tour.stage_view("kv_cache", tr, _decode(loaded))
    assert dict(v.metrics)["tour.m.kv_total"] == f"{tr.k.nbytes + tr.v.nbytes:,} B"


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
    at.run()
    assert not at.exception
    n_tok = len(smol.tokenizer(prompt)["input_ids"])
    seen = []
    for i, stage in enumerate(tour.STAGES):
        assert not at.exception, (stage.key, at.exception)
        assert at.query_params["step"] == [str(i)] or at.query_params["step"] == str(i)
        assert at.subheader[0].value == f"{i + 1}. {i18n.t(f'tour.{stage.key}.title', lang)}"
        assert at.metric, stage.key
        seen.append(stage.key)
        if stage.key == "tokens":
            assert at.metric[0].value == str(n_tok)
        if stage.key == "kv_cache":
            assert at.metric[0].value == f"{46080 * n_tok:,} B"
        at.button(key="tour_next_top").click().run()
    assert seen == list(tour.STAGE_KEYS)
    assert not at.exception and at.subheader[0].value.startswith("1. ")  # the last Next restarts the tour
    assert at.button(key="tour_back_bottom").disabled  # no Back from the first stage
    at.button(key="tour_next_bottom").click().run()
    at.button(key="tour_back_bottom").click().run()
    assert at.subheader[0].value.startswith("1. ") and not at.exception


def test_tour_page_url_state_and_presenter(smol):
    at = _app("tour", "zh", step="3", layer="7", present="1")
    at.run()
    assert not at.exception
    assert at.slider(key="tour_layer").value == 7
    assert at.subheader[0].value == "4. " + i18n.t("tour.blocks.title", "zh")
    assert len(at.dataframe) == 0  # presenter mode hides the details table …
    assert any("<style>" in m.value for m in at.markdown)  # … and enlarges the type
    at.slider(key="tour_layer").set_value(2).run()
    assert at.query_params["layer"] in ("2", ["2"])
    assert at.metric[0].label == i18n.t("tour.m.resid_in", "zh")


@pytest.mark.parametrize("lang", i18n.LANGS)
def test_quiz_page_answer_and_score(lang):
    at = _app("quiz", lang)
    at.run()
    assert not at.exception and len(at.main.radio) == len(quiz.QUESTIONS)
    wrong = quiz.QUESTIONS[0]
    for q in quiz.QUESTIONS[1:]:
        at.radio(key=f"quiz_{q.id}").set_value(q.correct)
    at.radio(key=f"quiz_{wrong.id}").set_value((wrong.correct + 1) % wrong.n_options)
    at.button(key=f"FormSubmitter:quiz_form-{i18n.t('quiz.submit', lang)}").click().run()
    assert not at.exception
    n = len(quiz.QUESTIONS)
    assert at.subheader[0].value == i18n.t("quiz.score", lang, right=n - 1, total=n, pct=round(100 * (n - 1) / n))
    assert len(at.main.error) == 1 and len(at.main.success) == n - 1
    assert i18n.t(f"quiz.{wrong.id}.o{wrong.correct}", lang) in at.main.error[0].value
    at.button(key="quiz_reset").click().run()
    assert not at.exception and not at.subheader


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
    assert at.subheader[-1].value == i18n.t("references.prov.title", lang)
    prov = at.dataframe[-1].value
    assert "30" in prov.iloc[:, 1].tolist()  # n_layers of the embedded SmolLM2, read from the loaded model
