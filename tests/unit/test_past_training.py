"""Past the training length (issue 25, seed 003's objective 3): the per-position loss against HF's own loss,
the toy's live measurement (deterministic, every position binned once, the toy's own loss), the shipped
measurement of the embedded model (its schema and label) and the long-context page that draws both."""

from __future__ import annotations

import copy
import json

import floats
import numpy as np
import pytest
import torch

from core.engine.trace import MAX_TOKENS
from core.inside import pasttrain
from core.toy import run as toy_run
from core.toy import train as toy_train


def test_bins_cover_every_position_once():
    for n, w in [(1, 1), (767, 32), (12287, 512), (100, 7)]:
        bins = pasttrain.bins_of(n, w)
        assert [p for a, b in bins for p in range(a, b + 1)] == list(range(n))
        assert all(b - a + 1 == w for a, b in bins[:-1])
    with pytest.raises(ValueError):
        pasttrain.bins_of(0, 4)


def test_held_out_rows_mark_exactly_the_second_copies():
    """Each predictable target repeats the letter one segment back, and every row starts at <bos>; a held-out
    row is not a training row (another random stream)."""
    ids, pred = pasttrain.held_out(4, 300, seed=5)
    assert ids.shape == (4, 300) and pred.shape == (4, 299) and (ids[:, 0] == 256).all()
    assert set(np.unique(ids[:, 1:])) <= set(toy_train.ALPHABET)
    ids2, pred2 = pasttrain.held_out(4, 300, seed=5)
    floats.assert_same(ids2, ids, "held-out rows")
    floats.assert_same(pred2, pred, "predictable mask")
    for r in range(4):  # rebuild the segment lengths from the mask: a run of True of length L−1 follows a copy of L
        t = 0
        while t < 299:
            if pred[r, t]:
                run = 0
                while t + run < 299 and pred[r, t + run]:
                    run += 1
                L = run + 1  # (a run cut by the row's end is shorter than its segment: not checked)
                tgt = t + 1  # the target ids[t + 1] is the 2nd letter of the second copy
                assert t + run == 299 or (ids[r, tgt : tgt + run] == ids[r, tgt - L : tgt - L + run]).all()
                t += run
            else:
                t += 1
    assert 0.3 < pred.mean() < 0.5  # about half the letters are second copies, minus their first letters


def test_toy_past_is_deterministic_and_is_the_toys_own_loss():
    """Two measurements: the same bits. Each bin's mean is the mean of its positions' losses. Each position's
    log p is the toy's own log_softmax of its logits, as accurately as the toy's float32 route is to float64."""
    loaded = toy_run.load_trained()
    a = pasttrain.measure_toy(loaded, 200, rows=2, width=32)
    b = pasttrain.measure_toy(loaded, 200, rows=2, width=32)
    floats.assert_same(a.logp, b.logp, "toy log p")
    assert a.loss_all == b.loss_all and a.loss_copy == b.loss_copy
    assert [p for s, e in a.bins for p in range(s, e + 1)] == list(range(199))
    for (s, e), m, mc in zip(a.bins, a.loss_all, a.loss_copy, strict=True):
        assert m == float((-a.logp[:, s : e + 1]).mean())
        sel = a.predictable[:, s : e + 1]
        assert mc == (float((-a.logp[:, s : e + 1])[sel].mean()) if sel.any() else None)
    ids, _ = pasttrain.held_out(2, 200)
    x = torch.from_numpy(ids)
    m64 = copy.deepcopy(loaded.model).double()
    with torch.inference_mode():
        ref = [torch.log_softmax(m(x)[0][:, :-1].double(), -1).gather(-1, x[:, 1:, None])[..., 0].numpy() for m in (loaded.model, m64)]
    floats.assert_as_accurate(a.logp, *ref, what="toy log p vs its own logits")


def test_toy_runs_past_its_trained_length_and_max_positions():
    """The trained length is the training script's ``seq_len`` (recorded beside the loss curve), not the
    config's ``max_positions``; the live measurement runs 8× it, past max_positions too; a learned table refuses."""
    trained = pasttrain.toy_trained_length()
    assert trained == toy_train.SEQ_LEN == json.loads((toy_run.ASSETS / toy_run.LOSS_FILE).read_text())["seq_len"]
    tp = pasttrain.toy_past()
    assert tp.trained == trained and tp.length == pasttrain.TOY_FACTOR * trained > tp.max_positions == 512
    assert tp.logp.shape == (pasttrain.TOY_ROWS, tp.length - 1) and np.isfinite(tp.logp).all()
    s = tp.summary()
    assert s["inside"] == float((-tp.logp[:, :trained])[tp.predictable[:, :trained]].mean())
    assert s["past"] == float((-tp.logp[:, trained:])[tp.predictable[:, trained:]].mean())
    words = pasttrain.toy_text(tp)
    assert words["inside"] == f"{s['inside']:.3f}" and words["past"] == f"{s['past']:.3f}" and words["factor"] == "8"
    assert pasttrain.toy_refusal() == "513 positions exceed max_positions=512"


