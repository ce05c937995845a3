"""The toy transformer: a whole decoder-only language model you can read in one file.

Names follow Hugging Face's ``modeling_llama.py`` (``embed_tokens``, ``layers[i].self_attn.q_proj`` …,
``input_layernorm``, ``post_attention_layernorm``, ``norm``, ``lm_head``) so the toy and the real model
read alike, and so tiny HF weights can be copied in (``ToyTransformer.from_hf``) to prove that this
file computes exactly what transformers computes.

Unlike HF's model, every intermediate value is visible: pass ``probes={}`` to ``forward`` and it comes
back filled with each site (raw scores, scaled scores, mask, softmax weights, per-head outputs, the
concatenation, the gate/up/act of the MLP …). Tensors are [batch, …] inside the model; probes keep
batch item 0 only, which is all the app ever traces.

Also here: a byte-level tokenizer (any text, Chinese and emoji included, with no vocabulary file),
``trace_toy`` (fills a ``core.trace.Trace`` like the real tracer does), ``load_trained`` and the
word-order demo (without positions, self-attention cannot tell "我喜欢你" from "你喜欢我").
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from core.models import LoadedModel, ModelFacts, TOY_ID
from core.trace import Trace

ASSETS = Path(__file__).resolve().parent.parent / "assets" / "toy"
WEIGHTS_FILE = "toy.safetensors"
CONFIG_FILE = "config.json"
LOSS_FILE = "loss_curve.json"

POSITIONS = ("none", "sinusoidal", "learned", "rope")
NORMS = ("layernorm", "rmsnorm")
PLACEMENTS = ("pre", "post")
FFNS = ("swiglu", "gelu")

KV = tuple[torch.Tensor, torch.Tensor]  # (K, V), each [1, Hkv, T_total, dh]


# =============================================================================================
# Config


@dataclass(frozen=True)
class ToyConfig:
    vocab_size: int = 259
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    position: str = "rope"
    rope_theta: float = 10000.0
    norm: str = "rmsnorm"
    norm_placement: str = "pre"
    ffn: str = "swiglu"
    d_ff: int = 128
    tied: bool = True
    causal: bool = True
    max_positions: int = 512
    eps: float = 1e-5
    head_dim: int | None = None  # None → d_model // n_heads (HF allows another value; so do we)
    qkv_bias: bool = False  # Qwen2 / GPT-2 put a bias on q, k, v
    o_bias: bool = False  # GPT-2 (and Llama with attention_bias) on o_proj
    mlp_bias: bool = False  # GPT-2 on its MLP

    def __post_init__(self) -> None:
        checks = [
            (self.vocab_size > 0 and self.d_model > 0 and self.n_layers > 0 and self.d_ff > 0, "sizes must be positive"),
            (self.n_heads > 0 and self.n_kv_heads > 0, "head counts must be positive"),
            (self.n_heads % self.n_kv_heads == 0, f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})"),
            (self.head_dim is not None or self.d_model % self.n_heads == 0, f"d_model ({self.d_model}) must divide by n_heads ({self.n_heads})"),
            (self.position in POSITIONS, f"position must be one of {POSITIONS}"),
            (self.norm in NORMS, f"norm must be one of {NORMS}"),
            (self.norm_placement in PLACEMENTS, f"norm_placement must be one of {PLACEMENTS}"),
            (self.ffn in FFNS, f"ffn must be one of {FFNS}"),
            (self.max_positions > 0 and self.eps > 0 and self.rope_theta > 0, "max_positions, eps, rope_theta must be positive"),
            (self.position != "rope" or self.dh % 2 == 0, "RoPE needs an even head_dim"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ValueError(f"ToyConfig: {msg}")

    @property
    def dh(self) -> int:
        return self.head_dim or self.d_model // self.n_heads

    @property
    def group_size(self) -> int:
        """Query head h reads KV head h // group_size."""
        return self.n_heads // self.n_kv_heads

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ToyConfig":
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        return cls(**known)


# =============================================================================================
# Building blocks


