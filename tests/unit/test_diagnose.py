"""The diagnose page: the fitted prefill curve holds its stated error, the extrapolation says what it
assumes, memory equals the calculator's formula and the bytes the real cache holds, the temperature demo is
exactly softmax(logits / T), and the page runs in both languages (1-token prompt, absurd budgets) without a
traceback. No assertion is on a time: the machine may be busy."""

from __future__ import annotations

import math

import floats
import numpy as np
import pytest
from helpers.diagnose import _curve, _run

from core.common import i18n, timing
from core.engine import budget
from core.engine.types import ConfigError
from core.gen import diagnose as dg
from core.gen import report


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


def test_exercise_and_evidence_by_hand():
    assert dg.EXERCISE_RIGHT in dg.EXERCISE_ANSWERS and len(set(dg.EXERCISE_ANSWERS)) == 4
    assert dg.with_evidence("  Canberra is the capital. ", " The capital is ") == "Canberra is the capital. The capital is"
