"""What the generation, KV-cache and chat pages show besides figures: their tables (DataFrames) and
the sentences built from measured numbers, in the page's language. Pure: pandas and i18n, no
Streamlit, so every number a page prints can be checked without running the app.
"""

from __future__ import annotations

import statistics
from collections.abc import Collection, Sequence
from typing import Any, NamedTuple

import pandas as pd

from core.common import timing
from core.common.i18n import t
from core.common.numbers import human_bytes, three_significant
from core.common.timing import Timing
from core.engine import budget
from core.engine.tokens import readable_tokens, sequence_labels, visible
from core.engine.types import HeadGeometry, ModelFacts, Tokenizer
from core.gen import diagnose as dg
from core.gen.chat_template import ChatRendering
from core.gen.generate import CacheComparison, Stepper, StepRecord, TpotMeasure
from core.gen.kvcalc import Costs, formula_terms, variant_rows

# ---------------------------------------------------------------------------------------------
# Timings, said the same way everywhere (core.common.timing measures them)


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


def compare_stop_of(c: CacheComparison, tokenizer: Tokenizer, lang: str) -> str | None:
    """``compare_stop`` with the end token the runs made, read by ``tokenizer``."""
    return compare_stop(c, readable_tokens(tokenizer, c.with_ids[-1:])[0] if c.with_ids else "", lang)


def compare_tokens(c: CacheComparison, tokenizer: Tokenizer, lang: str) -> pd.DataFrame:
    """``compare_table`` of both runs' tokens as ``tokenizer`` labels them."""
    return compare_table(c, sequence_labels(tokenizer, c.with_ids), sequence_labels(tokenizer, c.without_ids), lang)


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


class KvTotal(NamedTuple):
    """The calculator's answer for one shape, as the page shows it: the metric, its exact bytes, the formula
    with every factor, the MHA / GQA / MQA table and the figure's bars."""

    label: str
    value: str
    exact: str
    formula: str
    table: pd.DataFrame
    kinds: list[str]
    totals: list[int]


def kv_total(shape: HeadGeometry, tokens: int, bytes_per_value: int, requests: int, lang: str) -> KvTotal:
    """The KV cache of ``requests`` × ``tokens`` in ``shape`` by formula (``kvcalc.formula_terms``), and as
    the attention variants would hold it (``kvcalc.variant_rows``)."""
    terms = formula_terms(shape, tokens, bytes_per_value, requests)
    total = terms["total"]
    rows = variant_rows(shape, tokens, bytes_per_value, requests)
    return KvTotal(t("kv_cache.total", lang, kind=shape.kind), human_bytes(total), f"{total:,} B", t("kv_cache.formula", lang, **terms),
                   variant_table(rows, lang), [r["kind"] for r in rows], [r["total_bytes"] for r in rows])


def current_source(shape: HeadGeometry, lang: str) -> str:
    """Where the model in use's shape comes from: its own loaded config, factor by factor."""
    return t("kv_cache.current_source", lang, L=shape.n_layers, H=shape.n_heads, Hkv=shape.n_kv_heads, dh=shape.dh)


def costs_text(m: TpotMeasure, costs: Costs, model: str, lang: str) -> str:
    """The per-token costs measured here (``generate.measure_costs``: medians of repeated runs), in ms,
    and the KV bytes per token."""
    dec = timing_phrase(m.decode, lang) if m.decode is not None else "—"
    return t("kv_cache.costs", lang, pre=timing_phrase(m.prefill, lang, per=m.n_prompt), dec=dec, n=m.n_prompt,
             kv=costs.kv_bytes_per_token, model=model, page=t("page.generation", lang))


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


# ---------------------------------------------------------------------------------------------
# Diagnose: the symptom table and every sentence under a measurement (the numbers: core.gen.diagnose)


def _tm(tm: Timing | None, lang: str) -> str:
    """A timing with its spread, or — when nothing was timed."""
    return "—" if tm is None else timing_phrase(tm, lang)


def machine_text(m: dict[str, Any], lang: str) -> str:
    """Which machine measured (``diagnose.machine()``): processor, cores, torch's threads."""
    return t("diagnose.machine", lang, cpu=m["processor"], n=m["cpus"], threads=m["threads"])