class RMSNorm(nn.Module):
    """x / sqrt(mean(x²) + eps) · w — no mean subtraction, no bias (Llama, SmolLM2)."""

    def __init__(self, d: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Same order of operations as HF's LlamaRMSNorm, so copied weights give the same bits.
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps))


def make_norm(cfg: ToyConfig) -> nn.Module:
    return RMSNorm(cfg.d_model, cfg.eps) if cfg.norm == "rmsnorm" else nn.LayerNorm(cfg.d_model, eps=cfg.eps)


def sinusoidal_table(n_pos: int, d: int) -> torch.Tensor:
    """The original Transformer's fixed table: sin on even dims, cos on odd, wavelengths 2π … 10000·2π."""
    pos = torch.arange(n_pos, dtype=torch.float32)[:, None]  # [P, 1]
    i = torch.arange(0, d, 2, dtype=torch.float32)  # [d/2]
    angle = pos / (10000.0 ** (i / d))  # [P, d/2]
    table = torch.zeros(n_pos, d)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle[:, : d // 2])
    return table  # [P, d]


def rope_cos_sin(positions: torch.Tensor, dh: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin for each position, HF layout (the two halves of a head share frequencies)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, dh, 2, dtype=torch.float32) / dh))  # [dh/2]
    freqs = positions.float()[:, None] * inv_freq[None, :]  # [T, dh/2]
    emb = torch.cat([freqs, freqs], dim=-1)  # [T, dh]
    return emb.cos(), emb.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each (i, i + dh/2) pair by angle pos·θ_i: q·k then depends on the *distance* only."""
    return x * cos + rotate_half(x) * sin  # [B, H, T, dh] with cos/sin broadcast from [T, dh]


def additive_mask(t_q: int, t_k: int, causal: bool) -> torch.Tensor:
    """[t_q, t_k] of 0 (may look) and −inf (may not). Query i sits at absolute position t_k − t_q + i."""
    if not causal:
        return torch.zeros(t_q, t_k)
    offset = t_k - t_q  # the cached positions every new query may see
    q_pos = torch.arange(t_q)[:, None] + offset
    k_pos = torch.arange(t_k)[None, :]
    return torch.zeros(t_q, t_k).masked_fill(k_pos > q_pos, float("-inf"))


# =============================================================================================
# Attention, MLP, block


class Attention(nn.Module):
    def __init__(self, cfg: ToyConfig) -> None:
        super().__init__()
        self.cfg = cfg
        H, Hkv, dh, d = cfg.n_heads, cfg.n_kv_heads, cfg.dh, cfg.d_model
        self.q_proj = nn.Linear(d, H * dh, bias=cfg.qkv_bias)
        self.k_proj = nn.Linear(d, Hkv * dh, bias=cfg.qkv_bias)
        self.v_proj = nn.Linear(d, Hkv * dh, bias=cfg.qkv_bias)
        self.o_proj = nn.Linear(H * dh, d, bias=cfg.o_bias)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None, past: KV | None,
                probe: dict | None) -> tuple[torch.Tensor, KV]:
        cfg = self.cfg
        B, T, _ = x.shape
        H, Hkv, dh = cfg.n_heads, cfg.n_kv_heads, cfg.dh
        # Split the projections into heads: each head works in its own dh-dimensional subspace.
        q = self.q_proj(x).view(B, T, H, dh).transpose(1, 2)  # [B, H, T, dh]
        k = self.k_proj(x).view(B, T, Hkv, dh).transpose(1, 2)  # [B, Hkv, T, dh]
        v = self.v_proj(x).view(B, T, Hkv, dh).transpose(1, 2)  # [B, Hkv, T, dh]
        if rope is not None:  # RoPE rotates q and k (never v), before the cache: the cache holds rotated keys
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        if past is not None:  # earlier positions' K/V never change, so they are reused, not recomputed
            k = torch.cat([past[0], k], dim=2)  # [B, Hkv, T_total, dh]
            v = torch.cat([past[1], v], dim=2)
        new_kv = (k, v)
        # GQA/MQA: several query heads share one KV head, so repeat each KV head group_size times.
        k_rep = k.repeat_interleave(cfg.group_size, dim=1)  # [B, H, T_total, dh]
        v_rep = v.repeat_interleave(cfg.group_size, dim=1)  # [B, H, T_total, dh]
        scores_raw = q @ k_rep.transpose(-2, -1)  # [B, H, T, T_total]
        # Divide by √dh so the scores' spread does not grow with dh (else softmax saturates).
        scores_scaled = scores_raw * (dh ** -0.5)
        mask = additive_mask(T, k.shape[2], cfg.causal).to(x.dtype)  # [T, T_total]
        scores_masked = scores_scaled + mask
        weights = torch.softmax(scores_masked, dim=-1)  # [B, H, T, T_total]; each row sums to 1
        head_out = weights @ v_rep  # [B, H, T, dh]: a weighted average of value vectors
        concat = head_out.transpose(1, 2).reshape(B, T, H * dh)  # [B, T, H·dh]: heads side by side
        out = self.o_proj(concat)  # [B, T, d]: mixes the heads back into the residual space
        if probe is not None:
            for name, val in (("q", q), ("k", k), ("v", v), ("scores_raw", scores_raw), ("scores_scaled", scores_scaled),
                              ("scores_masked", scores_masked), ("weights", weights), ("head_out", head_out),
                              ("concat", concat), ("attn_out", out)):
                probe[name] = val[0].detach()
            probe["mask"] = mask.detach()
        return out, new_kv


class MLP(nn.Module):
    """SwiGLU (down(silu(gate(x)) · up(x)), Llama) or GELU (down(gelu(up(x))), GPT-2: tanh GELU)."""

    def __init__(self, cfg: ToyConfig) -> None:
        super().__init__()
        self.kind = cfg.ffn
        if cfg.ffn == "swiglu":
            self.gate_proj = nn.Linear(cfg.d_model, cfg.d_ff, bias=cfg.mlp_bias)
        self.up_proj = nn.Linear(cfg.d_model, cfg.d_ff, bias=cfg.mlp_bias)
        self.down_proj = nn.Linear(cfg.d_ff, cfg.d_model, bias=cfg.mlp_bias)

    def forward(self, x: torch.Tensor, probe: dict | None) -> torch.Tensor:
        up = self.up_proj(x)  # [B, T, d_ff]
        if self.kind == "swiglu":
            gate = self.gate_proj(x)  # [B, T, d_ff]
            act = F.silu(gate) * up  # the gate decides, per feature, how much of "up" passes
        else:
            gate = None
            act = F.gelu(up, approximate="tanh")
        down = self.down_proj(act)  # [B, T, d]
        if probe is not None:
            if gate is not None:
                probe["gate"] = gate[0].detach()
            probe["up"], probe["act"], probe["down"] = up[0].detach(), act[0].detach(), down[0].detach()
        return down


class Block(nn.Module):
    def __init__(self, cfg: ToyConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.input_layernorm = make_norm(cfg)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = make_norm(cfg)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, rope: Any, past: KV | None, probe: dict | None) -> tuple[torch.Tensor, KV]:
        if probe is not None:
            probe["resid_pre"] = x[0].detach()
        if self.cfg.norm_placement == "pre":
            # Pre-norm (GPT-2, Llama): normalise what enters each sub-layer; the stream itself
            # is only ever *added to*, so resid_post = resid_pre + attn_out + mlp_out exactly.
            a, kv = self.self_attn(self.input_layernorm(x), rope, past, probe)
            mid = x + a
            m = self.mlp(self.post_attention_layernorm(mid), probe)
            out = mid + m
        else:
            # Post-norm (the 2017 Transformer, BERT): normalise after each addition. The norm then
            # sits *on* the stream, so the simple "sum of what each sub-layer adds" no longer holds.
            a, kv = self.self_attn(x, rope, past, probe)
            mid = self.input_layernorm(x + a)
            m = self.mlp(mid, probe)
            out = self.post_attention_layernorm(mid + m)
        if probe is not None:
            probe["resid_mid"], probe["resid_post"] = mid[0].detach(), out[0].detach()
        return out, kv


# =============================================================================================
# The model


class ToyTransformer(nn.Module):
    def __init__(self, cfg: ToyConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.d_model)
        if cfg.position == "learned":
            self.embed_positions = nn.Embedding(cfg.max_positions, cfg.d_model)
        elif cfg.position == "sinusoidal":
            self.register_buffer("sin_table", sinusoidal_table(cfg.max_positions, cfg.d_model), persistent=False)
        self.layers = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layers)])
        # Post-norm blocks already end on a norm; only pre-norm needs one before the LM head.
        self.norm = make_norm(cfg) if cfg.norm_placement == "pre" else nn.Identity()
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tied:  # one matrix both reads tokens in and scores them out
            self.lm_head.weight = self.embed_tokens.weight

    def position_add(self, start: int, T: int) -> torch.Tensor | None:
        """The vector added to each embedding (sinusoidal / learned), or None (none / RoPE). [T, d]"""
        if start + T > self.cfg.max_positions and self.cfg.position in ("learned", "sinusoidal"):
            raise ValueError(f"{start + T} positions exceed max_positions={self.cfg.max_positions}")
        if self.cfg.position == "learned":
            return self.embed_positions.weight[start : start + T]
        if self.cfg.position == "sinusoidal":
            return self.sin_table[start : start + T]
        return None

    def forward(self, input_ids: torch.Tensor, past_kv: list[KV] | None = None, use_cache: bool = False,
                probes: dict | None = None) -> tuple[torch.Tensor, list[KV] | None]:
        """input_ids [B, T] → (logits [B, T, V], new past_kv or None).

        ``past_kv``: per layer (K, V) of the earlier positions, [B, Hkv, T_past, dh], after RoPE; new
        positions are numbered from T_past on. ``probes``: a dict filled with every site (batch item 0).
        """
        B, T = input_ids.shape
        start = past_kv[0][0].shape[2] if past_kv else 0
        emb = self.embed_tokens(input_ids)  # [B, T, d]
        pos = self.position_add(start, T)  # [T, d] or None
        x = emb if pos is None else emb + pos
        rope = None
        if self.cfg.position == "rope":
            rope = rope_cos_sin(torch.arange(start, start + T), self.cfg.dh, self.cfg.rope_theta)
        if probes is not None:
            probes["embeddings"] = emb[0].detach()
            probes["pos"] = pos.detach() if pos is not None else torch.zeros(T, self.cfg.d_model)
            probes["layers"] = []
        new_kv: list[KV] = []
        for i, layer in enumerate(self.layers):
            probe = {} if probes is not None else None
            x, kv = layer(x, rope, past_kv[i] if past_kv else None, probe)
            new_kv.append(kv)
            if probes is not None:
                probes["layers"].append(probe)
        h = self.norm(x)  # [B, T, d]
        logits = self.lm_head(h)  # [B, T, V]
        if probes is not None:
            probes["final_hidden"] = h[0].detach()
        return logits, (new_kv if use_cache else None)

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())  # a tied matrix is one Parameter, counted once

    # -----------------------------------------------------------------------------------------
    # Copying a Hugging Face model

    @classmethod
    def from_hf(cls, hf: Any) -> "ToyTransformer":
        """A toy holding the same weights as a HF Llama-family (Llama, Qwen2, Mistral) or GPT-2 model."""
        mt = hf.config.model_type
        if mt == "gpt2":
            return _from_gpt2(cls, hf)
        if mt in ("llama", "qwen2", "mistral"):
            return _from_llama(cls, hf)
        raise ValueError(f"from_hf: model_type '{mt}' is not supported (llama, qwen2, mistral, gpt2 are)")


def _copy(dst: nn.Module, src: nn.Module, transpose: bool = False) -> None:
    w = src.weight.detach()
    dst.weight.data.copy_(w.t() if transpose else w)
    if getattr(dst, "bias", None) is not None:
        dst.bias.data.copy_(src.bias.detach())


def _from_llama(cls: Any, hf: Any) -> ToyTransformer:
    from core.models import _rope_theta

    c = hf.config
    rp = getattr(c, "rope_parameters", None) or {}
    if rp.get("rope_type", "default") != "default":
        raise ValueError(f"RoPE scaling '{rp.get('rope_type')}' is not implemented in the toy")
    if getattr(c, "sliding_window", None) and getattr(c, "use_sliding_window", True) and c.model_type == "mistral":
        raise ValueError("sliding-window attention is not implemented in the toy")
    H = c.num_attention_heads
    tied = bool(getattr(c, "tie_word_embeddings", False))
    qkv_bias = bool(getattr(c, "attention_bias", False)) or c.model_type == "qwen2"
    cfg = ToyConfig(
        vocab_size=c.vocab_size, d_model=c.hidden_size, n_layers=c.num_hidden_layers, n_heads=H,
        n_kv_heads=getattr(c, "num_key_value_heads", None) or H, position="rope", rope_theta=_rope_theta(c) or 10000.0,
        norm="rmsnorm", norm_placement="pre", ffn="swiglu", d_ff=c.intermediate_size, tied=tied, causal=True,
        max_positions=c.max_position_embeddings, eps=c.rms_norm_eps, head_dim=getattr(c, "head_dim", None) or c.hidden_size // H,
        qkv_bias=qkv_bias, o_bias=bool(getattr(c, "attention_bias", False)), mlp_bias=bool(getattr(c, "mlp_bias", False)),
    )
    toy = cls(cfg)
    base = hf.model
    with torch.no_grad():
        toy.embed_tokens.weight.copy_(base.embed_tokens.weight)
        for t, h in zip(toy.layers, base.layers):
            for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
                _copy(getattr(t.self_attn, name), getattr(h.self_attn, name))
            for name in ("gate_proj", "up_proj", "down_proj"):
                _copy(getattr(t.mlp, name), getattr(h.mlp, name))
            t.input_layernorm.weight.copy_(h.input_layernorm.weight)
            t.post_attention_layernorm.weight.copy_(h.post_attention_layernorm.weight)
        toy.norm.weight.copy_(base.norm.weight)
        if not tied:
            toy.lm_head.weight.copy_(hf.lm_head.weight)
    return toy.eval()


def _from_gpt2(cls: Any, hf: Any) -> ToyTransformer:
    c = hf.config
    d = c.n_embd
    cfg = ToyConfig(
        vocab_size=c.vocab_size, d_model=d, n_layers=c.n_layer, n_heads=c.n_head, n_kv_heads=c.n_head,
        position="learned", norm="layernorm", norm_placement="pre", ffn="gelu", d_ff=c.n_inner or 4 * d,
        tied=True, causal=True, max_positions=c.n_positions, eps=c.layer_norm_epsilon,
        qkv_bias=True, o_bias=True, mlp_bias=True,
    )
    if c.activation_function not in ("gelu_new", "gelu_pytorch_tanh"):
        raise ValueError(f"GPT-2 activation '{c.activation_function}' is not the tanh GELU the toy implements")
    toy = cls(cfg)
    tr = hf.transformer
    with torch.no_grad():
        toy.embed_tokens.weight.copy_(tr.wte.weight)
        toy.embed_positions.weight.copy_(tr.wpe.weight)
        for t, h in zip(toy.layers, tr.h):
            # GPT-2 stores Linear weights transposed (Conv1D: [in, out]) and fuses q|k|v in c_attn.
            w, b = h.attn.c_attn.weight.detach().t(), h.attn.c_attn.bias.detach()  # [3d, d], [3d]
            for j, name in enumerate(("q_proj", "k_proj", "v_proj")):
                getattr(t.self_attn, name).weight.copy_(w[j * d : (j + 1) * d])
                getattr(t.self_attn, name).bias.copy_(b[j * d : (j + 1) * d])
            _copy(t.self_attn.o_proj, h.attn.c_proj, transpose=True)
            _copy(t.mlp.up_proj, h.mlp.c_fc, transpose=True)
            _copy(t.mlp.down_proj, h.mlp.c_proj, transpose=True)
            _copy(t.input_layernorm, h.ln_1)
            _copy(t.post_attention_layernorm, h.ln_2)
        _copy(toy.norm, tr.ln_f)
    return toy.eval()


# =============================================================================================
# Byte-level tokenizer


def _gpt2_byte_chars() -> list[str]:
    """GPT-2's printable stand-in character for each byte (so core.tracing can show ⟨E8⟩)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs))
    return [chr(table[b]) for b in range(256)]


