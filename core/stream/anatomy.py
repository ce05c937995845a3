"""Reading a model like the seeds' checklist: its config, where its parameters go, its block.

A *loaded* model: ``param_breakdown`` sorts every tensor of ``named_parameters()`` into a role; the parts
sum exactly to ``model.num_parameters()``. A pasted ``config.json``: ``analyse_config`` reads the same
checklist and ``estimate_params`` (``core.engine.budget``'s, the loader's) counts from the shapes alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from core.common.i18n import t
from core.common.numbers import human_bytes
from core.engine import budget
from core.engine import config as cfgread
from core.engine.roles import find_sites
from core.engine.types import ConfigError, HeadGeometry, LoadedModel

# The seeds' example model (tutorial 000, "实战三"), as its config.json reads.
QWEN25_05B_CONFIG: dict[str, Any] = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "vocab_size": 151936,
    "hidden_size": 896,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "intermediate_size": 4864,
    "hidden_act": "silu",
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-06,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "sliding_window": 32768,
    "use_sliding_window": False,
}
QWEN25_05B_PARAMS = 494_032_768  # published count, embeddings included

REQUIRED = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads")


# ---------------------------------------------------------------------------------------------
# the parameter breakdown of a loaded model

ROLES = ("embed", "pos_embed", "attn_q", "attn_k", "attn_v", "attn_qkv", "attn_o", "mlp_gate", "mlp_up", "mlp_down", "norm", "lm_head", "other")


def classify(name: str) -> str:
    """The role of one parameter tensor, from its HF name (Llama and GPT-2 vocabularies)."""
    leaf = name.split(".")
    parts = set(leaf)
    if parts & {"embed_tokens", "wte", "word_embeddings", "tok_embeddings"}:
        return "embed"
    if parts & {"wpe", "embed_positions", "position_embeddings"}:
        return "pos_embed"
    if "lm_head" in parts or "embed_out" in parts:
        return "lm_head"
    if any("norm" in p or p.startswith("ln") for p in leaf):
        return "norm"
    for key, role in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"), ("o_proj", "attn_o"),
                      ("gate_proj", "mlp_gate"), ("up_proj", "mlp_up"), ("down_proj", "mlp_down"),
                      ("c_attn", "attn_qkv"), ("query_key_value", "attn_qkv"), ("c_fc", "mlp_up")):
        if key in parts:
            return role
    if "c_proj" in parts:  # GPT-2 uses one name for two roles: the parent module tells which
        return "attn_o" if "attn" in parts else "mlp_down"
    return "other"


def param_breakdown(model: Any) -> dict[str, int]:
    """Parameters per role, summing exactly to ``model.num_parameters()``.

    ``named_parameters()`` yields a shared tensor once, as ``parameters()`` (and so
    ``num_parameters()``) counts it: a tied LM head is counted under ``embed`` only.
    """
    out = dict.fromkeys(ROLES, 0)
    for name, p in model.named_parameters():
        out[classify(name)] += int(p.numel())
    return {r: n for r, n in out.items() if n}


def param_table(model: Any, layer_prefix: str | None = None) -> list[dict[str, Any]]:
    """One row per tensor of one block (name, shape, count, role): the block's module tree in numbers."""
    rows = []
    for name, p in model.named_parameters():
        if layer_prefix is None or name.startswith(layer_prefix):
            short = name[len(layer_prefix):] if layer_prefix else name
            rows.append({"name": short, "shape": list(p.shape), "params": int(p.numel()), "role": classify(name)})
    return rows


def first_block_prefix(model: Any) -> str:
    """'model.layers.0.' (Llama) or 'transformer.h.0.' (GPT-2): the name prefix of block 0."""
    for name, _ in model.named_parameters():
        bits = name.split(".")
        for i, b in enumerate(bits):
            if b == "0" and i > 0:
                return ".".join(bits[: i + 1]) + "."
    return ""


def breakdown_check(parts: dict[str, int], n_params: int) -> tuple[bool, dict[str, str]]:
    """Whether the roles sum exactly to the model's own count, and the fields of the message saying so
    (anatomy.sum_ok / anatomy.sum_bad)."""
    n = sum(parts.values())
    return n == n_params, {"parts": f"{n:,}", "total": f"{n_params:,}"}


