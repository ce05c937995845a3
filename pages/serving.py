"""Serving lab: many requests on the real model, through transformers' own continuous-batching engine —
one padded batch, a workload step by step (which request ran in which forward step, the paged KV cache),
prefix reuse on and off, and a block pool too small for the workload."""

from __future__ import annotations

import streamlit as st

from core.engine.types import CodedError, Phrase
from core.gen import figures as gen_fig
from core.gen import report, serving, workloads
from core.web import cache, measure, nav, page, presenter, ui, widgets

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


def _workload(lang: str) -> tuple[serving.Request, ...] | None:
    """The workload: a preset, editable in a table; its requests once they pass the lab's checks. The browser's
    edit is checked before the editor applies it; one refused there gives a new editor, with the preset."""
    preset = widgets.radio_url(ui.t("serving.preset"), workloads.PRESETS, "chat", key=f"{P}_preset", param="workload", horizontal=True,
                               format_func=ui.fmt("serving.preset_{}"))
    st.caption(ui.t(f"serving.preset_{preset}_why"))
    reqs = workloads.preset(preset, lang)  # a Chinese page: the same requests in Chinese
    fresh = st.session_state.setdefault(f"{P}_fresh", 0)
    key = f"{P}_edit_{preset}_{lang}_{fresh}"
    try:
        serving.check_edits(st.session_state.get(key), len(reqs))
        return serving.requests_from_rows(st.data_editor([r.to_json() for r in reqs], num_rows="dynamic", key=key, width="stretch"))
    except CodedError as e:
        if e.code in ("too_many_rows", "too_big", "bad_edit"):  # refused before the editor: a new editor, without it
            del st.session_state[key]
            st.session_state[f"{P}_fresh"] = fresh + 1
        st.error(e.markdown(lang))
        return None


def _settings(part: str, loaded, reqs: tuple[serving.Request, ...] | None) -> serving.EngineSettings:
    c = st.columns(4)
    page = c[0].select_slider(ui.t("serving.page_size"), [8, 16, 32, 64], 32, key=f"{P}_page")
    mbt = c[1].select_slider(ui.t("serving.max_batch_tokens"), [64, 128, 256, 512], 256, key=f"{P}_mbt", help=ui.t("serving.mbt_help"))
    small = workloads.smallest_pool(loaded.tokenizer, reqs, page, loaded.facts.max_positions) if part == "blocks" and reqs else 0
    blocks = int(c[2].number_input(ui.t("serving.blocks"), 0, serving.BLOCKS[1], small, key=f"{P}_blocks_{part}_{page}_{small}",
                                   help=ui.t("serving.blocks_help")))
    sharing = c[3].toggle(ui.t("serving.sharing"), part != "blocks", key=f"{P}_share_{part}", disabled=part == "prefix")
    if small:
        st.caption(ui.t("serving.small_pool", n=small))
    return serving.EngineSettings(page, blocks or None, mbt, sharing)


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


def _press(part: str, asked: tuple) -> None:
    """Run: the model, workload and settings shown now (a later change waits for the next run); ignored while one goes."""
    if not measure.busy():
        st.session_state[f"{P}_run_{part}"] = (st.session_state.get(f"{P}_run_{part}", (0,))[0] + 1, *asked)


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
        reqs = _workload(lang)
        settings = _settings(part, loaded, reqs)
        st.button(ui.t("serving.run"), key=f"{P}_go_{part}", type="primary", on_click=_press, args=(part, (spec, reqs, settings)),
                  disabled=reqs is None)
        run, asked_spec, *asked = st.session_state.get(f"{P}_run_{part}", (0, None, None, None))
        if asked_spec != spec:
            st.info(ui.t("serving.press"))
            return
        if asked != [reqs, settings]:
            st.caption(ui.t("serving.next_run"))
        try:
            runs = measure.show(cache.serving_run(spec, *asked, part, run), Phrase("serving.progress"))
        except CodedError:  # said below, once: a failed run is not started again by the next change, only by a press
            st.session_state[f"{P}_run_{part}"] = (run, None, *asked)
            raise
        if runs is not None and part == "prefix":
            presenter.frame(report.sharing_table(serving.sharing_summary(runs[0], runs[2]), lang), hide_index=True, width="stretch")
            st.markdown(report.sharing_text(runs[:2], runs[2:], lang))
            ui.badge("measured")
        elif runs is not None:
            _results(runs[0], lang)
    except CodedError as e:  # a setting or workload the lab refuses: said in the page's language
        st.error(e.markdown(lang))


page.run(render)
