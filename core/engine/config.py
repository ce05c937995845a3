"""Reading a model's config, written once: the alias table (GPT-2's ``n_layer`` is Llama's
``num_hidden_layers`` …), JSON parsing with a reason for every refusal, the validation every reader
shares, and the attention geometry a config implies. Works on a ``config.json`` dict and on a
transformers config object alike.

Every value is validated where it enters, here, for every reader (the loader, the anatomy page, the
KV calculator, the memory budget): ``parse`` refuses text that is not one JSON object, or one nested
absurdly deep, and runs ``check``, which refuses every field the app reads whose type or size is
impossible. A count or a size must be a whole number (``32.7``, ``true``, ``"32"`` are refused, never
truncated), at least 1, finite and at most ``LIMITS``; θ must be a finite positive number; the rope
settings must be objects; names must be text. Each refusal is a ``ConfigError(code, detail)``: the
code picks a sentence in the user's language (``anatomy.err_<code>``), the detail says
``field = value`` as the JSON spelled it.
"""

from __future__ import annotations

import json
import math
from typing import Any

from core.common import digits
from core.engine.types import ConfigError, HeadGeometry

# canonical name (Llama's) → every spelling seen in HF config files, in order of preference
ALIASES: dict[str, tuple[str, ...]] = {
    "hidden_size": ("hidden_size", "n_embd", "d_model", "dim"),
    "num_hidden_layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "num_attention_heads": ("num_attention_heads", "n_head", "num_heads", "n_heads", "attention_heads"),
    "num_key_value_heads": ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "multi_query_group_num"),
    "head_dim": ("head_dim", "kv_channels"),
    "intermediate_size": ("intermediate_size", "n_inner", "ffn_dim"),
    "max_position_embeddings": ("max_position_embeddings", "n_positions", "seq_length"),
    "hidden_act": ("hidden_act", "activation_function"),
}

# The largest value each whole-number field may take: far above any real model (the widest has a
# hidden size near 3·10⁴, the deepest ~10² layers, the longest context ~10⁷ positions), far below
# what would make the pages' arithmetic meaningless.
MAX_DIM = 10**7
LIMITS: dict[str, int] = {
    "vocab_size": MAX_DIM,
    "hidden_size": MAX_DIM,
    "intermediate_size": MAX_DIM,
    "head_dim": MAX_DIM,
    "num_hidden_layers": 10**6,
    "num_attention_heads": 10**6,
    "num_key_value_heads": 10**6,
    "max_position_embeddings": 10**9,
    "sliding_window": 10**9,
    "num_local_experts": 10**6,
    "num_experts": 10**6,
}
# 0 means "none": no experts (a dense model); no window (Qwen2-MoE's default config says sliding_window=0)
OPTIONAL_ZERO = frozenset({"num_local_experts", "num_experts", "sliding_window"})
# Products of fields, capped likewise: the values one position keeps in a multi-head KV cache, over all
# layers (GPT-3: 96 × 96 × 128 ≈ 1.2·10⁶; the cap is 10⁵ times that, ~0.8 TB per token in fp32).
MAX_CACHE_WIDTH = 10**11
# … and the weights of the blocks, layers × hidden × (attention width + MLP width): Llama-3.1-405B has
# ~10¹¹; 10¹⁵ is a model no machine holds.
MAX_WEIGHTS = 10**15
MAX_ROPE_THETA = 1e12
MAX_DEPTH = 32  # a real config.json is nested 3 or 4 levels deep
MAX_CHARS = 2_000_000  # a real config.json is a few kB (a few hundred kB with a big label map)
TEXT_FIELDS = ("model_type", "hidden_act", "norm_placement", "_name_or_path")
DICT_FIELDS = ("rope_scaling", "rope_parameters", "text_config")
BOOL_FIELDS = ("tie_word_embeddings", "use_sliding_window", "attention_bias", "mlp_bias", "mlp_gated", "multi_query",
               "is_encoder_decoder")
# Every code a ConfigError raised here may carry; each has its sentence, anatomy.err_<code>, in both languages.
CODES = ("json", "too_long", "too_deep", "not_object", "missing", "bad_value", "not_integer", "not_finite", "not_positive",
         "too_big", "not_number", "not_text", "not_list", "not_dict", "not_bool", "not_multiple")


def show(value: Any, limit: int = 48) -> str:
    """A value as the JSON spelled it (``Infinity``, ``"abc"``, ``true``, ``1e+24``), cut to ``limit``
    characters. A backtick becomes ˋ, so the messages can quote it inside a code span whatever it holds."""
    try:
        shown = json.dumps(value, ensure_ascii=False, default=lambda o: type(o).__name__)
    except (TypeError, ValueError, RecursionError):
        shown = type(value).__name__
    shown = shown.replace("`", "ˋ")
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def _refuse(code: str, key: str, value: Any) -> ConfigError:
    return ConfigError(code, f"{key} = {show(value)}")


