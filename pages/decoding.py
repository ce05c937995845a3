"""Decoding, faster — and what it costs: another kernel, speculation, lower precision, on the embedded model.

A shipped reference run (assets/decoding_reference.json, its machine and date said) is drawn first, so a class
never waits; a live run of one part is measured on request in a server thread (core.web.jobs), bounded in size."""

from __future__ import annotations

import time

import numpy as np
import streamlit as st

from core import backends
from core.common import timing
from core.engine.tokens import decoded_text, readable_tokens
from core.engine.types import EMBEDDED_ID, TOY_ID
from core.gen import figures as gen_fig
from core.gen import speedups as S
from core.web import cache, jobs, measure, page, presenter, ui, widgets

P = "decoding"
PARTS = ("kernels", "speculation", "precision")
PROMPTS = ("copy", "free")
TEXT = {"copy": S.COPY_PROMPT, "free": S.FREE_PROMPT}


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.0f} %"


def _pick(name: str, options: tuple, label: str, fmt: str | None) -> str:
    """A choice kept in the URL (``?name=``), so a shared link opens the same view (``fmt``: the options' i18n
    pattern; None: shown as they are)."""
    return widgets.radio_url(label, options, options[0], key=f"{P}_{name}", param=name, horizontal=True,
                             format_func=str if fmt is None else ui.fmt(fmt))


def _labels(loaded, ids: list[int]) -> list[str]:
    return readable_tokens(loaded.tokenizer, ids)


def _source(live: bool, ref: S.Reference | None) -> None:
    if live:
        st.caption(ui.t("decoding.src_live"))
    elif ref is not None:
        st.caption(ui.t("decoding.src_reference", machine=ref.machine, date=ref.date, versions=ref.versions)
                   + (" " + ui.t("decoding.src_shared") if ref.shared else ""))


# ---------------------------------------------------------------------------------------------
# 1. Kernels


def _kernels(loaded, k: S.KernelResult, picture) -> None:
    lang = ui.lang()
    tm = [k.timing(n) for n in S.KERNELS]
    presenter.chart_in(picture, gen_fig.timing_bars(list(S.KERNELS), [t.median for t in tm], [t.q1 for t in tm], [t.q3 for t in tm],
                                                    ui.t("decoding.fig_kernel_times"), lang), width="stretch", key=f"{P}_fig_kernels")
    c = st.columns(3)
    for col, key in zip(c, ("eager_vs_sdpa", "sdpa_vs_float64", "eager_vs_float64"), strict=True):
        col.metric(ui.t(f"decoding.gap_{key}"), f"{k.max_abs[key]:.2e}")
    forks = {n: f for n, f in k.fork.items() if n != "float64"}
    if all(f is None for f in forks.values()):
        st.success(ui.t("decoding.kernels_same", n=k.n_new))
    for n, f in forks.items():
        if f is not None:
            st.warning(ui.t("decoding.kernels_fork", kernel=n, at=f, n=k.n_new))
    st.caption(" · ".join(f"{n}: {timing.describe(t)}" for n, t in zip(S.KERNELS, tm, strict=True)))
    ui.badge("measured", ui.t("decoding.kernels_note"))
    st.markdown(ui.t("decoding.kernels_lesson"))


# ---------------------------------------------------------------------------------------------
# 2. Speculation


def _round_rows(loaded, r: S.SpecResult) -> list[list[tuple[str, str]]]:
    rows = [rd.marked() for rd in r.rounds]
    return [list(zip(_labels(loaded, [t for t, _ in row]), [k for _, k in row], strict=True)) for row in rows]


def _spec_text(r: S.SpecResult) -> None:
    sp = r.speedup()
    c = st.columns(4)
    c[0].metric(ui.t("decoding.m_acceptance"), _pct(r.acceptance), help=ui.t("decoding.m_acceptance_help"))
    c[1].metric(ui.t("decoding.m_passes"), f"{r.verify_passes} / {r.plain_passes}", help=ui.t("decoding.m_passes_help"))
    c[2].metric(ui.t("decoding.m_saved"), str(r.passes_saved))
    c[3].metric(ui.t("decoding.m_speedup"), "—" if sp is None else f"{sp.median:.2f}×")
    st.markdown(ui.t("decoding.spec_counts", drafted=r.drafted, accepted=r.accepted, rounds=r.verify_passes,
                     n=len(r.tokens), saved=r.passes_saved, cost=f"{r.draft_cost:.1f}"))
    if sp is not None:
        st.caption(ui.t("decoding.spec_speed", med=f"{sp.median:.2f}", lo=f"{sp.lo:.2f}", hi=f"{sp.hi:.2f}", n=sp.n))
        why = r.verdict()
        getattr(st, "success" if why == "faster" else "warning")(
            ui.t(f"decoding.why_{why}", method=ui.t(f"decoding.method_{r.method}"), acc=_pct(r.acceptance),
                 cost=f"{r.draft_cost:.1f}", n=len(r.tokens), drafted=r.drafted, med=f"{sp.median:.2f}"))
    if r.same:
        st.success(ui.t("decoding.spec_same", n=len(r.tokens)))
    else:  # the test holds this never to happen; a page that hid it would lie
        st.error(ui.t("decoding.spec_differs", at=S.first_fork(r.plain, r.tokens)))


