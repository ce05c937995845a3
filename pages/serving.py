"""Serving lab: many requests on the real model, through transformers' own continuous-batching engine —
one padded batch, a workload step by step (which request ran in which forward step, the paged KV cache),
prefix reuse on and off, and a block pool too small for the workload."""

from __future__ import annotations

import streamlit as st

from core.engine.types import CodedError
from core.gen import figures as gen_fig
from core.gen import report, serving, workloads
from core.web import cache, nav, page, presenter, ui, widgets

P = "serving"
PARTS = ("padded", "batching", "prefix", "blocks")

PADDED = ("The capital of France is", "Hi", "The quick brown fox jumps over the lazy dog")
SIDES = ("left", "right")


def _padded(spec: str, lang: str) -> None:
    st.markdown(ui.t("serving.padded_intro"))
    cols = st.columns(3)
    prompts = tuple(p for i, (c, v) in enumerate(zip(cols, PADDED)) if (p := c.text_input(ui.t("serving.prompt_n", n=i + 1), v, key=f"{P}_p{i}")).strip())
    if len(prompts) < 2:
        st.info(ui.t("serving.need_two"))
        return
    batches = [cache.serving_padded(spec, prompts, side) for side in SIDES]
    presenter.chart(gen_fig.padded_masks(batches, lang), width="stretch")
    for pb in batches:
        st.caption(ui.t("serving.positions_caption", side=ui.t(f"serving.side_{pb.side}")))
        presenter.frame(report.positions_table(pb, lang), width="stretch")
    presenter.frame(report.padded_table(batches, lang).style.format(precision=6), hide_index=True, width="stretch")
    left = batches[0]
    st.markdown(ui.t("serving.padded_verdict", err=f"{left.error:.2g}", nomask=f"{left.error_without_mask:.3g}",
                     changed=left.argmax_changed_without_mask, nopos=f"{left.error_without_positions:.2g}"))
    ui.badge("real")


def _workload(lang: str) -> str | None:
    """The workload: a preset, editable in a table; returned as JSONL once it passes the lab's checks."""
    preset = widgets.radio_url(ui.t("serving.preset"), workloads.PRESETS, "chat", key=f"{P}_preset", param="workload", horizontal=True,
                               format_func=ui.fmt("serving.preset_{}"))
    st.caption(ui.t(f"serving.preset_{preset}_why"))
    reqs = serving.parse_workload(workloads.preset_text(preset, lang))  # a Chinese page: the same requests in Chinese
    rows = st.data_editor([r.to_json() for r in reqs], num_rows="dynamic", key=f"{P}_edit_{preset}_{lang}", width="stretch")
    try:
        return serving.workload_text(serving.parse_workload(workloads.rows_text(serving.edited_rows(rows))))
    except CodedError as e:
        st.error(e.markdown(lang))
        return None


def _settings(part: str, loaded, text: str | None) -> tuple[int, int | None, int, bool]:
    c = st.columns(4)
    page = c[0].select_slider(ui.t("serving.page_size"), [8, 16, 32, 64], 32, key=f"{P}_page")
    mbt = c[1].select_slider(ui.t("serving.max_batch_tokens"), [64, 128, 256, 512], 256, key=f"{P}_mbt", help=ui.t("serving.mbt_help"))
    small = workloads.smallest_pool(loaded.tokenizer, text, page, loaded.facts.max_positions) if part == "blocks" and text else 0
    blocks = int(c[2].number_input(ui.t("serving.blocks"), 0, serving.BLOCKS[1], small, key=f"{P}_blocks_{part}_{page}_{small}",
                                   help=ui.t("serving.blocks_help")))
    sharing = c[3].toggle(ui.t("serving.sharing"), part != "blocks", key=f"{P}_share_{part}", disabled=part == "prefix")
    if small:
        st.caption(ui.t("serving.small_pool", n=small))
    return page, blocks or None, mbt, sharing


def _run(spec: str, text: str, settings: tuple, sharing: bool, solo: bool, run: int):
    page, blocks, mbt, _ = settings
    return cache.serving_run(spec, text, page, blocks, mbt, sharing, solo, run)


def _results(res: serving.ServeResult, lang: str) -> None:
    st.markdown(report.throughput_text(res, lang))
    st.caption(ui.t("serving.one_run"))
    if res.refused:
        st.warning(ui.t("serving.refused", msg=widgets.md(res.refused)))
    ids = [r.id for r in res.requests]
    presenter.chart(gen_fig.serving_gantt(res.requests, lang), width="stretch")
    presenter.chart(gen_fig.serving_timeline(res.steps, ids, lang), width="stretch")
    presenter.frame(report.requests_table(res, lang), hide_index=True, width="stretch")
    presenter.chart(gen_fig.serving_blocks(res.steps, ids, res.settings["num_blocks"], lang), width="stretch")
    st.markdown(report.pool_text(res, lang))
    presenter.chart(gen_fig.serving_memory(res.memory, lang), width="stretch")
    ui.badge("measured", ui.t("serving.engine", v=res.transformers_version))


def _press(part: str) -> None:
    st.session_state[f"{P}_run_{part}"] = st.session_state.get(f"{P}_run_{part}", 0) + 1


def render(loaded) -> None:
    if loaded.is_toy:
        st.info(ui.t("serving.toy"))
        return
    spec, lang = ui.model_spec(), ui.lang()
    part = widgets.radio_url(ui.t("serving.part"), PARTS, "batching", key=f"{P}_part", param="part", horizontal=True,
                             format_func=ui.fmt("serving.part_{}"))
    st.markdown(ui.t(f"serving.part_{part}_intro"))
    nav.see_page("decoding")  # one request's decode made cheaper: speculation, kernels, precision
    try:
        if part == "padded":
            _padded(spec, lang)
            return
        text = _workload(lang)
        settings = _settings(part, loaded, text)
        st.button(ui.t("serving.run"), key=f"{P}_go_{part}", type="primary", on_click=_press, args=(part,))
        run = st.session_state.get(f"{P}_run_{part}", 0)
        if text is None or run == 0:
            st.info(ui.t("serving.press"))
            return
        if part == "prefix":
            on = [_run(spec, text, settings, True, i == 0, run * 10 + i) for i in range(2)]
            off = [_run(spec, text, settings, False, i == 0, run * 10 + i) for i in range(2)]
            presenter.frame(report.sharing_table(serving.sharing_summary(on[0], off[0]), lang), hide_index=True, width="stretch")
            st.markdown(report.sharing_text(on, off, lang))
            ui.badge("measured")
            return
        _results(_run(spec, text, settings, settings[3], True, run), lang)
    except CodedError as e:  # a setting or workload the lab refuses: said in the page's language
        st.error(e.markdown(lang))


page.run(render)