def symptom_table(symptoms: Sequence[str], lang: str) -> pd.DataFrame:
    """The tutorial's table: one row per symptom, its root cause, how to locate it and the fix."""
    return pd.DataFrame([{t("diagnose.col_symptom", lang): t(f"diagnose.sym_{s}", lang), t("diagnose.col_cause", lang): t(f"diagnose.{s}.cause", lang),
                          t("diagnose.col_check", lang): t(f"diagnose.{s}.check", lang), t("diagnose.col_fix", lang): t(f"diagnose.{s}.fix", lang)}
                         for s in symptoms])


def symptom_card(symptom: str, lang: str) -> str:
    """The chosen symptom's row of that table as one card."""
    return t("diagnose.card", lang, cause=t(f"diagnose.{symptom}.cause", lang), check=t(f"diagnose.{symptom}.check", lang),
             fix=t(f"diagnose.{symptom}.fix", lang))


def _zero_parts(fit: dg.Fit, lang: str) -> str:
    """The caveat when the fit set the linear or the quadratic part to zero (noise or too short a range)."""
    zero = [k for k, v in (("linear", fit.b), ("quadratic", fit.c)) if v == 0]
    if not fit.degenerate:
        return ""
    return t("diagnose.zero_part", lang, part=t(f"diagnose.part_{zero[0] if len(zero) == 1 else 'both'}", lang))


def prefill_note(points: Sequence[dg.PrefillPoint], lang: str) -> str:
    """How many timed runs each point of the prefill curve is (the badge under its figure)."""
    return t("diagnose.reps_note", lang, n=points[0].prefill.n)


def prefill_fit_text(points: Sequence[dg.PrefillPoint], fit: dg.Fit, lang: str) -> str:
    """The fitted curve t(n) = a + b·n + c·n², its three parts at the longest input measured, its stated
    error, and the first token's wait split into tokenising and prefill there."""
    last = points[-1]
    top = last.n_tokens
    parts = fit.parts(top)
    if fit.degenerate:  # said first, and no split: one part at 100 % would be the noise speaking
        return _zero_parts(fit, lang) + " " + t("diagnose.fit_degenerate", lang, a=timing.ms(fit.a), b=three_significant(fit.b * 1e6),
                                                c=three_significant(fit.c * 1e9), err=f"{fit.max_rel_error * 100:.0f}", k=fit.n_points,
                                                n=f"{top:,}", tok=timing.ms(last.tokenise.median), pre=timing.ms(last.prefill.median))
    return t("diagnose.fit_text", lang, a=timing.ms(fit.a), b=three_significant(fit.b * 1e6), c=three_significant(fit.c * 1e9),
             n=f"{top:,}", fixed=timing.ms(parts["fixed"]), lin=timing.ms(parts["linear"]), quad=timing.ms(parts["quadratic"]),
             err=f"{fit.max_rel_error * 100:.0f}", k=fit.n_points, tok=timing.ms(last.tokenise.median),
             pre=timing.ms(last.prefill.median))


def prefill_table(points: Sequence[dg.PrefillPoint], lang: str) -> pd.DataFrame:
    """The measured points: input tokens, then tokenising, prefill and decode-step time with their spread."""
    return pd.DataFrame({t("diagnose.col_tokens", lang): [p.n_tokens for p in points],
                         t("diagnose.col_tokenise", lang): [_tm(p.tokenise, lang) for p in points],
                         t("diagnose.col_prefill", lang): [_tm(p.prefill, lang) for p in points],
                         t("diagnose.col_tpot", lang): [_tm(p.decode, lang) for p in points]})


def medians_note(run: dg.DecodeRun, lang: str) -> str:
    """The badge under a curve of medians without error bars: how many runs, and the prefill's spread."""
    return t("diagnose.reps_note_medians", lang, n=run.prefill.n, pre=_tm(run.prefill, lang))


def decode_text(run: dg.DecodeRun, lang: str) -> str:
    """One request: its input and output lengths, TTFT, TPOT and the time until its last token."""
    return t("diagnose.decode_text", lang, n_in=run.n_prompt, n_out=run.n_decode + 1, ttft=_tm(run.prefill, lang),
             tpot=_tm(run.decode, lang), total=timing.ms(run.total))


def tpot_note(points: Sequence[dg.PrefillPoint], lang: str) -> str:
    """The badge under the TPOT line: how many decode steps each point is (``points``: those timed)."""
    return t("diagnose.tpot_note", lang, n=points[0].decode.n if points[0].decode else 0)