def _speculation(loaded, res: dict[str, S.SpecResult], method: str, picture) -> None:
    r = res.get(method)
    if r is None:
        st.info(ui.t("decoding.no_result"))
        return
    rows = _round_rows(loaded, r)
    presenter.chart_in(picture, gen_fig.spec_rounds(rows, ui.lang()), width="stretch", key=f"{P}_fig_rounds")
    _spec_text(r)
    marks = {"accepted": "✓", "rejected": "✗", "model": "+"}
    table = [{ui.t("decoding.round"): i + 1, ui.t("decoding.col_tokens"): "  ".join(f"{marks[k]} {tok}" for tok, k in row)}
             for i, row in enumerate(rows)]
    presenter.frame(table, hide_index=True, width="stretch")
    ui.badge("model", ui.t("decoding.rounds_note"))
    st.code(decoded_text(loaded.tokenizer, r.tokens) or "…", language=None, wrap_lines=True)
    ratios = {m: x.speedup() for m, x in res.items() if x.speedup() is not None}
    if ratios:
        names = [ui.t(f"decoding.method_{m}") for m in ratios]
        presenter.chart(gen_fig.ratio_bars(names, [t.median for t in ratios.values()], [t.lo for t in ratios.values()],
                                           [t.hi for t in ratios.values()], ui.t("decoding.fig_speedup"),
                                           ui.t("decoding.speedup_axis"), ui.lang()), width="stretch")
        ui.badge("measured", ui.t("decoding.speedup_note"))


# ---------------------------------------------------------------------------------------------
# 3. Precision


def _precision(loaded, pr: S.PrecisionResult, picture) -> None:
    presenter.chart_in(picture, gen_fig.variant_lines({v.name: np.maximum(v.kl, 1e-9) for v in pr.variants}, ui.t("decoding.position"),
                                                      ui.t("decoding.kl_axis"), ui.t("decoding.fig_kl"), log=True),
                       width="stretch", key=f"{P}_fig_kl")
    st.info(ui.t("decoding.q41_note", gguf=_mb(pr.gguf_bytes), f32=_mb(pr.base_bytes)))
    rows = []
    for v in pr.variants:
        tr = pr.tpot_ratio(v.name)
        rows.append({ui.t("decoding.col_variant"): v.name, ui.t("decoding.col_bits"): f"{v.bits:.2f}",
                     ui.t("decoding.col_bytes"): _mb(v.weight_bytes), ui.t("decoding.col_kl"): f"{v.kl_mean:.3g}",
                     ui.t("decoding.col_top1"): _pct(v.top1),
                     ui.t("decoding.col_fork"): "—" if v.fork is None else str(v.fork),
                     ui.t("decoding.col_tpot"): "—" if tr is None else f"{tr.median:.2f}× ({tr.lo:.2f}–{tr.hi:.2f})"})
    presenter.frame(rows, hide_index=True, width="stretch")
    ui.badge("measured", ui.t("decoding.tpot_note"))
    presenter.chart(gen_fig.variant_lines({v.name: v.drift for v in pr.variants}, ui.t("decoding.stream_point"),
                                          ui.t("decoding.drift_axis"), ui.t("decoding.fig_drift")), width="stretch")
    ui.badge("model")
    names = tuple(v.name for v in pr.variants)
    pick = names[0] if len(names) == 1 else _pick("variant", names, ui.t("decoding.pick_variant"), None)
    v = next(x for x in pr.variants if x.name == pick)
    base_txt, var_txt = decoded_text(loaded.tokenizer, pr.base_tokens), decoded_text(loaded.tokenizer, v.tokens)
    if v.fork is None:
        st.success(ui.t("decoding.no_fork", name=v.name, n=pr.n_new))
    else:
        st.warning(ui.t("decoding.fork_at", name=v.name, at=v.fork,
                        base=(_labels(loaded, pr.base_tokens[v.fork:v.fork + 1]) or ["∅"])[0],
                        var=(_labels(loaded, v.tokens[v.fork:v.fork + 1]) or ["∅"])[0]))
    c1, c2 = st.columns(2)
    c1.markdown(ui.t("decoding.text_base"))
    c1.code(base_txt or "…", language=None, wrap_lines=True)
    c2.markdown(ui.t("decoding.text_variant", name=v.name))
    c2.code(var_txt or "…", language=None, wrap_lines=True)
    st.markdown(ui.t("decoding.precision_lesson"))
    _toy()


