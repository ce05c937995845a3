"""The toy transformer: a whole decoder-only language model you can read in one file.

Names follow Hugging Face's ``modeling_llama.py`` (``embed_tokens``, ``layers[i].self_attn.q_proj`` …,
``norm``, ``lm_head``), so the toy and the real model read alike and tiny HF weights can be copied in
(``ToyTransformer.from_hf``) to prove this file computes what transformers computes. Every intermediate
value is visible: ``forward(probes={})`` fills each site under its name in ``core.engine.trace.SITES``
(``_probe`` refuses any other), batch item 0 only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from core.engine import config as cfgread
from core.engine.trace import SITE

POSITIONS = ("none", "sinusoidal", "learned", "rope")
NORMS = ("layernorm", "rmsnorm")
PLACEMENTS = ("pre", "post")
FFNS = ("swiglu", "gelu")

KV = tuple[torch.Tensor, torch.Tensor]  # (K, V), each [1, Hkv, T_total, dh]


def _probe(probe: dict | None, batched: bool = True, /, **sites: torch.Tensor) -> None:
    """Keep each site in ``probe`` (when probing) under its registry name, batch item 0 of a batched one."""
    if probe is None:
        return
    for name, val in sites.items():
        if name not in SITE:
            raise KeyError(f"the toy probes {name!r}, which is not a row of core.engine.trace.SITES: add the row")
        probe[name] = (val[0] if batched else val).detach()


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
    def from_dict(cls, d: dict[str, Any]) -> ToyConfig:
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
        _probe(probe, q=q, k=k, v=v, scores_raw=scores_raw, scores_scaled=scores_scaled, scores_masked=scores_masked,
               attn_pattern=weights, head_out=head_out, concat=concat, o_proj=out, attn_out=out)
        _probe(probe, False, mask=mask)  # [T, T_total]: no batch dimension
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
            gate_act = F.silu(gate)  # [B, T, d_ff]
            act = gate_act * up  # the gate decides, per feature, how much of "up" passes
            _probe(probe, gate=gate, gate_act=gate_act)
        else:
            act = F.gelu(up, approximate="tanh")
        down = self.down_proj(act)  # [B, T, d]
        _probe(probe, up=up, act=act, mlp_out=down)
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
        _probe(probe, resid_mid=mid)
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
        _B, T = input_ids.shape
        start = past_kv[0][0].shape[2] if past_kv else 0
        emb = self.embed_tokens(input_ids)  # [B, T, d]
        pos = self.position_add(start, T)  # [T, d] or None
        x = emb if pos is None else emb + pos
        rope = None
        if self.cfg.position == "rope":
            rope = rope_cos_sin(torch.arange(start, start + T), self.cfg.dh, self.cfg.rope_theta)
        _probe(probes, embeddings=emb)
        _probe(probes, False, pos=pos if pos is not None else torch.zeros(T, self.cfg.d_model))  # [T, d]
        stream = [x]  # the residual stream at every block boundary
        if probes is not None:
            probes["layers"] = []  # one probe dict per block
        new_kv: list[KV] = []
        for i, layer in enumerate(self.layers):
            probe = {} if probes is not None else None
            x, kv = layer(x, rope, past_kv[i] if past_kv else None, probe)
            new_kv.append(kv)
            if probes is not None:
                probes["layers"].append(probe)
                stream.append(x)
        h = self.norm(x)  # [B, T, d]
        logits = self.lm_head(h)  # [B, T, V]
        if probes is not None:
            _probe(probes, False, resid=torch.stack([s[0] for s in stream]))  # [L+1, T, d]
        _probe(probes, final_hidden=h)
        return logits, (new_kv if use_cache else None)

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())  # a tied matrix is one Parameter, counted once

    # -----------------------------------------------------------------------------------------
    # Copying a Hugging Face model

    @classmethod
    def from_hf(cls, hf: nn.Module) -> ToyTransformer:
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


def _from_llama(cls: type[ToyTransformer], hf: nn.Module) -> ToyTransformer:
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
        n_kv_heads=getattr(c, "num_key_value_heads", None) or H, position="rope", rope_theta=cfgread.rope(c)[0] or 10000.0,
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


def _from_gpt2(cls: type[ToyTransformer], hf: nn.Module) -> ToyTransformer:
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
