"""The diagnose page: the fitted prefill curve holds its stated error, the extrapolation says what it
assumes, memory equals the calculator's formula and the bytes the real cache holds, the temperature demo is
exactly softmax(logits / T), and the page runs in both languages (1-token prompt, absurd budgets) without a
traceback. No assertion is on a time: the machine may be busy."""

from __future__ import annotations

import dataclasses

import floats
import numpy as np
import pytest
import torch
from helpers.diagnose import _run
from streamlit.testing.v1 import AppTest

from conftest import ROOT
from core import backends
from core.common import i18n
from core.engine import budget
from core.engine.types import ConfigError
from core.gen import diagnose as dg
from core.gen import report

APP = str(ROOT / "app.py")


def test_measured_curve_reproduces_its_points_within_its_stated_error(smol):
    pts = dg.measure_prefill_curve(smol, [8, 16, 32], reps=2, warmup=0, tpot_steps=2)
    assert [p.n_tokens for p in pts] == [8, 16, 32]
    assert all(p.prefill.n == 2 and p.tokenise.n >= 5 for p in pts)
    assert all(p.decode is not None and p.decode.n == 2 * 2 for p in pts)  # 2 steps × 2 timed runs
    f = dg.fit_points(pts)
    # max_rel_error is max |pred − t| / t of these very predictions: reading it back as |pred − t| ≤ it × t
    # costs its own division and this product (≤ 3u)
    for p in pts:
        assert abs(float(f.predict(p.n_tokens)) - p.prefill.median) <= f.max_rel_error * p.prefill.median * (1 + 3 * floats.U64)
    line = dg.fit_tpot(pts)
    assert line is not None and line.n_points == 3 and line.c == 0 and line.b >= 0
    for p in pts:
        assert abs(float(line.predict(p.n_tokens)) - p.decode.median) <= line.max_rel_error * p.decode.median * (1 + 3 * floats.U64)
    assert dg.fit_tpot([dg.PrefillPoint(8, p.tokenise, p.prefill) for p in pts]) is None  # no decode steps: no line


def test_one_tpot_measured_one_way(smol, monkeypatch):
    """The diagnose page's request and curve are timed by generate.measure_tpot, the app's one TPOT;
    its per-run steps are exactly the samples of its decode Timing, and its cache the formula's bytes."""
    from core.gen import generate

    m = generate.measure_tpot(smol, [1, 2, 3, 4, 5], n_decode=3, reps=2, warmup=1)
    assert len(m.runs) == 2 and all(len(r) == 3 for r in m.runs)
    assert m.decode is not None and m.decode.samples == tuple(x for r in m.runs for x in r)
    assert m.kv_tokens == (5, 6, 7, 8)
    assert m.kv_bytes == dg.MemoryShape.of_facts(smol.facts, smol.facts.value_bytes).kv_bytes(8)
    seen = []
    generate.measure_tpot(smol, [1, 2], n_decode=0, reps=2, warmup=1, progress=lambda d, t, _w: seen.append((d, t)))
    assert seen == [(0, 3), (1, 3), (2, 3), (3, 3)]
    calls = []
    real = generate.measure_tpot

    def spy(*a, **kw):
        calls.append(kw.get("n_decode"))
        return real(*a, **kw)

    monkeypatch.setattr(generate, "measure_tpot", spy)
    d = dg.measure_decode(smol, "Hello there", False, n_decode=2, reps=1, warmup=0)
    dg.measure_prefill_curve(smol, [8], reps=1, warmup=0)
    assert calls == [2, dg.TPOT_STEPS]
    assert d.decode.n == 2 and d.step_medians == list(d.decode.samples)


def test_extrapolation_is_labelled_and_states_its_assumptions(smol):
    f = dg.Fit(0.01, 1e-4, 1e-8, 0.05, 5)
    e = dg.extrapolate(f, dg.EXERCISE_TO, 2048, smol.facts.max_positions)
    assert e.is_extrapolation and e.factor == pytest.approx(20_000 / 2048)  # float64: rel 1e-6 ≫ a division's rounding
    assert e.beyond_context  # SmolLM2 has 8,192 positions: 20K is a what-if
    assert not dg.extrapolate(f, 1024, 2048, smol.facts.max_positions).is_extrapolation
    assert e.assumptions == dg.ASSUMPTIONS and len(e.assumptions) >= 4
    cat = i18n.catalogue()
    for a in e.assumptions:
        assert cat[f"diagnose.assume_{a}"]["en"].strip() and cat[f"diagnose.assume_{a}"]["zh"].strip()
    assert dg.curve_lengths(2048, 8192) == [64, 128, 256, 512, 1024, 1536, 2048]
    assert dg.curve_lengths(4096, 600) == [64, 128, 256, 512]  # the context window caps it
    assert dg.curve_lengths(4096, 40) == [39]


