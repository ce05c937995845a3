"""Zero-ablation of attention heads: does the next-token distribution care about a head?

A head's contribution to the residual stream is its slice of the output projection's input:
``attn_out = o_proj(concat(head_0, …, head_{H-1}))``, head h occupying columns h·dh … (h+1)·dh.
Zeroing that slice removes exactly that head's write (and nothing else). Zeroing the whole input
removes the layer's attention (GPT-2's ``c_proj`` bias, if any, still gets added: it belongs to no head).

The hook is a forward *pre*-hook on the output projection, registered inside a ``with`` block and
removed in ``finally``; it acts only for the thread that registered it, and the forward pass runs
under ``loaded.lock`` with ``torch.inference_mode()``, so other sessions sharing the model never see it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from core.common.i18n import t
from core.common.numbers import softmax_of_tensor, top_k
from core.engine import roles, tokens
from core.engine.hooks import scoped_hooks
from core.engine.roles import out_proj  # the one finder of W_O (re-exported: ablation.out_proj)
from core.engine.types import EmptyPromptError, LoadedModel, Tokenizer

MAX_TOKENS = 256  # each ablation is a fresh forward pass; keep it quick on a CPU

Ablation = Sequence[tuple[int, int | None]]  # (layer, head) or (layer, None) = the whole layer


def too_long(n_tokens: int) -> bool:
    """Whether a prompt is too long for the page's ablations (MAX_TOKENS)."""
    return n_tokens > MAX_TOKENS


@dataclass(frozen=True)
class Target:
    """What the page ablates: one head of a layer (scope "head"), or the layer's whole attention ("layer")."""

    layer: int
    head: int
    scope: str

    @property
    def ablate(self) -> tuple[tuple[int, int | None], ...]:
        return ((self.layer, self.head if self.scope == "head" else None),)

    @property
    def marked(self) -> int | None:
        """The ablated head's index among its layer's heads (None when the whole layer is ablated)."""
        return self.head if self.scope == "head" else None

    def marked_in_model(self, n_heads: int) -> int | None:
        """The ablated head's index among every head of the model, layer by layer."""
        return self.layer * n_heads + self.head if self.scope == "head" else None


def _per_layer(ablate: Ablation, n_layers: int, n_heads: int) -> dict[int, list[int | None]]:
    out: dict[int, list[int | None]] = {}
    for layer, head in ablate:
        if not 0 <= int(layer) < n_layers:
            raise ValueError(f"layer {layer} is out of range 0 … {n_layers - 1}")
        if head is not None and not 0 <= int(head) < n_heads:
            raise ValueError(f"head {head} is out of range 0 … {n_heads - 1}")
        out.setdefault(int(layer), []).append(None if head is None else int(head))
    return out


@contextlib.contextmanager
def zero_heads(loaded: LoadedModel, ablate: Ablation, per_example: list[Ablation] | None = None) -> Iterator[None]:
    """Zero heads' slices of the output projection's input, for this thread, inside the block.

    ``ablate`` applies to every batch row; ``per_example[b]`` (optional) adds ablations for batch
    row b only, so a sweep over many heads can run as one batched forward pass.
    """
    sites = roles.find_sites(loaded.model)
    H, dh = loaded.facts.n_heads, loaded.facts.head_dim
    L = len(sites.attns)
    common = _per_layer(ablate, L, H)
    rows = [_per_layer(a, L, H) for a in (per_example or [])]

    def zero(x: torch.Tensor, heads: list[int | None]) -> None:  # x [..., T, H*dh], edited in place
        for h in heads:
            if h is None:
                x[..., :] = 0
            else:
                x[..., roles.head_slice(h, dh)] = 0

    def pre_for(layer: int) -> Any:
        def pre(_m: Any, args: tuple) -> tuple:
            x = args[0].clone()  # [B, T, H*dh]: never edit the caller's tensor
            zero(x, common.get(layer, []))
            for b, r in enumerate(rows):
                if layer in r:
                    zero(x[b], r[layer])
            return (x, *args[1:])

        return pre

    layers = sorted(set(common) | {layer for r in rows for layer in r})
    with scoped_hooks((out_proj(sites.attns[layer]), "pre", pre_for(layer)) for layer in layers):
        yield


def next_token_probs(loaded: LoadedModel, ids: Sequence[int], ablate: Ablation = ()) -> np.ndarray:
    """The next-token distribution [V] (float64) after the last of ``ids``, with ``ablate`` zeroed."""
    if not ids:
        raise EmptyPromptError("no_tokens")
    x = torch.tensor([list(ids)], dtype=torch.long)  # [1, T]
    with loaded.lock, torch.inference_mode(), zero_heads(loaded, ablate):
        logits = loaded.model(input_ids=x, use_cache=False).logits  # [1, T, V]
    return softmax_of_tensor(logits[:, -1, :])[0]  # [V] float64, torch's own softmax


