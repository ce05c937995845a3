"""The engine's vocabulary: what a loaded model is, what its attention looks like, and the errors
every layer above may raise. Pure Python: no torch, no transformers, no Streamlit.

* ``HeadGeometry`` is the ONE description of a model's attention shape (MHA / GQA / MQA, the
  query → KV head map, and what its KV cache weighs). The maths pages, the KV calculator, the
  generation stepper and the config reader all use it.
* ``ModelFacts`` is what a learner reads off a loaded model; its ``geometry`` is a ``HeadGeometry``.
* ``LoadedModel`` is one model shared by every browser session.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from core.common import escape, i18n

if TYPE_CHECKING:  # annotations only: this module stays importable without torch
    from torch import nn

EMBEDDED_ID = "SmolLM2-135M-Instruct"
TOY_ID = "toy"

# Bytes of one stored value, by dtype name (torch's spelling, without "torch.").
DTYPE_BYTES: dict[str, int] = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int8": 1, "uint8": 1}
# The widths a KV cache is commonly stored in, as the pages offer them.
VALUE_WIDTHS: dict[str, int] = {"fp32": 4, "fp16 / bf16": 2, "int8": 1}


# ---------------------------------------------------------------------------------------------
# errors: ONE shape, CodedError (a code picks the sentence in the i18n catalogue, params fill it);
# str(e) is English (the CLI), e.text(lang) / e.markdown(lang) the page's language


@dataclass(frozen=True)
class Phrase:
    """A piece of a message said in any language: the i18n key of its sentence and the values that fill
    it. A value may itself be a Phrase, or a list of them (said one after the other)."""

    key: str
    params: dict[str, Any] = field(default_factory=dict)

    def text(self, lang: str = "en") -> str:
        if self.key not in i18n.catalogue():  # a key without a sentence: say what is known, never "⟦key⟧"
            return " ".join([self.key, *(f"{k}={say(v, lang)}" for k, v in self.params.items())])
        return i18n.t(self.key, lang, **{k: say(v, lang) for k, v in self.params.items()}).strip()


def say(value: Any, lang: str = "en") -> str:
    """A message value as text in ``lang``: a Phrase is said, a list of values is said one after the
    other (a space between English sentences, none between Chinese ones), anything else as it is."""
    if isinstance(value, Phrase):
        return value.text(lang)
    if isinstance(value, (list, tuple)):
        return ("" if lang == "zh" else " ").join(say(v, lang) for v in value)
    return str(value)


class CodedError(Exception):
    """An error whose sentence lives in the i18n catalogue under ``PREFIX + code``, filled by ``params``
    (a value may be a Phrase: a translated piece). ``str(e)`` is the English sentence (the CLI prints
    it); ``e.text(lang)`` is the page's. Pickled and copied with its code and params."""

    PREFIX = ""

    def __init__(self, code: str, **params: Any) -> None:
        self.code = code
        self.params = params
        super().__init__(self.text("en"))

    @property
    def key(self) -> str:
        return f"{self.PREFIX}{self.code}"

    @property
    def known(self) -> bool:
        """Whether the code has its sentence (every code raised in core has one: tests check)."""
        return self.key in i18n.catalogue()

    def text(self, lang: str = "en") -> str:
        return Phrase(self.key, self.params).text(lang)

    def markdown(self, lang: str = "en", clean: Callable[[str], str] = str) -> str:
        """The sentence as a page's Markdown shows it: its values (what the user typed, a link carried, a
        file said), first through ``clean``, then through ``escape.md``, so none of them renders as a link,
        an image or a tag (the sentence's own Markdown is the catalogue's, and stays)."""
        return _rebuild_coded(type(self), self.code, {k: _md(v, clean) for k, v in self.params.items()}).text(lang)

    def __reduce__(self) -> tuple[Any, ...]:  # the default would pass the English sentence as the code
        return _rebuild_coded, (type(self), self.code, self.params)


def _md(value: Any, clean: Callable[[str], str] = str) -> Any:
    """A message value with its text (in a Phrase or a list too) through ``clean``, then ``escape.md``."""
    if isinstance(value, str):
        return escape.md(clean(value))
    if isinstance(value, Phrase):
        return Phrase(value.key, {k: _md(v, clean) for k, v in value.params.items()})
    if isinstance(value, (list, tuple)):
        return [_md(v, clean) for v in value]
    return value


def _rebuild_coded(cls: type[CodedError], code: str, params: dict[str, Any]) -> CodedError:
    return cls(code, **params)