def test_memory_is_the_formula_and_the_real_cache_bytes(smol):
    f = smol.facts
    for bpv in (4, 2, 1):
        s = dg.MemoryShape.of_facts(f, bpv)
        assert s.kv_bytes(4096, 8) == 2 * f.n_layers * f.n_kv_heads * f.head_dim * bpv * 4096 * 8
        assert s.weight_bytes() == f.n_params * bpv
        m = dg.memory_at(s, 4096, 8)
        assert m.total == m.weights + m.kv + m.activations and m.kv == s.kv_bytes(4096, 8)
    # a 1-token prompt, 3 decode steps: the real tensors of the Stepper's cache against the formula
    d = dg.measure_decode(smol, "Hi", False, n_decode=3, reps=1, warmup=0)
    assert d.n_prompt == 1 and d.kv_tokens_end == 4 and len(d.step_medians) == 3
    assert d.kv_bytes == dg.MemoryShape.of_facts(f, f.value_bytes).kv_bytes(d.kv_tokens_end)
    assert len(d.cumulative()) == 4 and np.all(np.diff(d.cumulative()) >= 0)


def test_temperature_demo_is_exactly_softmax_of_logits_over_t(smol):
    q = backends.trace(smol, "The capital of Australia is")
    e = backends.trace(smol, "Canberra is the capital of Australia. The capital of Australia is")
    demo = dg.temperature_demo(q.last_logits, e.last_logits)
    for i, T in enumerate(demo.temperatures):
        for logits, got in ((q.last_logits, demo.question[i]), (e.last_logits, demo.evidence[i])):
            z = logits.astype(np.float64) / T
            ref = torch.softmax(torch.tensor(z), dim=-1).numpy()[demo.ids]
            # two float64 softmaxes over V terms: each rounds its V-term sum of positive terms (γ_V), each
            # exponent's argument (≤ u × the spread), each exp and the division
            rel = 2 * (floats.gamma(len(z), floats.U64) + (z.max() - z.min() + 3) * floats.U64)
            floats.assert_within(got, ref, rel * np.maximum(got, ref), what=f"T = {T}", why="two float64 softmaxes")
        # dividing by T never reorders: the question's top candidate is the same at every temperature
        assert demo.ids[int(np.argmax(demo.question[i]))] == demo.top_question
    assert demo.top_question != demo.top_evidence  # the evidence, not the temperature, moves the answer


def test_memory_sentences_are_the_plan(smol):
    text = ('{"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096,'
            ' "intermediate_size": 14336, "vocab_size": 128256}')
    shape = dg.MemoryShape.of_config(text, 2)
    for reqs in (8, 200):
        plan = dg.memory_plan(shape, 8192, reqs, 24e9)
        m = report.memory_text(shape, plan, "en")
        for want in (budget.fmt_gb(plan.at.kv), budget.fmt_gb(plan.at.weights), budget.fmt_gb(plan.at.total), "24.0 GB", f"{reqs:,}", "8,192"):
            assert want in m, (want, m)
        assert report.memory_verdict(plan, "en") == i18n.t("diagnose.mem_fits" if plan.at.total <= 24e9 else "diagnose.mem_oom", "en", n=plan.limit)
    assert plan.limit < 200 and not plan.fits  # 200 requests of 8K tokens overflow 24 GB
    f = smol.facts
    exact = dg.MemoryShape.of_facts(f, f.value_bytes).kv_bytes(8)
    run = _run()
    good = dataclasses.replace(run, kv_bytes=exact, kv_tokens_end=8)
    assert f"**{exact:,} bytes**" in report.real_cache_text(f, good, "en") and report.real_cache_text(f, good, "en").endswith("✓.")
    bad = dataclasses.replace(good, kv_bytes=exact + 1)
    assert "✗" in report.real_cache_text(f, bad, "en")


def test_presenter_mode_draws_the_measured_points_as_a_table(monkeypatch):
    """On a projector the measured points are an st.table (the presenter CSS enlarges it), not a dataframe canvas."""
    monkeypatch.setattr(dg, "curve_lengths", lambda longest, max_pos, lengths=None: [8, 16])  # fast
    for present, tables, frames in (("1", 2, 0), ("0", 1, 1)):  # the symptom table is an st.table in both
        at = AppTest.from_file(APP, default_timeout=600)
        at.query_params["present"] = present
        at.switch_page("pages/diagnose.py")
        at.run()
        at.button(key="diagnose_go_prefill").click().run()
        assert not at.exception, [e.value for e in at.exception]
        assert (len(at.table), len(at.dataframe)) == (tables, frames), present
    assert at.dataframe[0].value.iloc[:, 0].tolist() == [8, 16]