def get(cfg: Any, key: str, default: Any = None) -> Any:
    """The first non-null value of ``key`` under any of its spellings (dict or config object)."""
    for k in ALIASES.get(key, (key,)):
        v = cfg.get(k) if isinstance(cfg, dict) else getattr(cfg, k, None)
        if v is not None:
            return v
    return default


# ---------------------------------------------------------------------------------------------
# one value


def whole(value: Any, key: str, limit: int | None = None) -> int:
    """``value`` as a count or a size: a whole number ≥ 1 and ≤ ``limit`` (``LIMITS[key]`` by default).
    A float is taken only when it is whole (``4096.0``); text, booleans, fractions, ±Infinity and NaN
    are refused, never truncated."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _refuse("not_integer", key, value)
    if isinstance(value, float) and not math.isfinite(value):
        raise _refuse("not_finite", key, value)
    n = digits.whole(value, text=False)  # the one whole-number check
    if n is None:
        raise _refuse("not_integer", key, value)
    if n <= 0:
        raise _refuse("not_positive", key, value)
    top = LIMITS.get(key, MAX_DIM) if limit is None else limit
    if n > top:
        raise ConfigError("too_big", f"{key} = {show(value)} > {top:,}")
    return n


def positive_number(value: Any, key: str, limit: float) -> float:
    """A finite number > 0 and ≤ ``limit`` (θ), as a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _refuse("not_number", key, value)
    if isinstance(value, float) and not math.isfinite(value):
        raise _refuse("not_finite", key, value)
    if value <= 0:
        raise _refuse("not_positive", key, value)
    if value > limit:
        raise ConfigError("too_big", f"{key} = {show(value)} > {limit:g}")
    return float(value)


def text(value: Any, key: str) -> str | None:
    """A name (model_type, an activation …): text or absent."""
    if value is not None and not isinstance(value, str):
        raise _refuse("not_text", key, value)
    return value


def mapping(value: Any, key: str) -> dict[str, Any]:
    """A JSON object (rope_scaling …), or {} when absent."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _refuse("not_dict", key, value)
    return value


def flag(value: Any, key: str) -> bool | None:
    """true / false, or None when absent."""
    if value is not None and not isinstance(value, bool):
        raise _refuse("not_bool", key, value)
    return value


# ---------------------------------------------------------------------------------------------
# one field of a config


def pos_int(cfg: Any, key: str, default: Any = None) -> int:
    """A positive whole number (see ``whole``), or ConfigError('missing') naming the field."""
    v = get(cfg, key, default)
    if v is None:
        raise ConfigError("missing", key)
    return whole(v, key)


def opt_int(cfg: Any, key: str) -> int | None:
    """A whole-number field that may be absent (None); 0 counts as absent where it means "none"."""
    v = get(cfg, key)
    if v is None or (key in OPTIONAL_ZERO and v == 0 and not isinstance(v, bool)):
        return None
    return whole(v, key)


def n_experts(cfg: Any) -> int | None:
    """The experts of a mixture-of-experts MLP (None for a dense model)."""
    return opt_int(cfg, "num_local_experts") or opt_int(cfg, "num_experts")


def _field(cfg: Any, key: str) -> Any:
    return cfg.get(key) if isinstance(cfg, dict) else getattr(cfg, key, None)


def rope(cfg: Any) -> tuple[float | None, str | None]:
    """(θ, scaling type) from ``rope_parameters`` (transformers 5; per layer type, the full-attention
    one) or the older flat fields; ConfigError when either is impossible."""
    rp = mapping(_field(cfg, "rope_parameters"), "rope_parameters")
    scaling = mapping(_field(cfg, "rope_scaling"), "rope_scaling")
    if rp and "rope_theta" not in rp and "rope_type" not in rp:  # {"full_attention": {...}, "sliding_attention": {...}}
        inner = rp.get("full_attention", next((v for v in rp.values() if isinstance(v, dict)), None))
        rp = mapping(inner, "rope_parameters.full_attention")
    theta = rp.get("rope_theta")
    theta = _field(cfg, "rope_theta") if theta is None else theta
    kind = text(rp.get("rope_type"), "rope_type") or text(scaling.get("rope_type"), "rope_scaling.rope_type") \
        or text(scaling.get("type"), "rope_scaling.type")
    return (None if theta is None else positive_number(theta, "rope_theta", MAX_ROPE_THETA)), kind


def head_size(cfg: Any, d: int | None, heads: int) -> int:
    """``head_dim`` as given, else hidden_size // heads (refused when that is 0: more heads than widths)."""
    if get(cfg, "head_dim") is not None or d is None:
        return pos_int(cfg, "head_dim")
    if d // heads < 1:
        raise ConfigError("not_positive", f"head_dim = hidden_size // num_attention_heads = {d} // {heads} = 0")
    return d // heads


