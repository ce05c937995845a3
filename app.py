"""Transformer X-Ray — the router.

The sidebar holds what every page shares (language, model, prompt, chat template); each page in
pages/ is a thin script: read widgets → call core → draw. Run it with `make run`.
"""

from __future__ import annotations

import contextlib
import sys

import streamlit as st

from core.common import i18n
from core.common.settings import SettingsError
from core.engine.types import EMBEDDED_ID, TOY_ID
from core.learn import long_docs
from core.web import a11y, cache, contents, guards, nav, presenter, replica, ui, visits
from core.web.classroom import view as classroom
from core.web.offer import LOCAL_ID, Offer, OfferError, canonical_target


def sidebar() -> None:
    lang = ui.lang()
    with st.sidebar:
        contents.place()  # the page's sections, under the pages' list (core.web.contents)
        choice = st.radio(
            "Language / 语言",
            list(i18n.LANGS),
            index=list(i18n.LANGS).index(lang),
            format_func=lambda c: i18n.LANG_NAMES[c],
            horizontal=True,
        )
        if choice != lang:
            st.session_state["lang"] = choice
            st.query_params["lang"] = choice
            st.rerun()
        st.query_params["lang"] = lang

        model_box()
        prompt_box()
        presenter.sidebar_toggle()
        st.caption(ui.t("sb.footer"))


def model_box() -> None:
    """The offered models (and the local-folder box, only where the operator turned it on). The URL
    names the model by its offered id; a folder typed in the box never goes into the URL."""
    offer = ui.offered()
    options = [*offer.ids, *([LOCAL_ID] if offer.allow_local else [])]
    labels = {EMBEDDED_ID: ui.t("sb.model_embedded"), TOY_ID: ui.t("sb.model_toy"), LOCAL_ID: ui.t("sb.model_local")}
    current = ui.model_id()
    pick = st.selectbox(ui.t("sb.model"), options, index=options.index(current) if current in options else 0,
                        format_func=lambda o: labels.get(o, o), key="model_pick", placeholder=ui.t("ui.choose"))
    wanted: tuple[str, str] | None = (pick, offer.models[pick]) if pick in offer.models else None
    if pick == LOCAL_ID:
        typed = st.text_input(ui.t("sb.model_path"), value=ui.model_spec() if current == LOCAL_ID else "", key="model_path",
                              placeholder="/path/to/Qwen2.5-0.5B-Instruct")
        if typed.strip():
            try:
                spec = canonical_target(typed)  # <P>, <P>/ and <P>/. are one folder, hence one cache entry
                wanted = (offer.id_for(spec) or LOCAL_ID, spec)
            except OfferError:
                st.error(ui.t("sb.model_path_bad"))
    if wanted is not None and wanted[1] != ui.model_spec():
        ui.switch_model(*wanted)
    if ui.model_id() == LOCAL_ID:
        st.query_params.pop("model", None)
    else:
        st.query_params["model"] = ui.model_id()
    if st.session_state.get("_link_model_refused"):
        st.warning(ui.t("sb.model_not_offered"))


