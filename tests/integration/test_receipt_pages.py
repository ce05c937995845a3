"""The receipt (issue 42) on the embedded SmolLM2: its numbers are the pages' own numbers for the same prompt
and position (logits page: p and the lens; attribution page: gradient × input; patching page: a cell's patched
run), its words differ where two prompts' measurements differ, its card exports in both languages, the
logits page opens it from a link (validated: a bad one is said, in the reader's language), the journey and the
stepper from a click, and the stepper's link (its run replayed to the step) opens a generated token's receipt."""

from __future__ import annotations

import io

import floats
import numpy as np
import pytest
import torch
from PIL import Image

from conftest import all_text, app_run
from core import backends
from core.cause import attribution, card, patching, receipt
from core.common import i18n
from core.common.numbers import softmax
from core.engine import roles, tokens
from core.engine.types import say
from core.gen import generate
from core.gen.sampling import SamplingConfig
from core.stream import lens
from core.web import receipt as web_receipt

EIFFEL = "The Eiffel Tower is in the city of"
COUNT = "One, two, three, four,"


@pytest.fixture(scope="module")
def eiffel(smol):
    tr = backends.trace(smol, EIFFEL)
    return tr, web_receipt.compute(smol, tr, tr.n_tokens - 1)


def test_numbers_are_the_pages_own(smol, eiffel):
    tr, rc = eiffel
    pos, tok = rc.pos, rc.token_id
    # the logits page: its table's probability (softmax of the last logits) and its lens (the window 0 … T − 1)
    assert tok == int(np.argmax(tr.last_logits)) and rc.p == softmax(tr.last_logits)[tok]
    ids, probs, _ = lens.logit_lens_with_text(smol, tr, 0, tr.n_tokens)
    assert np.array_equal(rc.formed.top_ids[:, 0], ids[:, pos])
    # the same ops on rows batched apart (the page reads T positions at once, the receipt one): each logit within
    # two routes' matmul bound 2γ_d (|norm(x)| @ |W|ᵀ), so each probability within p (e^{2a} − 1) and a rounding
    sites = roles.find_sites(smol.model)
    with torch.inference_mode():
        x = sites.require_final_norm()(torch.from_numpy(np.array(tr.resid[:, pos]))).double().abs()  # [L+1, d]
        a = (x @ sites.lm_head.weight.double().abs().T).max(-1).values.numpy() * 2 * floats.gamma(x.shape[-1])  # [L+1]
    p = probs[:, pos].astype(np.float64)
    floats.assert_within(rc.formed.top_probs[:, 0], p, p * np.expm1(2 * a) + 2 * floats.U32 * p, "lens top-1 p",
                         "the matmul bound of two routes of the LM head, through the softmax")
    assert rc.formed.top1 == int(np.argmax(ids[:, pos] == tok))
    # the attribution page: gradient × input of the same answer and foil (its chips)
    att = attribution.attribute(smol, tuple(tr.token_ids.tolist()), tok, rc.rival.id, steps=16)
    floats.assert_same(rc.read.scores, att.gxi.scores, "gradient × input")
    # the patching page, fed the pair (all sources → neutral token, the prompt): a cell's single patched run
    neutral = list(tr.token_ids.tolist())
    for s in rc.read.sources:
        neutral[s.pos] = rc.read.neutral_id
    base = patching.capture(smol, neutral, tr.token_ids.tolist())
    allow = floats.allowed_error(base.clean_logits(), base.clean_logits()) + 1e-5  # patching: sweeps ≈ 1e-5 from single runs
    for c in rc.carried:
        p = patching.Patch(patching.HEAD if c.kind == "head" else "mlp_out", c.layer, pos, c.head)
        page = float(softmax(patching.patched_logits(smol, base, p))[tok])
        floats.assert_within(c.p_after, page, page * np.expm1(2 * allow) + 1e-12, str(c), "a batched run after cached keys")
    for s in rc.read.sources:
        page = float(softmax(patching.patched_logits(smol, base, patching.Patch("resid", 0, s.pos)))[tok])
        floats.assert_within(s.p_after, page, page * np.expm1(2 * allow) + 1e-12, f"source {s.pos}", "a batched run")
    assert rc.read.p_all_removed == float(softmax(base.clean_logits().astype(np.float64))[tok]) or \
        abs(rc.read.p_all_removed - float(softmax(base.clean_logits())[tok])) < 1e-6


