"""The journey of a sentence: text → tokens → IDs → embeddings → blocks → hidden state → logits →
next token → the loop, with the real shapes and values of the current prompt."""

import functools
from urllib.parse import urlencode

import streamlit as st

from core.engine import tokens
from core.engine.tokens import special_mask
from core.learn import figures as learn_fig
from core.learn import journey
from core.web import cache, chips, nav, page, presenter, ui, widgets
from core.web import receipt as why

TEXT_SHOWN = 600  # characters of the exact text shown in stage 1


def _stage(src: dict[int, tuple[journey.Source, ...]], idx: int, key: str, link: str | None = None, **kw):
    """One bordered box per stage: number, title, live sentence, a link to the deep page, and where in the
    installed code this stage was computed (``src``: ``journey.stage_sources``, read from the model's classes)."""
    box = st.container(border=True, key=f"journey_s{idx}")  # a link can open at a stage (?focus=journey_s5)
    box.markdown(f"**{idx}. {ui.t(f'journey.s{idx}.title')}** — {ui.t(key, **kw)}")
    if link:
        nav.see_page(link, where=box)
    if src.get(idx):
        where = box.expander(journey.src_title(len(src[idx]), ui.lang()))
        where.markdown("\n".join(f"- `{s.label()}` — `{widgets.code(s.name)}`" for s in src[idx]))
        where.caption(ui.t("journey.src_how"))
    return box


def _link(stem: str, **query: str) -> str:
    """A relative link to a registered page in this language (and presenter mode, if on)."""
    if stem not in nav.STEMS:
        raise KeyError(f"no page '{stem}' is registered in core.web.nav.PAGES")
    q = {"lang": ui.lang(), **query, **({"present": "1"} if presenter.is_on() else {})}
    return f"{stem}?" + urlencode(q)


def _overview(tok, tr, f) -> None:
    """The whole model first (tokens → blocks → logits), on this trace's numbers, each part a link to its page;
    then where to go: the lessons for a class, the self-study order for a student alone."""
    parts = journey.overview(tr, tok, f.n_heads)
    norms = journey.last_token_norms(tr)
    presenter.chart(learn_fig.overview_figure([ui.t(f"journey.ov_{p.key}") for p in parts], [p.value for p in parts],
                                              [_link(p.page) for p in parts], norms, ui.t("journey.ov_title"), ui.t("journey.ov_norms")),
                    key="journey_overview")
    st.caption(ui.t("journey.ov_caption", T=tr.n_tokens, d=f.d_model, L=f.n_layers, H=f.n_heads, V=f.vocab_size, lo=float(norms.min()),
                    hi=float(norms.max())))
    c1, c2 = st.columns(2)
    c1.markdown(f"🗺️ [{ui.t('journey.go_lessons')}]({_link('lessons')})")
    c2.markdown(f"🧭 [{ui.t('journey.go_self')}]({_link('lessons', focus='self_study')})")