class ModelLoadError(CodedError):
    """A model could not be loaded (i18n key ``load.err_<code>``). No message ever holds a server path."""

    PREFIX = "load.err_"


class EmptyPromptError(CodedError, ValueError):
    """The prompt has nothing to trace (i18n key ``prompt.err_<code>``: ``empty``, ``no_tokens``)."""

    PREFIX = "prompt.err_"


class UnsupportedArchitectureError(CodedError, RuntimeError):
    """The tracer cannot follow this architecture (i18n key ``arch.err_<code>``); the sentence names what
    is unsupported, in the page's language."""

    PREFIX = "arch.err_"


class ConfigError(CodedError, ValueError):
    """A config that cannot be read (i18n key ``anatomy.err_<code>``, filled by ``detail``).

    code: "json" (not valid JSON) | "not_object" | "missing" (a field is absent: detail names it)
    | "bad_value" (a field has an impossible value: detail says which and why) | a field's code
    (``core.engine.config.CODES``). ``detail`` says ``field = value`` as the config spelled it."""

    PREFIX = "anatomy.err_"

    def __init__(self, code: str, detail: str = "") -> None:
        self.detail = detail
        super().__init__(code, detail=" ".join(str(detail).replace("`", "ˋ").split()))

    def reason(self) -> Phrase:
        """The refusal as a sentence in any language (``anatomy.err_<code>``: which field, and why)."""
        return Phrase(self.key, dict(self.params))

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.code, self.detail)


# ---------------------------------------------------------------------------------------------
# attention geometry


def attention_kind(n_heads: int, n_kv_heads: int) -> str:
    """MHA (one KV head per query head), MQA (one KV head in all) or GQA (in between)."""
    if n_kv_heads == n_heads:
        return "MHA"
    return "MQA" if n_kv_heads == 1 else "GQA"


def kv_bytes(n_layers: int, n_kv_heads: int, head_dim: int, tokens: int = 1, bytes_per_value: int = 4,
             requests: int = 1) -> int:
    """The KV-cache formula, written once: 2 (K and V) × layers × KV heads × head_dim × bytes per
    value × tokens × concurrent requests. Query heads do not appear: that is why GQA/MQA shrink it."""
    if tokens < 0 or requests < 0:
        raise ValueError("tokens and requests must be ≥ 0")
    return 2 * int(n_layers) * int(n_kv_heads) * int(head_dim) * int(bytes_per_value) * int(tokens) * int(requests)


