"""The attention lab's maths (core.maths.attention, core.maths.positions) against independent references:
torch SDPA, hand computations, the tutorials' numbers, and the real SmolLM2 trace; plus every
maths page under AppTest in both languages."""

from __future__ import annotations

import floats
import numpy as np
import pytest
from helpers.attention_lab import _clock, _weight_error, check_page_real_row, real_row_bound

from conftest import ROOT
from core import backends
from core.maths import attention as A
from core.maths import positions as R

PROMPT = "苹果很好吃。苹果发布了新系统。"


# ---------------------------------------------------------------------------------------------
# real model


@pytest.fixture(scope="module")
def smol_trace(smol):

    return backends.trace(smol, PROMPT)


@pytest.mark.parametrize("layer,head", [(0, 0), (7, 4), (29, 8)])
def test_real_row_reproduces_model_weights(smol, smol_trace, layer, head):
    tr = smol_trace
    for pos in (0, 3, tr.n_tokens - 1):
        ex = A.real_row(tr, layer, head, pos)
        assert int(ex["kv_head"]) == head // 3
        s = A.attention_steps(ex["q"], ex["k"], ex["v"], ex["mask"])
        # the model's weights: HF's float32 eager softmax, kept in float16; the calculator: float64
        floats.assert_within(s.weights[0], ex["reference"], real_row_bound(ex), what=f"layer {layer}, head {head}, row {pos}",
                             why="float16 storage of the model's float32 weights")
        np.testing.assert_array_equal(s.weights[0, pos + 1:], 0.0)


def test_rope_rotate_reproduces_real_q(smol, smol_trace):
    tr = smol_trace
    for layer in (0, 15, 29):
        raw = R.pre_rope_q(smol, tr.resid[layer], layer)  # [H, T, dh]
        rotated = R.rope_rotate(raw, np.arange(tr.n_tokens), smol.facts.rope_theta)
        q = backends.layer_detail(smol, tr, layer).q
        # raw is the replay's own q_proj(input_layernorm(resid)) (the same modules on the same input); HF
        # turns it in float32: its angle pos·θ_i is off by ≤ 4u of itself (θ_i's power and division, the
        # product), its cos and sin by ≤ 2u more, x·cos + rotate_half(x)·sin by 3u; numpy's float64 is exact to its eyes
        ang = R.rope_angles(np.arange(tr.n_tokens), raw.shape[-1], smol.facts.rope_theta)
        ang = np.concatenate([ang, ang], axis=-1)
        bound = (np.abs(raw) + np.abs(R.rotate_half(raw))) * (4 * floats.U32 * ang + 5 * floats.U32)
        floats.assert_within(rotated, q, bound, what=f"layer {layer}'s q after RoPE", why="HF's float32 rotation")
        assert np.abs(raw - q).max() > 0.1  # the rotation is what closes the gap


def test_recombine_heads_gives_attn_out(smol, smol_trace):
    from core.engine.roles import find_sites

    layer = 3
    o = find_sites(smol.model).attns[layer].o_proj.weight.detach().numpy()
    d = backends.layer_detail(smol, smol_trace, layer)
    parts = A.recombine_heads(d.attn_pattern, d.v, o)
    T = smol_trace.n_tokens
    assert parts["concat"].shape == (T, 576)
    # HF's eager attention: float32 weights (off by ``_weight_error`` from the exact ones) times v, then the
    # output projection; recombine_heads: the same weights kept in float16, in float64. Each head's output
    # moves by the weights' errors through |v| (+ the float32 sum's γ_T), then through |W_O| (+ its γ_{H·dh})
    group = A.kv_group_map(d.attn_pattern.shape[0], d.v.shape[0])
    v = d.v[group]
    w, dw32 = _weight_error(d.q, d.k[group], np.tril(np.ones((T, T), dtype=bool)), u=floats.U32)
    av = np.abs(v.astype(np.float64))
    per_head = (floats.f16_rounding(d.attn_pattern) + 2 * dw32) @ av + floats.gamma(T) * (w @ av)  # [H, T, dh]
    concat = np.transpose(per_head, (1, 0, 2)).reshape(T, -1)
    ao = np.abs(o.astype(np.float64))
    bound = concat @ ao.T + floats.sum_bound(np.abs(parts["concat"]) @ ao.T, ao.shape[1], routes=1)
    floats.assert_within(parts["out"], d.attn_out, bound, what="recombined heads vs attn_out", why="float16 weights, float32 attention")