def test_two_prompts_read_differently_where_their_measurements_differ(smol, eiffel):
    _, a = eiffel
    tr = backends.trace(smol, COUNT)
    b = web_receipt.compute(smol, tr, tr.n_tokens - 1)
    la, lb = receipt.lines(a), receipt.lines(b)
    ka, kb = ({p.key for sec in x.values() for p in sec} for x in (la, lb))
    assert ka != kb
    # each differing word choice follows a differing measurement
    third = {k.split("_")[-1] for k in ka ^ kb if k.startswith("receipt.formed_") and k != "receipt.formed_jump"}
    if third:
        assert (a.formed.top1, b.formed.top1) and a.formed.top1 != b.formed.top1
    temps = {k for k in ka ^ kb if k.startswith("receipt.temp_")}
    if temps:
        assert (a.rival.t_from is None) != (b.rival.t_from is None) or a.rival.t_to != b.rival.t_to
    assert receipt.card_markdown(a, "en") != receipt.card_markdown(b, "en")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_card_exports(eiffel, lang):
    _, rc = eiffel
    md = receipt.card_markdown(rc, lang)
    assert "⟦" not in md and md.count("## ") == len([s for s in receipt.lines(rc).values() if s])
    for p in receipt.lines(rc, receipt.md_token)["against"]:
        assert say(p, lang) in md
    img = Image.open(io.BytesIO(card.png(rc, lang)))
    assert img.format == "PNG" and img.width == card.WIDTH and img.height > 600


def _lines_on_page(at) -> str:
    return "\n".join(m.value for m in at.markdown)


def test_logits_page_opens_a_receipt_from_a_link(smol):
    tr = backends.trace(smol, EIFFEL)
    pos = 5
    at = app_run("logits", prompt=EIFFEL, chat="0", why=str(pos))
    assert not at.exception
    rc = web_receipt.compute(smol, tr, pos)
    shown = _lines_on_page(at)
    for said in receipt.lines(rc, receipt.md_token).values():
        for p in said:  # every sentence, the cost in forward passes too (counted, not timed: the same every run)
            assert say(p, "en") in shown, p.key
    assert any(b.label.startswith("Card (PNG") for b in at.get("download_button")) or "receipt-5-en.png" in all_text(at)


@pytest.mark.parametrize("why,tok,lang", [("abc", "1", "en"), ("99999", "-3", "en"), ("1e999", "x", "en"), ("-1", "", "en"),
                                          ("5", "99999999", "en"), ("99999", "", "zh")])
def test_bad_link_values_are_said_and_open_no_receipt(smol, why, tok, lang):
    T, V = backends.trace(smol, EIFFEL).n_tokens, smol.facts.vocab_size
    at = app_run("logits", prompt=EIFFEL, chat="0", why=why, why_tok=tok, lang=lang)
    assert not at.exception
    assert "Traceback" not in all_text(at)
    assert [w.value for w in at.warning].count(i18n.t("receipt.bad_link", lang, hi=T - 1, v=V - 1)) == 1
    assert not any(i18n.t("receipt.h_formed", lang) in m.value for m in at.markdown)  # no receipt opened


def test_journey_button_opens_the_receipt_of_the_next_token(smol):
    at = app_run("journey", prompt=EIFFEL, chat="0")
    assert not at.exception
    at.button(key="receipt_journey").click().run()
    assert not at.exception
    assert any("Where it formed" in m.value for m in at.markdown)


def test_stepper_step_opens_the_receipt_of_its_token(smol):
    at = app_run("generation", prompt=EIFFEL, chat="0", greedy="1", max="4")
    at.button(key="generation_prefill").click().run()  # step 0: the prefill, its token chosen after the prompt
    assert not at.exception
    at.button(key="receipt_step").click().run()
    assert not at.exception
    shown = _lines_on_page(at)
    # the receipt of the step's own token after its own context (the prompt: the prefill's step), sentence by sentence
    ids = backends.encode_prompt(smol, EIFFEL).ids
    rc = web_receipt.compute(smol, backends.trace_ids(smol, ids), len(ids) - 1)
    for said in receipt.lines(rc, receipt.md_token).values():
        for p in said:
            assert say(p, "en") in shown, p.key


