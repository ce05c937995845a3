"""Reading a model's config, written once: the alias table (GPT-2's ``n_layer`` is Llama's
``num_hidden_layers`` …), JSON parsing with a reason for every refusal, the validation every reader
shares, and the attention geometry a config implies; on a ``config.json`` dict or a transformers config alike.

``parse`` refuses text that is not one JSON object (or is nested absurdly deep) and runs ``check``, which
refuses every field the app reads whose type or size is impossible (a count must be a whole number in
1 … ``LIMITS``, never truncated; θ finite and positive …), as a ``ConfigError(code, detail)``: the code
picks a sentence (``anatomy.err_<code>``), the detail says ``field = value``. ``ModelConfig.of`` / ``read``
does that reading once, into the frozen dataclass the loader, the budget and a model's facts all take.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
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
# A config that names a LayerNorm epsilon (GPT-2, StableLM, the toy with LayerNorm) has LayerNorm's bias too.
LAYER_NORM_KEYS = ("layer_norm_epsilon", "layer_norm_eps", "layernorm_epsilon")
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
    top = LIMITS.get(key, MAX_DIM) if limit is None else limit
    c = digits.check(value, 1, top, text=False)  # the one whole-number check
    if c.why == digits.ABOVE:
        raise ConfigError("too_big", f"{key} = {show(value)} > {top:,}")
    if not c.ok:
        code = {digits.NOT_FINITE: "not_finite", digits.BELOW: "not_positive"}.get(c.why, "not_integer")
        raise _refuse(code, key, value)
    return c.n


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
    Absent fields pass: whoever needs one asks for it, and is told it is missing (``ModelConfig.need``)."""
    ModelConfig.of(cfg)
    return cfg


def parse(text_or_dict: str | dict[str, Any]) -> dict[str, Any]:
    """JSON text (or an already parsed dict) → a validated dict (see ``check``); ConfigError otherwise
    ('json' | 'too_long' | 'too_deep' | 'not_object' | a field's code). A multimodal wrapper's
    ``text_config`` (where the language model's shape lives) is merged in."""
    return check(_json_object(text_or_dict))


def _json_object(text_or_dict: str | dict[str, Any]) -> dict[str, Any]:
    """JSON text (or a parsed dict) → one JSON object, not nested absurdly deep, a wrapper's
    ``text_config`` merged in; its fields are not validated yet."""
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
    return {**cfg, **inner} if inner else cfg


def read(cfg: Any) -> ModelConfig:
    """THE way into a config: JSON text, a ``config.json`` dict (parsed and validated: ``parse``), a
    transformers config object, or a ``ModelConfig`` already read (returned as it is)."""
    if isinstance(cfg, ModelConfig):
        return cfg
    return ModelConfig.of(_json_object(cfg) if isinstance(cfg, (str, dict)) else cfg)


def geometry(cfg: Any, name: str | None = None, source: str = "") -> HeadGeometry:
    """The attention geometry a config implies (layers, query/KV heads, head_dim)."""
    return read(cfg).geometry(name, source)


# ---------------------------------------------------------------------------------------------
# one model's config, read once


class _Once:
    """A config seen through a memo: each raw field (one spelling) is read from the dict or the config
    object at most once, however many readers ask for it. ``get``/``pos_int``/``rope`` take it like a
    transformers config object (``getattr``)."""

    __slots__ = ("_cfg", "_seen")

    def __init__(self, cfg: Any) -> None:
        self._cfg = cfg
        self._seen: dict[str, Any] = {}

    def __getattr__(self, key: str) -> Any:  # only for names that are not the two slots
        if key.startswith("__"):
            raise AttributeError(key)
        seen = self._seen
        if key not in seen:
            cfg = self._cfg
            seen[key] = cfg.get(key) if isinstance(cfg, dict) else getattr(cfg, key, None)
        return seen[key]


def _eos(value: Any) -> tuple[int, ...]:
    """``eos_token_id``: one id, a list of ids, or absent (whole numbers ≥ 0 only)."""
    ids = value if isinstance(value, (list, tuple)) else (() if value is None else (value,))
    for i in ids:
        if isinstance(i, bool) or not isinstance(i, int) or i < 0:
            raise _refuse("not_integer", "eos_token_id", value)
    return tuple(int(i) for i in ids)