class ByteTokenizer:
    """256 byte tokens + <bos>, <eos>, <pad>: every string can be encoded, nothing is unknown.

    A Chinese character is 3 UTF-8 bytes, so 3 tokens: the toy sees far longer sequences than a
    BPE model does for the same text (the tokens page shows why real models learn merges).
    """

    SPECIALS = ("<bos>", "<eos>", "<pad>")
    chat_template = None

    def __init__(self) -> None:
        self.bos_token_id, self.eos_token_id, self.pad_token_id = 256, 257, 258
        self.bos_token, self.eos_token, self.pad_token = self.SPECIALS
        self._chars = _gpt2_byte_chars()
        self._char_to_id = {c: i for i, c in enumerate(self._chars)} | {s: 256 + i for i, s in enumerate(self.SPECIALS)}

    def __len__(self) -> int:
        return 256 + len(self.SPECIALS)

    @property
    def vocab_size(self) -> int:
        return len(self)

    @property
    def all_special_ids(self) -> list[int]:
        return [256, 257, 258]

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids = list(text.encode("utf-8"))
        return [self.bos_token_id, *ids] if add_special_tokens else ids

    def __call__(self, text: str, add_special_tokens: bool = True, **_: Any) -> dict[str, list[int]]:
        return {"input_ids": self.encode(text, add_special_tokens)}

    def decode(self, ids: Any, skip_special_tokens: bool = False, **_: Any) -> str:
        if isinstance(ids, (int, np.integer)):
            ids = [ids]
        out, buf = [], bytearray()
        for i in (int(x) for x in ids):
            if i < 256:
                buf.append(i)
                continue
            out.append(buf.decode("utf-8", errors="replace"))
            buf = bytearray()
            if not skip_special_tokens and i < len(self):
                out.append(self.SPECIALS[i - 256])
        out.append(buf.decode("utf-8", errors="replace"))
        return "".join(out)

    def batch_decode(self, seqs: Any, **kw: Any) -> list[str]:
        return [self.decode(s, **kw) for s in seqs]

    def convert_ids_to_tokens(self, ids: Any) -> Any:
        if isinstance(ids, (int, np.integer)):
            return self.convert_ids_to_tokens([ids])[0]
        return [self._chars[i] if i < 256 else self.SPECIALS[i - 256] for i in (int(x) for x in ids)]

    def convert_tokens_to_ids(self, toks: Any) -> Any:
        if isinstance(toks, str):
            return self._char_to_id[toks]
        return [self._char_to_id[t] for t in toks]

    def get_vocab(self) -> dict[str, int]:
        return dict(self._char_to_id)


