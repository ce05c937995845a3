"""KV-cache memory, by formula, for any model shape; and the tutorials' three request shapes.

Every layer keeps, for every position already seen, one Key and one Value vector per KV head:

    bytes = 2 (K and V) × layers × KV heads × head_dim × bytes per value × tokens × concurrent requests

Query heads do not appear: in GQA several query heads read one KV head, which is exactly why GQA and
MQA shrink the cache. ``simulate`` turns per-token costs *measured on the current model* into the
time split (TTFT vs total decode) and memory split (weights vs KV cache) of a request shape.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

PRESETS_PATH = Path(__file__).resolve().parent.parent / "assets" / "model_presets.json"

# bytes per stored value
BYTES_PER_VALUE: dict[str, int] = {"fp32": 4, "fp16 / bf16": 2, "int8": 1}


class ConfigError(ValueError):
    """A pasted config cannot give a KV shape; the message says which field is missing."""


@dataclass(frozen=True)
class KVShape:
    """The four numbers that size a KV cache (plus provenance)."""

    name: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    hidden_size: int | None = None
    max_positions: int | None = None
    source: str = ""

    def __post_init__(self) -> None:
        for f in ("n_layers", "n_heads", "n_kv_heads", "head_dim"):
            if int(getattr(self, f)) <= 0:
                raise ConfigError(f"{f} must be a positive integer (got {getattr(self, f)})")
        if self.n_heads % self.n_kv_heads:
            raise ConfigError(f"query heads ({self.n_heads}) must be a multiple of KV heads ({self.n_kv_heads})")

    @property
    def attention_kind(self) -> str:
        if self.n_kv_heads == self.n_heads:
            return "MHA"
        return "MQA" if self.n_kv_heads == 1 else "GQA"

    @property
    def group_size(self) -> int:
        return self.n_heads // self.n_kv_heads

    def bytes_per_token(self, bytes_per_value: int = 2) -> int:
        """2 × layers × KV heads × head_dim × bytes per value: one position, every layer."""
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * int(bytes_per_value)

    def with_kv_heads(self, n_kv: int) -> "KVShape":
        return replace(self, n_kv_heads=int(n_kv))


def kv_cache_bytes(shape: KVShape, tokens: int, bytes_per_value: int = 2, requests: int = 1) -> int:
    """Bytes of K and V for ``tokens`` positions in each of ``requests`` concurrent requests."""
    if tokens < 0 or requests < 0:
        raise ValueError("tokens and requests must be ≥ 0")
    return shape.bytes_per_token(bytes_per_value) * int(tokens) * int(requests)


def attention_variants(shape: KVShape) -> list[tuple[str, KVShape]]:
    """The same model as MHA (KV heads = query heads), as published, and as MQA (1 KV head)."""
    out = [("MHA", shape.with_kv_heads(shape.n_heads))]
    if 1 < shape.n_kv_heads < shape.n_heads:
        out.append((f"GQA ({shape.n_kv_heads})", shape))
    out.append(("MQA", shape.with_kv_heads(1)))
    return out


def variant_rows(shape: KVShape, tokens: int, bytes_per_value: int, requests: int = 1) -> list[dict[str, Any]]:
    """One row per attention variant: KV heads, bytes per token, total bytes, ratio to MHA."""
    rows = []
    mha = kv_cache_bytes(shape.with_kv_heads(shape.n_heads), tokens, bytes_per_value, requests)
    for kind, s in attention_variants(shape):
        total = kv_cache_bytes(s, tokens, bytes_per_value, requests)
        rows.append({"kind": kind, "kv_heads": s.n_kv_heads, "group": s.group_size,
                     "bytes_per_token": s.bytes_per_token(bytes_per_value), "total_bytes": total,
                     "vs_mha": total / mha if mha else 0.0})
    return rows


def _get(cfg: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    return None


def from_config(cfg: dict[str, Any] | str, name: str | None = None) -> KVShape:
    """A KVShape from a config.json (dict or its text), across common naming schemes."""
    if isinstance(cfg, str):
        try:
            cfg = json.loads(cfg)
        except ValueError as e:
            raise ConfigError(f"not valid JSON ({e})") from None
    if not isinstance(cfg, dict):
        raise ConfigError("config.json must be a JSON object")
    if isinstance(cfg.get("text_config"), dict):  # multimodal wrappers keep the LM's shape here
        cfg = {**cfg, **cfg["text_config"]}
    layers = _get(cfg, "num_hidden_layers", "n_layer", "num_layers", "n_layers")
    heads = _get(cfg, "num_attention_heads", "n_head", "num_heads", "n_heads")
    hidden = _get(cfg, "hidden_size", "n_embd", "d_model", "dim")
    if layers is None or heads is None:
        raise ConfigError("the config has no number of layers (num_hidden_layers) or attention heads (num_attention_heads)")
    kv = _get(cfg, "num_key_value_heads", "num_kv_heads", "n_kv_heads", "multi_query_group_num")
    if kv is None:
        kv = 1 if cfg.get("multi_query") else heads  # no field: classic multi-head attention
    head_dim = _get(cfg, "head_dim", "kv_channels")
    if head_dim is None:
        if hidden is None:
            raise ConfigError("the config has neither head_dim nor hidden_size")
        head_dim = int(hidden) // int(heads)
    try:
        return KVShape(
            name=name or str(cfg.get("_name_or_path") or cfg.get("model_type") or "config.json"),
            n_layers=int(layers), n_heads=int(heads), n_kv_heads=int(kv), head_dim=int(head_dim),
            hidden_size=int(hidden) if hidden is not None else None,
            max_positions=_get(cfg, "max_position_embeddings", "n_positions", "seq_length"),
            source="pasted config.json",
        )
    except (TypeError, ValueError) as e:
        raise ConfigError(str(e)) from None


def load_presets(path: Path | None = None) -> list[KVShape]:
    """The published shapes in assets/model_presets.json."""
    data = json.loads((path or PRESETS_PATH).read_text(encoding="utf-8"))
    out = []
    for p in data["presets"]:
        s = from_config(p, name=p["name"])
        out.append(replace(s, source=p.get("source", "")))
    return out


def human_bytes(n: float) -> str:
    """Binary units, three significant figures: 131072 → '128 KiB'."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" or n >= 100 else f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} TiB"  # pragma: no cover


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
