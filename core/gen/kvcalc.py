"""KV-cache memory, by formula, for any model shape; and the tutorials' three request shapes.

Every layer keeps, for every position already seen, one Key and one Value vector per KV head:

    bytes = 2 (K and V) × layers × KV heads × head_dim × bytes per value × tokens × concurrent requests

Query heads do not appear: in GQA several query heads read one KV head, which is exactly why GQA and
MQA shrink the cache. ``simulate`` turns per-token costs *measured on the current model* into the
time split (TTFT vs total decode) and memory split (weights vs KV cache) of a request shape.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from core.common.paths import asset
from core.engine import config as cfgread
from core.engine.types import HeadGeometry, ModelFacts

PRESETS_PATH = asset("model_presets.json")

# bytes per stored value
BYTES_PER_VALUE: dict[str, int] = {"fp32": 4, "fp16 / bf16": 2, "int8": 1}


def attention_variants(shape: HeadGeometry) -> list[tuple[str, HeadGeometry]]:
    """The same model as MHA (KV heads = query heads), as published, and as MQA (1 KV head)."""
    out = [("MHA", shape.with_kv_heads(shape.n_heads))]
    if 1 < shape.n_kv_heads < shape.n_heads:
        out.append((f"GQA ({shape.n_kv_heads})", shape))
    out.append(("MQA", shape.with_kv_heads(1)))
    return out


INT64_MAX = 2**63 - 1


def table_number(n: int) -> int | float:
    """``n`` as a table or a figure can hold it: an int while it fits 64 bits, a float beyond (a
    10⁷-token context for 10⁵ requests of a large model is more bytes than an int64 counts)."""
    return n if -INT64_MAX <= n <= INT64_MAX else float(n)


def variant_rows(shape: HeadGeometry, tokens: int, bytes_per_value: int, requests: int = 1) -> list[dict[str, Any]]:
    """One row per attention variant: KV heads, bytes per token, total bytes, ratio to MHA."""
    rows = []
    mha = shape.with_kv_heads(shape.n_heads).kv_bytes(tokens, bytes_per_value, requests)
    for kind, s in attention_variants(shape):
        total = s.kv_bytes(tokens, bytes_per_value, requests)
        rows.append({"kind": kind, "kv_heads": s.n_kv_heads, "group": s.group_size,
                     "bytes_per_token": table_number(s.kv_bytes_per_token(bytes_per_value)), "total_bytes": table_number(total),
                     "vs_mha": total / mha if mha else 0.0})
    if any(isinstance(r["total_bytes"], float) for r in rows):  # one column, one type
        for r in rows:
            r["total_bytes"] = float(r["total_bytes"])
    return rows


def formula_terms(shape: HeadGeometry, tokens: int, bytes_per_value: int, requests: int = 1) -> dict[str, int]:
    """Every factor of the formula above and its product, named as the pages' formula captions quote them."""
    return {"L": shape.n_layers, "kv": shape.n_kv_heads, "dh": shape.dh, "b": bytes_per_value, "t": tokens, "r": requests,
            "total": shape.kv_bytes(tokens, bytes_per_value, requests)}


def from_config(cfg: dict[str, Any] | str, name: str | None = None) -> HeadGeometry:
    """The KV shape of a pasted config.json (dict or its text), across common naming schemes; ConfigError
    (from ``core.engine.config``, the one validation module) for anything impossible in it."""
    return cfgread.geometry(cfg, name, source="pasted config.json")


def current_shape(facts: ModelFacts) -> HeadGeometry:
    """The model in use as the calculator's shape: its own layers, query and KV heads, head_dim and
    positions, read off its loaded config (``ModelFacts``), so the cache is sized for what is loaded."""
    return replace(facts.geometry, source=f"{facts.name} config ({facts.model_type})")


def shape_choices(facts: ModelFacts, current: str) -> dict[str, HeadGeometry]:
    """The calculator's shapes by the name its choice list shows: the model in use first (named ``current``),
    then every published preset."""
    return {current: current_shape(facts), **{p.name: p for p in load_presets()}}