# =============================================================================================
# Facts, loading, tracing


def facts_of(model: ToyTransformer, name: str = TOY_ID) -> ModelFacts:
    c = model.cfg
    return ModelFacts(
        name=name, model_type="toy", n_layers=c.n_layers, n_heads=c.n_heads, n_kv_heads=c.n_kv_heads, head_dim=c.dh,
        d_model=c.d_model, d_ff=c.d_ff, vocab_size=c.vocab_size,
        norm_type="RMSNorm" if c.norm == "rmsnorm" else "LayerNorm",
        norm_placement=f"{c.norm_placement}-norm",
        position_type={"rope": "RoPE", "learned": "learned", "sinusoidal": "sinusoidal", "none": "none"}[c.position],
        activation="silu" if c.ffn == "swiglu" else "gelu_tanh", ffn_type="SwiGLU" if c.ffn == "swiglu" else "MLP",
        tied_embeddings=c.tied, n_params=model.n_params(), max_positions=c.max_positions,
        rope_theta=c.rope_theta if c.position == "rope" else None, eos_token_ids=(257,),
    )


def wrap(model: ToyTransformer, source: str, name: str = TOY_ID) -> LoadedModel:
    """A LoadedModel around any toy (trained, copied from HF, or freshly initialised)."""
    model.eval()
    model.requires_grad_(False)
    return LoadedModel(model, ByteTokenizer(), facts_of(model, name), name, "toy", source)