def test_real_pattern_support_is_causal(smol, smol_trace):
    s = A.support_summary(smol_trace.site("attn_pattern", 5)[2])
    assert s["above_nonzero"] == 0 and s["above_total"] == smol_trace.n_tokens * (smol_trace.n_tokens - 1) // 2
    assert s["below_nonzero"] > 0


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_cost_tab_says_median_and_when_the_machine_was_busy(monkeypatch, lang):
    from core.common import i18n
    from core.web import cache

    busy = A.time_attention([64, 128], reps=3, clock=_clock([1.0, 10.0, 5.0, 50.0, 3.0, 30.0]))
    monkeypatch.setattr(A, "time_attention", lambda lengths: busy)
    cache.attention_timing.clear()
    try:
        at = _calc_app()
        at.session_state["lang"] = lang
        at.run()
    finally:
        cache.attention_timing.clear()  # later tests measure for real again
    assert not at.exception
    assert any(i18n.t("attention_lab.timing_detail", lang, reps=3) in c.value for c in at.caption)
    assert [w.value for w in at.warning] == [i18n.t("attention_lab.timing_busy", lang, n=2, pct=25)]


def _timing_ms(at) -> list[float]:
    """The measured medians the cost tab draws (the time panel of its figure, y axis 2 in ms)."""
    import base64
    import json

    fig = next(f for f in (json.loads(c.proto.spec) for c in at.get("plotly_chart"))
               if f["layout"].get("yaxis2", {}).get("title", {}).get("text") == "ms")
    y = fig["data"][1]["y"]
    if isinstance(y, dict):  # a typed array {dtype, bdata}
        return np.frombuffer(base64.b64decode(y["bdata"]), dtype=np.dtype(y["dtype"])).astype(float).tolist()
    return [float(v) for v in y]


def _measured_at(at, lang: str):
    """The caption that says when the shown measurement was taken: (its UTC time, the caption)."""
    import datetime
    import re

    from core.common import i18n

    button = i18n.t("attention_lab.time_again", lang)
    for c in at.caption:
        m = re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", c.value)
        if m and c.value == i18n.t("attention_lab.timing_when", lang, when=m.group(0), button=button):
            return datetime.datetime.strptime(m.group(0), "%Y-%m-%d %H:%M:%S").replace(tzinfo=datetime.UTC), c.value
    raise AssertionError([c.value for c in at.caption])


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_measure_again_drops_the_shared_timing_and_measures_anew(monkeypatch, lang):
    """One measurement per server process, until "Measure again": the press measures anew (the shown
    curve and the busy warning are the new run's), and the caption says when the shown one was taken."""
    import datetime

    from core.common import i18n
    from core.web import cache

    busy = A.time_attention([64, 128], reps=3, clock=_clock([1.0, 10.0, 5.0, 50.0, 3.0, 30.0]))
    calm = A.time_attention([64, 128], reps=3, clock=_clock([1.0, 2.0, 1.01, 2.01, 1.02, 2.02]))
    calls = []

    def fake(lengths):
        calls.append(tuple(lengths))
        return (busy, calm)[min(len(calls), 2) - 1]

    monkeypatch.setattr(A, "time_attention", fake)
    cache.attention_timing.clear()
    try:
        t0 = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
        at = _calc_app()
        at.session_state["lang"] = lang
        at.run()
        t1 = datetime.datetime.now(datetime.UTC)
        assert not at.exception and len(calls) == 1  # the language's rerun reads the cached measurement
        assert _timing_ms(at) == [3000.0, 30000.0]
        assert [w.value for w in at.warning] == [i18n.t("attention_lab.timing_busy", lang, n=2, pct=25)]
        first, text = _measured_at(at, lang)
        assert t0 <= first <= t1 and f"{first:%Y-%m-%d %H:%M:%S}" in text and "UTC" in text
        button = at.button(key="attention_lab_time_again")
        assert button.label == i18n.t("attention_lab.time_again", lang)
        button.click().run()
        t2 = datetime.datetime.now(datetime.UTC)
        assert not at.exception and len(calls) == 2 and calls[0] == calls[1] == cache.TIMING_LENGTHS
        assert _timing_ms(at) == pytest.approx([1010.0, 2010.0])  # the new run's medians, not the first's (float64 s → ms: rel 1e-6 ≫ u)
        assert not at.warning  # the calm run has no busy warning
        second, _ = _measured_at(at, lang)
        assert first <= second <= t2
        at.run()  # an ordinary rerun measures nothing
        assert len(calls) == 2 and _timing_ms(at) == pytest.approx([1010.0, 2010.0])
    finally:
        cache.attention_timing.clear()  # later tests measure for real again


# ---------------------------------------------------------------------------------------------
# pages