def prompt_box() -> None:
    """The shared prompt. One arriving by a link is capped like a typed one; the URL carries the
    whole prompt or, past URL_PROMPT_CHARS, none (a caption says so), never a silently cut one."""
    longs = [f"long:{k}" for k in long_docs.KEYS]
    preset = st.selectbox(ui.t("sb.presets"), ["—", *ui.PRESETS, *longs], key="preset_pick",
                          format_func=lambda p: ui.t(f"sb.long_{p[5:]}") if p in longs else p, placeholder=ui.t("ui.choose"))
    if preset != "—" and st.session_state.get("_last_preset") != preset:
        st.session_state["_last_preset"] = preset
        st.session_state["prompt"] = long_docs.load(preset[5:]).text if preset in longs else preset
    if "prompt" not in st.session_state and st.query_params.get("doc") in long_docs.KEYS:
        st.session_state["prompt"] = long_docs.load(st.query_params["doc"]).text  # a link to a long document names it
    if "prompt" not in st.session_state:
        text, cut_from = ui.link_prompt()
        st.session_state["prompt"] = text
        if cut_from is not None:
            st.session_state["_prompt_cut"] = (cut_from, hash(text))
    st.text_area(ui.t("sb.prompt"), key="prompt", height=90, max_chars=ui.MAX_PROMPT_CHARS)
    text = st.session_state["prompt"]
    cut = st.session_state.get("_prompt_cut")
    if cut is not None and cut[1] == hash(text):
        st.warning(ui.t("sb.prompt_capped", n=f"{cut[0]:,}", k=f"{ui.MAX_PROMPT_CHARS:,}"))
    ui.chat()  # the switch's first value: the link's, else on for a model with a chat template
    st.toggle(ui.t("sb.chat"), key="chat", help=ui.t("sb.chat_help"))
    st.caption(ui.t("sb.chat_caption"))
    doc = long_docs.which(text)
    st.query_params.pop("doc", None)
    if doc is not None:
        st.query_params.pop("prompt", None)
        st.query_params["doc"] = doc
    elif len(text) <= ui.URL_PROMPT_CHARS:
        st.query_params["prompt"] = text
    else:
        st.query_params.pop("prompt", None)
        st.caption(ui.t("sb.prompt_not_in_link", n=f"{len(text):,}", k=f"{ui.URL_PROMPT_CHARS:,}"))
    st.query_params["chat"] = "1" if st.session_state["chat"] else "0"


def model_from_link(offer: Offer) -> None:
    """The model a link names, by offered id only. Anything else (a path, an unknown id) is neither
    loaded nor looked at: one generic sentence, the same whatever the value, and the embedded model."""
    st.session_state["model_spec_ok"] = EMBEDDED_ID
    st.session_state["model_id"] = EMBEDDED_ID
    wanted = st.query_params.get("model")
    if not wanted or wanted == EMBEDDED_ID:
        return
    spec = offer.spec(wanted)
    if spec is None:
        st.session_state["_link_model_refused"] = True
        return
    ui.switch_model(wanted, spec)


def load_in_view() -> None:
    """The embedded model, loaded before the sidebar is drawn, so that a cold start's progress bar (the
    first run converts the GGUF file, ≈ 15 s) stands in the main area, where the reader looks, with its
    words in the reader's language (issue 28), not at the foot of the sidebar beside a blank page. Once
    loaded this is a cache hit and draws nothing. A failure is left to the sidebar and the page, which
    say it in their own words; other models load where the reader chose them."""
    if ui.model_spec() != EMBEDDED_ID:
        return
    ui.lang()  # the bar's language: the link's or the browser's, before the sidebar's radio is drawn
    with contextlib.suppress(Exception):  # said by the sidebar's and the page's own load, right after
        cache.get_model(EMBEDDED_ID)


def main() -> None:
    with guards.url_batch():  # the run's URL writes reach the browser as one message: one history entry at most
        _main()


def _main() -> None:
    st.set_page_config(page_title=nav.APP_NAME, page_icon="🩻", layout="wide",
                       initial_sidebar_state=presenter.sidebar_state())  # a ?present=1 link opens with it collapsed
    try:
        offer = ui.offered()
    except SettingsError as e:  # the operator's setting: said on the console, never echoed to a visitor
        print(f"Transformer X-Ray: the model setting cannot be read: {e}", file=sys.stderr)
        st.error(ui.t("err.offer_setting"))
        st.stop()
    if "model_spec_ok" not in st.session_state:
        model_from_link(offer)
    load_in_view()
    classroom.arrive()  # a class's student: the teacher's prompt, before the prompt box is drawn
    sidebar()
    presenter.apply_css()
    replica.moved_notice()  # behind `make serve`: this browser's replica stopped and it came back here
    replica.keep_alive()
    page = nav.navigation()
    nav.label_document(page)
    a11y.apply()
    stem = nav.route(page.url_path)
    visits.mark(stem)  # the self-study order ticks off the pages this session has opened
    classroom.bar(stem)  # in a class: the teacher's questions, or the student's follow bar; nothing otherwise
    classroom.record(stem)  # the teacher's page and its URL parameters become the class's view: before the page
    try:                    # runs (the room follows at once, not after the teacher's trace) ...
        page.run()
    finally:
        classroom.record(stem)  # ... and after it (the parameters the page itself wrote: a step, a layer)


if __name__ == "__main__":
    main()
