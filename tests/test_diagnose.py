"""The diagnose page: the fitted prefill curve holds its stated error, the extrapolation says what it
assumes, memory equals the calculator's formula and the bytes the real cache holds, the temperature demo is
exactly softmax(logits / T), and the page runs in both languages (1-token prompt, absurd budgets) without a
traceback. No assertion is on a time: the machine may be busy."""

from __future__ import annotations

import dataclasses
import math

import floats
import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from conftest import ROOT
from core import backends
from core.common import i18n, timing
from core.engine import budget
from core.engine.types import ConfigError
from core.gen import diagnose as dg
from core.gen import report

APP = str(ROOT / "app.py")


def _ls_bounds(n: np.ndarray, t: np.ndarray, coef: np.ndarray) -> tuple[float, float]:
    """float64 least squares of the weighted columns A = [1, n, n²] / t against 1 (``fit_prefill``'s): LAPACK's
    solution is exact for A + ΔA, ‖ΔA‖ ≤ γ_{3m}‖A‖ (backward stable), and each t carries three roundings of
    its closed form. So (relative miss at a point, ≤ ‖ΔA‖‖x‖ + the data's and the prediction's few roundings;
    error of a coefficient, ≤ κ(A) × that relative to ‖x‖)."""
    A = np.stack([np.ones_like(n), n, n * n][: len(coef)], axis=1) / t[:, None]
    x = np.linalg.norm(coef)
    back = floats.gamma(3 * len(n) + 6, floats.U64) * np.linalg.norm(A, 2) * x
    return float(back + floats.gamma(6, floats.U64)), float(np.linalg.cond(A) * back)


def test_fit_recovers_an_exact_curve_and_refuses_negative_terms():
    n = np.array([64, 128, 256, 512, 1024, 2048], dtype=float)
    t = 0.01 + 2e-4 * n + 3e-8 * n * n
    f = dg.fit_prefill(n, t)
    miss, coef = _ls_bounds(n, t, np.array([0.01, 2e-4, 3e-8]))
    floats.assert_within(f.max_rel_error, 0.0, miss, what="relative miss", why="float64 least squares (backward error)")
    floats.assert_within([f.a, f.b], [0.01, 2e-4], coef, what="a, b", why="float64 least squares (κ(A) × backward error)")
    # c is ~10⁻⁵ of ‖x‖: the normwise bound above does not reach it; float64 gets it to ~1e-12 of itself here,
    # and rel 1e-6 is ~10⁶ above that
    assert math.isclose(f.c, 3e-8, rel_tol=1e-6)
    parts = f.parts(2048)
    assert sum(parts.values()) == float(f.predict(2048))  # the same three terms, added in the same order
    concave = 0.5 * np.sqrt(n)  # a curve bending down: the n² term would be negative, so it is left out
    g = dg.fit_prefill(n, concave)
    assert g.a >= 0 and g.b >= 0 and g.c >= 0


def test_tpot_line_recovers_an_exact_line_and_never_slopes_down():
    n = np.array([64, 256, 1024, 2048], dtype=float)
    t = 0.02 + 3e-6 * n
    f = dg.fit_prefill(n, t, degree=1)
    miss, coef = _ls_bounds(n, t, np.array([0.02, 3e-6]))
    assert f.c == 0
    floats.assert_within(f.max_rel_error, 0.0, miss, what="relative miss", why="float64 least squares (backward error)")
    floats.assert_within(f.a, 0.02, coef, what="a", why="float64 least squares (κ(A) × backward error)")
    assert math.isclose(f.b, 3e-6, rel_tol=1e-6)  # b is ~10⁻⁴ of ‖x‖: as c above, rel 1e-6 is ~10⁶ above float64's error here
    g = dg.fit_prefill(n, 0.03 - 1e-6 * n, degree=1)  # noise sloping down: the slope is kept at 0
    assert g.b == 0 and g.c == 0 and g.a > 0
    with pytest.raises(ValueError):
        dg.fit_prefill(n, n, degree=3)


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