def check_heads(heads: int, kv: int, head_dim: int, layers: int | None = None) -> None:
    """Query heads a whole multiple of KV heads, the projections no wider than ``MAX_DIM``, and (given
    the layers) one position's multi-head cache no wider than ``MAX_CACHE_WIDTH``."""
    if heads % kv:
        raise ConfigError("not_multiple", f"num_attention_heads = {heads}, num_key_value_heads = {kv}")
    if heads * head_dim > MAX_DIM:
        raise ConfigError("too_big", f"num_attention_heads × head_dim = {heads:,} × {head_dim:,} > {MAX_DIM:,}")
    if layers is not None and layers * heads * head_dim > MAX_CACHE_WIDTH:
        raise ConfigError("too_big", f"num_hidden_layers × num_attention_heads × head_dim = {layers:,} × {heads:,} × {head_dim:,} "
                                     f"> {MAX_CACHE_WIDTH:,}")


# ---------------------------------------------------------------------------------------------
# a whole config


def _depth_ok(obj: Any) -> None:
    """ConfigError('too_deep') past MAX_DEPTH levels (counted without recursion)."""
    stack = [(obj, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ConfigError("too_deep", str(MAX_DEPTH))
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend((v, depth + 1) for v in node)


def check(cfg: dict[str, Any]) -> dict[str, Any]:
    """Every field the app reads, validated (returns ``cfg``); ConfigError naming the first impossible one.
    Absent fields pass: whoever needs one asks ``pos_int``, which says it is missing."""
    for key in TEXT_FIELDS:
        text(get(cfg, key), key)
    archs = cfg.get("architectures")
    if archs is not None and (not isinstance(archs, list) or not all(isinstance(a, str) for a in archs)):
        raise _refuse("not_list", "architectures", archs)
    for key in DICT_FIELDS:
        mapping(cfg.get(key), key)
    for key in BOOL_FIELDS:
        flag(cfg.get(key), key)
    for key in LIMITS:
        opt_int(cfg, key)
    rope(cfg)
    heads, kv, d = (opt_int(cfg, k) for k in ("num_attention_heads", "num_key_value_heads", "hidden_size"))
    layers = opt_int(cfg, "num_hidden_layers")
    if heads is not None and (d is not None or get(cfg, "head_dim") is not None):
        width = heads * head_size(cfg, d, heads)
        check_heads(heads, kv or heads, width // heads, layers)
        ff = opt_int(cfg, "intermediate_size") or 4 * (d or 0)
        if layers is not None and d is not None and layers * d * (width + ff) > MAX_WEIGHTS:
            raise ConfigError("too_big", f"num_hidden_layers × hidden_size × (num_attention_heads × head_dim + intermediate_size) "
                                         f"= {layers * d * (width + ff):,} > {MAX_WEIGHTS:,}")
    return cfg


def parse(text_or_dict: str | dict[str, Any]) -> dict[str, Any]:
    """JSON text (or an already parsed dict) → a validated dict (see ``check``); ConfigError otherwise
    ('json' | 'too_long' | 'too_deep' | 'not_object' | a field's code). A multimodal wrapper's
    ``text_config`` (where the language model's shape lives) is merged in."""
    if isinstance(text_or_dict, str):
        if len(text_or_dict) > MAX_CHARS:
            raise ConfigError("too_long", f"{len(text_or_dict):,}")
        try:
            cfg = json.loads(text_or_dict)
        except json.JSONDecodeError as e:
            raise ConfigError("json", f"line {e.lineno}, column {e.colno}: {e.msg}") from None
        except RecursionError:
            raise ConfigError("too_deep", str(MAX_DEPTH)) from None
        except ValueError as e:  # e.g. an integer of more than 4300 digits
            raise ConfigError("json", str(e)[:120]) from None
    else:
        cfg = text_or_dict
    if not isinstance(cfg, dict):
        raise ConfigError("not_object", type(cfg).__name__)
    _depth_ok(cfg)
    inner = mapping(cfg.get("text_config"), "text_config")
    if inner:
        cfg = {**cfg, **inner}
    return check(cfg)


def geometry(cfg: Any, name: str | None = None, source: str = "") -> HeadGeometry:
    """The attention geometry a config implies (layers, query/KV heads, head_dim)."""
    cfg = parse(cfg) if isinstance(cfg, (str, dict)) else cfg
    layers = pos_int(cfg, "num_hidden_layers")
    heads = pos_int(cfg, "num_attention_heads")
    multi_query = flag(_field(cfg, "multi_query"), "multi_query")
    kv = pos_int(cfg, "num_key_value_heads", 1 if multi_query else heads)  # no field: classic MHA
    hidden = get(cfg, "hidden_size")
    if get(cfg, "head_dim") is None and hidden is None:
        raise ConfigError("missing", "head_dim or hidden_size")
    d = pos_int(cfg, "hidden_size") if hidden is not None else None
    head_dim = head_size(cfg, d, heads)
    check_heads(heads, kv, head_dim, layers)
    max_pos = opt_int(cfg, "max_position_embeddings")
    label = name or text(_field(cfg, "_name_or_path"), "_name_or_path") or text(_field(cfg, "model_type"), "model_type") or "config.json"
    return HeadGeometry(str(label)[:80], layers, heads, kv, head_dim, d, max_pos, source)