def _greedy(smol, prompt, steps):
    """The stepper's own greedy run, as the page replays a link to pass ``steps`` (max 4)."""
    stp = generate.Stepper(smol, backends.encode_prompt(smol, prompt).ids, SamplingConfig(greedy=True), 4)
    stp.run(steps + 1)
    return stp


def test_stepper_link_opens_the_receipt_of_a_generated_token(smol):
    """A token of the generated answer (pass 2, after two generated tokens): the link the receipt gives (the
    run's settings, ``step``, ``why`` = its position, ``why_tok`` = its token) replays the run and opens the
    receipt of that token after its own context, sentence by sentence the receipt made on that context; the
    URL still names it; the same step's button opens the same receipt."""
    stp = _greedy(smol, EIFFEL, 2)
    ctx = tuple(stp.all_ids[: len(stp.prompt_ids) + 2])
    pos, tok = len(ctx) - 1, stp.records[2].token_id
    query = {"prompt": EIFFEL, "chat": "0", "greedy": "1", "max": "4", "step": "2", "why": str(pos), "why_tok": str(tok)}
    at = app_run("generation", **query)
    assert not at.exception
    rc = web_receipt.compute(smol, backends.trace_ids(smol, ctx), pos, tok)
    assert rc.token_id == tok and rc.pos == pos
    shown = _lines_on_page(at)
    for said in receipt.lines(rc, receipt.md_token).values():
        for p in said:
            assert say(p, "en") in shown, p.key
    url = {k: (v[0] if isinstance(v, list) else v) for k, v in at.query_params.items()}
    assert {k: url.get(k) for k in query} == query  # the address bar still opens this receipt
    link = all_text(at)
    assert f"why={pos}" in link and f"why_tok={tok}" in link and "step=2" in link  # the receipt's own link
    at = app_run("generation", prompt=EIFFEL, chat="0", greedy="1", max="4", step="2")
    assert not list(at.warning)
    at.button(key="receipt_step").click().run()
    assert not at.exception
    assert all(say(p, "en") in _lines_on_page(at) for said in receipt.lines(rc, receipt.md_token).values() for p in said)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_stepper_link_for_another_step_is_said(smol, lang):
    """A stepper link whose ``why`` is not the position the step reads up to (or whose token is not the step's):
    the page says which the step has, in the reader's language, and opens no receipt."""
    stp = _greedy(smol, EIFFEL, 1)
    pos = len(stp.prompt_ids)  # the context: the prompt and the one token generated before pass 1
    rec = stp.records[1]
    for why, tok in ((pos + 1, rec.token_id), (pos, rec.token_id + 1), ("x", "")):
        at = app_run("generation", prompt=EIFFEL, chat="0", greedy="1", max="4", step="1", why=str(why), why_tok=str(tok), lang=lang)
        assert not at.exception
        said = i18n.t("receipt.bad_link_step", lang, step=1, pos=pos, tok=receipt.md_token(rec.token))
        assert [w.value for w in at.warning] == [said]
        assert not any(i18n.t("receipt.h_formed", lang) in m.value for m in at.markdown)


def test_the_heading_quotes_the_context_as_text(smol):
    """The receipt's heading quotes the context's last tokens decoded together: a Chinese prompt reads as its
    characters (each token alone shows bytes such as ‹E5 BE›), and the quote ends where the context ends."""
    ids = backends.encode_prompt(smol, "小明批评了小红，因为她迟到了。然后她").ids
    tail = receipt._tail(smol.tokenizer, ids)
    assert "‹" not in tail and tail.endswith("然后她") and "迟到了" in tail
    assert len(ids) > receipt.TAIL and any("‹" in t for t in tokens.visible_tokens(smol.tokenizer, ids))
    short = backends.encode_prompt(smol, EIFFEL).ids
    assert receipt._tail(smol.tokenizer, short) == tokens.visible(smol.tokenizer.decode(short))
