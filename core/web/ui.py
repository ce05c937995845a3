"""Small Streamlit helpers shared by app.py and the pages: language, the shared sidebar state,
the current model and trace, URL state, provenance badges and the trace download.

Pages stay thin: read widgets → call core → draw. Everything that computes lives elsewhere in core/.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import streamlit as st

from core.common import digits, escape, i18n, numbers
from core.engine.hf import hide_paths
from core.engine.tokens import Encoded, cut_notice, encode, has_chat_template, has_cjk, tokens_per_char
from core.engine.trace import Trace
from core.engine.types import EMBEDDED_ID, TOY_ID, CodedError, EmptyPromptError, LoadedModel, ModelLoadError, UnsupportedArchitectureError
from core.web import cache, download, guards
from core.web.offer import LOCAL_ID, Offer, from_env

PRESETS = (
    "What is the capital of France?",
    "2加3等于几？",
    "苹果很好吃。苹果发布了新系统。",
    "小明把书交给小红，因为她明天要考试。",
    "成都今天适合跑步吗",
)
DEFAULT_PROMPT = PRESETS[0]
# The first prompt per language. SmolLM2 was trained mostly on English: of the Chinese questions tried
# (capitals, greetings, colours, translation, arithmetic), it repeats or drifts on most ("法国的首都是哪里？" →
# "法国的首都是哪里�") and answers arithmetic right, in digits ("2加3等于几？" → "2 + 3 = 5."). ZH_SAME_IN_EN
# is that question in English, so the page can set the two token counts side by side.
DEFAULT_PROMPTS = {"en": DEFAULT_PROMPT, "zh": "2加3等于几？"}
ZH_SAME_IN_EN = "What is 2 plus 3?"
MAX_PROMPT_CHARS = 20_000  # the prompt box's cap, for a prompt typed or arriving by a link alike
URL_PROMPT_CHARS = 2_000  # a link carries the whole prompt up to this length, or no prompt at all
GUARDED = guards.install()  # a crafted NaN / ∞ in a number input never breaks a session (core.web.guards)


# ---------------------------------------------------------------------------------------------
# language


def lang() -> str:
    if "lang" not in st.session_state:
        qp = st.query_params.get("lang")
        loc = None
        try:
            loc = st.context.locale
        except Exception:  # older Streamlit / AppTest
            loc = None
        st.session_state["lang"] = i18n.normalise_lang(qp or loc)
    return st.session_state["lang"]


def t(key: str, **kw: Any) -> str:
    return i18n.t(key, lang(), **kw)


def fmt(pattern: str, **kw: Any):
    """A ``format_func`` for translated widget options: ``fmt("heads.metric_{}")`` maps the option
    ``"entropy"`` to the string of key heads.metric_entropy. The language is fixed now, in the script's thread, because
    Streamlit's test harness calls format_func from another thread, where the session is unknown."""
    now = lang()
    return lambda v: i18n.t(pattern.format(v), now, **kw)


# ---------------------------------------------------------------------------------------------
# shared state: the offered models, the model in use, prompt, chat switch


def offered() -> Offer:
    """The models this server offers (``XRAY_MODELS``, ``XRAY_ALLOW_LOCAL``), parsed once per setting.
    Raises ``OfferError`` on a malformed setting (app.main says so before anything else runs)."""
    return from_env()


def model_spec() -> str:
    """What the loader and the caches take for the model in use: a built-in id, a canonical folder or
    an HF cache id. Never read from the URL: app.main resolves a link's ``model`` id through the offer."""
    return st.session_state.get("model_spec_ok", EMBEDDED_ID)


def model_id() -> str:
    """The offered id of the model in use (``LOCAL_ID`` for a folder typed in the local-folder box)."""
    return st.session_state.get("model_id", EMBEDDED_ID)


def model_label() -> str:
    """How the page names the model in use: its offered id (never the operator's folder), or the
    folder the user typed into the local-folder box."""
    return model_spec() if model_id() == LOCAL_ID else model_id()


