"""Reading a model's config, written once: the alias table (GPT-2's ``n_layer`` is Llama's
``num_hidden_layers`` …), JSON parsing with a reason for every refusal, and the attention geometry
a config implies. Works on a ``config.json`` dict and on a transformers config object alike.
"""

from __future__ import annotations

import json
from typing import Any

from core.engine.types import ConfigError, HeadGeometry

# canonical name (Llama's) → every spelling seen in HF config files, in order of preference
ALIASES: dict[str, tuple[str, ...]] = {
    "hidden_size": ("hidden_size", "n_embd", "d_model", "dim"),
    "num_hidden_layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "num_attention_heads": ("num_attention_heads", "n_head", "num_heads", "n_heads"),
    "num_key_value_heads": ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "multi_query_group_num"),
    "head_dim": ("head_dim", "kv_channels"),
    "intermediate_size": ("intermediate_size", "n_inner", "ffn_dim"),
    "max_position_embeddings": ("max_position_embeddings", "n_positions", "seq_length"),
    "hidden_act": ("hidden_act", "activation_function"),
}


def get(cfg: Any, key: str, default: Any = None) -> Any:
    """The first non-null value of ``key`` under any of its spellings (dict or config object)."""
    for k in ALIASES.get(key, (key,)):
        v = cfg.get(k) if isinstance(cfg, dict) else getattr(cfg, k, None)
        if v is not None:
            return v
    return default


def pos_int(cfg: Any, key: str, default: Any = None) -> int:
    """A positive whole number, or ConfigError('missing' | 'bad_value') naming the field."""
    v = get(cfg, key, default)
    if v is None:
        raise ConfigError("missing", key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or int(v) != v or v <= 0:
        raise ConfigError("bad_value", f"{key} = {v!r}")
    return int(v)


def parse(text: str | dict[str, Any]) -> dict[str, Any]:
    """JSON text (or an already parsed dict) → dict; ConfigError('json' | 'not_object') otherwise.
    A multimodal wrapper's ``text_config`` (where the language model's shape lives) is merged in."""
    if isinstance(text, str):
        try:
            cfg = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError("json", f"line {e.lineno}, column {e.colno}: {e.msg}") from None
    else:
        cfg = text
    if not isinstance(cfg, dict):
        raise ConfigError("not_object", type(cfg).__name__)
    if isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg, **cfg["text_config"]}
    return cfg


def rope(cfg: Any) -> tuple[float | None, str | None]:
    """(θ, scaling type) from ``rope_parameters`` (transformers 5) or the older flat fields."""
    as_dict = cfg if isinstance(cfg, dict) else {k: getattr(cfg, k, None) for k in ("rope_parameters", "rope_scaling", "rope_theta")}
    rp = as_dict.get("rope_parameters") or {}
    scaling = as_dict.get("rope_scaling") or {}
    theta = rp.get("rope_theta", as_dict.get("rope_theta")) if isinstance(rp, dict) else as_dict.get("rope_theta")
    kind = (rp.get("rope_type") if isinstance(rp, dict) else None) or scaling.get("rope_type") or scaling.get("type")
    return (float(theta) if theta is not None else None), kind


def geometry(cfg: Any, name: str | None = None, source: str = "") -> HeadGeometry:
    """The attention geometry a config implies (layers, query/KV heads, head_dim)."""
    cfg = parse(cfg) if isinstance(cfg, (str, dict)) else cfg
    layers = pos_int(cfg, "num_hidden_layers")
    heads = pos_int(cfg, "num_attention_heads")
    multi_query = cfg.get("multi_query") if isinstance(cfg, dict) else getattr(cfg, "multi_query", None)
    kv = pos_int(cfg, "num_key_value_heads", 1 if multi_query else heads)  # no field: classic MHA
    hidden = get(cfg, "hidden_size")
    if get(cfg, "head_dim") is None and hidden is None:
        raise ConfigError("missing", "head_dim or hidden_size")
    d = pos_int(cfg, "hidden_size") if hidden is not None else None
    head_dim = pos_int(cfg, "head_dim", (d or 0) // heads or None)
    max_pos = get(cfg, "max_position_embeddings")
    label = name or str((cfg.get("_name_or_path") or cfg.get("model_type")) if isinstance(cfg, dict) else getattr(cfg, "model_type", "")) or "config.json"
    return HeadGeometry(label, layers, heads, kv, head_dim, d, int(max_pos) if isinstance(max_pos, (int, float)) else None, source)
