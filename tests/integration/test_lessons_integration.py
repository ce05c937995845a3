"""The lessons page (issue 25): two 45-minute routes whose every link opens a registered page with
parameters that page really reads, values its own readers accept unchanged, and the view the teacher
prepared; the answers' numbers against the model; the self-study order covering every tutorial section,
cause and effect after the maths; the "covered" marker after a page is opened."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from helpers.lessons import _split

from conftest import all_text, app_run
from core import backends, encode_prompt, trace
from core.cause import receipt
from core.common import i18n
from core.engine.types import say
from core.gen import generate
from core.gen.sampling import SamplingConfig
from core.inside import embeddings
from core.learn import examples, lessons
from core.web import receipt as web_receipt
from core.web import ui


@pytest.fixture
def fake_url(monkeypatch):
    url: dict[str, str] = {}
    monkeypatch.setattr(ui, "st", SimpleNamespace(query_params=url, session_state={}))
    return url


def _ranges(smol, route, step, q) -> dict[str, tuple[int, int]]:
    f = smol.facts
    T = len(encode_prompt(smol, q["prompt"], chat=q["chat"] == "1").ids)
    top = f.n_layers if step.page == "journey" else f.n_layers - 1  # the journey's slider runs over the boundaries 0 … L
    n = int(q.get("max", 1))  # the stepper's passes: its step, and the receipt's position within prompt and answer
    return {"layer": (0, top), "head": (0, f.n_heads - 1), "pos": (0, T - 1), "max": (1, 256), "step": (0, n - 1),
            "why": (0, T + n - 2), "why_tok": (0, f.vocab_size - 1)}


CHOICES = {"tab": ("calc", "scale", "cost", "relative"), "pair": tuple(embeddings.CONTEXT_PAIRS), "show": ("layer", "head")}
FLOATS = {("logits", "temp"): (0.05, 3.0, 0.05)}  # pages/logits.py's slider_url


def test_every_value_is_taken_unchanged_by_the_pages_readers(smol, fake_url):
    """Each value through the reader its page uses (ui.qp_int / qp_choice / qp_bool / qp_float with the
    page's own range): a value it would clamp or drop would open another view than the one prepared."""
    view = examples.best_view(*_she_layers(smol))
    for route in lessons.ROUTES.values():
        for step in route.steps:
            _, q = _split(lessons.href(route, step, view))
            fake_url.clear()
            fake_url.update(q)
            ranges = _ranges(smol, route, step, q)
            for name, raw in q.items():
                if name in ranges:
                    lo, hi = ranges[name]
                    assert ui.qp_int(name, -1, lo, hi) == int(raw), (route.key, step.key, name, raw, lo, hi)
                elif name in CHOICES:
                    assert ui.qp_choice(name, CHOICES[name], None) == raw, (step.key, name)
                elif name in ("chat", "hide", "greedy"):
                    assert ui.qp_bool(name, None) is (raw == "1")
                elif (step.page, name) in FLOATS:
                    assert ui.qp_float(name, -1.0, *FLOATS[(step.page, name)]) == float(raw)
                else:
                    assert name in ("lang", "prompt", "focus"), (step.key, name)


def _she_layers(smol):
    tr = trace(smol, examples.SHE.prompt, chat=False)
    return tr.tokens, [tr.attention(layer) for layer in range(tr.n_layers)]


def test_the_she_step_opens_at_the_models_own_view(smol):
    """Its layer, head and position are best_view's on the embedded model, and the answer's percentages are its weights."""
    view = examples.best_view(*_she_layers(smol))
    step = next(s for s in lessons.ZH.steps if s.view == "she")
    q = lessons.params(lessons.ZH, step, view)
    assert (q["layer"], q["head"], q["pos"]) == (str(view.layer), str(view.head), str(view.query_pos))
    assert q["chat"] == "0" and q["prompt"] == examples.SHE.prompt
    assert lessons.fill(step, view) == {"l": str(view.layer), "h": str(view.head), "t": f"{view.on_target:.0%}", "o": f"{view.on_other:.0%}"}
    assert "layer" not in lessons.params(lessons.ZH, step, None)  # unknown view: the heads page's own button finds it


# ---------------------------------------------------------------------------------------------
# a few steps opened as the teacher's link opens them


def _open(route_key: str, step_key: str, view=None):
    route = lessons.ROUTES[route_key]
    step = next(s for s in route.steps if s.key == step_key)
    page, q = _split(lessons.href(route, step, view))
    at = app_run(page, **q)
    assert not at.exception, [e.value for e in at.exception][:2]
    assert at.text_area(key="prompt").value == route.prompt_of(step)
    assert at.toggle(key="chat").value is route.chat_of(step)
    return at


def test_she_link_shows_the_view(smol):
    view = examples.best_view(*_she_layers(smol))
    at = _open("zh", "she", view)
    assert (at.slider(key="heads_layer").value, at.slider(key="heads_head").value, at.slider(key="heads_q").value) == \
        (view.layer, view.head, view.query_pos)


def test_journey_link_shows_its_layer(smol):
    at = _open("en", "flow")
    assert at.slider(key="journey_layer").value == 15


@pytest.mark.parametrize(("route", "pair"), [("en", "en"), ("zh", "zh_ctx")])
def test_context_link_shows_its_pair_and_the_answer_holds(smol, route, pair):
    """The pair the link names is the one shown, and the answer's claim: 1.000 at the embedding, lower deeper."""
    at = _open(route, "context" if route == "en" else "apple")
    assert at.selectbox(key="context_preset").value == pair
    assert not at.warning  # same IDs: no "different token IDs" warning
    m = {x.label: x.value for x in at.metric}
    assert m[i18n.t("context.m_embed", route)] == "1.000"
    assert float(m[i18n.t("context.m_min", route)]) < 1.0


def test_attention_lab_link_opens_the_calculator_on_the_worked_example(smol):
    at = _open("en", "formula")
    assert at.query_params["tab"] == ["calc"] or at.query_params["tab"] == "calc"
    assert at.radio(key="attention_lab_preset").value == "worked"


# ---------------------------------------------------------------------------------------------
# the answers' numbers


def test_the_answers_numbers_are_the_models(smol):
    f = smol.facts
    assert (f.n_layers, f.n_heads, f.n_kv_heads, f.d_model, f.vocab_size) == (30, 9, 3, 576, 49152)
    assert f.n_heads // f.n_kv_heads == 3 and 28 // 4 == 7  # GQA groups: SmolLM2's, the tutorial's Qwen2.5
    assert len(encode_prompt(smol, lessons.EN_PROMPT, chat=True).ids) == 37  # en flow: 37 IDs with the template
    raw = trace(smol, lessons.ZH_PROMPT, chat=False)
    assert (len(lessons.ZH_PROMPT), raw.n_tokens) == (7, 11)  # zh cost: 7 characters, 11 tokens
    for ch, n in (("2", 1), ("加", 1), ("3", 1), ("等", 2), ("于", 2), ("几", 2), ("？", 2)):
        assert len(examples.locate(raw.tokens, ch)) == n, ch
    chat = trace(smol, lessons.ZH_PROMPT, chat=True)
    assert smol.tokenizer.decode([int(np.argmax(chat.last_logits))]) == "2"  # zh flow: greedy picks "2"
    a = smol.tokenizer("小明批评了小红", add_special_tokens=False)["input_ids"]
    b = smol.tokenizer("小红批评了小明", add_special_tokens=False)["input_ids"]
    assert sorted(a) == sorted(b) and a != b  # zh order: the same tokens, another order


def test_the_sink_answer_layer_15(smol):
    """en "sink": in most of layer 15's heads the last query's largest weight is on the first token."""
    tr = trace(smol, lessons.EN_PROMPT, chat=True)
    w = tr.attention(15)[:, -1, :]  # [H, T]
    assert int((w.argmax(axis=1) == 0).sum()) > tr.n_heads // 2


def test_temperature_half_sharpens_and_keeps_the_ranking(smol):
    tr = trace(smol, lessons.ZH_PROMPT, chat=True)
    p1, p5 = tr.last_probs(1.0), tr.last_probs(0.5)
    assert p5.max() > p1.max() and int(p5.argmax()) == int(p1.argmax())
    assert np.array_equal(np.argsort(-p1)[:10], np.argsort(-p5)[:10])


def test_covered_marker_ticks_an_opened_page(smol):
    at = app_run("lessons", lang="en")
    assert not at.exception
    assert any("0 of" in i.value for i in at.info)
    at.switch_page("pages/tokens.py").run()
    at.switch_page("pages/lessons.py").run()
    assert not at.exception
    assert "tokens" in at.session_state["_pages_opened"]
    done = " ".join(s.value for s in at.success)
    assert "§A4" in done and "§B2.1" in done and "§A5" not in done  # A5 also needs the context page
    assert lessons.covered({"tokens"}) == tuple(s for s in lessons.SECTIONS if s.pages == ("tokens",))


def test_presenter_mode_shows_the_route_with_links_that_keep_it(smol):
    at = app_run("lessons", lang="zh", present="1", route="en")
    assert not at.exception
    text = all_text(at)
    assert "present=1" in text and "lang=en" in text
    assert i18n.t("lessons.self_title", "zh") not in [h.value for h in at.header]


# ---------------------------------------------------------------------------------------------
# the reveal: the receipt of the answer's key token


@pytest.mark.parametrize(("route_key", "word"), [("en", "Paris"), ("zh", "5")])
def test_the_receipt_step_opens_the_answers_token_and_its_answer_holds(smol, route_key, word):
    """Each lesson's last step: its link replays the greedy answer on the stepper's own route to the pass that
    writes the key token (its ``why_tok``, at the position ``why`` the pass reads up to), and opens that token's
    receipt, sentence by sentence the receipt made on that context, in the lesson's language; the teacher's
    answer says what that receipt measures (late in the depth, a late MLP, and which source removal confirms)."""
    route = lessons.ROUTES[route_key]
    step = next(s for s in route.steps if s.key == "why")
    q = dict(step.query)
    n = int(q["step"])
    ids = encode_prompt(smol, route.prompt_of(step), chat=route.chat_of(step)).ids
    stp = generate.Stepper(smol, ids, SamplingConfig(greedy=True), int(q["max"]))
    stp.run(n + 1)
    tok = stp.records[n].token_id
    assert (tok, int(q["why"])) == (int(q["why_tok"]), len(ids) + n - 1)
    assert smol.tokenizer.decode([tok]).strip() == word
    ctx = tuple(stp.all_ids[: len(ids) + n])
    rc = web_receipt.compute(smol, backends.trace_ids(smol, ctx), len(ctx) - 1, tok)
    at = _open(route_key, "why")
    shown = "\n".join(m.value for m in at.markdown)
    for said in (p for ps in receipt.lines(rc, receipt.md_token).values() for p in ps):
        assert say(said, route_key) in shown, said.key
    L, p = smol.facts.n_layers, rc.read.p
    assert rc.formed.top1 is not None and rc.formed.top1 >= 2 * L / 3  # "only in the last third of the layers"
    most = min(rc.carried, key=lambda c: c.dp)
    assert most.kind == "mlp" and most.layer >= 2 * L / 3  # "carried most by a late layer's MLP"
    text = {s.pos: smol.tokenizer.decode([ctx[s.pos]]) for s in rc.read.sources}
    if route_key == "en":  # "capital": scored against Paris, and replacing it makes Paris all but vanish
        cap = next(s for s in rc.read.sources if text[s.pos].strip() == "capital")
        assert cap.score < 0 and cap.p_after < 0.1 * p
    else:  # "加" ranked first but not confirmed; the "+" it wrote and the space after it confirmed
        first = rc.read.sources[0]
        assert text[first.pos] == "加" and not first.confirmed and abs(first.dp) < 0.1 * p
        written = [s for s in rc.read.sources if s.pos >= len(ids)]
        assert [text[s.pos] for s in written] == [" +", " "] and all(s.confirmed and s.p_after < p / 2 for s in written)
