"""The word-order demo: without position information, self-attention cannot tell "我喜欢你" from
"你喜欢我" — the same tokens in another order give the same (permuted) outputs."""

from __future__ import annotations

from typing import Any

import torch

from core.toy.model import ToyConfig, ToyTransformer
from core.toy.tokenizer import ByteTokenizer


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