def tpot_text(points: Sequence[dg.PrefillPoint], line: dg.Fit, lang: str) -> str:
    """The TPOT line through the decode medians (``points``: ``diagnose.tpot_points``): its slope per 1,000
    cached tokens, TPOT at both ends, and the exercise's output tokens decoded after the longest prompt."""
    lo, hi = points[0].n_tokens, points[-1].n_tokens
    return t("diagnose.tpot_text", lang, a=timing.ms(line.a), k=three_significant(line.b * 1e6), per1k=timing.ms(line.b * 1000),
             lo=f"{lo:,}", hi=f"{hi:,}", t_lo=timing.ms(float(line.predict(lo))), t_hi=timing.ms(float(line.predict(hi))),
             err=f"{line.max_rel_error * 100:.0f}", n=line.n_points, out=dg.EXERCISE_OUTPUT,
             dec=timing.ms(dg.EXERCISE_OUTPUT * float(line.predict(hi))))


def memory_text(shape: dg.MemoryShape, plan: dg.MemoryPlan, lang: str) -> str:
    """Weights, KV cache and activations at the learner's (context, requests), against the budget."""
    at, g = plan.at, shape.geometry
    return t("diagnose.mem_text", lang, name=shape.name, t=f"{at.context:,}", r=f"{at.requests:,}", w=budget.fmt_gb(at.weights),
             kv=budget.fmt_gb(at.kv), act=budget.fmt_gb(at.activations), total=budget.fmt_gb(at.total),
             budget=budget.fmt_gb(plan.budget), L=g.n_layers, kvh=g.n_kv_heads, dh=g.dh, b=shape.bytes_per_value)


def memory_verdict(plan: dg.MemoryPlan, lang: str) -> str:
    """Whether the learner's point fits, and how many requests would."""
    return t("diagnose.mem_fits" if plan.fits else "diagnose.mem_oom", lang, n=plan.limit)


def real_cache_text(facts: ModelFacts, run: dg.DecodeRun, lang: str) -> str:
    """The bytes the measured request's real cache held against the formula's (``diagnose.real_cache_check``)."""
    formula, ok = dg.real_cache_check(facts, run)
    return t("diagnose.mem_real", lang, t=f"{run.kv_tokens_end:,}", real=f"{run.kv_bytes:,}", formula=f"{formula:,}",
             ok="✓" if ok else "✗", b=facts.value_bytes)


def temperature_text(demo: dg.TemperatureDemo, top: str, top_evidence: str, lang: str) -> str:
    """What the temperatures did to the top candidate, and what the evidence did (``top``, ``top_evidence``:
    the two top candidates as the page shows them)."""
    moved = demo.top_question != demo.top_evidence
    return t("diagnose.temp_text" if moved else "diagnose.temp_same", lang, top=top, top_ev=top_evidence,
             temps=", ".join(f"{T:g}" for T in demo.temperatures))


def exercise_kv_text(facts: ModelFacts, lang: str) -> str:
    """The exercise's KV cache for one request of this model: at both lengths, fp32 and fp16."""
    g = facts.geometry
    return t("diagnose.ex_kv", lang, t=f"{dg.EXERCISE_TO:,}", fp32=human_bytes(g.kv_bytes(dg.EXERCISE_TO, 4)),
             fp16=human_bytes(g.kv_bytes(dg.EXERCISE_TO, 2)), small=human_bytes(g.kv_bytes(dg.EXERCISE_FROM, 4)),
             t0=f"{dg.EXERCISE_FROM:,}", name=facts.name)


def extrapolated_note(ex: dg.Exercise, lang: str) -> str:
    """The badge under the extended curve: measured up to where, extrapolated beyond."""
    return t("diagnose.extrapolated_badge", lang, n=f"{ex.large.measured_up_to:,}")