@st.cache_data(show_spinner=False)
def _toy_rows() -> list[S.ToyRow]:
    """The toy's float32 → 8 → 4-bit rows (instant: the toy is ~100 kB), once per server process."""
    return S.toy_precision(cache.get_model(TOY_ID))


def _toy() -> None:
    st.header(ui.t("decoding.toy_head"))
    st.markdown(ui.t("decoding.toy_intro"))
    rows = [{ui.t("decoding.col_variant"): r.name, ui.t("decoding.col_bits"): f"{r.bits:.1f}",
             ui.t("decoding.col_kl"): f"{r.kl_mean:.3g}", ui.t("decoding.col_top1"): _pct(r.top1),
             ui.t("decoding.col_toy_loss"): f"{r.loss_second_copy:.3f}"} for r in _toy_rows()]
    presenter.frame(rows, hide_index=True, width="stretch")
    ui.badge("toy")


def _mb(n: int | None) -> str:
    return "—" if n is None else f"{n / 2**20:,.1f} MiB"


# ---------------------------------------------------------------------------------------------
# Live runs (server threads, one per session at a time, bounded)


def _ask(want: tuple) -> None:
    if measure.busy():
        return
    st.session_state[f"{P}_live"] = (*want, time.time_ns())


def _live(loaded, part: str, prompt_key: str) -> jobs.Job | jobs.Refused | None:
    """The controls of a live run of this part and, when this session asked for one, its job (measured in a server
    thread: started here, never waited on here)."""
    with st.expander(ui.t("decoding.live_head"), expanded=False):
        c1, c2 = st.columns([2, 1])
        n_new = c1.slider(ui.t("decoding.n_new"), 8, S.MAX_NEW, S.DEFAULT_NEW, step=8, key=f"{P}_n_new")
        variant = c2.selectbox(ui.t("decoding.live_variant"), S.VARIANTS, key=f"{P}_live_variant") if part == "precision" else None
        want = (loaded.spec, part, prompt_key, variant, n_new)
        st.button(ui.t("decoding.live_button"), key=f"{P}_go", type="primary", on_click=_ask, args=(want,),
                  help=ui.t("decoding.live_help"))
    got = st.session_state.get(f"{P}_live")
    if not got or got[:-1] != want:
        return None
    ids = backends.encode_prompt(loaded, TEXT[prompt_key], chat=True).ids

    def compute(job):
        if part == "kernels":
            return S.kernels(loaded, ids, n_new, reps=3, progress=job.report)
        if part == "speculation":
            return {m: S.speculate(loaded, ids, m, n_new, reps=2, progress=job.report) for m in S.METHODS}
        return S.precision(loaded, ids, [variant], n_new, reps=2, progress=job.report)

    return cache.measurement(("decoding", *got), compute)


def _finished(job) -> object | None:
    return job.value if isinstance(job, jobs.Job) and not job.running and job.error is None else None


def render(loaded) -> None:
    if not backends.is_hf(loaded):
        st.info(ui.t("decoding.only_hf"))
        return
    ref = S.load_reference() if loaded.spec == EMBEDDED_ID else None
    part = _pick("part", PARTS, ui.t("decoding.pick_part"), "decoding.part_{}")
    picture = st.container()  # the part's main figure first, on the first screen; what sets it, and the rest, under it
    st.markdown(ui.t(f"decoding.{part}_intro", layer=S.EXIT_LAYER))
    prompt_key = _pick("prompt", PROMPTS, ui.t("decoding.pick_prompt"), "decoding.prompt_{}") if part == "speculation" else "free"
    st.caption(ui.t("decoding.prompt_is", text=TEXT[prompt_key]))
    method = _pick("method", S.METHODS, ui.t("decoding.pick_method"), "decoding.method_{}") if part == "speculation" else ""
    job = _live(loaded, part, prompt_key)
    live = _finished(job)
    result = live if live is not None else None if ref is None else (
        ref.kernels if part == "kernels" else ref.speculation.get(prompt_key, {}) if part == "speculation" else ref.precision)
    if result is None:
        st.info(ui.t("decoding.no_reference"))
    else:  # the shipped run first, while a live one is measured below: a class never waits for the page
        if part == "kernels":
            _kernels(loaded, result, picture)
        elif part == "speculation":
            _speculation(loaded, result, method, picture)
        else:
            _precision(loaded, result, picture)
        with picture:  # under the figure: whose run it is
            _source(live is not None, ref)
    if job is not None and live is None:
        try:
            done = measure.show(job)
        except Exception as e:  # a live run that failed is said, never drawn as a result
            st.error(ui.t("decoding.live_failed", error=type(e).__name__))
            return
        if done is not None:
            st.rerun()  # the finished live run takes the shipped run's place above


page.run(render)
