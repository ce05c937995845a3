"""Training vs inference (core.learn.training, pages/training.py): labels shifted by one, every position's
loss from one parallel pass, and the same logits from a separate pass of each prefix.

References: Hugging Face's own training loss (``model(input_ids, labels=input_ids).loss``, which shifts the
labels itself) and HF's own eager model in float32 and float64 (conftest.EagerReference) for the bounds.
"""

from __future__ import annotations

import json

import floats
import numpy as np
import pytest
import torch

from conftest import app_run, title_of
from core import backends
from core.common import i18n
from core.learn import training

PROMPT = "The capital of France is Paris. The capital of Italy is Rome."


@pytest.fixture(scope="module")
def traced(smol):
    return backends.trace(smol, PROMPT)


def test_every_position_loss_from_one_pass_is_hf_loss(smol, eager_refs, traced):
    """The mean of the per-position losses from the trace's logits is HF's own ``labels=`` loss; each
    position's loss is as accurate as HF float32's own, against the float64 model."""
    tf = training.teacher_forcing(smol, traced)
    ids = traced.token_ids.tolist()
    assert tf.n == len(ids) - 1 and tf.ids.tolist() == ids
    ref = eager_refs["smollm2"]
    x = torch.tensor([ids])
    out32, out64 = ref.run(ids, labels=x), ref.run(ids, "float64", labels=x)
    labels = np.asarray(ids[1:])  # next-token labels: the inputs shifted by one
    per32 = training.cross_entropy(out32.logits[0, :-1].numpy(), labels)
    per64 = training.cross_entropy(out64.logits[0, :-1].numpy(), labels)
    floats.assert_as_accurate(tf.losses, per32, per64, "per-position cross-entropy")
    # HF's labels= loss is the mean of per-position cross-entropies, computed in float32 (transformers'
    # ForCausalLMLoss casts the logits with .float(), even a float64 model's). The exact loss is the float64
    # mean of the float64 model's per-position losses; ours must be as close to it as HF's own float32 loss is.
    exact = float(per64.mean())
    floats.assert_as_accurate(tf.mean_loss, float(out32.loss), exact, "mean loss vs HF's labels= loss")
    floats.assert_as_accurate(tf.mean_loss, float(out64.loss), exact, "mean loss vs HF's loss on float64 logits")
    # the label's rank and the favourite read off the same rows
    assert np.all((tf.rank == 0) == (tf.top1 == labels))
    floats.assert_within(tf.p_label, np.exp(-tf.losses), 0, "p = exp(−loss)")
    assert 0 < tf.n_top1 < tf.n  # this prompt: some next tokens guessed, some not (the numbers move, the claim holds)


@pytest.mark.parametrize("which", ["first", "middle", "second_last", "last"])
def test_parallel_row_equals_a_separate_pass_of_the_prefix(smol, eager_refs, traced, which):
    """Row t of the one parallel pass = the last row of a separate forward of tokens 0 … t (inference's
    view), both as accurate as HF float32's own prefix pass against float64; at the last position the
    two are the same route (the whole text, the last row) and equal bit for bit."""
    T = traced.n_tokens
    t = {"first": 0, "middle": T // 2, "second_last": T - 2, "last": T - 1}[which]
    sl = training.same_logits(smol, traced, t)
    ids = traced.token_ids.tolist()[: t + 1]
    ref = eager_refs["smollm2"]
    r32, r64 = ref.run(ids).logits[0, -1].numpy(), ref.run(ids, "float64").logits[0, -1].numpy()
    floats.assert_as_accurate(sl.parallel, r32, r64, f"parallel row {t}")
    floats.assert_as_accurate(sl.prefix, r32, r64, f"prefix pass 0…{t}")
    floats.assert_greedy_choice(np.array([int(sl.top_ids[0])]), r32[None], r64[None], f"favourite at {t}")
    if t == T - 1:
        floats.assert_same(sl.prefix, traced.last_logits, "the whole text's last row, twice")
        floats.assert_same(sl.parallel, traced.last_logits, "row T−1 is the trace's last logits")


def test_a_long_prompt_is_scored_on_its_first_positions(smol):
    long = " ".join(["one two three four"] * 80)
    tr = backends.trace(smol, long)
    assert tr.n_tokens > training.MAX_POSITIONS
    head = training.scored_trace(smol, tr)
    assert head.n_tokens == training.MAX_POSITIONS and head.token_ids.tolist() == tr.token_ids[: training.MAX_POSITIONS].tolist()
    tf = training.teacher_forcing(smol, head, n_total=tr.n_tokens)
    assert tf.cut and tf.n == training.MAX_POSITIONS - 1
    # causal mask: the first rows of the long pass and of the short pass are one prediction
    assert int(np.argmax(backends.full_logits(smol, tr)[10])) == int(tf.top1[10])


@pytest.mark.parametrize("lang", i18n.LANGS)
def test_page_renders_numbers_in_both_languages(smol, lang):
    at = app_run("training", lang=lang, prompt=PROMPT, pos="5")
    assert not at.exception, [e.value for e in at.exception][:2]
    figs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    titles = [title_of(f) for f in figs]
    assert titles == [i18n.t("training.fig_loss_title", lang), i18n.t("training.fig_same_title", lang)]
    tf = training.teacher_forcing(smol, backends.trace(smol, PROMPT, chat=bool(at.session_state["chat"])))
    assert [round(v, 6) for v in figs[0]["data"][0]["y"]] == [round(float(v), 6) for v in tf.losses]
    metric = {m.label: m.value for m in at.metric}
    assert metric[i18n.t("training.m_loss", lang)] == f"{tf.mean_loss:.3f}"
    assert metric[i18n.t("training.m_same_top", lang, k=training.TOP)] == i18n.t("training.yes", lang)
    assert at.query_params["pos"] == "5"  # a shared link opens the same position


def test_page_in_presenter_mode(smol):
    from core.web import presenter

    at = app_run("training", present="1", prompt=PROMPT)
    assert not at.exception
    figs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert len(figs) == 2 and all(f["layout"]["font"]["size"] >= presenter.MIN_FONT for f in figs)