def exercise_prefill_text(ex: dg.Exercise, lang: str) -> str:
    """The TTFT at both lengths from the prefill curve, each said to be an extrapolation where it is,
    how far past the data, and the attention part's share; a caveat when the fit found no n² part."""
    lo, hi = ex.small, ex.large
    kind = t("diagnose.kind_extrap" if lo.is_extrapolation else "diagnose.kind_interp", lang)
    if ex.fit.degenerate:  # the caveat first; the TTFTs as a rough guide, and no attention share
        first = t("diagnose.no_quad", lang) if ex.fit.c == 0 else _zero_parts(ex.fit, lang)
        return first + " " + t("diagnose.ex_extrap_plain", lang, t0=f"{dg.EXERCISE_FROM:,}", s0=timing.ms(lo.seconds), kind0=kind,
                               t1=f"{dg.EXERCISE_TO:,}", s1=timing.ms(hi.seconds), x=f"{ex.ratio:.1f}", top=f"{hi.measured_up_to:,}",
                               factor=f"{hi.factor:.1f}")
    return (t("diagnose.ex_extrap", lang, t0=f"{dg.EXERCISE_FROM:,}", s0=timing.ms(lo.seconds), kind0=kind, t1=f"{dg.EXERCISE_TO:,}",
              s1=timing.ms(hi.seconds), x=f"{ex.ratio:.1f}", top=f"{hi.measured_up_to:,}", factor=f"{hi.factor:.1f}",
              quad=f"{ex.quadratic_share:.0f}")
            + (" " + t("diagnose.no_quad", lang) if ex.fit.c == 0 else ""))


def exercise_decode_text(ex: dg.Exercise, lang: str) -> str | None:
    """The exercise's output tokens decoded after each input length, beside the TTFT's growth (None
    without a TPOT line)."""
    dec = ex.decode_seconds()
    if dec is None:
        return None
    d0, d1 = dec
    lo, hi = ex.small.seconds, ex.large.seconds
    return t("diagnose.ex_decode", lang, out=dg.EXERCISE_OUTPUT, t0=f"{dg.EXERCISE_FROM:,}", t1=f"{dg.EXERCISE_TO:,}", d0=timing.ms(d0),
             d1=timing.ms(d1), dd=timing.ms(max(0.0, d1 - d0)), top=f"{ex.tpot_up_to:,}", s0=timing.ms(lo), s1=timing.ms(hi),
             ds=timing.ms(max(0.0, hi - lo)))


def assumptions_text(ex: dg.Exercise, facts: ModelFacts, lang: str) -> str:
    """Every assumption the extrapolation makes, as a list under its heading."""
    ctx = format(facts.max_positions or 0, ",")
    return t("diagnose.assume_head", lang) + "\n" + "\n".join(
        f"- {t(f'diagnose.assume_{a}', lang, ctx=ctx, name=facts.name)}" for a in ex.large.assumptions)


def stream_text(run: dg.DecodeRun, lang: str) -> str:
    """The request's timeline in words: first token, last token, and the first token's share of the wait."""
    return t("diagnose.stream_text", lang, first=timing.ms(run.first_token), total=timing.ms(run.total), n=run.n_decode + 1,
             share=f"{100 * run.first_token / max(run.total, 1e-12):.0f}")


# ---------------------------------------------------------------------------------------------
# The serving lab (core.gen.serving)


def _named(df: pd.DataFrame, lang: str) -> pd.DataFrame:
    return df.rename(columns=lambda c: t(c, lang))


def _s(x: float | None, digits: int = 3) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def padded_table(batches: Sequence[Any], lang: str) -> pd.DataFrame:
    """Per padding side and prompt: its real tokens, and how far the batched logits at its real positions
    lie from the prompt run alone — as the batch ran, without the padding mask, without the shifted positions."""
    rows = []
    for pb in batches:
        for b in range(len(pb.prompts)):
            alone = pb.alone[b].astype("float64")
            rows.append({"serving.col_side": t(f"serving.side_{pb.side}", lang), "serving.col_prompt": b + 1,
                         "serving.col_tokens": pb.lengths[b],
                         "serving.col_err": float(abs(pb.logits[b] - alone).max()),
                         "serving.col_err_nomask": float(abs(pb.logits_without_mask[b] - alone).max()),
                         "serving.col_err_nopos": float(abs(pb.logits_without_positions[b] - alone).max()),
                         "serving.col_next_nomask": int((pb.logits_without_mask[b].argmax(-1) != alone.argmax(-1)).sum())})
    return _named(pd.DataFrame(rows), lang)


def positions_table(pb: Any, lang: str) -> pd.DataFrame:
    """The batch as the model received it: per prompt, each slot's token (or pad), mask bit and position id."""
    cols = {}
    for b in range(len(pb.prompts)):
        cols[t("serving.col_prompt", lang) + f" {b + 1}"] = [
            f"{int(pb.position_ids[b, i])}" if pb.mask_2d[b, i] else f"pad ({int(pb.position_ids[b, i])})" for i in range(pb.mask_2d.shape[1])]
    return pd.DataFrame(cols).T