def test_shipped_measurement_schema_and_label():
    """assets/past_training.json: labelled (machine, date, torch and threads, model, attention, time, document),
    bins 0 … n − 2 once, past the trained length (the embedded model's 8,192) and the app's trace cut; the summary
    means agree with the bins they cover (float64 sums in another order)."""
    rec = pasttrain.load_reference()
    assert pasttrain.check_reference(rec) == []
    for k in pasttrain.LABEL_KEYS:
        assert rec[k] not in ("", None), k
    assert rec["attention"] == "sdpa" and rec["document"].startswith(pasttrain.DOCUMENT)
    assert "SmolLM2" in rec["model"] and rec["trained"] == 8192 and rec["trace_cut"] == MAX_TOKENS
    assert rec["n_tokens"] >= rec["trained"] + rec["bin"]
    assert rec["trained"] % rec["bin"] == 0  # the trained length falls on a bin edge
    k = rec["trained"] // rec["bin"]
    count = np.array([b - a + 1 for a, b in zip(rec["first"], rec["last"], strict=True)], dtype=np.float64)
    loss = np.array(rec["loss"])
    for got, sl in ((rec["loss_inside"], slice(0, k)), (rec["loss_past"], slice(k, None))):
        want = float((loss[sl] * count[sl]).sum() / count[sl].sum())
        floats.assert_within(got, want, floats.sum_bound(abs(got) * count[sl].sum(), int(count[sl].sum()), floats.U64, routes=4),
                             "summary vs bins", "float64 means in another order")
    if "control" in rec:
        assert all(c is None for c in rec["control"][:k]) and all(c is not None for c in rec["control"][k:])
        diffs = [rec["loss"][i] - rec["control"][i] for i in range(k, len(loss))]
        i = k + int(np.argmax(diffs))
        if max(diffs) > 0:
            assert pasttrain.widest_gap(rec) == {"a": f"{rec['first'][i]:,}", "b": f"{rec['last'][i]:,}",
                                                 "full": f"{rec['loss'][i]:.3f}", "ctrl": f"{rec['control'][i]:.3f}"}


@pytest.mark.parametrize("broken", [
    lambda r: r.pop("machine"),
    lambda r: r["loss"].__setitem__(0, float("nan")),
    lambda r: r["first"].__setitem__(1, r["first"][1] + 1),
    lambda r: r.__setitem__("trained", r["n_tokens"]),
])
def test_a_broken_record_is_refused(tmp_path, broken):
    rec = pasttrain.load_reference()
    broken(rec)
    p = tmp_path / "x.json"
    p.write_text(json.dumps(rec))
    with pytest.raises(ValueError, match="not a past-training measurement"):
        pasttrain.load_reference(p)


def test_real_measurement_maps_the_control_window_onto_the_documents_positions(tiny_loaded):
    """measure_real on a tiny model (300 document tokens, a 'trained length' of 200): the full curve is the bins of
    one forward's log p; the control at document position p ≥ 200 is the window's log p at p − 100 (the window
    ids[100:] run alone: same route, same bits); the record it makes passes the schema check."""
    loaded = tiny_loaded["llama"]
    got = pasttrain.measure_real(loaded, 300, 200, width=50, log=lambda _s: None)
    ids, source = pasttrain.document_ids(loaded.tokenizer, 300)
    assert got["document"] == source and source.startswith(pasttrain.DOCUMENT) and got["control_start"] == 100
    full = pasttrain.next_logprob(loaded, pasttrain.forward_rows(loaded, torch.from_numpy(ids[None]))[0])
    win = pasttrain.next_logprob(loaded, pasttrain.forward_rows(loaded, torch.from_numpy(ids[None, 100:]))[0])
    bins = pasttrain.bins_of(299, 50)
    assert got["loss"] == [float((-full[a : b + 1]).mean()) for a, b in bins]
    assert got["control"] == [None] * 4 + [float((-win[a - 100 : b - 100 + 1]).mean()) for a, b in bins[4:]]
    assert got["loss_past_control"] == float((-win[100:]).mean()) and got["loss_past"] == float((-full[200:]).mean())
    rec = pasttrain.reference_record(got, "test machine", "today", "tiny llama", 1.0)
    assert pasttrain.check_reference(rec) == []
