"""Chat template: how system / user / assistant messages become one token sequence."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from core.engine import tokens
from core.gen import chat_template, report
from core.gen import figures as gen_fig
from core.web import chips, page, ui, widgets

P = "chat"


def _messages() -> list[dict[str, str]]:
    """Editable messages (the sidebar prompt is the last user turn by default)."""
    df = pd.DataFrame(report.default_messages(ui.prompt(), ui.lang()))
    cols = {"role": st.column_config.SelectboxColumn(ui.t("chat.role"), options=list(chat_template.ROLES), required=True),
            "content": st.column_config.TextColumn(ui.t("chat.content"), width="large", max_chars=chat_template.MAX_CHARS)}
    edited = st.data_editor(df, num_rows="dynamic", column_config=cols, hide_index=True, width="stretch", key=f"{P}_msgs")
    msgs, cut = chat_template.messages_from_records(edited.to_dict("records"))
    if cut:
        st.warning(ui.t("chat.capped", rows=chat_template.MAX_MESSAGES, chars=f"{chat_template.MAX_CHARS:,}"))
    return msgs


def _rendering(tok: Any, msgs: list[dict[str, str]], add_gen: bool) -> chat_template.ChatRendering | None:
    """The messages through the template; None, with the reason shown, when that fails."""
    try:
        return chat_template.render(tok, msgs, add_generation_prompt=add_gen)
    except ValueError:
        st.info(ui.t("chat.need_message"))
    except Exception as e:  # a template may raise on unusual role orders: say so, no traceback
        st.error(ui.t("chat.template_error", msg=widgets.md(f"{type(e).__name__}: {e}")))
    return None


def _text_and_tokens(r: chat_template.ChatRendering) -> None:
    """The templated text with its special tokens marked, then its token chips."""
    st.header(ui.t("chat.s_text"))
    st.html(gen_fig.segments_html(r.segments))
    if r.system_added:
        st.info(ui.t("chat.system_added"))
    st.header(ui.t("chat.s_tokens", n=len(r.ids), n_special=sum(r.special)))
    chips.show_page(r.tokens, r.ids, key="chat", kinds=chips.kinds_from_special(r.special), framed_tail=r.n_generation_prompt_tokens)
    st.caption(ui.t("chat.legend"))
    ui.badge("model", ui.t("chat.badge_tokenizer"))


def _generation_and_end(r: chat_template.ChatRendering, eos_ids: frozenset[int]) -> None:
    """Where the answer starts (the generation prompt) and which token ends it."""
    c1, c2 = st.columns(2)
    with c1:
        st.header(ui.t("chat.s_gen"))
        if r.generation_prompt:
            st.code(r.generation_prompt_line, language=None)
            st.markdown(ui.t("chat.gen_explain", n=r.n_generation_prompt_tokens))
        else:
            st.markdown(ui.t("chat.gen_off"))
    with c2:
        st.header(ui.t("chat.s_end"))
        st.code(f"{r.end_token}  →  id {r.end_token_id}", language=None)
        st.markdown(report.end_explain(r, eos_ids, ui.lang()))


def render(loaded) -> None:
    tok = loaded.tokenizer
    if not tokens.has_chat_template(tok):
        st.warning(ui.t("chat.no_template", model=widgets.md(loaded.facts.name)))
        return
    msgs = _messages()
    add_gen = st.toggle(ui.t("chat.add_gen"), value=True, key=f"{P}_gen", help=ui.t("chat.add_gen_help"))
    r = _rendering(tok, msgs, add_gen)
    if r is None:
        return
    _text_and_tokens(r)
    _generation_and_end(r, loaded.eos_ids())
    with st.expander(ui.t("chat.table")):
        st.dataframe(report.chat_token_table(r, ui.lang()), hide_index=True, width="stretch")
        ui.badge("model")


page.run(render)
