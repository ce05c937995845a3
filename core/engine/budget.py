"""How big a model is before it exists: its parameter count read off ``config.json`` alone, what its
float32 weights weigh, and how much this server lets one model take.

The loader asks *before* anything is allocated, so a config too big for the machine is refused with the
figure. ``estimate_params(cfg)`` gives parameters per role (exact for the Llama, Mistral, Qwen, Gemma,
Phi-3, GPT-2, GPT-NeoX, OPT … families, approximate for others: it sizes a budget, it does not audit);
``n_params`` is their sum (the anatomy page's estimate too). ``budget_bytes()`` is ``XRAY_MEMORY_BUDGET_GB``
or 40 % of the memory, never under 1 GB, so the embedded SmolLM2 always fits. Pure Python: no torch.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from core.common import digits, settings
from core.engine import config as cfgread

BUDGET_SHARE = 0.40  # of the machine's memory, when the operator sets nothing
BUDGET_FLOOR = 1.0e9  # bytes: the embedded model (≈ 0.54 GB in float32) always fits
GB = 1.0e9  # decimal, as the setting is written

# Families whose MLP is the classic two-matrix one (no gate) and whose norms are LayerNorm (gain + bias).
UNGATED_TYPES = frozenset({
    "gpt2", "gpt_neo", "gpt_neox", "gptj", "opt", "bloom", "falcon", "phi", "codegen", "starcoder2",
    "gpt_bigcode", "biogpt", "xglm", "mpt",
})
# Families with a learned position table (wte + wpe), and how many extra rows it has (OPT keeps two).
LEARNED_POSITIONS = {"gpt2": 0, "gpt_bigcode": 0, "gpt_neo": 0, "opt": 2, "biogpt": 2}


def estimate_params(cfg: Any) -> dict[str, int]:
    """Parameters per role from the config's shapes alone (no weights, nothing allocated).

    Llama-style (gated MLP, RMSNorm): q/k/v/o (+ biases: Llama's ``attention_bias``, Qwen2's q/k/v
    biases always), gate/up/down (+ ``mlp_bias``), two RMSNorm gains per block and a final one,
    Qwen3's per-head q/k norms. GPT-2-style (ungated): fused q/k/v with bias, a two-matrix MLP with
    biases, LayerNorm gain and bias, a learned position table. An LM head unless the embeddings are
    tied. Mixture-of-experts: the MLP once per expert plus the router ("other"). The roles are
    ``core.stream.anatomy.ROLES``'s. Raises ``ConfigError`` naming a missing or impossible field.
    """
    m = cfgread.read(cfg)  # the config, read once (a multimodal wrapper's text_config is where the shape lives)
    g = m.geometry(name="config")
    d = g.d_model or m.need(m.d_model, "hidden_size")
    L, H, Hkv, hd = g.n_layers, g.n_heads, g.n_kv_heads, g.dh
    V = m.need(m.vocab_size, "vocab_size")
    mt = m.model_type or ""
    ungated = mt in UNGATED_TYPES or m.gpt2_names
    gated = not ungated if m.mlp_gated is None else m.mlp_gated
    ff = m.d_ff if m.d_ff is not None else cfgread.whole(4 * d, "intermediate_size")
    q_out, kv_out = H * hd, Hkv * hd
    layer_norm = ungated or m.layer_norm_named  # a gated family naming a LayerNorm epsilon (StableLM) too
    norm = 2 * d if layer_norm else d  # LayerNorm has a bias too
    experts = m.n_experts if m.n_experts and m.n_experts > 1 else 0

    out: dict[str, int] = {"embed": V * d}
    if gated:
        qkv_bias = True if mt == "qwen2" else bool(m.attention_bias)
        o_bias = False if mt == "qwen2" else bool(m.attention_bias)
        mlp_bias = bool(m.mlp_bias)
        out["attn_q"] = L * (d * q_out + (q_out if qkv_bias else 0))
        out["attn_k"] = L * (d * kv_out + (kv_out if qkv_bias else 0))
        out["attn_v"] = L * (d * kv_out + (kv_out if qkv_bias else 0))
        out["attn_o"] = L * (q_out * d + (d if o_bias else 0))
        mlp = {"mlp_gate": d * ff + (ff if mlp_bias else 0), "mlp_up": d * ff + (ff if mlp_bias else 0),
               "mlp_down": ff * d + (d if mlp_bias else 0)}
    else:
        if mt in LEARNED_POSITIONS:
            n_pos = m.need(m.max_positions, "max_position_embeddings")
            out["pos_embed"] = (n_pos + LEARNED_POSITIONS[mt]) * d
        out["attn_qkv"] = L * (d * (q_out + 2 * kv_out) + q_out + 2 * kv_out)
        out["attn_o"] = L * (q_out * d + d)
        mlp = {"mlp_up": d * ff + ff, "mlp_down": ff * d + d}
    for role, n in mlp.items():
        out[role] = L * n * max(experts, 1)
    if experts:
        out["other"] = L * d * experts  # the router
    out["norm"] = (2 * L + 1) * norm + (L * 2 * hd if mt == "qwen3" else 0)  # Qwen3 also norms q and k per head
    if not (ungated if m.tied_embeddings is None else m.tied_embeddings):
        out["lm_head"] = V * d
    return out


def n_params(cfg: Any) -> int:
    """The parameter count ``estimate_params`` adds up to (tied embeddings counted once)."""
    return sum(estimate_params(cfg).values())


def weight_bytes(n: int, bytes_per_value: int = 4) -> int:
    """What ``n`` parameters weigh in memory (float32 unless told)."""
    return int(n) * int(bytes_per_value)


# ---------------------------------------------------------------------------------------------
# the server's budget


def machine_memory() -> int | None:
    """Bytes of memory this process may use: the physical RAM, or a container's cgroup limit when
    that is smaller. None when the system does not say."""
    total: int | None = None
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        try:
            for line in Path("/proc/meminfo").read_text().splitlines():
                if line.startswith("MemTotal:"):
                    total = int(line.split()[1]) * 1024
                    break
        except (OSError, ValueError, IndexError):
            total = None
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            raw = Path(limit_file).read_text().strip()
        except OSError:
            continue
        n = digits.whole_in(raw, 1)  # "max" (no limit) is no number
        if n is not None and (total is None or n < total):
            total = n
    return total if total and total > 0 else None


def default_budget_bytes() -> int:
    """40 % of the machine's memory, at least 1 GB (8 GB assumed when the system does not say)."""
    mem = machine_memory() or 8 * 1024**3
    return int(max(BUDGET_SHARE * mem, BUDGET_FLOOR))


def budget_bytes() -> int:
    """The most one model's float32 weights may take on this server, in bytes: ``XRAY_MEMORY_BUDGET_GB``
    (decimal GB, e.g. ``4`` or ``2.5``; ``core.common.settings``) when set, else ``default_budget_bytes()``."""
    gb = settings.get().memory_budget_gb
    return default_budget_bytes() if gb is None else int(gb * GB)


def cache_bytes() -> int:
    """What the server keeps of traces and their derived layers, in all sessions together:
    ``XRAY_CACHE_GB`` (decimal GB; ``core.common.settings``), 1.5 GB by default."""
    return int(settings.get().cache_gb * GB)


def fmt_gb(n_bytes: float) -> str:
    """Decimal gigabytes with one decimal ('5.1 GB'); megabytes below 0.1 GB ('54 MB')."""
    if n_bytes >= 0.1 * GB:
        return f"{n_bytes / GB:.1f} GB"
    return f"{max(n_bytes / 1e6, 0.0):.3g} MB"


def fmt_count(n: float) -> str:
    """A parameter count in words a learner reads: 1.27 B, 135 M, 30.7 K."""
    for size, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)}"
