"""The diagnose page: the fitted prefill curve holds its stated error, the extrapolation says what it
assumes, memory equals the calculator's formula and the bytes the real cache holds, the temperature demo is
exactly softmax(logits / T), and the page runs in both languages (1-token prompt, absurd budgets) without a
traceback. No assertion is on a time: the machine may be busy."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from conftest import ROOT
from core import backends
from core.engine import budget, i18n
from core.engine.types import ConfigError
from core.gen import diagnose as dg

APP = str(ROOT / "app.py")


def test_fit_recovers_an_exact_curve_and_refuses_negative_terms():
    n = np.array([64, 128, 256, 512, 1024, 2048], dtype=float)
    t = 0.01 + 2e-4 * n + 3e-8 * n * n
    f = dg.fit_prefill(n, t)
    assert f.max_rel_error < 1e-9
    assert math.isclose(f.a, 0.01, rel_tol=1e-6) and math.isclose(f.b, 2e-4, rel_tol=1e-6) and math.isclose(f.c, 3e-8, rel_tol=1e-6)
    parts = f.parts(2048)
    assert math.isclose(sum(parts.values()), float(f.predict(2048)), rel_tol=1e-12)
    concave = 0.5 * np.sqrt(n)  # a curve bending down: the n² term would be negative, so it is left out
    g = dg.fit_prefill(n, concave)
    assert g.a >= 0 and g.b >= 0 and g.c >= 0


def test_tpot_line_recovers_an_exact_line_and_never_slopes_down():
    n = np.array([64, 256, 1024, 2048], dtype=float)
    f = dg.fit_prefill(n, 0.02 + 3e-6 * n, degree=1)
    assert f.c == 0 and f.max_rel_error < 1e-9
    assert math.isclose(f.a, 0.02, rel_tol=1e-6) and math.isclose(f.b, 3e-6, rel_tol=1e-6)
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
    for p in pts:
        assert abs(float(f.predict(p.n_tokens)) - p.prefill.median) <= (f.max_rel_error + 1e-9) * p.prefill.median
    line = dg.fit_tpot(pts)
    assert line is not None and line.n_points == 3 and line.c == 0 and line.b >= 0
    for p in pts:
        assert abs(float(line.predict(p.n_tokens)) - p.decode.median) <= (line.max_rel_error + 1e-9) * p.decode.median
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
    generate.measure_tpot(smol, [1, 2], n_decode=0, reps=2, warmup=1, progress=lambda d, t: seen.append((d, t)))
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
    assert e.is_extrapolation and e.factor == pytest.approx(20_000 / 2048)
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
            ref = torch.softmax(torch.tensor(logits, dtype=torch.float64) / T, dim=-1).numpy()[demo.ids]
            np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-15)
        # dividing by T never reorders: the question's top candidate is the same at every temperature
        assert demo.ids[int(np.argmax(demo.question[i]))] == demo.top_question
    assert demo.top_question != demo.top_evidence  # the evidence, not the temperature, moves the answer


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
        assert "reproduces each of its 3 measured points" in " ".join(m.value for m in at.markdown)
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