def test_memory_of_a_pasted_config_and_absurd_budgets():
    text = ('{"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096,'
            ' "intermediate_size": 14336, "vocab_size": 128256}')
    s = dg.MemoryShape.of_config(text, 2)
    assert s.kv_bytes(1000) == 2 * 32 * 8 * 128 * 2 * 1000
    assert s.n_params == budget.n_params(text)
    with pytest.raises(ConfigError):
        dg.MemoryShape.of_config('{"num_hidden_layers": -3}', 2)
    for raw, why in (("0", "not_positive"), ("-5", "not_positive"), ("1e30", "too_big"), ("nan", "not_finite"),
                     ("inf", "not_finite"), ("abc", "not_number"), ("", "not_number")):
        assert dg.parse_budget_gb(raw) == (None, why), raw
        assert i18n.catalogue()[f"diagnose.budget_{why}"]
    b, why = dg.parse_budget_gb("24")
    assert why is None and b == 24e9
    assert dg.max_requests(s, 8192, 1e9) == 0  # the weights alone overflow 1 GB
    n = dg.max_requests(s, 8192, b)
    assert dg.memory_at(s, 8192, n).total <= b < dg.memory_at(s, 8192, n + 1).total
    xs = dg.request_axis(n, 8)
    assert xs[0] == 1 and xs[-1] >= max(n, 8)


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


def _curve(ns, a=0.01, b=2e-4, c=3e-8, tpot=(0.02, 3e-6)):
    """Points whose prefill medians lie exactly on a + b·n + c·n² and decode medians on the TPOT line
    (``tpot`` None: no decode step timed); three samples each, the median in the middle."""
    def tm(x):
        return timing.of([0.98 * x, x, 1.03 * x])
    return [dg.PrefillPoint(n, tm(1e-4 + 1e-7 * n), tm(a + b * n + c * n * n), None if tpot is None else tm(tpot[0] + tpot[1] * n))
            for n in ns]


def _run(steps=(0.02, 0.03, 0.025)):
    """One request measured elsewhere: 5 prompt tokens, len(steps) decode steps."""
    decode = timing.of(steps)
    return dg.DecodeRun(5, len(steps), timing.of([0.001] * 5), timing.of([0.1, 0.11, 0.12]), list(steps), decode,
                        list(range(5, 6 + len(steps))), 4096, 5 + len(steps))


def test_prefill_sentence_and_table_say_the_measured_points():
    pts = _curve([64, 128, 256])
    fit = dg.fit_points(pts)
    en = report.prefill_fit_text(pts, fit, "en")
    parts = fit.parts(256)
    for want in ("reproduces each of its 3 measured points", "at 256 tokens", timing.ms(parts["quadratic"]), timing.ms(parts["linear"]),
                 timing.ms(pts[-1].prefill.median), timing.ms(pts[-1].tokenise.median)):
        assert want in en, want
    assert i18n.t("diagnose.zero_part", "en", part="")[:20] not in en  # all three parts found: no caveat
    line = _curve([64, 128, 256], c=0.0)  # a straight line: the fit sets the n² part to zero and says so
    assert i18n.t("diagnose.part_quadratic", "en") in report.prefill_fit_text(line, dg.fit_points(line), "en")
    for lang in ("en", "zh"):
        df = report.prefill_table(pts, lang)
        assert list(df.columns) == [i18n.t(f"diagnose.col_{c}", lang) for c in ("tokens", "tokenise", "prefill", "tpot")]
        assert df.iloc[:, 0].tolist() == [64, 128, 256]
        assert df.iloc[:, 2].tolist() == [report.timing_phrase(p.prefill, lang) for p in pts]
    zh = report.prefill_fit_text(pts, fit, "zh") + " ".join(report.prefill_table(pts, "zh").iloc[:, 1:].to_numpy().ravel())
    assert "四分位距" in zh and "median" not in zh and "IQR" not in zh
    assert report.prefill_table(_curve([64], tpot=None), "en").iloc[0, 3] == "—"  # no decode step timed: a dash, never 0 ms


def test_tpot_sentence_reads_the_line():
    pts = dg.tpot_points(_curve([64, 512, 2048], tpot=(0.02, 4e-6)))
    line = dg.fit_tpot(pts)
    assert line is not None
    text = report.tpot_text(pts, line, "en")
    for want in ("+4.00 ms per 1,000 cached tokens", "64 … 2,048 tokens", timing.ms(0.02 + 4e-6 * 2048),
                 timing.ms(dg.EXERCISE_OUTPUT * (0.02 + 4e-6 * 2048))):
        assert want in text, (want, text)
    assert report.tpot_note(pts, "en") == i18n.t("diagnose.tpot_note", "en", n=3)


