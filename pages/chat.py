"""Chat template: how system / user / assistant messages become one token sequence."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from core.engine import tokens
from core.gen import chat_template
from core.gen import figures as gen_fig
from core.web import chips, presenter, ui

P = "chat"


def _messages() -> list[dict[str, str]]:
    """Editable messages (the sidebar prompt is the last user turn by default)."""
    df = pd.DataFrame([
        {"role": "system", "content": ui.t("chat.default_system")},
        {"role": "user", "content": ui.t("chat.default_user")},
        {"role": "assistant", "content": ui.t("chat.default_assistant")},
        {"role": "user", "content": ui.prompt() or "…"},
    ])
    cols = {"role": st.column_config.SelectboxColumn(ui.t("chat.role"), options=list(chat_template.ROLES), required=True),
            "content": st.column_config.TextColumn(ui.t("chat.content"), width="large")}
    edited = st.data_editor(df, num_rows="dynamic", column_config=cols, hide_index=True, width="stretch", key=f"{P}_msgs")
    return [{"role": str(r["role"] or ""), "content": "" if pd.isna(r["content"]) else str(r["content"])} for r in edited.to_dict("records")]


def render() -> None:
    ui.header("page.chat", "chat.intro")
    loaded = ui.loaded_model()
    if loaded is None:
        return
    tok = loaded.tokenizer
    if not tokens.has_chat_template(tok):
        st.warning(ui.t("chat.no_template", model=loaded.facts.name))
        return
    msgs = _messages()
    add_gen = st.toggle(ui.t("chat.add_gen"), value=True, key=f"{P}_gen", help=ui.t("chat.add_gen_help"))
    try:
        r = chat_template.render(tok, msgs, add_generation_prompt=add_gen)
    except ValueError:
        st.info(ui.t("chat.need_message"))
        return
    except Exception as e:  # a template may raise on unusual role orders: say so, no traceback
        st.error(ui.t("chat.template_error", msg=f"{type(e).__name__}: {e}"))
        return

    st.subheader(ui.t("chat.s_text"))
    st.html(gen_fig.segments_html(r.segments))
    if r.system_added:
        st.info(ui.t("chat.system_added"))
    st.subheader(ui.t("chat.s_tokens", n=len(r.ids), n_special=sum(r.special)))
    chips.show(r.tokens, r.ids, kinds=chips.kinds_from_special(r.special), framed_tail=r.n_generation_prompt_tokens)
    st.caption(ui.t("chat.legend"))
    ui.badge("model", ui.t("chat.badge_tokenizer"))

    c1, c2 = st.columns(2)
    with c1:
        st.subheader(ui.t("chat.s_gen"))
        if r.generation_prompt:
            st.code(r.generation_prompt.replace("\n", "⏎"), language=None)
            st.markdown(ui.t("chat.gen_explain", n=r.n_generation_prompt_tokens))
        else:
            st.markdown(ui.t("chat.gen_off"))
    with c2:
        st.subheader(ui.t("chat.s_end"))
        eos = sorted(set(loaded.facts.eos_token_ids) | ({r.end_token_id} if r.end_token_id is not None else set()))
        st.code(f"{r.end_token}  →  id {r.end_token_id}", language=None)
        st.markdown(ui.t("chat.end_explain", tok=r.end_token, id=r.end_token_id, ids=", ".join(map(str, eos)),
                         n=sum(1 for i in r.ids if i == r.end_token_id)))

    with st.expander(ui.t("chat.table")):
        df = pd.DataFrame({ui.t("ui.position"): range(len(r.ids)), "id": r.ids, ui.t("ui.token"): r.tokens,
                           ui.t("chat.special"): ["✓" if s else "" for s in r.special]})
        st.dataframe(df, hide_index=True, width="stretch")
        ui.badge("model")


render()
presenter.sources("decoder_only")