def breakdown_note(parts: dict[str, int], n_params: int, tied: bool) -> tuple[str, dict[str, str]]:
    """The sentence under the parameter breakdown, from this model's own facts: the sum check, and what
    the LM head costs. ``tied`` (``ModelFacts.tied_embeddings``: the config's tie_word_embeddings, or the
    head's weight being the embedding's very tensor) and an ``lm_head`` part of its own say the same thing
    for a sound model; the parts decide, since they are what was counted."""
    ok, kw = breakdown_check(parts, n_params)
    if not ok:
        return "anatomy.sum_bad", kw
    lm = int(parts.get("lm_head", 0))
    if lm:  # untied: the head is a matrix of its own, counted beside the embedding
        return "anatomy.sum_ok_untied", {**kw, "lm": f"{lm:,}", "share": f"{lm / max(1, n_params):.1%}"}
    return ("anatomy.sum_ok" if tied else "anatomy.sum_ok_nohead"), kw


def first_block_text(model: Any) -> str:
    """Block 0 as PyTorch prints it (its module tree); UnsupportedArchitectureError where no block list is found."""
    return str(find_sites(model).blocks[0])


def block_rows(model: Any) -> list[dict[str, Any]]:
    """``param_table`` of block 0 (names shortened to the block's own)."""
    return param_table(model, first_block_prefix(model))


def block_table(rows: list[dict[str, Any]], lang: str) -> pd.DataFrame:
    """Block 0's tensors as a table: name, shape, count and role, in ``lang``."""
    return pd.DataFrame([{t("anatomy.col_name", lang): r["name"], t("anatomy.col_shape", lang): str(r["shape"]),
                          t("anatomy.col_params", lang): r["params"], t("anatomy.col_role", lang): t(f"anatomy.role_{r['role']}", lang)}
                         for r in rows])


def block_table_view(df: pd.DataFrame, lang: str):
    """``block_table`` as a page shows it: counts with thousands separators, as the caption and the chart."""
    return df.style.format({t("anatomy.col_params", lang): "{:,}"})


def block_args(rows: list[dict[str, Any]], n_layers: int, n_params: int) -> dict[str, Any]:
    """The fields of anatomy.block_total: one block's count, × the blocks, and their share of the model."""
    n = sum(r["params"] for r in rows)
    return {"n": f"{n:,}", "L": n_layers, "all": f"{n * n_layers:,}", "share": f"{n * n_layers / n_params:.1%}"}


# ---------------------------------------------------------------------------------------------
# a config.json, read like the checklist


def parse_config(text: str) -> dict[str, Any]:
    """JSON text → a validated dict, or ConfigError naming the problem (``core.engine.config.parse``)."""
    return cfgread.parse(text)