def test_exercise_reads_both_curves_at_2k_and_20k():
    pts = _curve([64, 256, 1024])
    ex = dg.exercise(pts, 8192)
    f = lambda n: 0.01 + 2e-4 * n + 3e-8 * n * n  # noqa: E731
    # float64 closed forms against the fit of exact points: pytest.approx's rel 1e-6 is ~10⁶ above the fit's error
    assert ex.small.seconds == pytest.approx(f(2000)) and ex.large.seconds == pytest.approx(f(20000))
    assert ex.ratio == pytest.approx(f(20000) / f(2000)) and ex.quadratic_share == pytest.approx(100 * 3e-8 * 20000**2 / f(20000))
    assert ex.small.is_extrapolation and ex.large.beyond_context and ex.tpot_up_to == 1024
    d0, d1 = ex.decode_seconds()
    assert d0 == pytest.approx(100 * (0.02 + 3e-6 * 2000)) and d1 == pytest.approx(100 * (0.02 + 3e-6 * 20000))
    en = report.exercise_prefill_text(ex, "en")
    for want in (timing.ms(f(2000)), timing.ms(f(20000)), f"about {ex.ratio:.1f}×", "(also an extrapolation)", "past the longest input measured (1,024",
                 f"{ex.quadratic_share:.0f} %"):
        assert want in en, (want, en)
    assert i18n.t("diagnose.no_quad", "en") not in en
    dec = report.exercise_decode_text(ex, "en")
    assert dec is not None and timing.ms(d0) in dec and timing.ms(d1) in dec and "up to 1,024 cached tokens" in dec
    lines = report.assumptions_text(ex, _Facts(), "en").split("\n")
    assert lines[0] == i18n.t("diagnose.assume_head", "en") and len(lines) == 1 + len(dg.ASSUMPTIONS)
    assert "8,192" in report.assumptions_text(ex, _Facts(), "en")
    flat = dg.exercise(_curve([64, 2048], c=0.0, tpot=None), 8192)  # no n² part found, no decode step timed
    assert flat.tpot is None and flat.decode_seconds() is None and report.exercise_decode_text(flat, "en") is None
    text = report.exercise_prefill_text(flat, "en")
    assert i18n.t("diagnose.no_quad", "en") in text and f"({i18n.t('diagnose.kind_interp', 'en')})" in text  # 2,000 ≤ 2,048 measured
    assert report.extrapolated_note(flat, "zh") == i18n.t("diagnose.extrapolated_badge", "zh", n="2,048")


class _Facts:
    """The two facts the assumptions read."""

    name = "toy-model"
    max_positions = 8192


def test_request_and_streaming_sentences_from_one_run():
    d = _run()
    first = 0.001 + 0.11  # float64 medians and sums: pytest.approx's rel 1e-6 ≫ their rounding
    assert d.first_token == pytest.approx(first) and d.total == pytest.approx(first + 0.075)
    assert d.cumulative()[0] == pytest.approx(first)
    text = report.decode_text(d, "en")
    assert "Prompt of 5 tokens, 4 output tokens" in text and timing.ms(d.total) in text
    assert report.timing_phrase(d.prefill, "en") in text and report.timing_phrase(d.decode, "en") in text
    s = report.stream_text(d, "en")
    assert timing.ms(first) in s and "last of 4 tokens" in s and f"({100 * first / d.total:.0f} % of this request)" in s
    zh = report.decode_text(d, "zh") + report.stream_text(d, "zh") + report.medians_note(d, "zh")
    assert "四分位距" in zh and "median" not in zh and "IQR" not in zh


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


