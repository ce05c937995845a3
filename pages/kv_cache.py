"""KV cache: what it saves (timed both ways), what it costs (memory by formula), and which
phase dominates the tutorials' three request shapes (simulated from costs measured here)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from core.engine.numbers import human_bytes
from core.engine.types import ConfigError, EmptyPromptError, HeadGeometry
from core.gen import figures as gen_fig
from core.gen import kvcalc
from core.web import cache, presenter, ui

P = "kv_cache"


def _shape() -> tuple[HeadGeometry | None, int, int, int]:
    """The calculator's inputs: a preset or a pasted config.json, bytes/value, tokens, requests."""
    presets = {p.name: p for p in kvcalc.load_presets()}
    c = st.columns(4)
    name = c[0].selectbox(ui.t("kv_cache.model"), [*presets, ui.t("kv_cache.paste")], key=f"{P}_preset")
    bpv = kvcalc.BYTES_PER_VALUE[c[1].selectbox(ui.t("kv_cache.bpv"), list(kvcalc.BYTES_PER_VALUE), index=1, key=f"{P}_bpv")]
    tokens = int(c[2].number_input(ui.t("kv_cache.tokens"), 1, 10_000_000, 4096, key=f"{P}_tokens"))
    reqs = int(c[3].number_input(ui.t("kv_cache.requests"), 1, 100_000, 1, key=f"{P}_reqs"))
    if name in presets:
        st.caption(ui.t("kv_cache.source", src=presets[name].source))
        return presets[name], bpv, tokens, reqs
    text = st.text_area(ui.t("kv_cache.paste_here"), '{"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096}', key=f"{P}_cfg")
    try:
        return kvcalc.from_config(text, name="config.json"), bpv, tokens, reqs
    except ConfigError as e:
        ui.config_error(e)
        return None, bpv, tokens, reqs


def _compare(spec: str, prompt: str, chat: bool, n: int, min_len: int) -> None:
    r = cache.compare_cache(spec, prompt, chat, n, min_len)
    st.caption(ui.t("kv_cache.prompt_len", t=r["n_prompt"]))
    st.plotly_chart(gen_fig.cache_compare(r["with_lengths"], r["with_seconds"], r["without_lengths"], r["without_seconds"], ui.lang()), width="stretch")
    ui.badge("measured")
    same = r["with_ids"] == r["without_ids"]
    st.markdown(ui.t("kv_cache.same" if same else "kv_cache.differ", n=len(r["with_ids"])))
    st.dataframe(pd.DataFrame({ui.t("kv_cache.with"): r["with_tokens"], ui.t("kv_cache.without"): r["without_tokens"],
                               "✓": ["✓" if a == b else "✗" for a, b in zip(r["with_ids"], r["without_ids"])]}).T, width="stretch")
    tot_w, tot_wo = sum(r["with_seconds"]), sum(r["without_seconds"])
    st.caption(ui.t("kv_cache.totals", w=tot_w * 1000, wo=tot_wo * 1000, x=tot_wo / tot_w if tot_w else 0.0))


def render() -> None:
    ui.header("page.kv_cache", "kv_cache.intro")
    loaded = ui.loaded_model()
    if loaded is None:
        return
    spec, prompt, chat = ui.model_spec(), ui.prompt(), ui.chat()
    st.subheader(ui.t("kv_cache.s1"))
    c1, c2 = st.columns(2)
    n = c1.slider(ui.t("kv_cache.n_steps"), 2, 32, 12, key=f"{P}_n")
    min_len = c2.select_slider(ui.t("kv_cache.min_len"), [0, 32, 64, 128, 256], 128, key=f"{P}_len", help=ui.t("kv_cache.min_len_help"))
    if st.button(ui.t("kv_cache.measure"), key=f"{P}_measure", type="primary"):
        st.session_state[f"{P}_cmp"] = (spec, prompt, chat, n, min_len)
    if not prompt.strip():
        st.info(ui.t("hint.empty_prompt"))
    elif st.session_state.get(f"{P}_cmp") == (spec, prompt, chat, n, min_len):
        with st.spinner(ui.t("kv_cache.measuring")):
            try:
                _compare(spec, prompt, chat, n, min_len)
            except EmptyPromptError:
                st.info(ui.t("hint.empty_prompt"))
    else:
        st.info(ui.t("kv_cache.press_measure"))

    st.subheader(ui.t("kv_cache.s2"))
    shape, bpv, tokens, reqs = _shape()
    if shape is not None:
        total = shape.kv_bytes(tokens, bpv, reqs)
        st.metric(ui.t("kv_cache.total", kind=shape.kind), human_bytes(total), f"{total:,} B", delta_color="off")
        st.caption(ui.t("kv_cache.formula", L=shape.n_layers, kv=shape.n_kv_heads, dh=shape.head_dim, b=bpv, t=tokens, r=reqs, total=total))
        rows = kvcalc.variant_rows(shape, tokens, bpv, reqs)
        st.dataframe(pd.DataFrame(rows).rename(columns=lambda c: ui.t(f"kv_cache.col_{c}")), hide_index=True, width="stretch")
        st.plotly_chart(gen_fig.kv_variants([r["kind"] for r in rows], [r["total_bytes"] for r in rows], ui.lang()), width="stretch")
        ui.badge("formula")

    st.subheader(ui.t("kv_cache.s3"))
    with st.spinner(ui.t("kv_cache.measuring")):
        m = cache.measured_costs(spec)
    f = loaded.facts
    costs = kvcalc.Costs(m["prefill_s_per_token"], m["decode_s_per_token"], f.kv_bytes_per_token(), f.n_params * f.value_bytes)
    st.markdown(ui.t("kv_cache.costs", pre=costs.prefill_s_per_token * 1000, dec=costs.decode_s_per_token * 1000,
                     n=m["n_prefill"], kv=costs.kv_bytes_per_token, model=f.name))
    rows = kvcalc.simulate(kvcalc.SEED_WORKLOADS, costs)
    names = [ui.t(f"kv_cache.wl_{r['key']}") for r in rows]
    df = pd.DataFrame([{**r, "key": nm, "kv_bytes": human_bytes(r["kv_bytes"]), "weight_bytes": human_bytes(r["weight_bytes"]),
                        "time_dominant": ui.t(f"kv_cache.dom_{r['time_dominant']}"), "memory_dominant": ui.t(f"kv_cache.dom_{r['memory_dominant']}")}
                       for r, nm in zip(rows, names)])
    st.dataframe(df.round(2).rename(columns=lambda c: ui.t(f"kv_cache.col_{c}")), hide_index=True, width="stretch")
    st.plotly_chart(gen_fig.workloads(names, [r["ttft_s"] for r in rows], [r["decode_s"] for r in rows],
                                        [r["kv_bytes"] / 2**30 for r in rows], [r["weight_bytes"] / 2**30 for r in rows], ui.lang()), width="stretch")
    ui.badge("measured", ui.t("kv_cache.simulated"))


render()
presenter.sources("kv_cache")
