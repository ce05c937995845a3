"""Classroom pages: the guided tour, the self-check quiz, the references — data, numbers, pages.

The tour's numbers are checked against an independent computation with the HF model itself
(embedding matrix rows, hidden states, softmax of the logits, the sizes of HF's own KV cache).
"""

from __future__ import annotations

import pytest
from helpers.learn import _decode

from core import backends
from core.common import i18n
from core.engine.tokens import visible
from core.learn import quiz, references, tour
from core.web import chips
from core.web.nav import STEMS as NAV_STEMS


def app_page_stems() -> list[str]:
    """The stems the router registers (core.web.nav.PAGES)."""
    return list(NAV_STEMS)


STEMS = app_page_stems()


# ---------------------------------------------------------------------------------------------
# data: stages, questions, references


def test_pages_list_parsed():
    assert {"tour", "quiz", "references", "journey"} <= set(STEMS)


@pytest.mark.parametrize("lang", i18n.LANGS)
def test_tour_stages_have_text_and_valid_pages(lang):
    cat = i18n.catalogue()
    assert tuple(s.key for s in tour.STAGES) == ("text", "tokens", "embeddings", "blocks", "hidden", "logits", "sampling", "kv_cache",
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
    assert s.percent == pytest.approx(100 / len(qs))  # float64: rel 1e-6 is ~10⁹ × a division's rounding
    with pytest.raises(ValueError):
        quiz.Question("bad", 3, 3, "tour", "attention")


def test_references_data_and_cite():
    arx = {r.arxiv for r in references.REFERENCES.values()}
    assert {"1706.03762", "2005.14165", "2104.09864", "2305.13245"} <= arx
    assert references.cite("kv_cache")[0].key == "trtllm_kv"
    assert references.cite("positions")[0].label().startswith("Su et al. (2021). RoFormer")
    for r in references.REFERENCES.values():  # a preprint is cited once as arXiv, never "arXiv. arXiv:…"
        assert "arXiv. arXiv:" not in r.label() and r.label().count("arXiv") <= (2 if "arXiv" in r.title else 1)
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


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_tour_every_stage_on_tiny_models(tiny_loaded, arch):
    loaded = tiny_loaded[arch]
    tr = backends.trace(loaded, "Hello `world` $x$ <b>")
    for key in (s.key for s in tour.STAGES):
        v = tour.stage_view(key, tr, _decode(loaded), layer=99)  # an out-of-range layer is clamped
        assert v.metrics
        for s in v.fill.values():
            assert "`" not in str(s)
        body = i18n.t(f"tour.{key}.body", "zh", **v.fill)  # every placeholder is filled
        assert "{" not in body
    v = tour.stage_view("kv_cache", tr, _decode(loaded))
    traced = sum(d.k.nbytes + d.v.nbytes for d in (backends.layer_detail(loaded, tr, layer) for layer in range(tr.n_layers)))
    assert dict(v.metrics)["tour.m.kv_total"] == f"{traced:,} B"


def test_quiz_option_order_is_seeded_and_varies():
    q = quiz.QUESTIONS[0]
    assert quiz.option_order(q, 42) == quiz.option_order(q, 42)  # a link reproduces it
    assert sorted(quiz.option_order(q, 42)) == list(range(q.n_options))
    for q in quiz.QUESTIONS:  # over attempts, the right answer is found in every place
        places = {quiz.option_order(q, seed).index(q.correct) for seed in range(60)}
        assert places == set(range(q.n_options)), q.id
    # within one attempt, the right answers' places do not follow the 2, 3, 1 cycle of the data
    cycle = [q.correct for q in quiz.QUESTIONS]
    assert any([quiz.option_order(q, s).index(q.correct) for q in quiz.QUESTIONS] != cycle for s in range(5))
    assert [quiz.parse_seed(x) for x in ("123", " 7 ", "0")] == [123, 7, 0]
    assert [quiz.parse_seed(x) for x in (None, "", "abc", "-1", "1e3", "3.5", str(quiz.SEED_MAX), "9" * 40)] == [None] * 8