def test_symptom_table_and_card_in_both_languages():
    for lang in ("en", "zh"):
        df = report.symptom_table(dg.SYMPTOMS, lang)
        assert len(df) == len(dg.SYMPTOMS) and df.columns[0] == i18n.t("diagnose.col_symptom", lang)
        assert df.iloc[2, 1] == i18n.t("diagnose.oom.cause", lang)
        assert i18n.t("diagnose.oom.fix", lang) in report.symptom_card("oom", lang)
    assert set(dg.SEE_ALSO) == set(dg.SYMPTOMS)
    demo = dg.temperature_demo(np.array([3.0, 1.0, 0.0]), np.array([0.0, 1.0, 3.0]), k=2)
    assert report.temperature_text(demo, "`a`", "`c`", "en") == i18n.t("diagnose.temp_text", "en", top="`a`", top_ev="`c`", temps="0.3, 0.7, 1, 1.5")
    same = dg.temperature_demo(np.array([3.0, 1.0, 0.0]), np.array([3.0, 0.0, 1.0]), k=2)
    assert report.temperature_text(same, "`a`", "`a`", "zh") == i18n.t("diagnose.temp_same", "zh", top="`a`", top_ev="`a`", temps="0.3, 0.7, 1, 1.5")


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


def test_browser_link_reopens_its_symptom():
    """In a real browser: a link with ?symptom=oom opens that symptom (Chinese here), with no error;
    choosing another symptom writes it back to the URL."""
    import urllib.parse

    from browser_helpers import CHROMIUM, Watch, chromium, settle, streamlit_server

    if CHROMIUM is None:
        pytest.skip("no chromium executable installed")
    with streamlit_server(8640) as app, chromium() as b:
        page = b.new_page(viewport={"width": 1400, "height": 900})
        watch = Watch(page)
        page.goto(f"{app.base}/diagnose?lang=zh&symptom=oom")
        settle(page, timeout=300)
        assert not page.locator('[data-testid="stException"]').count()
        checked = page.locator('.st-key-diagnose_sym input[type="radio"]:checked')
        assert checked.count() == 1
        assert page.locator(".st-key-diagnose_budget").count() == 1  # the memory symptom's budget box is shown
        page.locator(".st-key-diagnose_sym label").filter(has_text=i18n.t("diagnose.sym_temperature", "zh")[:8]).first.click()
        settle(page, timeout=300)
        assert urllib.parse.parse_qs(urllib.parse.urlparse(page.url).query)["symptom"] == ["temperature"]
        assert not page.locator('[data-testid="stException"]').count() and not watch.real_errors()


def test_coefficients_are_rounded_to_three_significant_digits():
    """A fitted coefficient never claims more digits than three (it used to print 21,453 as is)."""
    from core.common.numbers import three_significant

    assert [three_significant(x) for x in (21453, -21453, 1234567, 123.456, 1.23456, 0.0123456, 0.5, 0)] == \
        ["21,500", "-21,500", "1,230,000", "123", "1.23", "0.0123", "0.500", "0"]


def test_see_page_link_uses_the_languages_own_colon():
    from core.common.i18n import t

    assert t("ui.see_page", "en", page="Long context") == "See the page: Long context"
    assert t("ui.see_page", "zh", page="长上下文") == "查看页面：长上下文"


# --- the page's glue, moved out of pages/diagnose.py ---


def test_a_press_asks_run_zero_first_then_a_fresh_run():
    want = ("smol", (256, 512))
    assert not dg.asked_again(None, want) and dg.next_request(None, want, 99) == ("smol", (256, 512), 0)
    assert dg.asked_again(("smol", (256, 512), 0), want) and dg.next_request(("smol", (256, 512), 0), want, 99) == ("smol", (256, 512), 99)
    assert not dg.asked_again(("smol", (256,), 0), want) and dg.next_request(("smol", (256,), 7), want, 99)[-1] == 0  # other settings


def test_memory_shape_from_a_paste_or_the_model(smol):
    pasted = dg.memory_shape("paste", dg.PASTE_EXAMPLE, smol.facts, 2)
    assert pasted == dg.MemoryShape.of_config(dg.PASTE_EXAMPLE, 2) and pasted.d_model == 4096
    assert dg.memory_shape("current", "", smol.facts, 4) == dg.MemoryShape.of_facts(smol.facts, 4)
    with pytest.raises(ConfigError):
        dg.memory_shape("paste", "{not json", smol.facts, 2)


def test_exercise_and_evidence_by_hand():
    assert dg.EXERCISE_RIGHT in dg.EXERCISE_ANSWERS and len(set(dg.EXERCISE_ANSWERS)) == 4
    assert dg.with_evidence("  Canberra is the capital. ", " The capital is ") == "Canberra is the capital. The capital is"