def load_trained(progress: Callable[[float, str], None] | None = None, folder: Path = ASSETS) -> LoadedModel:
    """The toy trained by ``python -m core.train_toy``, from assets/toy/ (instant: ~100 kB)."""
    from safetensors.torch import load_file

    from core.models import ModelLoadError

    if progress:
        progress(0.5, "loading the toy's weights")
    try:
        cfg = ToyConfig.from_dict(json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8")))
        state = load_file(str(folder / WEIGHTS_FILE))
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"the toy's weights are missing or broken in {folder} ({e}); run `python -m core.train_toy`.") from None
    model = ToyTransformer(cfg)
    model.load_state_dict(state, strict=False)  # strict=False: a tied lm_head is not stored twice
    if progress:
        progress(1.0, "ready")
    return wrap(model, f"assets/toy/{WEIGHTS_FILE} (trained by core/train_toy.py)")


def load_loss_curve(folder: Path = ASSETS) -> dict[str, Any]:
    return json.loads((folder / LOSS_FILE).read_text(encoding="utf-8"))


def _np(t: torch.Tensor, dtype: Any = np.float32) -> np.ndarray:
    return t.detach().cpu().float().numpy().astype(dtype, copy=False)


def trace_toy(loaded: LoadedModel, prompt: str, chat: bool = False, max_tokens: int = 512) -> Trace:
    """One forward pass of the toy on ``prompt``, every site recorded (same meaning as the real tracer)."""
    from core import tracing

    model: ToyTransformer = loaded.model
    limit = min(max_tokens, model.cfg.max_positions)
    enc = tracing.encode(loaded.tokenizer, prompt, chat=chat, max_tokens=limit)
    ids = enc.ids
    probes: dict[str, Any] = {}
    with loaded.lock, torch.inference_mode():
        logits, _ = model(torch.tensor([ids]), probes=probes)
    logits = logits[0]  # [T, V]
    lay = probes["layers"]

    def stack(key: str) -> np.ndarray:
        return _np(torch.stack([p[key] for p in lay]))  # [L, …]

    pos = probes["pos"]  # [T, d]
    resid0 = probes["embeddings"] + pos  # what enters block 0
    resid = torch.stack([resid0] + [p["resid_post"] for p in lay])  # [L+1, T, d]
    notes = list(enc.notes)
    if model.cfg.norm_placement == "post":
        notes.append("Post-norm toy: each block normalises after adding, so resid[l+1] ≠ resid[l] + attn_out[l] + mlp_out[l].")
    if not model.cfg.causal:
        notes.append("Bidirectional toy (no causal mask): every position sees the whole prompt, future included.")
    extras = {k: stack(k) for k in ("scores_raw", "scores_scaled", "scores_masked", "head_out", "concat", "up", "act", "resid_mid")}
    extras["o_proj"] = stack("attn_out")
    if "gate" in lay[0]:
        extras["gate"] = stack("gate")
    extras["mask"] = _np(lay[0]["mask"])  # [T, T]: the same mask in every layer
    extras["pos"] = _np(pos)
    lse = torch.logsumexp(logits, dim=-1)
    top = torch.topk(logits, k=min(tracing.TOP_K, logits.shape[-1]), dim=-1)
    meta = {"model": loaded.facts.name, "model_kind": "toy", "source": loaded.source, "facts": loaded.facts.to_dict(),
            "chat": chat, "toy_config": model.cfg.to_dict()}
    return Trace(
        prompt=prompt, text=enc.text, chat=chat,
        tokens=np.asarray(tracing.readable_tokens(loaded.tokenizer, ids), dtype=object),
        token_ids=np.asarray(ids, dtype=np.int64),
        embeddings=_np(probes["embeddings"]), resid=_np(resid), attn_out=stack("attn_out"), mlp_out=stack("down"),
        q=stack("q"), k=stack("k"), v=stack("v"), attn_pattern=_np(torch.stack([p["weights"] for p in lay]), np.float16),
        final_hidden=_np(probes["final_hidden"]), last_logits=_np(logits[-1]),
        top_ids=top.indices.numpy().astype(np.int64), top_logits=_np(top.values), logsumexp=_np(lse),
        meta=meta, truncated_from=enc.truncated_from, notes=notes, extras=extras,
    )