@dataclass(frozen=True)
class HeadGeometry:
    """The attention shape of one model: enough to draw its heads and size its KV cache."""

    name: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int = 0  # 0 → d_model // n_heads
    d_model: int | None = None
    max_positions: int | None = None
    source: str = ""
    bytes_per_value: int = 2  # the width of one cached value when none is given (fp16/bf16 serving)

    def __post_init__(self) -> None:
        for f in ("n_layers", "n_heads", "n_kv_heads"):
            if int(getattr(self, f)) <= 0:
                raise ConfigError("bad_value", f"{f} must be a positive integer (got {getattr(self, f)})")
        if self.n_heads % self.n_kv_heads:
            raise ConfigError("bad_value", f"query heads ({self.n_heads}) must be a multiple of KV heads ({self.n_kv_heads})")
        if self.dh <= 0:
            raise ConfigError("bad_value", "head_dim must be positive (or d_model given)")

    @property
    def dh(self) -> int:
        return int(self.head_dim or (self.d_model or 0) // self.n_heads)

    @property
    def kind(self) -> str:
        return attention_kind(self.n_heads, self.n_kv_heads)

    @property
    def group_size(self) -> int:
        """How many query heads read one KV head: query head h reads KV head h // group_size."""
        return self.n_heads // self.n_kv_heads

    def kv_head_of(self, h: int) -> int:
        return h // self.group_size

    def kv_bytes_per_token(self, bytes_per_value: int | None = None) -> int:
        """One position, every layer, K and V."""
        return kv_bytes(self.n_layers, self.n_kv_heads, self.dh, 1, self.bytes_per_value if bytes_per_value is None else bytes_per_value)

    def kv_bytes(self, tokens: int, bytes_per_value: int | None = None, requests: int = 1) -> int:
        bpv = self.bytes_per_value if bytes_per_value is None else bytes_per_value
        return kv_bytes(self.n_layers, self.n_kv_heads, self.dh, tokens, bpv, requests)

    def with_kv_heads(self, n_kv: int) -> HeadGeometry:
        return replace(self, n_kv_heads=int(n_kv))


# ---------------------------------------------------------------------------------------------
# a loaded model


@dataclass(frozen=True)
class ModelFacts:
    """What a learner reads off a model's config, plus the parameter count."""

    name: str
    model_type: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_model: int
    d_ff: int
    vocab_size: int
    norm_type: str  # "RMSNorm" | "LayerNorm"
    norm_placement: str  # "pre-norm" | "post-norm"
    position_type: str  # "RoPE" | "learned" | "sinusoidal" | "none"
    activation: str
    ffn_type: str  # "SwiGLU" | "MLP"
    tied_embeddings: bool
    n_params: int
    max_positions: int
    rope_theta: float | None = None
    eos_token_ids: tuple[int, ...] = ()
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.n_heads <= 0 or self.n_kv_heads <= 0 or self.n_heads % self.n_kv_heads:
            raise ValueError(f"query heads ({self.n_heads}) must be a multiple of KV heads ({self.n_kv_heads})")
        if self.n_layers <= 0 or self.head_dim <= 0 or self.d_model <= 0:
            raise ValueError("layers, head_dim and d_model must be positive")

    @property
    def value_bytes(self) -> int:
        """Bytes of one value in the model's own dtype (what its KV cache stores)."""
        return DTYPE_BYTES.get(self.dtype, 4)

    @property
    def geometry(self) -> HeadGeometry:
        return HeadGeometry(self.name, self.n_layers, self.n_heads, self.n_kv_heads, self.head_dim, self.d_model,
                            self.max_positions or None, bytes_per_value=self.value_bytes)

    @property
    def attention_kind(self) -> str:
        return attention_kind(self.n_heads, self.n_kv_heads)

    @property
    def group_size(self) -> int:
        return self.geometry.group_size

    def kv_bytes_per_token(self, bytes_per_value: int | None = None) -> int:
        """K and V, every layer, every KV head; the byte width defaults to the model's dtype."""
        return self.geometry.kv_bytes_per_token(bytes_per_value)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["eos_token_ids"] = list(self.eos_token_ids)
        d["attention_kind"] = self.attention_kind
        return d


class Tokenizer(Protocol):
    """What the app asks of a tokenizer (HF's, or the toy's byte tokenizer)."""

    def __call__(self, text: str, add_special_tokens: bool = True) -> Any: ...
    def decode(self, ids: Any) -> str: ...
    def convert_ids_to_tokens(self, ids: Any) -> Any: ...


@dataclass
class LoadedModel:
    """One loaded model shared by every browser session. Nothing per-request lives here."""

    model: nn.Module  # a transformers PreTrainedModel, or core.toy.ToyTransformer (kind says which)
    tokenizer: Tokenizer  # a transformers tokenizer, or core.toy.ByteTokenizer
    facts: ModelFacts
    spec: str  # what the user chose: EMBEDDED_ID, TOY_ID or a path / cache id
    kind: str  # "hf" | "toy"
    # Where the weights came from, as a page and an exported trace say it: never a server path (the
    # embedded GGUF's package, the toy, an HF cache id, a folder by its name). See ``public_source``.
    source: str
    # Serialises forward passes on the shared model. Torch already uses every CPU core inside one
    # forward, so running two at once buys nothing, and one lock makes "each session gets exactly
    # the trace it gets alone" true by construction.
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    @property
    def model_id(self) -> str:
        return self.spec

    @property
    def is_toy(self) -> bool:
        return self.kind == "toy"

    def public_source(self, model_id: str | None = None) -> str:
        """THE public description of where this model came from, for a page or a file a student downloads:
        a model the operator offers is named by its offered id ``model_id`` (never by the operator's
        folder); the embedded model, the toy, an HF cache id or a folder typed in the local-folder box by
        their ``source``, which names no path."""
        if model_id and model_id not in (EMBEDDED_ID, TOY_ID, self.spec):
            return model_id
        return self.source

    def eos_ids(self) -> frozenset[int]:
        """Every id that ends generation: the config's eos ids and the tokenizer's eos token."""
        ids = {int(i) for i in self.facts.eos_token_ids}
        tok_eos = getattr(self.tokenizer, "eos_token_id", None)
        if tok_eos is not None:
            ids.add(int(tok_eos))
        return frozenset(ids)

    def __hash__(self) -> int:  # lets st.cache_data hash a LoadedModel argument cheaply
        return hash((self.spec, self.source))
