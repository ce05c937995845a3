"""Issue 25: the quiz items for the points that had none (fixed head roles, concat and W_O, two residuals and
two norms per block, long input vs long output), each right answer checked against the real model; and the
printable self-check list (every point mapped to registered pages, both languages, a Markdown download)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.selfcheck import _numbers

from conftest import app_run
from core import backends
from core.common import i18n
from core.gen import generate
from core.learn import checklist, quiz


def test_head_roles_answer_heads_change_with_the_input(smol):
    """The right answer: a head has no fixed job. Checked on the model: where each head of SmolLM2 looks from
    the last position (its strongest key: the first token, itself, the previous token, or further back)
    changes with the prompt for many heads."""
    q = quiz.BY_ID["head_roles"]
    assert "train" in i18n.t(f"quiz.head_roles.o{q.correct}", "en")

    def roles(prompt: str) -> np.ndarray:
        tr = backends.trace(smol, prompt)
        T, top = tr.n_tokens, tr.last_attn.argmax(-1)  # [L, H]
        return np.select([top == 0, top == T - 1, top == T - 2], [0, 1, 2], 3)

    a = roles("The cat sat on the mat because it was tired, and then it slept.")
    b = roles("def add(a, b):\n    return a + b\n\nprint(add(2, 3))")
    changed = int((a != b).sum())
    assert changed >= 10, changed  # of 30 × 9 = 270 heads; a fixed role per head would change none


def test_concat_wo_answer_matches_the_model(smol):
    """9 heads × 64 = 576 = d_model, and W_O (o_proj) is 576 × 576 in every layer: the numbers the item quotes.
    (That concat → W_O gives the traced attention output is test_attention_lab.test_recombine_heads_gives_attn_out.)"""
    f = smol.facts
    q = quiz.BY_ID["concat_wo"]
    text = i18n.t("quiz.concat_wo.q", "en") + i18n.t(f"quiz.concat_wo.o{q.correct}", "en")
    assert {f.n_heads, f.head_dim, f.n_heads * f.head_dim} <= _numbers(text)
    assert f.n_heads * f.head_dim == f.d_model
    for layer in smol.model.model.layers:
        assert tuple(layer.self_attn.o_proj.weight.shape) == (f.d_model, f.n_heads * f.head_dim)


def test_two_norms_answer_matches_the_model(smol):
    """Two norms inside every block (before attention, before the MLP), one after the last: 2L + 1."""
    L = smol.facts.n_layers
    norms = [n for n, m in smol.model.named_modules() if type(m).__name__.endswith("RMSNorm")]
    per_block = [n for n in norms if ".layers.0." in n]
    assert sorted(n.rsplit(".", 1)[1] for n in per_block) == ["input_layernorm", "post_attention_layernorm"]
    assert len(norms) == 2 * L + 1
    assert {2 * L + 1, L} <= _numbers(i18n.t("quiz.two_norms.why", "en"))
    assert i18n.t("quiz.two_norms.o1", "en").count("+") == 2  # two additions


def test_long_io_answer_counts_forward_passes(smol):
    """Same total tokens, long input vs long output: the long input is one prefill pass plus few decode
    steps; every output token is a pass of its own. Run for real (40 in / 3 out vs 3 in / 40 out), then the
    item's numbers (2,000 / 20) by the same rule: 1 prefill + (output − 1) decode steps."""
    ids = smol.tokenizer("1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14")["input_ids"]
    long_in = generate.Stepper(smol, (ids * 4)[:40], max_steps=3, record_attention=False, stop_at_eos=False)
    long_out = generate.Stepper(smol, ids[:3], max_steps=40, record_attention=False, stop_at_eos=False)
    long_in.run()
    long_out.run()
    a = [(r.phase, r.n_input) for r in long_in.records]
    b = [(r.phase, r.n_input) for r in long_out.records]
    assert a == [("prefill", 40)] + [("decode", 1)] * 2
    assert b == [("prefill", 3)] + [("decode", 1)] * 39
    assert sum(n for _, n in a) == sum(n for _, n in b) == 42  # the same tokens through the model …
    assert len(b) > 10 * len(a)  # … in many more passes, one after another
    q = quiz.BY_ID["long_io"]
    assert {2000, 20, 20 - 1, 2000 - 1} <= _numbers(i18n.t("quiz.long_io.q", "en") + i18n.t("quiz.long_io.why", "en"))
    assert "B" in i18n.t(f"quiz.long_io.o{q.correct}", "en")


@pytest.mark.parametrize("lang", i18n.LANGS)
def test_quiz_page_shows_the_checklist(lang):
    at = app_run("quiz", lang=lang)
    assert not at.exception
    assert i18n.t("checklist.h", lang) in [h.value for h in at.header]
    texts = " ".join(m.value for m in at.main.markdown)
    for p in checklist.POINTS:
        assert i18n.t(f"checklist.{p.key}", lang) in texts
    assert len(at.main.radio) == len(quiz.QUESTIONS)