@dataclass(frozen=True)
class ModelConfig:
    """One model's config, read ONCE from a ``config.json`` dict or a transformers config object and
    validated field by field as it is read (``of``: the rules of this module's docstring), then handed
    to every reader: the loader's checks (``hf.check_causal_config``), the memory budget
    (``budget.estimate_params``), the attention geometry and the facts a page shows (``hf.facts_from_hf``).

    A field the config leaves out is None here (``need`` says it is missing when a reader needs it); the
    defaults (MHA when no KV heads are given, d_model // heads when no head_dim …) are the readers'."""

    model_type: str | None = None
    architectures: tuple[str, ...] | None = None
    is_encoder_decoder: bool = False
    n_layers: int | None = None
    n_heads: int | None = None
    n_kv_heads: int | None = None  # as written: None → MHA (or MQA when multi_query)
    multi_query: bool | None = None
    head_dim: int | None = None  # as written: None → d_model // n_heads
    d_model: int | None = None
    d_ff: int | None = None
    vocab_size: int | None = None
    max_positions: int | None = None
    sliding_window: int | None = None  # None: no window (0 in a config means none too)
    use_sliding_window: bool | None = None
    n_experts: int | None = None  # a mixture-of-experts MLP; None: dense
    hidden_act: str | None = None
    norm_placement: str | None = None
    name_or_path: str | None = None
    rope_theta: float | None = None
    rope_type: str | None = None
    has_rope: bool = False  # rope_parameters or rope_theta present
    alibi: bool = False
    post_norm: bool = False  # OPT's do_layer_norm_before = false, Bloom's post-LayerNorm residual
    tied_embeddings: bool | None = None
    mlp_gated: bool | None = None
    attention_bias: bool | None = None
    mlp_bias: bool | None = None
    gpt2_names: bool = False  # spelled like GPT-2 (n_embd): the classic two-matrix MLP
    layer_norm_named: bool = False  # names a LayerNorm epsilon (LayerNorm's bias exists too)
    eos_token_ids: tuple[int, ...] = ()
    dtype: str | None = None  # the dtype the config says its weights were saved in

    @classmethod
    def of(cls, cfg: Any) -> ModelConfig:
        """Read and validate every field the app uses, each raw field once; ConfigError naming the first
        impossible one (its code and ``field = value`` as the config spelled it)."""
        if isinstance(cfg, ModelConfig):
            return cfg
        c = _Once(cfg)
        texts = {key: text(get(c, key), key) for key in TEXT_FIELDS}
        archs = _field(c, "architectures")
        if archs is not None and (not isinstance(archs, list) or not all(isinstance(a, str) for a in archs)):
            raise _refuse("not_list", "architectures", archs)
        for key in DICT_FIELDS:
            if key == "text_config" and not isinstance(cfg, dict):
                continue  # a transformers object keeps it as a config object of its own
            mapping(_field(c, key), key)
        flags = {key: flag(_field(c, key), key) for key in BOOL_FIELDS}
        ints = {key: opt_int(c, key) for key in LIMITS}
        theta, rope_type = rope(c)
        heads, kv, d, layers = (ints[k] for k in ("num_attention_heads", "num_key_value_heads", "hidden_size",
                                                   "num_hidden_layers"))
        given_dh = ints["head_dim"]
        if heads is not None and (d is not None or given_dh is not None):
            width = heads * head_size(c, d, heads)
            check_heads(heads, kv or heads, width // heads, layers)
            ff = ints["intermediate_size"] or 4 * (d or 0)
            if layers is not None and d is not None and layers * d * (width + ff) > MAX_WEIGHTS:
                raise ConfigError("too_big", f"num_hidden_layers × hidden_size × (num_attention_heads × head_dim + intermediate_size) "
                                             f"= {layers * d * (width + ff):,} > {MAX_WEIGHTS:,}")
        stored = _field(c, "dtype") or (_field(c, "torch_dtype") if isinstance(cfg, dict) else None)  # transformers 5 warns on torch_dtype
        return cls(
            model_type=texts["model_type"], architectures=None if archs is None else tuple(archs),
            is_encoder_decoder=bool(flags["is_encoder_decoder"]),
            n_layers=layers, n_heads=heads, n_kv_heads=kv, multi_query=flags["multi_query"], head_dim=given_dh,
            d_model=d, d_ff=ints["intermediate_size"], vocab_size=ints["vocab_size"],
            max_positions=ints["max_position_embeddings"], sliding_window=ints["sliding_window"],
            use_sliding_window=flags["use_sliding_window"], n_experts=ints["num_local_experts"] or ints["num_experts"],
            hidden_act=texts["hidden_act"], norm_placement=texts["norm_placement"], name_or_path=texts["_name_or_path"],
            rope_theta=theta, rope_type=rope_type,
            has_rope=_field(c, "rope_parameters") is not None or _field(c, "rope_theta") is not None,
            alibi=bool(_field(c, "alibi")) or _field(c, "position_embedding_type") == "alibi",
            post_norm=_field(c, "do_layer_norm_before") is False or bool(_field(c, "apply_residual_connection_post_layernorm")),
            tied_embeddings=flags["tie_word_embeddings"], mlp_gated=flags["mlp_gated"],
            attention_bias=flags["attention_bias"], mlp_bias=flags["mlp_bias"],
            gpt2_names=_field(c, "n_embd") is not None,
            layer_norm_named=any(_field(c, k) is not None for k in LAYER_NORM_KEYS),
            eos_token_ids=_eos(_field(c, "eos_token_id")),
            dtype=None if stored is None else str(stored).replace("torch.", ""),
        )

    @staticmethod
    def need(value: int | None, key: str) -> int:
        """A field a reader cannot do without: its value, or ConfigError('missing') naming it."""
        if value is None:
            raise ConfigError("missing", key)
        return value

    @property
    def kv_heads(self) -> int:
        """KV heads: as written, else one in all (multi_query), else one per query head (classic MHA)."""
        if self.n_kv_heads is not None:
            return self.n_kv_heads
        return 1 if self.multi_query else self.need(self.n_heads, "num_attention_heads")

    def geometry(self, name: str | None = None, source: str = "") -> HeadGeometry:
        """The attention geometry (layers, query/KV heads, head_dim); ConfigError when a field it needs is absent."""
        layers = self.need(self.n_layers, "num_hidden_layers")
        heads = self.need(self.n_heads, "num_attention_heads")
        kv = self.kv_heads
        if self.head_dim is None and self.d_model is None:
            raise ConfigError("missing", "head_dim or hidden_size")
        head_dim = self.head_dim if self.head_dim is not None else self.d_model // heads  # ≥ 1: checked in ``of``
        check_heads(heads, kv, head_dim, layers)
        label = name or self.name_or_path or self.model_type or "config.json"
        return HeadGeometry(str(label)[:80], layers, heads, kv, head_dim, self.d_model, self.max_positions, source)
