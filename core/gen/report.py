"""What the generation, KV-cache and chat pages show besides figures: their tables (DataFrames) and
the sentences built from measured numbers, in the page's language. Pure: pandas and i18n, no
Streamlit, so every number a page prints can be checked without running the app.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import pandas as pd

from core.engine.i18n import t
from core.engine.numbers import human_bytes
from core.gen.chat_template import ChatRendering
from core.gen.generate import Stepper, StepRecord
from core.gen.kvcalc import Costs

# ---------------------------------------------------------------------------------------------
# Generation, step by step

STOP_LEVELS = {"eos": "success", "max_steps": "info", "context": "warning"}  # how loudly each stop is said


def stop_note(stp: Stepper, tokens: Sequence[str], lang: str) -> tuple[str, str] | None:
    """Why generation stopped, as (level: success | info | warning, text); None while it runs.
    ``tokens`` are the readable pieces of ``stp.all_ids`` (the last one is the end token)."""
    if stp.stop_reason == "eos":
        text = t("generation.stop_eos", lang, tok=tokens[-1], id=stp.generated[-1])
    elif stp.stop_reason == "max_steps":
        text = t("generation.stop_max", lang, n=stp.max_steps)
    elif stp.stop_reason == "context":
        text = t("generation.stop_context", lang, n=stp.max_positions)
    else:
        return None
    return STOP_LEVELS[stp.stop_reason], text


def step_metrics(rec: StepRecord, step: int, lang: str) -> list[tuple[str, str, str | None]]:
    """(label, value, delta) of one pass: the token it chose, its wall time, the cache after it."""
    phase = t(f"generation.phase_{rec.phase}", lang)
    return [
        (t("generation.new_token", lang, phase=phase, i=step), repr(rec.token), f"id {rec.token_id}"),
        (t("generation.pass_time", lang, n=rec.n_input), f"{rec.seconds * 1000:.1f} ms", None),
        (t("generation.kv_now", lang), f"{rec.kv_tokens} · {rec.kv_bytes:,} B", None),
    ]


def timing_text(stp: Stepper, lang: str) -> str:
    """TTFT and the mean TPOT over the decode steps, in ms."""
    tp = stp.tpots
    mean = (sum(tp) / len(tp) * 1000) if tp else 0.0
    return t("generation.ttft_tpot", lang, ttft=(stp.ttft or 0.0) * 1000, tpot=mean, n=len(tp))


# ---------------------------------------------------------------------------------------------
# KV cache: with vs without (the dict of core.web.cache.compare_cache)


def compare_verdict(r: dict[str, Any], lang: str) -> str:
    """Whether both runs produced the same tokens."""
    same = r["with_ids"] == r["without_ids"]
    return t("kv_cache.same" if same else "kv_cache.differ", lang, n=len(r["with_ids"]))


def compare_table(r: dict[str, Any], lang: str) -> pd.DataFrame:
    """The tokens of both runs, one row each, and a ✓/✗ row where they agree or not."""
    marks = ["✓" if a == b else "✗" for a, b in zip(r["with_ids"], r["without_ids"])]
    return pd.DataFrame({t("kv_cache.with", lang): r["with_tokens"], t("kv_cache.without", lang): r["without_tokens"],
                         "✓": marks}).T


def compare_totals(r: dict[str, Any], lang: str) -> str:
    """Total time both ways (ms) and how many times longer the run without the cache took."""
    tot_w, tot_wo = sum(r["with_seconds"]), sum(r["without_seconds"])
    return t("kv_cache.totals", lang, w=tot_w * 1000, wo=tot_wo * 1000, x=tot_wo / tot_w if tot_w else 0.0)


# ---------------------------------------------------------------------------------------------
# KV cache: the calculator and the request shapes (rows of core.gen.kvcalc)


def _columns(df: pd.DataFrame, lang: str) -> pd.DataFrame:
    return df.rename(columns=lambda c: t(f"kv_cache.col_{c}", lang))


def variant_table(rows: Sequence[dict[str, Any]], lang: str) -> pd.DataFrame:
    """``kvcalc.variant_rows`` with translated column names."""
    return _columns(pd.DataFrame(rows), lang)


def costs_text(costs: Costs, n_prefill: int, model: str, lang: str) -> str:
    """The per-token costs measured here, in ms, and the KV bytes per token."""
    return t("kv_cache.costs", lang, pre=costs.prefill_s_per_token * 1000, dec=costs.decode_s_per_token * 1000,
             n=n_prefill, kv=costs.kv_bytes_per_token, model=model)


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
