"""Prefill & decode, one token at a time: the KV cache grows, each step is timed."""

from __future__ import annotations

import streamlit as st

from core.engine import tokens
from core.engine.tokens import position_label
from core.engine.types import EmptyPromptError
from core.gen import figures as gen_fig
from core.gen import generate
from core.web import generation as gen_ui
from core.web import presenter, ui

P = "generation"


def _status(stp: generate.Stepper, tokens: list[str], text: str) -> None:
    """The generated text so far and why generation stopped, if it did."""
    n_prompt = len(stp.prompt_ids)
    gen = text
    st.markdown(ui.t("generation.sequence", n_prompt=n_prompt, n_gen=len(stp.generated)))
    st.code((gen or "…"), language=None, wrap_lines=True)
    if stp.stop_reason == "eos":
        st.success(ui.t("generation.stop_eos", tok=tokens[-1], id=stp.generated[-1]))
    elif stp.stop_reason == "max_steps":
        st.info(ui.t("generation.stop_max", n=stp.max_steps))
    elif stp.stop_reason == "context":
        st.warning(ui.t("generation.stop_context", n=stp.max_positions))


def _pick_step(n: int) -> int:
    """Which pass to look at (URL ``step``); follows the newest pass after each button."""
    if n == 1:
        return 0
    key = f"{P}_step"
    if key not in st.session_state:
        st.session_state[key] = ui.qp_int("step", n - 1, 0, n - 1)
    st.session_state[key] = min(int(st.session_state[key]), n - 1)
    step = st.slider(ui.t("generation.step"), 0, n - 1, key=key, help=ui.t("generation.step_help"))
    ui.set_qp(step=step)
    return step


def render() -> None:
    ui.header("page.generation", "generation.intro")
    loaded = ui.loaded_model()
    if loaded is None:
        return
    try:
        enc = tokens.encode(loaded.tokenizer, ui.prompt(), chat=ui.chat(), max_tokens=generate.MAX_PROMPT_TOKENS)
    except EmptyPromptError:
        st.info(ui.t("hint.empty_prompt"))
        return
    if enc.truncated_from:
        st.warning(ui.t("warn.truncated", n=enc.truncated_from, k=len(enc.ids)))
    cfg, max_steps = gen_ui.sampling_widgets(P)
    stp = gen_ui.stepper(loaded, enc.ids, cfg, max_steps)
    gen_ui.controls(stp, P)
    if not stp.started:
        st.info(ui.t("generation.hint_start", n=len(enc.ids)))
        return
    pieces = tokens.readable_tokens(loaded.tokenizer, stp.all_ids)
    _status(stp, pieces, loaded.tokenizer.decode(stp.generated))
    step = _pick_step(len(stp.records))
    rec = stp.records[step]
    f = loaded.facts
    c1, c2 = st.columns([3, 2])
    with c1:
        labels = tokens.readable_tokens(loaded.tokenizer, rec.top_ids.tolist())
        chosen = int(next((i for i, t in enumerate(rec.top_ids) if t == rec.token_id), -1))
        st.plotly_chart(gen_fig.candidates(labels, rec.top_probs, rec.top_sample_probs, chosen, ui.lang()), width="stretch")
        ui.badge("model")
    with c2:
        st.metric(ui.t("generation.new_token", phase=ui.t(f"generation.phase_{rec.phase}"), i=step), repr(rec.token), f"id {rec.token_id}", delta_color="off")
        st.metric(ui.t("generation.pass_time", n=rec.n_input), f"{rec.seconds * 1000:.1f} ms")
        st.metric(ui.t("generation.kv_now"), f"{rec.kv_tokens} · {rec.kv_bytes:,} B")
        st.caption(ui.t("generation.kv_formula", L=f.n_layers, kv=f.n_kv_heads, dh=f.head_dim, t=rec.kv_tokens,
                        b=f.value_bytes, total=f.geometry.kv_bytes(rec.kv_tokens)))
        ui.badge("measured")
    layer, head = ui.layer_head_pickers(P, f.n_layers, f.n_heads)
    a1, a2 = st.columns(2)
    n_vis = rec.kv_tokens
    if rec.attn is not None:
        title = ui.t("generation.fig_row", tok=position_label(pieces, n_vis - 1), layer=layer, head=head, kv=head // f.group_size)
        a1.plotly_chart(gen_fig.attention_row(rec.attn[layer, head], pieces[:n_vis], len(stp.prompt_ids), title, ui.lang()), width="stretch")
    if stp.prefill_pattern is not None:
        title = ui.t("generation.fig_prefill", layer=layer, head=head)
        a2.plotly_chart(gen_fig.prefill_matrix(stp.prefill_pattern[layer, head], pieces, title, ui.lang()), width="stretch")
    else:
        a2.info(ui.t("generation.no_prefill_matrix", n=generate.MAX_PREFILL_PATTERN))
    ui.badge("model")
    kv_tok, kv_b, kv_layers = stp.kv_arrays()
    k1, k2 = st.columns(2)
    k1.plotly_chart(gen_fig.kv_growth(kv_tok, kv_b, ui.lang()), width="stretch")
    k2.plotly_chart(gen_fig.kv_layers(kv_layers[step], ui.lang()), width="stretch")
    ui.badge("measured", ui.t("generation.kv_source"))
    st.plotly_chart(gen_fig.timings([r.seconds for r in stp.records], ui.lang()), width="stretch")
    tp = stp.tpots
    st.caption(ui.t("generation.ttft_tpot", ttft=stp.ttft * 1000, tpot=(sum(tp) / len(tp) * 1000) if tp else 0.0, n=len(tp)))
    ui.badge("measured")


render()
presenter.sources("kv_cache")
