"""Transformer X-Ray — the router.

The sidebar holds what every page shares (language, model, prompt, chat template); each page in
pages/ is a thin script: read widgets → call core → draw. Run it with `make run`.
"""

from __future__ import annotations

import streamlit as st

from core.engine import i18n
from core.engine.types import EMBEDDED_ID, TOY_ID, ModelLoadError
from core.web import cache, nav, presenter, ui


def sidebar() -> None:
    lang = ui.lang()
    with st.sidebar:
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

        # -- model ------------------------------------------------------------------------
        options = [EMBEDDED_ID, TOY_ID, "__local__"]
        current = ui.model_spec()
        idx = options.index(current) if current in options else len(options) - 1
        labels = {EMBEDDED_ID: ui.t("sb.model_embedded"), TOY_ID: ui.t("sb.model_toy"), "__local__": ui.t("sb.model_local")}
        pick = st.selectbox(ui.t("sb.model"), options, index=idx, format_func=labels.get, key="model_pick")
        spec = pick
        if pick == "__local__":
            path = st.text_input(ui.t("sb.model_path"), value="" if current in options else current, key="model_path",
                                 placeholder="/path/to/Qwen2.5-0.5B-Instruct")
            spec = path.strip() or st.session_state.get("model_spec_ok", EMBEDDED_ID)
        if spec != ui.model_spec():
            _switch_model(spec)
        st.query_params["model"] = ui.model_spec()

        # -- prompt -----------------------------------------------------------------------
        preset = st.selectbox(ui.t("sb.presets"), ["—", *ui.PRESETS], key="preset_pick")
        if preset != "—" and st.session_state.get("_last_preset") != preset:
            st.session_state["_last_preset"] = preset
            st.session_state["prompt"] = preset
        if "prompt" not in st.session_state:
            st.session_state["prompt"] = st.query_params.get("prompt", ui.DEFAULT_PROMPT)
        st.text_area(ui.t("sb.prompt"), key="prompt", height=90, max_chars=20000)
        if "chat" not in st.session_state:
            st.session_state["chat"] = st.query_params.get("chat", "0") == "1"
        st.toggle(ui.t("sb.chat"), key="chat", help=ui.t("sb.chat_help"))
        st.query_params["prompt"] = st.session_state["prompt"][:2000]
        st.query_params["chat"] = "1" if st.session_state["chat"] else "0"
        presenter.sidebar_toggle()
        st.caption(ui.t("sb.footer"))


def _switch_model(spec: str) -> None:
    """Try a new model; on failure keep the previous one and say why."""
    try:
        cache.get_model(spec)
    except ModelLoadError as e:
        st.sidebar.error(ui.t("err.model_load", msg=str(e)))
        st.sidebar.caption(ui.t("sb.kept_model", spec=st.session_state.get("model_spec_ok", EMBEDDED_ID)))
        st.session_state.setdefault("model_spec_ok", EMBEDDED_ID)
        return
    except Exception as e:  # never a traceback: any failure keeps the previous model
        st.sidebar.error(ui.t("err.model_load", msg=f"{type(e).__name__}: {e}"))
        st.session_state.setdefault("model_spec_ok", EMBEDDED_ID)
        return
    st.session_state["model_spec_ok"] = spec


def main() -> None:
    st.set_page_config(page_title="Transformer X-Ray", page_icon="🩻", layout="wide")
    if "model_spec_ok" not in st.session_state:
        wanted = st.query_params.get("model", EMBEDDED_ID)
        st.session_state["model_spec_ok"] = EMBEDDED_ID
        if wanted != EMBEDDED_ID:
            _switch_model(wanted)
    sidebar()
    presenter.apply_css()
    nav.navigation().run()


if __name__ == "__main__":
    main()
