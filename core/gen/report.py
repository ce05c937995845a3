"""What the generation, KV-cache and chat pages show besides figures: their tables (DataFrames) and
the sentences built from measured numbers, in the page's language. Pure: pandas and i18n, no
Streamlit, so every number a page prints can be checked without running the app.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import pandas as pd

from core.engine import timing
from core.engine.i18n import t
from core.engine.numbers import human_bytes
from core.engine.timing import Timing
from core.engine.tokens import visible
from core.gen.chat_template import ChatRendering
from core.gen.generate import CacheComparison, Stepper, StepRecord, TpotMeasure
from core.gen.kvcalc import Costs

# ---------------------------------------------------------------------------------------------
# Timings, said the same way everywhere (core.engine.timing measures them)


def timing_phrase(tm: Timing, lang: str, per: int = 1) -> str:
    """'41.0 ms (median of 24; IQR 40.5–42.0 ms)' in the page's language; ``per`` divides every
    figure (e.g. a prefill's seconds per prompt token)."""
    d = max(1, int(per))
    if tm.n == 1:
        return t("timing.one_run", lang, median=timing.ms(tm.median / d))
    q1, q3 = tm.q1 / d, tm.q3 / d
    # one unit for both ends of the range: never 'IQR 850.0 ms–1.70 s'
    lo = f"{q1:.2f} s" if q3 >= 1.0 > q1 else timing.ms(q1)
    return t("timing.median_iqr", lang, median=timing.ms(tm.median / d), n=tm.n, q1=lo, q3=timing.ms(q3))


def busy_note(lang: str) -> str:
    """The one line shown when the runs disagree too much (``Timing.busy``)."""
    return t("timing.busy", lang, pct=round(timing.BUSY_SPREAD * 100))


# ---------------------------------------------------------------------------------------------
# Generation, step by step

STOP_LEVELS = {"eos": "success", "max_steps": "info", "context": "warning"}  # how loudly each stop is said


def stop_note(stp: Stepper, tokens: Sequence[str], lang: str) -> tuple[str, str] | None:
    """Why generation stopped, as (level: success | info | warning, text); None while it runs.
    ``tokens`` are the readable pieces of ``stp.all_ids`` (the last one is the end token)."""
    if stp.stop_reason == "eos":
        text = t("generation.stop_eos", lang, tok=visible(tokens[-1]), id=stp.generated[-1])
    elif stp.stop_reason == "max_steps":
        text = t("generation.stop_max", lang, n=stp.max_steps)
    elif stp.stop_reason == "context":
        text = t("generation.stop_context", lang, n=stp.max_positions)
    else:
        return None
    return STOP_LEVELS[stp.stop_reason], text


def step_metrics(rec: StepRecord, step: int, lang: str) -> list[tuple[str, str, str | None]]:
    """(label, value, note) of one pass: the token it chose (note: its id), its wall time, the cache after
    it. The note is a caption under the value, never a metric's delta: nothing rose or fell."""
    phase = t(f"generation.phase_{rec.phase}", lang)
    return [
        (t("generation.new_token", lang, phase=phase, i=step), visible(rec.token), f"id {rec.token_id}"),
        (t("generation.pass_time", lang, n=rec.n_input), f"{rec.seconds * 1000:.1f} ms", None),
        (t("generation.kv_now", lang), f"{rec.kv_tokens} · {rec.kv_bytes:,} B", None),
    ]


def timing_text(stp: Stepper, lang: str) -> str:
    """The stepper's own passes: TTFT and the median decode pass — which also recorded every head's
    attention, said as such. Before any decode step: 'no decode step yet', never a 0.0 ms mean."""
    ttft = timing.ms(stp.ttft or 0.0)
    rec = t("generation.recorded" if stp.record_attention else "generation.not_recorded", lang)
    if not stp.tpots:
        return t("generation.ttft_no_decode", lang, ttft=ttft, rec=rec)
    return t("generation.ttft_tpot", lang, ttft=ttft, tpot=timing_phrase(timing.of(stp.tpots), lang), rec=rec)


def pure_tpot_text(m: TpotMeasure, stp: Stepper, lang: str) -> str:
    """The one TPOT (``generate.measure_tpot``) of this prompt, and what recording attention added to
    the stepper's own decode passes (compared the right way round; 'no measurable cost' within 5 %)."""
    if m.decode is None:
        return t("generation.pure_no_room", lang, ttft=timing_phrase(m.prefill, lang))
    text = t("generation.pure_tpot", lang, tpot=timing_phrase(m.decode, lang), reps=m.prefill.n, steps=m.n_decode,
             ttft=timing.ms(m.prefill.median))
    own = timing.of(stp.tpots) if stp.tpots else None
    if own is not None and stp.record_attention and not (own.busy or m.busy):  # a busy machine: no verdict
        c = timing.compare(own, m.decode)
        if c.faster == "b":
            text += " " + t("generation.rec_costs", lang, x=f"{c.ratio:.1f}", extra=timing.ms(own.median - m.decode.median))
        elif c.faster == "same":
            text += " " + t("generation.rec_free", lang)
    return text


# ---------------------------------------------------------------------------------------------
# KV cache: with vs without (the dict of core.web.cache.compare_cache)


def compare_verdict(c: CacheComparison, lang: str) -> str:
    """Whether both runs produced the same tokens."""
    return t("kv_cache.same" if c.same else "kv_cache.differ", lang, n=c.n_done)


def compare_stop(c: CacheComparison, end_token: str, lang: str) -> str | None:
    """Why the runs made fewer tokens than asked (the model chose an end token), or None."""
    if c.n_done >= c.n_requested:
        return None
    if c.stop_reason == "eos":
        return t("kv_cache.stopped_eos", lang, k=c.n_done, n=c.n_requested, tok=end_token, id=c.with_ids[-1])
    return t("kv_cache.stopped_context", lang, k=c.n_done, n=c.n_requested)


def compare_table(c: CacheComparison, with_tokens: Sequence[str], without_tokens: Sequence[str], lang: str) -> pd.DataFrame:
    """The tokens of both runs, one row each, and a ✓/✗ row where they agree or not."""
    marks = ["✓" if a == b else "✗" for a, b in zip(c.with_ids, c.without_ids)]
    return pd.DataFrame({t("kv_cache.with", lang): list(with_tokens), t("kv_cache.without", lang): list(without_tokens),
                         "✓": marks}).T


def compare_totals(c: CacheComparison, lang: str) -> str:
    """Both totals (median of the timed runs, with their spread) and the cache's speed-up, phrased the
    right way round: 'N× faster' when the cache won, 'N× slower' when it lost, 'about the same' within 5 %."""
    v = c.verdict
    key = {"a": "kv_cache.cache_faster", "b": "kv_cache.cache_slower", "same": "kv_cache.cache_same"}[v.faster]
    return t(key, lang, k=c.n_done, w=timing_phrase(c.with_total, lang), wo=timing_phrase(c.without_total, lang),
             x=f"{v.ratio:.1f}")


# ---------------------------------------------------------------------------------------------
# KV cache: the calculator and the request shapes (rows of core.gen.kvcalc)


def _columns(df: pd.DataFrame, lang: str) -> pd.DataFrame:
    return df.rename(columns=lambda c: t(f"kv_cache.col_{c}", lang))


def variant_table(rows: Sequence[dict[str, Any]], lang: str) -> pd.DataFrame:
    """``kvcalc.variant_rows`` as shown: translated column names, byte counts with thousands separators
    (as the caption above prints the total) and the ratio to MHA to two decimals (never 1 beside 0.3333)."""
    df = pd.DataFrame([{**r, "bytes_per_token": f"{r['bytes_per_token']:,.0f}", "total_bytes": f"{r['total_bytes']:,.0f}",
                        "vs_mha": f"{r['vs_mha']:.2f}"} for r in rows])
    return _columns(df, lang)


def costs_text(m: TpotMeasure, costs: Costs, model: str, lang: str) -> str:
    """The per-token costs measured here (``generate.measure_costs``: medians of repeated runs), in ms,
    and the KV bytes per token."""
    dec = timing_phrase(m.decode, lang) if m.decode is not None else "—"
    return t("kv_cache.costs", lang, pre=timing_phrase(m.prefill, lang, per=m.n_prompt), dec=dec, n=m.n_prompt,
             kv=costs.kv_bytes_per_token, model=model)


def workload_names(rows: Sequence[dict[str, Any]], lang: str) -> list[str]:
    """The translated name of each request shape of ``kvcalc.simulate``."""
    return [t(f"kv_cache.wl_{r['key']}", lang) for r in rows]


def workload_table(rows: Sequence[dict[str, Any]], lang: str) -> pd.DataFrame:
    """``kvcalc.simulate`` as shown: names and dominant phases translated, bytes made human, rounded."""
    df = pd.DataFrame([{**r, "key": nm, "kv_bytes": human_bytes(r["kv_bytes"]), "weight_bytes": human_bytes(r["weight_bytes"]),
                        "time_dominant": t(f"kv_cache.dom_{r['time_dominant']}", lang),
                        "memory_dominant": t(f"kv_cache.dom_{r['memory_dominant']}", lang)}
                       for r, nm in zip(rows, workload_names(rows, lang))])
    return _columns(df.round(2), lang)


# ---------------------------------------------------------------------------------------------
# Chat template


def default_messages(prompt: str, lang: str) -> list[dict[str, str]]:
    """The chat editor's starting turns; the sidebar prompt is the last user turn."""
    return [
        {"role": "system", "content": t("chat.default_system", lang)},
        {"role": "user", "content": t("chat.default_user", lang)},
        {"role": "assistant", "content": t("chat.default_assistant", lang)},
        {"role": "user", "content": prompt or "…"},
    ]


def end_explain(r: ChatRendering, eos_ids: Collection[int], lang: str) -> str:
    """The end-of-turn token, how often the text holds it, and every id that stops this model."""
    return t("chat.end_explain", lang, tok=r.end_token, id=r.end_token_id, ids=", ".join(map(str, sorted(eos_ids))),
             n=r.n_end_tokens)


def chat_token_table(r: ChatRendering, lang: str) -> pd.DataFrame:
    """Position, id, readable piece and special-token mark of every templated token."""
    return pd.DataFrame({t("ui.position", lang): range(len(r.ids)), "id": r.ids, t("ui.token", lang): r.tokens,
                         t("chat.special", lang): ["✓" if s else "" for s in r.special]})
