"""The "Why this token?" panel: one button on a token opens its receipt (``core.cause.receipt``), made in a
server job (``core.web.jobs``: one in flight per session, fresh ones capped per server per minute; finished ones
kept, so a second click or another session's click on the same (model, prompt, position, token) reads it again),
its progress said in words, its sentences in the reader's language, its card downloadable as Markdown and PNG
in English and Chinese, and a link that opens it again: ``?why=<position>&why_tok=<id>`` on the page that made it
(the logits page or the journey for a prompt's position; the stepper's page, with the settings that replay its
run, for a generated token). Both are validated where they enter: whole numbers, a position of the prompt (the
stepper: the position of the step shown) and a token of the vocabulary (the stepper: the step's token); a link
that fails says so in the reader's language and opens no receipt.

``compute`` (no Streamlit in it) joins the two areas a receipt reads — the logit lens (``core.stream.lens``)
and cause (``core.cause``) — since areas do not import each other; tests and the benchmark call it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import streamlit as st

import core.backends as backends
from core.cause import card, receipt
from core.cause import figures as cause_fig
from core.common import digits, escape, i18n
from core.common.progress import Progress, noop
from core.engine.trace import Trace
from core.engine.types import LoadedModel, Phrase, say
from core.stream import lens
from core.web import cache, measure, nav, presenter, ui

OPEN = "receipt_open"  # session key: the receipt this session asked for (``Ask``)
QP_POS, QP_TOK = "why", "why_tok"  # spelled out where read: tests/unit/test_lessons.py reads a page's parameters from its source
LINK_READ = "receipt_link_read"  # session key: the stepper's page has read its link's receipt (once, on the first visit)


def lens_reader(loaded: LoadedModel, tr: Trace) -> receipt.Lens:
    """The logit lens of ``tr`` at one position, as the receipt reads it: the top 5 of every layer boundary
    (``lens.logit_lens_topk``) and the token's own lens probability (``lens.lens_probs_of``), the same route."""

    def at(pos: int, token: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        k = lens.logit_lens_topk(loaded, tr, receipt.TOP5, lo=pos, hi=pos + 1)
        return k.ids[:, 0], k.probs[:, 0], lens.lens_probs_of(loaded, tr, pos, [token])[:, 0]

    return at


def compute(loaded: LoadedModel, tr: Trace, pos: int, token: int | None = None, *, model_name: str = "",
            progress: Progress = noop) -> receipt.Receipt:
    """The receipt of position ``pos`` of the traced prompt ``tr`` for ``token`` (None: the model's own choice)."""
    logits = tr.last_logits if pos == tr.n_tokens - 1 else backends.logits_row(loaded, tr, pos)
    return receipt.make(loaded, tr.token_ids.tolist(), pos, logits, lens_reader(loaded, tr),
                        lambda layer: backends.attention(loaded, tr, layer), token, model_name=model_name or loaded.facts.name,
                        progress=progress)


# ---------------------------------------------------------------------------------------------
# asking for one, from a button or a link


@dataclass(frozen=True)
class Ask:
    where: tuple  # the trace's cache key, or ("ids", …) for a context that is no cached prompt (the stepper)
    pos: int
    token: int | None


def button(where: tuple, pos: int, token: int | None, token_text: str, *, key: str, place: Any = None,
           link: bool = True) -> bool:
    """The one-click button "Why «token»?"; a press asks for that receipt (and, with ``link``, puts it in the URL)."""
    pressed = (place or st).button(ui.t("receipt.button", tok=f"«{escape.md(token_text)}»"), key=key, icon="🧾")
    if pressed:
        st.session_state[OPEN] = Ask(where, int(pos), None if token is None else int(token))
        if link:
            ui.set_qp(**{QP_POS: int(pos), QP_TOK: None if token is None else int(token)})
    return pressed


def _link(pos_lo: int, pos_hi: int, tok_lo: int, tok_hi: int) -> tuple[int, int | None] | None:
    """The link's (``why``, ``why_tok``) when ``why`` is a whole number in pos_lo … pos_hi and ``why_tok`` is
    absent or empty (None: the model's own choice) or one in tok_lo … tok_hi; None when the link asks for none
    or for one out of range (never clamped: a clamped link would open another receipt than the one shared)."""
    raw = st.query_params.get("why")
    if raw is None:
        return None
    pos = digits.check(raw, pos_lo, pos_hi)
    raw_tok = st.query_params.get("why_tok")
    tok = None if raw_tok in (None, "") else digits.check(raw_tok, tok_lo, tok_hi)
    if not pos.ok or (tok is not None and not tok.ok):
        return None
    return int(pos.n), None if tok is None else int(tok.n)


def asked(where: tuple, n_tokens: int, vocab: int, *, quiet: bool = False) -> Ask | None:
    """The receipt asked for on this view: this session's press, else the link's ``why`` (a whole number in
    0 … n_tokens − 1) and ``why_tok`` (0 … vocab − 1, or absent: the model's own choice); a link out of range
    is said (unless ``quiet``) and opens none."""
    a = st.session_state.get(OPEN)
    if isinstance(a, Ask) and a.where == where:
        return a
    if st.query_params.get(QP_POS) is None:
        return None
    got = _link(0, n_tokens - 1, 0, vocab - 1)
    if got is None:
        if not quiet:
            st.warning(ui.t("receipt.bad_link", hi=n_tokens - 1, v=vocab - 1))
        return None
    return Ask(where, *got)


# ---------------------------------------------------------------------------------------------
# making it (a server job) and showing it


def _job(key: tuple, make: Any) -> Any:
    return cache.measurement(("receipt", *key), lambda job: make(job.report))


def panel(loaded: LoadedModel, tr: Trace) -> None:
    """The receipt asked for on this trace (a press or the link), made and shown; nothing when none was asked."""
    key = tuple(tr.key)
    a = asked(key, tr.n_tokens, tr.vocab_size)
    if a is None:
        return
    name = ui.model_label()
    job = _job((*key, a.pos, a.token), lambda report: compute(loaded, tr, a.pos, a.token, model_name=name, progress=report))
    query = {"model": ui.model_id(), "prompt": tr.key.prompt, "chat": "1" if tr.key.chat else "0", QP_POS: str(a.pos)}
    if a.token is not None:
        query[QP_TOK] = str(a.token)
    _show_job(job, loaded, link=("logits", query))


def panel_ids(loaded: LoadedModel, ids: Sequence[int], token: int, where: tuple, link: dict[str, str] | None = None) -> None:
    """The receipt of the next token after ``ids`` (a context that is no cached prompt: a stepper's step), when
    this session asked for it with ``where``: the context is traced once in the job. ``link``: the stepper
    page's parameters that replay the run to this step, for the receipt's link."""
    a = st.session_state.get(OPEN)
    if not (isinstance(a, Ask) and a.where == where):
        return
    ids = tuple(int(i) for i in ids)
    name = ui.model_label()

    def make(report: Progress) -> receipt.Receipt:
        tr = backends.trace_ids(loaded, ids)
        return compute(loaded, tr, len(ids) - 1, token, model_name=name, progress=report)

    _show_job(_job((loaded.spec, ids, len(ids) - 1, int(token)), make), loaded, link=None if link is None else ("generation", link))


def _show_job(job: Any, loaded: LoadedModel, link: tuple | None) -> None:
    try:
        rc = measure.show(job, Phrase("receipt.waiting"))
    except Exception as e:  # never a traceback: the sentence, in the reader's language
        st.error(ui.t("receipt.failed", msg=ui.error_md(e)))
        return
    if rc is not None:
        show(rc, link)


def show(rc: receipt.Receipt, link: tuple[str, dict[str, str]] | None = None) -> None:
    """The receipt: its sections' sentences (tokens as inert code spans), the lens curve, the card downloads,
    the link that opens it again (``link``: the page's stem and the query that opens it there)."""
    lang = ui.lang()
    said = receipt.lines(rc, receipt.md_token)
    with st.container(border=True, key="receipt"):  # a link can open at it (?focus=receipt: the lessons' receipt step)
        st.header(ui.t("receipt.title", tok=receipt.md_token(rc.token)))
        st.caption(ui.t("receipt.context", model=escape.md(rc.model), pos=rc.pos, n=rc.n_tokens,
                        prompt=receipt.md_token(rc.tail)))
        for sec in receipt.SECTIONS:
            if not said[sec]:
                continue
            st.markdown(f"**{ui.t(f'receipt.h_{sec}')}**")
            st.markdown("\n".join(f"- {say(p, lang)}" for p in said[sec]))
            if sec == "formed" and rc.formed is not None:
                presenter.chart(cause_fig.fig_receipt_lens(rc.formed.curve, rc.formed.top1, rc.formed.top5, rc.token, lang),
                                width="stretch")
        ui.badge("model")
        _downloads(rc)
        if link is not None:
            nav.page_link(link[0], label=ui.t("receipt.link"), icon="🔗", query=link[1])


def _downloads(rc: receipt.Receipt) -> None:
    cols = st.columns(4)
    stem = f"receipt-{rc.pos}"
    for i, lang in enumerate(i18n.LANGS):
        name = i18n.LANG_NAMES[lang]
        cols[i].download_button(ui.t("receipt.dl_md", language=name), data=lambda lang=lang: receipt.card_markdown(rc, lang),
                                file_name=f"{stem}-{lang}.md", mime="text/markdown", key=f"receipt_md_{lang}_{rc.pos}_{rc.token_id}")
        cols[2 + i].download_button(ui.t("receipt.dl_png", language=name), data=lambda lang=lang: card.png(rc, lang),
                                    file_name=f"{stem}-{lang}.png", mime="image/png", key=f"receipt_png_{lang}_{rc.pos}_{rc.token_id}")
    st.caption(ui.t("receipt.png_note"))


# ---------------------------------------------------------------------------------------------
# the entry points (one line in a page each)


def offer(loaded: LoadedModel, tr: Trace) -> None:
    """The logits page's entry: a position of the prompt (the link's ``why`` first, else the last) and the button
    for the model's choice there; then the receipt asked for, if any."""
    key = tuple(tr.key)
    T = tr.n_tokens
    a = asked(key, T, tr.vocab_size, quiet=True)  # said once, by the panel below
    first = T - 1 if a is None else a.pos
    pos = int(st.number_input(ui.t("receipt.pick_pos"), 0, T - 1, first, 1, key="receipt_pos"))
    logits = tr.last_logits if pos == T - 1 else backends.logits_row(loaded, tr, pos)
    token = int(np.argmax(logits))
    button(key, pos, None, cache.token_texts(loaded, (token,))[0], key="receipt_logits")
    panel(loaded, tr)


def offer_next(loaded: LoadedModel, tr: Trace, place: Any = None) -> None:
    """The journey's entry: the button on the next token (the model's choice after the last position), in ``place``."""
    key = tuple(tr.key)
    token = int(np.argmax(tr.last_logits))
    button(key, tr.n_tokens - 1, None, cache.token_texts(loaded, (token,))[0], key="receipt_journey", place=place)
    panel(loaded, tr)


def offer_step(loaded: LoadedModel, prompt_ids: Sequence[int], all_ids: Sequence[int], step: int, token: int, token_text: str) -> None:
    """The stepper's entry: the button on the token chosen at ``step`` (0 = the prefill), whose context is the
    prompt and the tokens generated before it. Its link is the stepper's page with the settings in its URL
    (they replay the run to ``step``) and ``why`` / ``why_tok``: on the page's first visit in a session they must
    be this step's position and token (else a sentence says which the step has); later, the URL carries them
    only while this step's receipt is the one shown."""
    ctx = tuple(int(i) for i in all_ids[: len(prompt_ids) + step])
    pos, token = len(ctx) - 1, int(token)
    where = ("ids", loaded.spec, ctx, token)
    if not st.session_state.get(LINK_READ):
        st.session_state[LINK_READ] = True
        if st.query_params.get("why") is not None:
            if _link(pos, pos, token, token) is not None:
                st.session_state[OPEN] = Ask(where, pos, token)
            else:
                st.warning(ui.t("receipt.bad_link_step", step=step, pos=pos, tok=receipt.md_token(token_text)))
    button(where, pos, token, token_text, key="receipt_step")
    a = st.session_state.get(OPEN)
    if not (isinstance(a, Ask) and a.where == where):  # the URL names no receipt this page does not show
        ui.set_qp(**{QP_POS: None, QP_TOK: None})
        return
    ui.set_qp(**{QP_POS: pos, QP_TOK: token})
    query = {k: v for k, v in st.query_params.to_dict().items() if k not in ("lang", "focus")}
    query.update(model=ui.model_id(), prompt=ui.prompt(), chat="1" if ui.chat() else "0", step=str(step))
    panel_ids(loaded, ctx, token, where, link=query)