def switch_model(model_id: str, spec: str) -> bool:
    """Try a new model (an offered id and its spec, or ``LOCAL_ID`` and a folder the reader typed); on failure
    keep the previous one and say why. Whether it switched."""
    try:
        cache.get_model(spec)
    except Exception as e:  # never a traceback: any failure keeps the previous model
        st.sidebar.error(t("err.model_load", msg=load_error_text(e, spec)))
        st.sidebar.caption(t("sb.kept_model", spec=escape.md(model_label())))
        return False
    st.session_state["model_spec_ok"] = spec
    st.session_state["model_id"] = model_id
    st.session_state.pop("_link_model_refused", None)
    return True


def load_error_text(e: Exception, spec: str) -> str:
    """A load failure as a sentence in the user's language, as Markdown (what came from outside escaped) (a ModelLoadError's code picks it; one whose
    code has no sentence is said as ``str(e)``). Never a server path: an offered model's folder is named
    by its id, any other folder by its name, the server account's home folder ``~`` (``hide_paths``)."""
    shown = offered().id_for(spec) or (Path(spec).name if spec.startswith(("/", "~", ".")) else spec)

    def clean(text: str) -> str:
        return hide_paths(text.replace(spec, shown) if spec and shown != spec else text)

    if isinstance(e, ModelLoadError) and e.known:  # the catalogue's sentence; its values escaped (escape.md)
        return e.markdown(lang(), clean)
    # not the loader's refusal: whatever it says, said without paths, as text
    return escape.md(clean(str(e) if isinstance(e, ModelLoadError) else f"{type(e).__name__}: {e}"))


def error_md(e: BaseException) -> str:
    """An error as the page's Markdown, in the reader's language: a ``CodedError`` (every refusal core raises:
    an unsupported architecture, a config, an empty prompt …) says its catalogue sentence, its values escaped
    and without server paths; anything else its type and message, escaped, without paths."""
    if isinstance(e, CodedError):
        return e.markdown(lang(), hide_paths)
    return escape.md(hide_paths(f"{type(e).__name__}: {e}"))


def model_source(loaded: LoadedModel) -> str:
    """Where ``loaded`` came from, as a page says it (never a server path): the offered id of the model in
    use, else its own public source (``LoadedModel.public_source`` decides)."""
    mid = model_id()
    return loaded.public_source(mid if offered().spec(mid) == loaded.spec else None)


def link_prompt() -> tuple[str, int | None]:
    """The prompt a link carries, capped like the prompt box: (text, its length before the cut or None)."""
    raw = st.query_params.get("prompt")
    if raw is None:
        return default_prompt(), None
    if len(raw) > MAX_PROMPT_CHARS:
        return raw[:MAX_PROMPT_CHARS], len(raw)
    return raw, None


def default_prompt() -> str:
    """The prompt a session starts on without a link's: a Chinese example in a Chinese UI."""
    return DEFAULT_PROMPTS.get(lang(), DEFAULT_PROMPT)


def prompt() -> str:
    return st.session_state.get("prompt", link_prompt()[0])


def english_note(text: str) -> None:
    """For the embedded SmolLM2 and a prompt with Chinese in it: the model was trained mostly on English,
    with its numbers — tokens per character of this prompt and of the same question in English,
    counted now by the tokenizer in use."""
    if model_id() != EMBEDDED_ID or not text or not has_cjk(text):
        return
    loaded = loaded_model()
    if loaded is None:
        return
    zh_t, zh_c = tokens_per_char(loaded.tokenizer, text)
    en = ZH_SAME_IN_EN if text == DEFAULT_PROMPTS["zh"] else DEFAULT_PROMPT
    en_t, en_c = tokens_per_char(loaded.tokenizer, en)
    st.info(t("ui.english_note", zh=escape.md(text[:40] + ("…" if len(text) > 40 else "")), zh_t=zh_t, zh_c=zh_c,
              zh_r=f"{zh_t / zh_c:.2f}", en=en, en_t=en_t, en_c=en_c, en_r=f"{en_t / en_c:.2f}",
              x=f"{(zh_t / zh_c) / (en_t / en_c):.1f}"))