def sweep_heads(loaded: LoadedModel, ids: Sequence[int], layers: Sequence[int], chunk: int = 32) -> np.ndarray:
    """Next-token distributions with each head of ``layers`` ablated alone: [len(layers), H, V].

    Batched: row b of a forward pass ablates one head, so a whole layer costs one pass.
    """
    H = loaded.facts.n_heads
    jobs = [(layer, h) for layer in layers for h in range(H)]
    out = []
    for s in range(0, len(jobs), chunk):
        part = jobs[s : s + chunk]
        x = torch.tensor([list(ids)] * len(part), dtype=torch.long)  # [B, T]
        with loaded.lock, torch.inference_mode(), zero_heads(loaded, (), per_example=[[j] for j in part]):
            logits = loaded.model(input_ids=x, use_cache=False).logits  # [B, T, V]
        out.append(softmax_of_tensor(logits[:, -1, :]))  # [B, V]
    V = out[0].shape[-1]
    return np.concatenate(out).reshape(len(layers), H, V)


@dataclass(frozen=True)
class Effect:
    kl: float  # KL(before ‖ after) in nats
    top_id: int  # the original most likely next token
    p_before: float  # its probability before …
    p_after: float  # … and after the ablation
    new_top_id: int  # the most likely token after the ablation

    @property
    def delta(self) -> float:
        return self.p_after - self.p_before

    @property
    def same_top(self) -> bool:
        """Whether the most likely next token is still the same one."""
        return self.new_top_id == self.top_id


def kl_divergence(p: np.ndarray, q: np.ndarray) -> float:
    """KL(p ‖ q) = Σ p log(p/q), in nats; terms with p = 0 contribute nothing."""
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    m = p > 0
    return float(np.sum(p[m] * (np.log(p[m]) - np.log(np.maximum(q[m], 1e-300)))))


def effect(before: np.ndarray, after: np.ndarray) -> Effect:
    top = int(np.argmax(before))
    return Effect(kl_divergence(before, after), top, float(before[top]), float(after[top]), int(np.argmax(after)))


def top_table(tokenizer: Tokenizer, before: np.ndarray, after: np.ndarray, k: int = 10) -> list[dict[str, Any]]:
    """Rows for a table: the k most likely tokens before and after, with both probabilities."""
    ids = list(dict.fromkeys([*top_k(before, k).tolist(), *top_k(after, k).tolist()]))
    names = tokens.visible_tokens(tokenizer, ids)  # the one label rule: ⏎, ␣, never a blank cell
    rows = [
        {"id": int(i), "token": n, "p_before": float(before[i]), "p_after": float(after[i]), "delta": float(after[i] - before[i])}
        for i, n in zip(ids, names)
    ]
    rows.sort(key=lambda r: -r["p_before"])
    return rows


def points(delta: float) -> str:
    """A change of probability in percentage points, signed: '+32.04', '-1.37', '0.00' (never '-0.00').
    Not a percent: p going from 15 % to 47 % rose by 32 points, which is +210 %."""
    v = round(float(delta) * 100, 2)
    return "0.00" if v == 0 else f"{v:+.2f}"


def points_text(delta: float, lang: str) -> str:
    """``points`` with its unit, for a metric's delta: '+32.04 points' / '+32.04 个百分点'."""
    return t("ablation.pp", lang, v=points(delta))


def top_frame(tokenizer: Tokenizer, before: np.ndarray, after: np.ndarray, lang: str, k: int = 8) -> pd.DataFrame:
    """``top_table`` as shown: translated headings, probabilities as percents, their change in
    percentage points (a heading says so) — text, so the table reads the same on a projector."""
    rows = [{**r, "p_before": f"{r['p_before']:.2%}", "p_after": f"{r['p_after']:.2%}", "delta": points(r["delta"])}
            for r in top_table(tokenizer, before, after, k)]
    return pd.DataFrame(rows).rename(columns={
        "token": t("ui.token", lang), "p_before": t("ablation.p_before", lang), "p_after": t("ablation.p_after", lang),
        "delta": t("ablation.delta_pp", lang)})


def head_names(n_heads: int, n_layers: int | None = None) -> list[str]:
    """'h0', 'h1' … for one layer's heads, or 'L0·h0' … for every head of ``n_layers`` layers."""
    if n_layers is None:
        return [f"h{h}" for h in range(n_heads)]
    return [f"L{i}·h{h}" for i in range(n_layers) for h in range(n_heads)]


def sweep_args(sharpness: np.ndarray, kl: np.ndarray) -> dict[str, Any]:
    """The fields of ablation.sweep_result: the sharpest head (hs, its sharpness s, its KL ks) beside the
    head whose removal changes the next token most (hk, its KL k, its sharpness sk)."""
    hs, hk = int(np.argmax(sharpness)), int(np.argmax(kl))
    return {"hs": hs, "s": float(sharpness[hs]), "ks": float(kl[hs]), "hk": hk, "k": float(kl[hk]), "sk": float(sharpness[hk])}