@dataclass(frozen=True)
class ConfigReport:
    """The checklist's answers for one config."""

    model_type: str
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    hidden_act: str
    max_position_embeddings: int | None
    rope_theta: float | None
    rope_type: str | None
    norm_type: str
    norm_placement: str
    tied_embeddings: bool
    gated_mlp: bool
    sliding_window: int | None
    n_experts: int | None
    notes: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)  # the validated config it reads

    @property
    def geometry(self) -> HeadGeometry:
        return HeadGeometry(self.model_type, self.num_hidden_layers, self.num_attention_heads, self.num_key_value_heads,
                            self.head_dim, self.hidden_size, self.max_position_embeddings)

    @property
    def attention_kind(self) -> str:
        return self.geometry.kind

    def kv_bytes_per_token(self, bytes_per_value: int = 2) -> int:
        """K and V for every layer and KV head: 2 × L × Hkv × head_dim × bytes."""
        return self.geometry.kv_bytes_per_token(bytes_per_value)

    def checklist(self) -> list[tuple[str, str]]:
        """(item, value) in the seeds' order; the page adds a one-line explanation per item."""
        g = self.num_attention_heads // self.num_key_value_heads
        rope = "—" if self.rope_theta is None else f"θ = {self.rope_theta:,.0f}" + (f" ({self.rope_type})" if self.rope_type else "")
        return [
            ("vocab_size", f"{self.vocab_size:,}"),
            ("hidden_size", f"{self.hidden_size:,}"),
            ("num_hidden_layers", f"{self.num_hidden_layers}"),
            ("num_attention_heads", f"{self.num_attention_heads}"),
            ("num_key_value_heads", f"{self.num_key_value_heads} → {self.attention_kind}" + (f" ({g}:1)" if self.attention_kind == "GQA" else "")),
            ("head_dim", f"{self.head_dim}"),
            ("intermediate_size", f"{self.intermediate_size:,} ({self.intermediate_size / self.hidden_size:.2f} × hidden)"),
            ("hidden_act", f"{self.hidden_act}" + (" (SwiGLU)" if self.gated_mlp and self.hidden_act in ("silu", "swish") else "")),
            ("max_position_embeddings", "—" if self.max_position_embeddings is None else f"{self.max_position_embeddings:,}"),
            ("rope", rope),
            ("norm", f"{self.norm_type}, {self.norm_placement}"),
            ("special", ", ".join(x for x in (
                f"sliding window {self.sliding_window:,}" if self.sliding_window else "",
                f"MoE × {self.n_experts}" if self.n_experts else "",
            ) if x) or "—"),
            ("tie_word_embeddings", "yes" if self.tied_embeddings else "no"),
        ]


def checklist_table(report: ConfigReport, lang: str) -> pd.DataFrame:
    """The checklist as a table indexed by item: its value and a one-line meaning, in ``lang``."""
    item = t("anatomy.col_item", lang)
    return pd.DataFrame([{item: k, t("anatomy.col_value", lang): v, t("anatomy.col_meaning", lang): t(f"anatomy.ck_{k}", lang)}
                         for k, v in report.checklist()]).set_index(item)


def analyse_config(cfg: dict[str, Any]) -> ConfigReport:
    """Read a config dict; raises ConfigError naming the field that is missing or impossible (every field
    read here is validated by ``core.engine.config``, the one validation module)."""
    cfg = cfgread.check(cfg)
    for key in REQUIRED:
        if cfgread.get(cfg, key) is None:
            raise ConfigError("missing", key)
    mt = cfgread.text(cfg.get("model_type"), "model_type") or "?"
    d = cfgread.pos_int(cfg, "hidden_size")
    H = cfgread.pos_int(cfg, "num_attention_heads")
    Hkv = cfgread.pos_int(cfg, "num_key_value_heads", H)  # absent → one KV head per query head (MHA)
    head_dim = cfgread.head_size(cfg, d, H)
    cfgread.check_heads(H, Hkv, head_dim, cfgread.pos_int(cfg, "num_hidden_layers"))
    gated = _flag(cfg, "mlp_gated", mt not in budget.UNGATED_TYPES and "n_embd" not in cfg)
    ff = cfgread.pos_int(cfg, "intermediate_size", 4 * d)
    theta, rope_type = cfgread.rope(cfg)
    ln = mt in budget.UNGATED_TYPES or any(k in cfg for k in cfgread.LAYER_NORM_KEYS)
    sw = cfgread.opt_int(cfg, "sliding_window") if _flag(cfg, "use_sliding_window", True) else None
    return ConfigReport(
        model_type=mt,
        vocab_size=cfgread.pos_int(cfg, "vocab_size"),
        hidden_size=d,
        num_hidden_layers=cfgread.pos_int(cfg, "num_hidden_layers"),
        num_attention_heads=H,
        num_key_value_heads=Hkv,
        head_dim=head_dim,
        intermediate_size=ff,
        hidden_act=cfgread.text(cfgread.get(cfg, "hidden_act"), "hidden_act") or "?",
        max_position_embeddings=cfgread.opt_int(cfg, "max_position_embeddings"),
        rope_theta=theta,
        rope_type=rope_type,
        norm_type="LayerNorm" if ln else "RMSNorm",
        # every HF decoder-only family read here normalises before the sub-layer; the toy may not
        norm_placement=cfgread.text(cfg.get("norm_placement"), "norm_placement") or "pre-norm",
        tied_embeddings=_flag(cfg, "tie_word_embeddings", mt in budget.UNGATED_TYPES),
        gated_mlp=gated,
        sliding_window=sw,
        n_experts=cfgread.n_experts(cfg),
        config=cfg,
    )