def default_chat() -> bool:
    """The chat switch's first value: the link's ``chat`` when it has one; otherwise on for a model whose
    tokenizer has a chat template. An instruct model answers a question inside its template; given the
    bare text it mostly predicts its end token at once (SmolLM2: ``<|im_end|>``, 67 %), so a class's
    first screen would be an empty answer."""
    raw = st.query_params.get("chat")
    if raw in ("0", "1"):
        return raw == "1"
    try:
        return has_chat_template(cache.get_model(model_spec()).tokenizer)
    except Exception:  # the page says why the model cannot load; the switch just starts off
        return False


def chat() -> bool:
    if "chat" not in st.session_state:
        st.session_state["chat"] = default_chat()
    return bool(st.session_state["chat"])


def is_toy() -> bool:
    return model_spec() == TOY_ID


def loaded_model():
    """The current LoadedModel, or None with a message already shown."""
    spec = model_spec()
    try:
        return cache.get_model(spec)
    except Exception as e:  # never a traceback in the page
        st.error(t("err.model_load", msg=load_error_text(e, spec)))
    return None


def current_trace(prompt_text: str | None = None, *, chat_mode: bool | None = None):
    """The cached Trace of the shared prompt (or ``prompt_text``), or None with a message shown."""
    p = prompt() if prompt_text is None else prompt_text
    c = chat() if chat_mode is None else chat_mode
    if not p or not p.strip():
        st.info(t("hint.empty_prompt"))
        return None
    if loaded_model() is None:
        return None
    try:
        with st.spinner(t("ui.tracing")):  # shown only if the trace is not cached and takes over half a second
            tr = cache.get_trace(model_spec(), p, c)
    except EmptyPromptError:
        st.info(t("hint.empty_prompt"))
        return None
    except UnsupportedArchitectureError as e:
        st.error(t("err.unsupported", msg=error_md(e)))
        return None
    except Exception as e:
        st.error(t("err.trace", msg=escape.md(hide_paths(f"{type(e).__name__}: {e}"))))
        return None
    if tr.truncated_from:
        warn_cut(tr.truncated_from, tr.n_tokens, tr.meta.get("cut_by"), bool(tr.meta.get("kept_tail")))
    return tr


def warn_cut(truncated_from: int, kept: int, cut_by: str | None = None, kept_tail: bool = False) -> None:
    """The one notice that a prompt was cut, saying whose limit (the app's or the model's positions) cut it."""
    st.warning(" ".join(t(key, **args) for key, args in cut_notice(truncated_from, kept, cut_by, kept_tail)))


def model_and_trace() -> tuple[LoadedModel, Trace] | None:
    """The current model and the cached trace of the shared prompt, or None with a message shown."""
    tr = current_trace()
    loaded = loaded_model() if tr is not None else None
    return None if loaded is None else (loaded, tr)


def site(tr: Trace, name: str, layer: int) -> np.ndarray | None:
    """Site ``name`` (``core.engine.trace.SITES``) of layer ``layer`` of the cached trace ``tr``: the pages' door
    (``cache.site``). Derived once per (trace, layer) and kept in the byte-bounded cache; a spinner says so
    while it is derived; None, with the reason shown, if it cannot be."""
    try:  # by the trace's own key (Trace.key): never the session's model or prompt, read again
        if cache.has_site(tr, name, layer):
            return cache.site(tr, name, layer)
        with st.spinner(t("ui.deriving_layer", l=layer, T=tr.n_tokens)):
            return cache.site(tr, name, layer)
    except UnsupportedArchitectureError as e:
        st.error(t("err.unsupported", msg=error_md(e)))
    except Exception as e:  # never a traceback in the page
        st.error(t("err.trace", msg=escape.md(hide_paths(f"{type(e).__name__}: {e}"))))
    return None


def encoded_prompt(loaded: LoadedModel, max_tokens: int) -> Encoded | None:
    """The shared prompt as ids (None, with a hint, when it is empty); warns when it was cut."""
    try:
        enc = encode(loaded.tokenizer, prompt(), chat=chat(), max_tokens=max_tokens, max_positions=loaded.facts.max_positions)
    except EmptyPromptError:
        st.info(t("hint.empty_prompt"))
        return None
    if enc.truncated_from:
        warn_cut(enc.truncated_from, len(enc.ids), enc.cut_by, enc.kept_tail)
    return enc