def requests_table(res: Any, lang: str) -> pd.DataFrame:
    """Per request, from the engine's own clock: queueing, TTFT, TPOT, end to end, the prompt tokens it
    computed and reused, and whether its tokens equal the same request generated alone (✓)."""
    rows = [{"serving.col_id": r.id, "serving.col_prompt_tokens": r.prompt_tokens, "serving.col_reused": r.reused_prompt_tokens,
             "serving.col_computed": r.computed_prompt_tokens, "serving.col_new": len(r.token_ids),
             "serving.col_queue": _s(r.queue_s), "serving.col_ttft": _s(r.ttft_s),
             "serving.col_tpot": _s(None if r.tpot_s is None else r.tpot_s * 1000, 1), "serving.col_e2e": _s(r.e2e_s),
             "serving.col_preempt": r.preemptions, "serving.col_solo": {True: "✓", False: "✗", None: "—"}[r.equals_solo],
             "serving.col_text": visible(r.text) if r.outcome == "finished" else t(f"serving.outcome_{r.outcome}", lang)}
            for r in res.requests]
    return _named(pd.DataFrame(rows), lang)


def throughput_text(res: Any, lang: str) -> str:
    """Tokens per second through the engine against the same requests one after another with
    ``generate`` (measured in the same run), and whether every request matched itself alone."""
    n_ok = sum(bool(r.equals_solo) for r in res.requests)
    ratio = (res.tokens_per_s / res.sequential_tokens_per_s) if res.sequential_tokens_per_s else None
    return t("serving.throughput", lang, cb=f"{res.tokens_per_s:,.1f}", seq=_s(res.sequential_tokens_per_s, 1),
             ratio="—" if ratio is None else f"{ratio:.2f}", ok=n_ok, n=len(res.requests), steps=len(res.steps))


def sharing_table(summary: dict[str, Any], lang: str) -> pd.DataFrame:
    rows = [{"serving.col_id": r["id"], "serving.col_ttft_on": _s(r["ttft_shared_s"]), "serving.col_ttft_off": _s(r["ttft_unshared_s"]),
             "serving.col_reused": r["reused_prompt_tokens"], "serving.col_computed_on": r["computed_shared"],
             "serving.col_computed_off": r["computed_unshared"]} for r in summary["requests"]]
    return _named(pd.DataFrame(rows), lang)


def sharing_text(on: Sequence[Any], off: Sequence[Any], lang: str) -> str:
    """The TTFT of the requests after the first, with sharing on and off, over repeated runs of each:
    a saving is called one only when every run with sharing beat every run without it."""
    def ttfts(res: Any) -> list[float]:
        first = min(res.requests, key=lambda r: (r.arrival_s, r.id))
        return [r.ttft_s for r in res.requests if r is not first and r.ttft_s is not None]
    med_on = [statistics.median(ttfts(r)) for r in on if ttfts(r)]
    med_off = [statistics.median(ttfts(r)) for r in off if ttfts(r)]
    if not med_on or not med_off:
        return t("serving.sharing_none", lang)
    key = "serving.sharing_saves" if max(med_on) < min(med_off) else "serving.sharing_noise"
    return t(key, lang, on=f"{statistics.median(med_on):.3f}", off=f"{statistics.median(med_off):.3f}",
             lo_on=f"{min(med_on):.3f}", hi_on=f"{max(med_on):.3f}", lo_off=f"{min(med_off):.3f}", hi_off=f"{max(med_off):.3f}",
             runs=len(med_on))


def pool_text(res: Any, lang: str) -> str:
    """The pool by the KV page's rule beside the bytes the engine allocated, and what it did when short."""
    m = res.memory
    pre = sum(r.preemptions for r in res.requests)
    refused = [r.id for r in res.requests if r.outcome != "finished"]
    waited = max((r.queue_s or 0.0) for r in res.requests)
    return t("serving.pool", lang, blocks=res.settings["num_blocks"], page=res.settings["page_size"],
             per_block=human_bytes(m["bytes_per_block"]), formula=human_bytes(m["pool_bytes_formula"]),
             measured=human_bytes(m["pool_bytes_data"]), needed=human_bytes(m["needed_bytes"]), peak=m["peak_blocks_used"],
             preempted=pre, refused=", ".join(refused) or "—", waited=f"{waited:.2f}", layers=m["layers"], kv=m["kv_heads"],
             dh=m["head_dim"], bpv=m["bytes_per_value"])
