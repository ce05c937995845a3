"""Class questions (core/web/classroom/questions.py): the counts equal the votes, a guess is scored by the stored
distribution (by hand here), the KV number is the formula by hand, the CSV holds one row per vote."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest

from core.engine.types import HeadGeometry
from core.web.classroom import questions as cq
from core.web.classroom.store import Question, Vote


class Tok:
    """A tokenizer of whole words: id = position in VOCAB; the readable piece is the word."""

    VOCAB = (" Paris", " London", " the", " a", "Paris", " Rome")

    def encode(self, text, add_special_tokens=False):
        words = text.replace(" ", "\x00 ").split("\x00")
        return [self.VOCAB.index(w) for w in words if w]

    def convert_ids_to_tokens(self, ids):
        return [self.VOCAB[i] for i in ids]

    def decode(self, ids):
        return "".join(self.VOCAB[i] for i in ids)


def _votes(*answers):
    return [Vote(f"d{i:016d}", a, float(i)) for i, a in enumerate(answers)]


def test_next_token_top_k_and_guesses_scored_by_the_stored_distribution():
    probs = np.array([0.5, 0.2, 0.15, 0.1, 0.04, 0.01], dtype=np.float32)
    public, answer, blob = cq.next_token(Tok(), "The capital of France is", "The capital of France is", probs, k=3)
    assert [t[0] for t in answer["top"]] == [0, 1, 2] and answer["space"] is True
    assert np.array_equal(np.frombuffer(blob, dtype=np.float32), probs)
    q = Question(1, "next", False, public, answer)
    guesses = cq.tally_next(Tok(), q, _votes("Paris", "Paris", "Rome", "London", " Paris "), probs)
    by = {g.text: g for g in guesses}
    assert by["Paris"].n == 3 and by["Paris"].rank == 1 and by["Paris"].p == pytest.approx(0.5)
    assert by["Rome"].rank == 6 and by["London"].rank == 2 and by["Rome"].pieces == (" Rome",)
    assert sum(g.n for g in guesses) == 5
    assert cq.hits(guesses, 1) == 3 and cq.hits(guesses, 5) == 4


def test_mc_counts_equal_the_votes_and_bad_answers_are_not_counted():
    q = Question(2, "mc", False, {"id": "kv_stores", "n": 3}, {"correct": 2})
    assert cq.tally_mc(q, _votes("2", "2", "0", "7", "x", "-1")) == [1, 0, 2]


def test_kv_number_is_the_formula_by_hand():
    shape = HeadGeometry("m", n_layers=30, n_heads=9, n_kv_heads=3, head_dim=64)
    public, answer, _ = cq.kv_number(shape, "SmolLM2", 4096)
    assert answer["bytes"] == 2 * 30 * 3 * 64 * 2 * 4096
    q = Question(3, "number", False, public, answer)
    xs, spread = cq.tally_number(q, _votes("94.4", "1e2", "10", "forty", "47,2 MB"))
    assert xs == [94.4, 100.0, 10.0, 47.2] and spread.n == 4 and spread.median == pytest.approx((47.2 + 94.4) / 2)
    assert spread.within_2x == 3  # 94.4 MB is the value: 10 is not within ×2


@pytest.mark.parametrize(("typed", "value"), [("12", 12.0), ("12.5", 12.5), (".5", 0.5), ("3e2", 300.0), ("1,5", 1.5),
                                               ("40 MB", 40.0), ("×10", 10.0), ("10x", 10.0), ("x", None), ("10xx", None), ("", None), ("1e999", None), ("nan", None), ("-3", None),
                                               ("<b>1</b>", None)])
def test_parse_number(typed, value):
    assert cq.parse_number(typed) == value


def test_csv_has_one_row_per_vote_names_only_when_on_and_no_formulas():
    q1 = Question(1, "mc", False, {"id": "kv_stores", "n": 3}, {"correct": 2})
    q2 = Question(2, "next", False, {}, {})
    v1 = [Vote("a" * 16, "2", 1.0, "Ann"), Vote("b" * 16, "0", 2.0, "=HYPERLINK(\"x\")")]
    v2 = [Vote("a" * 16, "<script>", 3.0, "Ann")]
    anon = list(csv.reader(io.StringIO(cq.csv_bytes([(q1, v1), (q2, v2)], names=False).decode())))
    assert anon[0] == ["question", "kind", "answer"] and len(anon) == 1 + 3
    assert not any("Ann" in c for row in anon for c in row)
    named = list(csv.reader(io.StringIO(cq.csv_bytes([(q1, v1), (q2, v2)], names=True).decode())))
    assert named[2][3] == "'=HYPERLINK(\"x\")" and named[3][2] == "<script>"


def test_ablate_counts_each_choice_and_ranks_the_room_by_the_measured_kl():
    public, answer, blob = cq.ablate("x" * 450, "head", 3, ["h0", "h1", "h2", "h3"], [0.01, 0.4, 0.02, 0.1])
    assert public["cut"] and len(public["prompt"]) == 400 and public["n"] == 4 and blob == b""
    q = Question(4, "ablate", False, public, answer)
    hostile = ("7", "-1", "x", "", " 2", "²", "0" * 60, "<b>1</b>", "1.0", "٣")  # none is a choice's index
    assert not any(cq.valid_answer(q, h) for h in hostile)
    counts = cq.tally_mc(q, _votes("3", "3", "1", "0", *hostile))
    assert counts == [1, 1, 0, 2]
    a = cq.ablated(q, counts)
    assert (a.best, a.n_best, a.favourite, a.favourite_rank) == (1, 1, 3, 2)  # h3: 2nd largest KL (0.1 < 0.4)
    with pytest.raises(AssertionError):
        cq.ablate("p", "model", 0, ["h0"], [0.1])


def test_a_next_token_question_keeps_its_prompt_whole_for_the_receipt_only_within_its_bytes(tmp_path):
    from core.web.classroom.store import SqliteStore

    assert cq.retrace("m", "a" * cq.RETRACE_BYTES, True) == {"model": "m", "prompt": "a" * cq.RETRACE_BYTES, "chat": True}
    assert cq.retrace("m", "字" * (cq.RETRACE_BYTES // 3 + 1), False) is None  # counted in UTF-8 bytes, not characters
    probs = np.full(49_152, 1 / 49_152, dtype=np.float32)
    public, answer, _ = cq.next_token(Tok(), "字" * 400, "x", probs[:6] / probs[:6].sum(),
                                         lens=(["字字字字"] * 31, [0.5] * 31))
    answer["again"] = cq.retrace("m", "字" * (cq.RETRACE_BYTES // 3), True)
    s = SqliteStore(tmp_path / "c.sqlite3")
    c = s.start()
    assert s.open_question(c.cid, c.secret, "next", public, answer, probs.tobytes()) == 1  # the longest one fits the store


def test_ttft_factor_is_the_diagnose_exercise_read_off_the_fit_by_hand():
    from core.gen import diagnose as dg

    fit = dg.Fit(a=0.01, b=2e-4, c=5e-8, max_rel_error=0.02, n_points=4)
    ex = dg.Exercise(fit, dg.extrapolate(fit, 2_000, 1_024, 8_192), dg.extrapolate(fit, 20_000, 1_024, 8_192), None, 0)
    public, answer, _ = cq.ttft_number(ex, "SmolLM2", 8_192)
    by_hand = (0.01 + 2e-4 * 20_000 + 5e-8 * 20_000**2) / (0.01 + 2e-4 * 2_000 + 5e-8 * 2_000**2)
    assert answer["ratio"] == pytest.approx(by_hand, rel=1e-12) and public["from"] == 2_000 and public["to"] == 20_000
    q = Question(5, "ttft", False, public, json.loads(json.dumps(answer)))  # as the store gives it back
    again = cq.exercise_of(q)
    assert again.ratio == answer["ratio"] and again.large.beyond_context and again.large.measured_up_to == 1_024
    assert cq.truth(q) == answer["ratio"]
    xs, spread = cq.tally_number(q, _votes("10", "×30", "100x", "fast", "", "<i>2</i>", "x"))
    assert xs == [10.0, 30.0, 100.0] and spread.within_2x == 1  # 39.4: only 30 is within ×2