@pytest.mark.parametrize("stem", ["attention_lab", "masks", "multihead", "positions"])
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_page_runs(stem, lang, smol):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.session_state["lang"] = lang
    at.switch_page(f"pages/{stem}.py")
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert len(at.get("plotly_chart")) >= 1
    assert not any("⟦" in m.value for m in at.markdown)  # no missing i18n key
    if stem == "attention_lab":
        at.radio(key="attention_lab_preset").set_value("real").run()
        assert not at.exception
        check_page_real_row(at, smol)
        at.radio(key="attention_lab_preset").set_value("worked").run()
        at.checkbox(key="attention_lab_unmask").check().run()
        assert not at.exception


def test_page_empty_prompt_is_a_message():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.session_state["prompt"] = "   "
    at.switch_page("pages/masks.py")
    at.run()
    assert not at.exception
    assert any("prompt" in i.value.lower() for i in at.info)


def _calc_app(**qp):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    for k, v in qp.items():
        at.query_params[k] = v
    at.switch_page("pages/attention_lab.py")
    at.run()
    return at


def _editor_ids(at) -> list[str]:
    return [e.proto.id for e in at.dataframe if e.proto.id]  # the data editors (plain tables have no id)


def test_unmask_keeps_the_q_k_v_editors_and_renews_only_the_mask():
    """An edited Q survives "Unmask": Q, K and V keep their editors (Streamlit keeps a data editor's
    edits by its key), only the mask's editor is new."""
    at = _calc_app()
    before = _editor_ids(at)
    at.checkbox(key="attention_lab_unmask").check().run()
    after = _editor_ids(at)
    assert not at.exception and len(before) == len(after) == 4
    for name in ("q", "k", "v"):
        assert [i for i in before if f"attention_lab_{name}_" in i] == [i for i in after if f"attention_lab_{name}_" in i]
    assert [i for i in before if "attention_lab_mask_" in i] != [i for i in after if "attention_lab_mask_" in i]


def test_real_row_scaling_is_its_own_and_unscaled_says_why(smol):
    at = _calc_app()
    at.checkbox(key="attention_lab_scaled_worked").uncheck().run()  # unscaled on the tutorial's example …
    at.radio(key="attention_lab_preset").set_value("real").run()
    assert at.checkbox(key="attention_lab_scaled_real").value is True  # … leaves the real row scaled like the model
    check_page_real_row(at, smol)
    # the timing tab may warn that the machine was busy while it measured (CI is); no warning about the scale
    assert not [w for w in at.warning if "√64" in w.value]
    at.checkbox(key="attention_lab_scaled_real").uncheck().run()
    diff = float(next(m for m in at.metric if m.label.startswith("max |")).value)
    assert diff > 0.01 and any("√64 = 8" in w.value and f"{diff:.2f}" in w.value for w in at.warning)


def test_cost_tab_table_is_formatted():
    import pyarrow as pa

    at = _calc_app()
    cost = next(d for d in at.table if d.value.columns[0] == "n")
    assert not at.exception and cost.value.iloc[0, 0] == 1024  # the numbers stay numbers …
    shown = pa.ipc.open_stream(cost.proto.arrow_data.styler.display_values).read_all().to_pandas()  # … drawn formatted
    text = shown.to_string()
    assert "1,024" in text and "1,048,576" in text and "—" in text and "×4" in text and "None" not in text and "nan" not in text


def test_shipped_reference_timing_loads_and_is_shown_with_its_machine_and_date(fake_timing):
    """The JSON in assets/ (made by tests/benchmarks/bench_attention_reference.py --write) lines up, and the
    cost tab shows its medians beside the live run, with its machine, date and torch in the caption."""
    from core.common import i18n
    from core.common.paths import asset
    from core.web import cache

    ref = A.load_reference(asset(A.REFERENCE_FILE))
    assert A.REFERENCE_LENGTHS == cache.TIMING_LENGTHS  # the reference times what the live run times
    assert ref["n"] == list(A.REFERENCE_LENGTHS) and all(a <= m <= b for a, m, b in zip(ref["q1"], ref["ms"], ref["q3"]))
    for lang in ("en", "zh"):
        at = _calc_app()
        at.session_state["lang"] = lang
        at.run()
        assert not at.exception
        want = i18n.t("attention_lab.ref_where", lang, machine=ref["machine"], date=ref["date"], torch=ref["torch"], reps=ref["reps"])
        assert want in [c.value for c in at.caption]
        table = next(d.value for d in at.dataframe if i18n.t("attention_lab.ref_col", lang) in d.value.columns)
        assert table[i18n.t("attention_lab.ref_col", lang)].tolist() == ref["ms"]
        assert table[i18n.t("attention_lab.live_col", lang)].tolist() == [float(n) for n in ref["n"]]  # the stand-in live run
