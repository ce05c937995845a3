"""The app shell: every registered page runs in both languages, every string has both languages,
and looking at another layer reads the cached trace instead of running the model."""

from __future__ import annotations

import html
import json
import re

import pytest
from helpers.app import _font_sizes
from streamlit.testing.v1 import AppTest

from conftest import ROOT, all_text, app_run
from core import backends
from core.web.nav import STEMS

APP = str(ROOT / "app.py")
LANGS = ("en", "zh")
# Every registered page (core.web.nav.PAGES, the router's own list) in both languages, one test each:
# ``pytest tests/integration/test_app.py -k heads-zh`` re-runs one.
PAGE_RUNS = [pytest.param(stem, lang, id=f"{stem}-{lang}") for stem in STEMS for lang in LANGS]


# ---------------------------------------------------------------------------------------------
# every page runs


@pytest.mark.parametrize(("stem", "lang"), PAGE_RUNS)
def test_page_runs_without_exception(stem, lang):
    at = app_run(stem, lang=lang)
    assert not at.exception, (stem, lang, [e.value for e in at.exception][:2])
    if stem != "journey":
        assert at.title or at.header or at.markdown, f"{stem} rendered nothing"
    unknown = sorted(set(re.findall(r"⟦[^⟧]*⟧", all_text(at))))  # i18n.t shows a key it lacks as ⟦key⟧
    assert not unknown, (stem, lang, unknown)
    if lang == "zh":  # Streamlit's own placeholder ("Choose an option") shows where a choice list is given none
        shown = [w.proto.placeholder for w in (*at.selectbox, *at.multiselect)]
        assert all(shown) and "Choose an option" not in shown and "Choose an option" not in all_text(at), (stem, shown)


def test_journey_shows_the_real_trace_in_both_languages():
    at = app_run()
    text = " ".join(m.value for m in at.markdown)
    assert "3575" in text and "capital" in text  # the real token id of " capital" in SmolLM2's vocabulary
    assert at.title[0].value == "The journey of a sentence"
    at.session_state["lang"] = "zh"
    at.run()
    assert at.title[0].value == "一句话的旅程"


def test_choosing_a_layer_never_runs_the_model_again():
    at = app_run()
    before = backends.FORWARD_PASSES
    slider = at.slider(key="journey_layer")
    for layer in (0, 7, 29):
        slider.set_value(layer).run()
        assert not at.exception
        assert any(f"resid[{layer}]" in c.value for c in at.code)
    assert before == backends.FORWARD_PASSES


def test_empty_prompt_gives_a_hint_and_no_model_call():
    at = app_run()
    before = backends.FORWARD_PASSES
    at.text_area(key="prompt").set_value("   ").run()
    assert not at.exception
    assert any("prompt" in i.value.lower() for i in at.info)
    assert before == backends.FORWARD_PASSES


def test_wrong_model_folder_keeps_the_previous_model(tmp_path, monkeypatch):
    monkeypatch.setenv("XRAY_ALLOW_LOCAL", "1")  # the local-folder box exists only when the operator turns it on
    at = app_run()
    at.selectbox(key="model_pick").set_value("__local__").run()
    at.text_input(key="model_path").set_value(str(tmp_path / "missing")).run()
    assert not at.exception
    assert any("No folder" in e.value for e in at.error)
    assert at.session_state["model_spec_ok"] == "SmolLM2-135M-Instruct"
    assert at.title[0].value == "The journey of a sentence"


# ---------------------------------------------------------------------------------------------
# issue 14: one label rule on every page, a projector's type, links that reopen the view

LABEL_PROMPT = "我喜欢人工智能\n a  b"  # byte tokens, a newline, spaces
_POS_LABEL = re.compile(r"(?<![\w‹])(\d+)·((?:‹[0-9A-F ]+›|[^\s<|‹])+)")