# ---------------------------------------------------------------------------------------------
# URL state


def qp_int(name: str, default: int, lo: int, hi: int) -> int:
    """An integer from the URL (clamped), so a shared link opens the same view; read by the one reader of
    whole numbers (``digits.whole``: ASCII digits only), anything else dropped for ``default``."""
    c = digits.check(st.query_params.get(name), lo, hi)  # the one check; out of range: the nearest end
    return default if c.n is None else {digits.BELOW: lo, digits.ABOVE: hi}.get(c.why, c.n)


def qp_layer(n_layers: int, default: int, *, stream: bool = False) -> int:
    """The link's ``?layer=``, the one reader every page uses: a block 0 … L − 1 (``n_layers`` = L), or with
    ``stream=True`` a point of the residual stream 0 … L, where ``resid[0]`` is the embeddings and ``resid[L]``
    is after the last block (the journey's slider walks the stream). Out of range: the nearest end."""
    return qp_int("layer", default, 0, n_layers if stream else n_layers - 1)


def qp_choice(name: str, options: Sequence[Any], default: Any) -> Any:
    """One of ``options`` named in the URL (compared as text), else ``default``: an unknown value is dropped."""
    raw = st.query_params.get(name)
    for o in options:
        if raw is not None and str(o) == raw:
            return o
    return default


def qp_bool(name: str, default: bool) -> bool:
    """A switch from the URL: "1" / "0" (anything else is dropped)."""
    raw = st.query_params.get(name)
    return {"1": True, "0": False}.get(raw, default) if raw is not None else default


def qp_float(name: str, default: float, lo: float, hi: float, step: float | None = None) -> float:
    """A number from the URL, clamped to lo … hi and snapped to ``step`` from ``lo`` (a slider
    refuses a value off its grid); NaN, infinities and text are dropped."""
    try:
        v = float(st.query_params.get(name, default))
    except (TypeError, ValueError):
        return default
    if not math.isfinite(v):
        return default
    v = max(lo, min(hi, v))
    if step:
        v = round(lo + round((v - lo) / step) * step, 10)
        v = max(lo, min(hi, v))
    return v


def set_qp(**kw: Any) -> None:
    for k, v in kw.items():
        if v is None:
            st.query_params.pop(k, None)
        else:
            st.query_params[k] = str(v)






# ---------------------------------------------------------------------------------------------
# provenance and export

_BADGE = {
    "real": ("🔬", "badge.real"),
    "toy": ("🧪", "badge.toy"),
    "formula": ("📐", "badge.formula"),
    "measured": ("⏱️", "badge.measured"),
}


def badge(kind: str, detail: str | None = None) -> None:
    """Where a figure's numbers come from: the real model, the toy, a formula, a measurement."""
    if kind == "model":
        kind = "toy" if is_toy() else "real"
    icon, key = _BADGE[kind]
    text = t(key)
    if kind == "real":
        text = f"{text} · {escape.md(model_label())}"
    if detail:
        text = f"{text} · {detail}"
    st.caption(f"{icon} {text}")


def download_trace(tr: Trace, key: str) -> None:
    """A 'Download trace (.npz)' button for the cached trace ``tr`` (the one the page shows, by its own key);
    the file is built only when clicked, one at a time per server. A trace whose file would pass the server's
    limit (``core.web.download``) gets a sentence with its size and the command that writes it instead."""
    bound, limit = download.size_bound(tr), download.limit_bytes()
    if bound > limit:
        st.caption(t("download.too_big", size=numbers.human_bytes(bound), limit=numbers.human_bytes(limit),
                     n=f"{tr.n_tokens:,}"))
        return

    def build() -> bytes:
        with download.BUILD:
            return cache.get_trace_npz(tr)

    st.download_button(
        t("ui.download_trace"),
        data=build,
        file_name="trace.npz",
        mime="application/octet-stream",
        key=f"dl_{key}",
        on_click="ignore",
    )




def header(title_key: str, intro_key: str | None = None) -> None:
    st.title(t(title_key))
    if intro_key:
        st.markdown(t(intro_key))