def test_symptom_in_the_url_round_trip():
    at = AppTest.from_file(APP, default_timeout=600)
    at.query_params["symptom"] = "oom"
    at.switch_page("pages/diagnose.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.radio(key="diagnose_sym").value == "oom"
    at.radio(key="diagnose_sym").set_value("temperature").run()
    assert at.query_params["symptom"] == ["temperature"] or at.query_params["symptom"] == "temperature"
    bad = AppTest.from_file(APP, default_timeout=600)
    bad.query_params["symptom"] = "<script>nonsense"
    bad.switch_page("pages/diagnose.py")
    bad.run()
    assert not bad.exception and not bad.error
    assert bad.radio(key="diagnose_sym").value == "slow_first"  # an unknown symptom falls back to the first, silently


def test_page_on_the_toy_model(monkeypatch):
    if not (ROOT / "assets" / "toy").is_dir():
        pytest.skip("the trained toy is not in assets/toy")
    monkeypatch.setattr(dg, "curve_lengths", lambda longest, max_pos, lengths=None: [8, 16])  # fast
    at = AppTest.from_file(APP, default_timeout=600)
    at.query_params["model"] = "toy"
    at.session_state["prompt"] = "Hi"
    at.switch_page("pages/diagnose.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    at.slider(key="diagnose_n_out").set_value(4).run()
    at.button(key="diagnose_go_decode").click().run()
    at.button(key="diagnose_go_prefill").click().run()
    for sym in ("slow_first", "slow_answer", "oom", "temperature", "attention"):
        at.radio(key="diagnose_sym").set_value(sym).run()
        assert not at.exception, (sym, [e.value for e in at.exception])


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_page_in_both_languages_with_a_one_token_prompt(lang, monkeypatch):
    monkeypatch.setattr(dg, "curve_lengths", lambda longest, max_pos, lengths=None: [8, 16, 32])  # fast
    at = AppTest.from_file(APP, default_timeout=600)
    at.query_params["lang"] = lang
    at.query_params["chat"] = "0"
    at.session_state["prompt"] = "Hi"
    at.switch_page("pages/diagnose.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.title[0].value == i18n.t("page.diagnose", lang)
    for sym in ("temperature", "oom", "attention", "slow_answer", "slow_first"):
        at.radio(key="diagnose_sym").set_value(sym).run()
        assert not at.exception, (sym, [e.value for e in at.exception])
    at.radio(key="diagnose_sym").set_value("oom").run()
    for raw in ("0", "-3", "1e30", "nan", "lots"):
        at.text_input(key="diagnose_budget").set_value(raw).run()
        assert not at.exception, (raw, [e.value for e in at.exception])
        assert any(w.value for w in at.warning), raw
    at.text_input(key="diagnose_budget").set_value("24").run()
    at.radio(key="diagnose_ex").set_value("temperature").run()
    assert at.error and not at.exception
    # measure (tiny lengths; the second language reads the first one's cached run): the figures' views
    at.slider(key="diagnose_n_out").set_value(4).run()
    at.button(key="diagnose_go_decode").click().run()
    at.button(key="diagnose_go_prefill").click().run()
    assert not at.exception, [e.value for e in at.exception]
    if lang == "zh":  # every sentence and table cell in Chinese: no English timing phrase left
        at.radio(key="diagnose_sym").set_value("slow_first").run()
        cells = " ".join(str(v) for df in at.dataframe for v in df.value.to_numpy().ravel())
        at.radio(key="diagnose_sym").set_value("slow_answer").run()
        text = " ".join(m.value for m in at.markdown) + cells
        assert "四分位距" in text and "median of" not in text and "IQR" not in text
        assert "每多 1,000 个缓存 Token" in text
    if lang == "en":  # the real-cache check, the fit's stated error, the TPOT line
        text = " ".join(m.value for m in at.markdown)
        assert "Checked on the real cache" in text and "✓" in text
        assert "an extrapolation" in text and "The extrapolation assumes" in text
        at.radio(key="diagnose_sym").set_value("slow_first").run()
        fit = " ".join(m.value for m in at.markdown)
        # a fit whose linear or quadratic part is 0 (the ≥ 0 constraint, which a loaded machine's timings can
        # hit) says so instead of splitting (issue 25); either way it states its points and its error
        assert "reproduces each of its 3 measured points" in fit or ("within ±" in fit and "of its 3 measured points" in fit)
        at.radio(key="diagnose_sym").set_value("slow_answer").run()
        assert not at.exception, [e.value for e in at.exception]
        assert "per 1,000 cached tokens" in " ".join(m.value for m in at.markdown)
        # issue 14: a curve or timeline without error bars never says "bars: interquartile range"
        caps = [c.value for c in at.caption]
        assert any("no error bars here; the spread of the prefill:" in c and "IQR" in c for c in caps)
        assert not any("bars: interquartile range" in c for c in caps if "decode steps" not in c)


def test_memory_shape_from_a_paste_or_the_model(smol):
    pasted = dg.memory_shape("paste", dg.PASTE_EXAMPLE, smol.facts, 2)
    assert pasted == dg.MemoryShape.of_config(dg.PASTE_EXAMPLE, 2) and pasted.d_model == 4096
    assert dg.memory_shape("current", "", smol.facts, 4) == dg.MemoryShape.of_facts(smol.facts, 4)
    with pytest.raises(ConfigError):
        dg.memory_shape("paste", "{not json", smol.facts, 2)