def render(loaded, tr) -> None:
    f, tok = loaded.facts, loaded.tokenizer
    stage = functools.partial(_stage, journey.stage_sources(loaded))  # every box names the code that computed it
    T, d, V, L = tr.n_tokens, f.d_model, f.vocab_size, f.n_layers
    _overview(tok, tr, f)
    box = stage(1, "journey.s1.body", chars=len(tr.text))
    box.code(tr.text[:TEXT_SHOWN] + ("…" if len(tr.text) > TEXT_SHOWN else ""), language=None, wrap_lines=True)
    if len(tr.text) > TEXT_SHOWN:  # never let a cut text pass for the whole prompt
        box.caption(ui.t("journey.s1.cut", shown=TEXT_SHOWN, chars=len(tr.text)))
    chips.show_page(tr.tokens, tr.token_ids, key="journey", kinds=chips.kinds_from_special(special_mask(tok, tr.token_ids)),
                    where=stage(2, "journey.s2.body", "tokens", n=T))
    stage(3, "journey.s3.body", "tokens", ids=str(tr.token_ids[:12].tolist())[:-1] + (", …]" if T > 12 else "]"), T=T)
    box = stage(4, "journey.s4.body", "tokens", V=V, d=d, T=T)
    box.code(f"E[{int(tr.token_ids[-1])}] = {journey.vector_preview(tr.embeddings[-1], lang=ui.lang())}", language=None)
    key, args = journey.position_note(f.position_type)  # from this model's own facts (GPT-2: learned, no RoPE)
    box.caption(ui.t(key, **args))
    box = stage(5, "journey.s5.body", "residual", L=L, T=T, d=d, H=f.n_heads, Hkv=f.n_kv_heads)
    layer = box.slider(ui.t("ui.layer"), 0, L, ui.qp_layer(L, L // 2, stream=True), key="journey_layer")
    ui.set_qp(layer=layer)  # a link reopens this boundary
    box.code(f"resid[{layer}][{T - 1}] = {journey.vector_preview(tr.resid[layer, -1], lang=ui.lang())}", language=None)
    presenter.chart_in(box, learn_fig.norms_figure(journey.last_token_norms(tr), ui.t("journey.norms_title"),
                                          ui.t("journey.norms_x"), ui.t("journey.norms_y")), width="stretch")
    with box:
        ui.badge("model")
    stage(6, "journey.s6.body", "residual", T=T, d=d).code(
        f"final_hidden[{T - 1}] = {journey.vector_preview(tr.final_hidden[-1], lang=ui.lang())}", language=None)
    box = stage(7, "journey.s7.body", "logits", T=T, V=V)
    rows = journey.top_next_tokens(tr, tok)
    presenter.frame_in(box, journey.top_frame(rows, ui.t("ui.token")).style.format({"logit": "{:.3f}", "p": "{:.2%}"}),
                       hide_index=True, width="stretch")  # on a projector a table whose text grows with the page
    with box:
        ui.badge("model")
    box = stage(8, "journey.s8.body", "logits", tok=f"`{widgets.code(tokens.visible(rows[0][0]))}`", p=f"{rows[0][3]:.1%}")
    if not tr.chat and rows[0][1] in f.eos_token_ids and getattr(tok, "chat_template", None):
        box.caption(ui.t("journey.try_chat"))  # an instruct model ends a bare question at once
    why.offer_next(loaded, tr, place=box)  # "Why this token?" on the next token
    asked = tr.key  # what this trace was made from: the button's answer is for it alone
    if journey.deferred(T) and st.session_state.get("journey_asked") != asked:  # a long prompt: the loop on request
        box = stage(9, "journey.s9.deferred", "generation", T=f"{T:,}", limit=f"{journey.DEFER_ABOVE:,}", n=journey.MAX_NEW)
        box.button(ui.t("journey.continue", n=journey.MAX_NEW), key="journey_continue", type="primary",
                   on_click=st.session_state.__setitem__, args=("journey_asked", asked))
        ui.download_trace(tr, "journey")
        return
    with st.spinner(ui.t("journey.generating", n=journey.MAX_NEW)):  # shown only if it takes over half a second
        new, stopped = cache.get_continuation(tr, journey.MAX_NEW)
    box = stage(9, "journey.s9.body", "generation", n=len(new))
    pieces = tokens.readable_tokens(tok, new)
    box.markdown(ui.t("journey.s9.text", text=widgets.code(tok.decode(new))))  # the bytes decoded together: whole characters
    chips.show(pieces, new, kinds=chips.kinds_from_special(special_mask(tok, new)), where=box)
    box.info(ui.t("journey.stop_eos") if stopped else ui.t("journey.stop_limit", n=len(new)))
    with box:
        ui.badge("model", ui.t("journey.greedy"))
    ui.download_trace(tr, "journey")


page.run(render)