def _strings(obj, out: list[str]) -> list[str]:
    """Every string inside a plotly spec (ticks, hover, custom data, names, titles)."""
    if isinstance(obj, str):
        out.append(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            _strings(v, out)
    elif isinstance(obj, list):
        for v in obj:
            _strings(v, out)
    return out


def _page(stem: str, **state):
    at = AppTest.from_file(APP, default_timeout=240)
    for k, v in state.items():
        at.session_state[k] = v
    at.switch_page(f"pages/{stem}.py")
    at.run()
    assert not at.exception, (stem, [e.value for e in at.exception])
    return at


def test_one_label_rule_on_every_figure_table_and_chip(smol):
    """A token reads the same everywhere: in the chips, the tables, every figure's ticks and hover text
    — whitespace made visible (never a blank), a byte token as its character and bytes (我‹E6 88›)."""
    from core.engine.tokens import readable_tokens, token_labels

    ids = smol.tokenizer(LABEL_PROMPT)["input_ids"]
    labels = token_labels(readable_tokens(smol.tokenizer, ids))
    assert labels[0] == "我‹E6 88›" and "⏎" in labels and any("␣" in lbl for lbl in labels)
    found: dict[str, int] = {}
    for stem in ("journey", "tokens", "heads", "residual", "logits", "multihead", "tour", "positions"):
        at = _page(stem, prompt=LABEL_PROMPT, chat=False)
        texts = [m.value for m in at.markdown] + [c.value for c in at.caption]
        texts += [s for c in at.get("plotly_chart") for s in _strings(json.loads(c.proto.spec), [])]
        texts += [str(x) for d in [*at.dataframe, *at.table] for x in d.value.astype(str).to_numpy().ravel()]
        texts += [str(o) for sb in at.selectbox for o in sb.options]
        for text in texts:
            assert "⟨" not in text, (stem, text[:200])  # bytes always drawn ‹E6 88›
            assert not re.search(r"‹[0-9A-F ]*␣", text), (stem, text[:200])  # never ‹E6␣88›
            for pos, lbl in _POS_LABEL.findall(text):
                if int(pos) < len(labels):
                    assert lbl == labels[int(pos)], (stem, pos, lbl, labels[int(pos)])
                    found[stem] = found.get(stem, 0) + 1
        chips_html = " ".join(m.value for m in at.markdown if 'class="xr-chip"' in m.value)
        if stem in ("journey", "tokens"):
            pieces = re.findall(r'data-piece="([^"]*)"', chips_html)[: len(labels)]
            assert [html.unescape(p) for p in pieces] == labels, stem
    assert {"heads", "residual", "logits", "multihead", "tokens"} <= set(found), found  # position labels were seen


@pytest.mark.parametrize("stem", ["heads", "attention_lab", "tour", "context", "positions", "logits"])
def test_presenter_mode_figures_use_projector_type(smol, stem):
    """?present=1: every figure's text is at least 18 px (one helper applies it), the sidebar starts
    collapsed."""
    from core.web import presenter

    at = app_run(stem, present="1", step="3")
    assert not at.exception
    figs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert figs, stem
    for spec in figs:
        lay = {k: v for k, v in spec["layout"].items() if k != "template"}
        assert lay["font"]["size"] >= presenter.MIN_FONT
        sizes = _font_sizes({"data": spec["data"], "layout": lay}, [])
        assert sizes and min(sizes) >= presenter.MIN_FONT, (stem, sorted(set(sizes)))
    at2 = app_run(stem)
    plain = [json.loads(c.proto.spec)["layout"].get("font", {}).get("size") for c in at2.get("plotly_chart")]
    assert all(s is None or s < presenter.MIN_FONT for s in plain)  # outside presenter mode, figures are as built


def test_links_reopen_journey_sampling_and_stepper_settings(smol):
    """The journey's layer, the sampling settings and the stepper's run settings live in the URL; a
    link with bad values opens with them clamped or dropped, never a traceback."""
    at = app_run(layer="12")
    assert at.slider(key="journey_layer").value == 12
    at.slider(key="journey_layer").set_value(20).run()
    assert at.query_params["layer"] in ("20", ["20"])

    at = app_run("logits", temp="0.7", top_k="40", top_p="0.9", penalty="1.2", seed="7")
    assert not at.exception
    assert (at.slider(key="logits_temp").value, at.number_input(key="logits_topk").value) == (0.7, 40)
    assert (at.slider(key="logits_topp").value, at.slider(key="logits_pen").value, at.number_input(key="logits_seed").value) == (0.9, 1.2, 7)
    at.slider(key="logits_temp").set_value(1.5).run()
    assert at.query_params["temp"] in ("1.5", ["1.5"])

    at = app_run("logits", temp="nan", top_k="-3", top_p="7", penalty="abc", seed="1e99")
    assert not at.exception and not at.error
    assert (at.slider(key="logits_temp").value, at.number_input(key="logits_topk").value) == (1.0, 0)
    assert (at.slider(key="logits_topp").value, at.slider(key="logits_pen").value, at.number_input(key="logits_seed").value) == (1.0, 1.0, 0)

    at = app_run("generation", greedy="0", temp="1.3", top_k="20", top_p="0.8", seed="5", max="12")
    assert not at.exception
    assert at.toggle(key="generation_greedy").value is False and at.slider(key="generation_temp").value == 1.3
    assert [at.number_input(key=f"generation_{k}").value for k in ("topk", "seed", "max")] == [20, 5, 12]
    assert at.slider(key="generation_topp").value == 0.8

    at = app_run("generation", greedy="maybe", temp="-9", top_k="1e3", max="100000")
    assert not at.exception and not at.error
    assert at.toggle(key="generation_greedy").value is True and at.slider(key="generation_temp").value == 0.1
    assert [at.number_input(key=f"generation_{k}").value for k in ("topk", "max")] == [50, 256]


def test_presenter_css_enlarges_metric_values_inputs_and_tables():
    """The metric's value is markdown (a <p>) since Streamlit 1.4x: the rule for body text must not shrink
    it below the label; inputs and selects grow too; tables of numbers become st.table on a projector,
    the one kind of table the CSS reaches (st.dataframe draws on a canvas)."""
    from core.web import presenter

    css = presenter._CSS
    assert css.index('[data-testid="stMetricValue"] p') > css.index('[data-testid="stMarkdownContainer"] p')
    assert '[data-testid="stMain"] input' in css and '[data-baseweb="select"]' in css
    at = app_run("logits", present="1")
    assert not at.exception and len(at.dataframe) == 0 and len(at.table) >= 1
    at = app_run("logits")
    assert not at.exception and len(at.dataframe) >= 1