def full_logits(loaded: LoadedModel, tr: Trace) -> np.ndarray:
    """[T, V]: the LM head applied to the traced final hidden states."""
    with loaded.lock, torch.inference_mode():
        return _np(loaded.model.lm_head(torch.from_numpy(np.ascontiguousarray(tr.final_hidden))))


# =============================================================================================
# The word-order demo


def _align(a: list[int], b: list[int]) -> list[int] | None:
    """perm with b[j] == a[perm[j]] (equal tokens paired in order), or None if not the same multiset."""
    if sorted(a) != sorted(b):
        return None
    slots: dict[int, list[int]] = {}
    for i, t in enumerate(a):
        slots.setdefault(t, []).append(i)
    return [slots[t].pop(0) for t in b]


WORD_ORDER_SETTINGS = (("none", False), ("none", True), ("sinusoidal", False), ("rope", False), ("learned", False))


def word_order_demo(a: str = "我喜欢你", b: str = "你喜欢我", seed: int = 0, d_model: int = 32) -> list[dict[str, Any]]:
    """Can a (random, untrained) toy tell ``a`` from ``b`` — the same tokens in another order?

    For each (position, causal) setting: the largest difference between the two mean-pooled final
    hidden states, and whether b's per-token outputs are exactly a's, permuted. With no position
    information and no causal mask, attention is a function of a *set*: outputs permute with the
    inputs and the pooled vectors are identical. A causal mask or any position encoding breaks that.
    No <bos> is added: it would be the same token at the same place in both, and changes nothing.
    """
    tok = ByteTokenizer()
    ia, ib = tok.encode(a, add_special_tokens=False), tok.encode(b, add_special_tokens=False)
    perm = _align(ia, ib)
    if perm is None:
        raise ValueError("the two texts are not the same tokens in another order")
    rows = []
    for position, causal in WORD_ORDER_SETTINGS:
        torch.manual_seed(seed)
        cfg = ToyConfig(d_model=d_model, n_layers=2, n_heads=4, n_kv_heads=4, d_ff=2 * d_model, position=position, causal=causal,
                        max_positions=max(64, len(ia)), tied=True)
        model = ToyTransformer(cfg).eval()
        pa: dict[str, Any] = {}
        pb: dict[str, Any] = {}
        with torch.inference_mode():
            model(torch.tensor([ia]), probes=pa)
            model(torch.tensor([ib]), probes=pb)
        ha, hb = pa["final_hidden"], pb["final_hidden"]  # [T, d] each
        pooled = (ha.mean(0) - hb.mean(0)).abs().max().item()
        permuted = (ha[perm] - hb).abs().max().item()
        rows.append({"position": position, "causal": causal, "pooled_diff": pooled, "permuted_diff": permuted,
                     "distinguishable": pooled > 1e-4, "tokens": len(ia)})
    return rows
