"""Past the training length (issue 25, seed 003's objective 3): the per-position loss against HF's own loss,
the toy's live measurement (deterministic, every position binned once, the toy's own loss), the shipped
measurement of the embedded model (its schema and label) and the long-context page that draws both."""

from __future__ import annotations

import json

import floats
import numpy as np
import pytest
import torch
from helpers.app import _font_sizes

from conftest import app_run, figure_spec, plotly_array, title_of
from core.common import i18n
from core.inside import pasttrain
from core.web import presenter


def test_per_position_loss_is_hfs_own_loss(tiny_loaded, eager_refs):
    """−mean of the per-position log p equals ``model(ids, labels=ids).loss`` (HF's own shift and
    cross-entropy, eager attention, a separate copy of the model) as accurately as HF's float32 route is to
    float64; and each position's log p equals HF's log_softmax there. 300 tokens: past the tiny config's 256
    positions too (RoPE computes any position)."""
    loaded, ref = tiny_loaded["llama"], eager_refs["llama"]
    ids = torch.from_numpy(np.random.default_rng(3).integers(0, loaded.facts.vocab_size, 300))
    ours = pasttrain.next_logprob(loaded, pasttrain.forward_rows(loaded, ids[None])[0])
    assert ours.shape == (299,) and ours.dtype == np.float64
    lab = ids[None]
    loss32 = float(ref.run(ids.tolist(), labels=lab).loss)
    loss64 = float(ref.run(ids.tolist(), "float64", labels=lab).loss)
    floats.assert_as_accurate(-ours.mean(), loss32, loss64, what="−mean log p vs HF's labels= loss")
    per = []
    for dt in ("float32", "float64"):
        z = ref.run(ids.tolist(), dt).logits[0, :-1].double()
        per.append(torch.log_softmax(z, -1)[torch.arange(299), ids[1:]].numpy())
    floats.assert_as_accurate(ours, *per, what="log p per position vs HF's log_softmax")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_long_context_page_draws_the_measurements(smol, lang):
    """Both figures on the page in both languages; the shipped figure's points are exactly the file's numbers,
    the toy's exactly the live measurement's; the label and the readouts say what the file says."""
    at = app_run("long_context", lang=lang)
    assert not at.exception, [e.value for e in at.exception]
    rec = pasttrain.load_reference()
    spec = figure_spec(at, i18n.t("pasttrain.fig_real", lang, n=f"{rec['n_tokens']:,}"))
    full = spec["data"][0]
    assert plotly_array(full["x"]).tolist() == rec["first"] and plotly_array(full["y"]).tolist() == rec["loss"]
    if "control" in rec:
        ctrl = spec["data"][1]
        assert plotly_array(ctrl["y"]).tolist() == [c for c in rec["control"] if c is not None]
    tp = pasttrain.toy_past()
    toy = figure_spec(at, i18n.t("pasttrain.fig_toy", lang))
    assert plotly_array(toy["data"][0]["y"]).tolist() == tp.loss_copy and plotly_array(toy["data"][1]["y"]).tolist() == tp.loss_all
    captions = " ".join(c.value for c in at.caption)
    words = pasttrain.real_text(rec)
    assert words["inside"] in captions and words["past"] in captions and rec["date"] in captions
    assert pasttrain.toy_text(tp)["past"] in captions and "513 positions exceed max_positions=512" in captions


def test_long_context_page_in_presenter_mode(smol):
    """?present=1: both new figures are drawn, every text in them (the limit lines' labels too) at the projector's size."""
    at = app_run("long_context", present="1")
    assert not at.exception, [e.value for e in at.exception]
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    rec = pasttrain.load_reference()
    mine = (i18n.t("pasttrain.fig_toy", "en"), i18n.t("pasttrain.fig_real", "en", n=f"{rec['n_tokens']:,}"))
    ours = [s for s in specs if title_of(s) in mine]
    assert len(ours) == 2, [title_of(s) for s in specs]
    for spec in ours:
        lay = {k: v for k, v in spec["layout"].items() if k != "template"}
        sizes = _font_sizes({"data": spec["data"], "layout": lay}, [])
        assert sizes and min(sizes) >= presenter.MIN_FONT, sorted(set(sizes))
