"""The ONE role map of a decoder-only model's parts: the token embedding, the decoder blocks and
inside each its attention, MLP and two norms, the final norm and the LM head.

Role names differ across architectures (Llama's ``self_attn`` / ``mlp`` / ``input_layernorm`` /
``norm``, GPT-2's ``attn`` / ``mlp`` / ``ln_1`` / ``ln_f`` …); the toy uses Llama's names. The tracer,
the logit lens, head ablation, the RoPE check and the W_O recombination all find parts here.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from torch import nn

from core.engine import config as cfgread
from core.engine.types import UnsupportedArchitectureError

ATTN_NAMES = ("self_attn", "attn", "attention", "self_attention")
MLP_NAMES = ("mlp", "feed_forward", "ffn")
EMBED_NAMES = ("embed_tokens", "wte", "word_embeddings", "tok_embeddings")
FINAL_NORM_NAMES = ("norm", "ln_f", "final_layernorm", "final_layer_norm", "final_norm")
NORM_NAMES = {  # (before attention, before the MLP), HF role names first
    "attn": ("input_layernorm", "ln_1", "attention_norm", "ln1"),
    "mlp": ("post_attention_layernorm", "ln_2", "ffn_norm", "ln2"),
}
CROSS_NAMES = ("crossattention", "encoder_attn")
OUT_PROJ_NAMES = ("o_proj", "c_proj", "out_proj", "dense")  # the attention's output projection (W_O)
# Inside the MLP: a site of the trace's registry (``core.engine.trace.SITES``, kind MLP) → the role names of the
# MLP's part whose output it is. The MLP replay (``hf_trace.mlp_replay``) records every site named here.
MLP_PARTS = {
    "gate_act": ("act_fn",),  # Llama / Qwen2 / Mistral: act_fn(gate_proj(x)), before it multiplies up_proj(x)
}


@dataclass(frozen=True)
class Parts:
    """One model's modules by role (``find_sites``): what hooks and replays are attached to."""

    embed: nn.Module
    blocks: tuple[nn.Module, ...]
    attns: tuple[nn.Module, ...]
    mlps: tuple[nn.Module, ...]
    attn_norms: tuple[nn.Module | None, ...]  # the norm in front of each attention (None if absent)
    mlp_norms: tuple[nn.Module | None, ...]  # the norm in front of each MLP
    final_norm: nn.Module | None
    lm_head: nn.Module

    def block_norm(self, layer: int, which: str) -> nn.Module:
        """The norm in front of the attention (``which="attn"``) or the MLP (``"mlp"``) of ``layer``."""
        m = (self.attn_norms if which == "attn" else self.mlp_norms)[layer]
        if m is None:
            raise UnsupportedArchitectureError(f"no_{which}_norm", block=layer, names="/".join(NORM_NAMES[which]))
        return m

    def require_final_norm(self) -> nn.Module:
        if self.final_norm is None:
            raise UnsupportedArchitectureError("no_final_norm", names="/".join(FINAL_NORM_NAMES))
        return self.final_norm


def child_by_name(parent: Any, names: tuple[str, ...]) -> Any | None:
    """The first attribute of ``parent`` named in ``names`` (role names differ across architectures)."""
    for n in names:
        m = getattr(parent, n, None)
        if m is not None:
            return m
    return None


def out_proj(attn: Any) -> Any:
    """The attention module's output projection (Llama/Qwen/Mistral ``o_proj``, GPT-2 ``c_proj``). Its
    input is the heads' outputs side by side, [..., H·dh]: head h owns ``head_slice(h, dh)`` of it."""
    m = child_by_name(attn, OUT_PROJ_NAMES)
    if m is None:
        raise UnsupportedArchitectureError("no_out_proj", module=type(attn).__name__, names="/".join(OUT_PROJ_NAMES))
    return m


def mlp_part(mlp: Any, site: str) -> nn.Module | None:
    """The part of ``mlp`` whose output is ``site`` (``MLP_PARTS``), or None where this MLP has none."""
    m = child_by_name(mlp, MLP_PARTS[site])
    return m if isinstance(m, nn.Module) else None


def head_slice(head: int, head_dim: int) -> slice:
    """Head ``head``'s columns in the output projection's input: h·dh … (h+1)·dh."""
    return slice(head * head_dim, (head + 1) * head_dim)


def n_layers_of(model: nn.Module) -> int:
    """Blocks in the model, from its config (HF) or its ``cfg`` (the toy)."""
    cfg = getattr(model, "config", None)
    if cfg is not None:
        return int(cfgread.get(cfg, "num_hidden_layers", 0) or 0)
    return int(getattr(getattr(model, "cfg", None), "n_layers", 0) or 0)


_PARTS: weakref.WeakKeyDictionary[nn.Module, Parts] = weakref.WeakKeyDictionary()


def find_sites(model: nn.Module) -> Parts:
    """Every role of ``model`` (cached per model object: the model's structure never changes)."""
    if model not in _PARTS:
        _PARTS[model] = _find(model)
    return _PARTS[model]


def _find(model: nn.Module) -> Parts:
    n_layers = n_layers_of(model)
    lists = [m for _, m in model.named_modules() if isinstance(m, nn.ModuleList) and len(m) == n_layers]
    if not lists:
        raise UnsupportedArchitectureError("no_blocks", n=n_layers, model=type(model).__name__)
    blocks = tuple(lists[0])
    attns, mlps = [], []
    for i, b in enumerate(blocks):
        a, m = child_by_name(b, ATTN_NAMES), child_by_name(b, MLP_NAMES)
        if a is None or m is None:
            raise UnsupportedArchitectureError("no_attn_or_mlp", block=i, module=type(b).__name__, attn="/".join(ATTN_NAMES),
                                               mlp="/".join(MLP_NAMES))
        if child_by_name(b, CROSS_NAMES) is not None and getattr(getattr(model, "config", None), "add_cross_attention", False):
            raise UnsupportedArchitectureError("cross_attention")
        attns.append(a)
        mlps.append(m)
    get_out = getattr(model, "get_output_embeddings", None)
    lm_head = get_out() if get_out else getattr(model, "lm_head", None)
    if lm_head is None:
        raise UnsupportedArchitectureError("no_lm_head", model=type(model).__name__)
    get_in = getattr(model, "get_input_embeddings", None)
    embed = get_in() if get_in else child_by_name(model, EMBED_NAMES)
    base = getattr(model, getattr(model, "base_model_prefix", "model"), None) or model
    final = child_by_name(base, FINAL_NORM_NAMES) or child_by_name(model, FINAL_NORM_NAMES)
    return Parts(
        embed=embed,
        blocks=blocks,
        attns=tuple(attns),
        mlps=tuple(mlps),
        attn_norms=tuple(child_by_name(b, NORM_NAMES["attn"]) for b in blocks),
        mlp_norms=tuple(child_by_name(b, NORM_NAMES["mlp"]) for b in blocks),
        final_norm=final if isinstance(final, nn.Module) and not isinstance(final, nn.ModuleList) else None,
        lm_head=lm_head,
    )