def load_presets(path: Path | None = None) -> list[HeadGeometry]:
    """The published shapes in assets/model_presets.json."""
    data = json.loads((path or PRESETS_PATH).read_text(encoding="utf-8"))
    return [replace(from_config(p, name=p["name"]), source=p.get("source", "")) for p in data["presets"]]


def preset_text(lang: str, path: Path | None = None) -> dict[str, tuple[str, str]]:
    """Each preset's name as the page shows it in ``lang`` and its source sentence: ``name_<lang>`` /
    ``source_<lang>`` where the file gives one, else the name and source as written."""
    data = json.loads((path or PRESETS_PATH).read_text(encoding="utf-8"))
    return {p["name"]: (p.get(f"name_{lang}", p["name"]), p.get(f"source_{lang}", p.get("source", ""))) for p in data["presets"]}


# ---------------------------------------------------------------------------------------------
# The tutorials' three request shapes


@dataclass(frozen=True)
class Workload:
    key: str  # i18n key suffix: long_in | long_out | concurrent
    prompt_tokens: int
    output_tokens: int
    concurrency: int = 1


SEED_WORKLOADS: tuple[Workload, ...] = (
    Workload("long_in", prompt_tokens=8000, output_tokens=100, concurrency=1),
    Workload("long_out", prompt_tokens=100, output_tokens=2000, concurrency=1),
    Workload("concurrent", prompt_tokens=8000, output_tokens=100, concurrency=64),
)


@dataclass(frozen=True)
class Costs:
    """Per-token costs measured on the current model (seconds) and its memory facts (bytes)."""

    prefill_s_per_token: float
    decode_s_per_token: float
    kv_bytes_per_token: int
    weight_bytes: int

    @classmethod
    def of_model(cls, facts: ModelFacts, prefill_s_per_token: float, decode_s_per_token: float) -> Costs:
        """Measured times per token, with the model's KV bytes per token and weight bytes in its own dtype."""
        return cls(prefill_s_per_token, decode_s_per_token, facts.kv_bytes_per_token(), facts.n_params * facts.value_bytes)


def simulate(workloads: Sequence[Workload], costs: Costs) -> list[dict[str, Any]]:
    """Linear model of each request shape from the measured per-token costs.

    TTFT ≈ prompt × prefill cost per token; decode ≈ output × TPOT (each request as if it had the
    machine alone — batching changes throughput, not this split); peak KV = concurrency ×
    (prompt + output) × KV bytes per token, next to the weights (held once, shared).
    """
    rows = []
    for w in workloads:
        ttft = w.prompt_tokens * costs.prefill_s_per_token
        decode = w.output_tokens * costs.decode_s_per_token
        kv = w.concurrency * (w.prompt_tokens + w.output_tokens) * costs.kv_bytes_per_token
        rows.append({
            "key": w.key,
            "prompt_tokens": w.prompt_tokens,
            "output_tokens": w.output_tokens,
            "concurrency": w.concurrency,
            "ttft_s": ttft,
            "decode_s": decode,
            "total_s": ttft + decode,
            "kv_bytes": kv,
            "weight_bytes": costs.weight_bytes,
            "time_dominant": "prefill" if ttft >= decode else "decode",
            "memory_dominant": "kv" if kv >= costs.weight_bytes else "weights",
        })
    return rows


def workload_rows(facts: ModelFacts, prefill_s_per_token: float, decode_s_per_token: float | None,
                  workloads: Sequence[Workload] = SEED_WORKLOADS) -> tuple[Costs, list[dict[str, Any]]]:
    """The model's costs (the per-token times measured on it; no decode measured: 0) and ``simulate``'s rows."""
    costs = Costs.of_model(facts, prefill_s_per_token, decode_s_per_token or 0.0)
    return costs, simulate(workloads, costs)