def _flag(cfg: dict[str, Any], key: str, default: bool) -> bool:
    v = cfgread.flag(cfg.get(key), key)
    return default if v is None else v


def estimate_params(r: ConfigReport) -> dict[str, int]:
    """Parameters per role from the config's shapes alone (no weights needed): ``core.engine.budget``'s
    count, the one the loader sizes a model with, in ``ROLES``'s vocabulary (so it reads beside
    ``param_breakdown``). Llama- and GPT-2-style blocks, biases where the family has them, an LM head
    unless tied; a mixture-of-experts MLP once per expert, plus the router."""
    return budget.estimate_params(r.config)


# A pasted config reads as a known model when its family, width and depth are that model's: the paste
# section then quotes the model's published count beside the estimate.
IDENTITY = ("model_type", "hidden_size", "num_hidden_layers")
KNOWN_COUNTS = ((analyse_config(QWEN25_05B_CONFIG), QWEN25_05B_PARAMS),)
KV_CONTEXT, KV_CONTEXT_MAX = 4096, 32768  # the context the KV line sizes: the config's own (4096 if absent), at most 32768


def published_count(report: ConfigReport) -> int | None:
    """The published parameter count of the known model ``report`` describes, or None."""
    for known, count in KNOWN_COUNTS:
        if all(getattr(report, f) == getattr(known, f) for f in IDENTITY):
            return count
    return None


@dataclass(frozen=True)
class Estimate:
    """What the paste section says about one config: parameters per role from its shapes, the published
    count when it is a known model's, and the KV cache it implies."""

    parts: dict[str, int]
    published: int | None
    kv_bf16: int  # KV-cache bytes per token, 2-byte values
    kv_fp32: int  # … 4-byte values
    context: int  # the positions the KV line sizes

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    def args(self) -> dict[str, str]:
        """The fields of anatomy.estimate, anatomy.estimate_known (with ``published``) and anatomy.kv."""
        out = {"total": f"{self.total:,}", "bf16": human_bytes(self.kv_bf16), "fp32": human_bytes(self.kv_fp32),
               "ctx": human_bytes(self.kv_bf16 * self.context), "n": f"{self.context:,}"}
        if self.published is not None:
            out |= {"known": f"{self.published:,}", "diff": f"{self.total - self.published:+,}"}
        return out


def estimate_config(report: ConfigReport) -> Estimate:
    return Estimate(estimate_params(report), published_count(report), report.kv_bytes_per_token(2), report.kv_bytes_per_token(4),
                    min(report.max_position_embeddings or KV_CONTEXT, KV_CONTEXT_MAX))


def config_of(loaded: LoadedModel) -> dict[str, Any]:
    """The loaded model's config as a dict: HF's own, or one rebuilt from its facts (the toy)."""
    cfg = getattr(loaded.model, "config", None)
    if hasattr(cfg, "to_dict"):  # without the folder it was loaded from: a page never shows a server path
        return {k: v for k, v in cfg.to_dict().items() if k != "_name_or_path"}
    f = loaded.facts
    return {
        "model_type": f.model_type, "vocab_size": f.vocab_size, "hidden_size": f.d_model,
        "num_hidden_layers": f.n_layers, "num_attention_heads": f.n_heads, "num_key_value_heads": f.n_kv_heads,
        "head_dim": f.head_dim, "intermediate_size": f.d_ff, "hidden_act": f.activation,
        "max_position_embeddings": f.max_positions, "rope_theta": f.rope_theta,
        "tie_word_embeddings": f.tied_embeddings, "mlp_gated": f.ffn_type == "SwiGLU", "norm_placement": f.norm_placement,
        **({"layer_norm_eps": 1e-5} if f.norm_type == "LayerNorm" else {"rms_norm_eps": 1e-6}),
    }


def config_text(cfg: dict[str, Any]) -> str:
    """A config as indented JSON text, for the page's text area."""
    return json.dumps(cfg, indent=2, default=str, ensure_ascii=False)
