"""The toy as an app model: its facts, loading the trained weights, and one traced forward pass
that fills the same ``Trace`` as the real tracer (plus the toy's own sites, read by ``tr.site``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file

from core.common.paths import asset
from core.common.progress import Progress, noop
from core.engine.tokens import encode, readable_tokens
from core.engine.trace import LAYER_SITES, MAX_TOKENS, MLP, SITES, TOY, Trace
from core.engine.types import TOY_ID, LoadedModel, ModelFacts, ModelLoadError, Phrase
from core.toy.model import ToyConfig, ToyTransformer
from core.toy.tokenizer import ByteTokenizer

ROOT = Path(__file__).resolve().parents[2]
ASSETS = asset("toy")
WEIGHTS_FILE = "toy.safetensors"
CONFIG_FILE = "config.json"
LOSS_FILE = "loss_curve.json"
# Where the trained toy comes from, as a page or an exported trace says it (no server path).
TOY_SOURCE = f"the toy transformer trained by make toy (assets/toy/{WEIGHTS_FILE}, shipped with the app)"


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


def load_trained(progress: Progress = noop, folder: Path = ASSETS) -> LoadedModel:
    """The toy trained by ``make toy`` (``python -m core.toy.train``), from assets/toy/ (instant: ~100 kB);
    its progress in two steps, said in the reader's language."""
    progress(1, 2, Phrase("load.step_toy"))
    try:
        cfg = ToyConfig.from_dict(json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8")))
        state = load_file(str(folder / WEIGHTS_FILE))
    except (OSError, ValueError, TypeError, KeyError) as e:  # missing, unreadable, or not the toy's config
        where = _where(folder)
        error = f"{type(e).__name__}: {e}"
        for full in sorted({str(folder.resolve()), str(folder)}, key=len, reverse=True):
            error = error.replace(full, where)
        error = " ".join(error.replace("`", "ˋ").split())[:300]
        raise ModelLoadError("toy_broken", where=f"`{where}`", error=f"`{error}`") from None
    model = ToyTransformer(cfg)
    model.load_state_dict(state, strict=False)  # strict=False: a tied lm_head is not stored twice
    progress(2, 2, Phrase("load.ready"))
    return wrap(model, TOY_SOURCE)


def _where(folder: Path) -> str:
    """``folder`` as a message may name it: inside the app, relative to it (``assets/toy``); elsewhere,
    its name alone (a server path is never shown)."""
    try:
        return folder.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return folder.name


def load_loss_curve(folder: Path = ASSETS) -> dict[str, Any]:
    return json.loads((folder / LOSS_FILE).read_text(encoding="utf-8"))


def _np(t: torch.Tensor, dtype: Any = np.float32) -> np.ndarray:
    return t.detach().cpu().float().numpy().astype(dtype, copy=False)


def trace_toy(loaded: LoadedModel, prompt: str, chat: bool = False, max_tokens: int = MAX_TOKENS) -> Trace:
    """One forward pass of the toy on ``prompt``, every site recorded (same meaning as the real tracer)."""
    model: ToyTransformer = loaded.model
    enc = encode(loaded.tokenizer, prompt, chat=chat, max_tokens=max_tokens, max_positions=model.cfg.max_positions)
    ids = enc.ids
    probes: dict[str, Any] = {}
    with loaded.lock, torch.inference_mode():
        logits, _ = model(torch.tensor([ids]), probes=probes)
    logits = logits[0]  # [T, V]
    lay = probes["layers"]

    def stack(key: str) -> np.ndarray:
        return _np(torch.stack([p[key] for p in lay]))  # [L, …]

    notes = list(enc.notes)
    if model.cfg.norm_placement == "post":
        notes.append("Post-norm toy: each block normalises after adding, so resid[l+1] ≠ resid[l] + attn_out[l] + mlp_out[l].")
    if not model.cfg.causal:
        notes.append("Bidirectional toy (no causal mask): every position sees the whole prompt, future included.")
    # every site the registry gives the toy alone, and the MLP's internals: per layer stacked [L, …], the others
    # as probed (the mask: block 0's, the same in every block)
    found = {**probes, **lay[0]}
    own = {s.name: stack(s.name) if s.per_layer else _np(found[s.name])
           for s in SITES if s.kind in (TOY, MLP) and s.name in found}
    kept = {name: stack(name) for name in LAYER_SITES if name != "attn_pattern"}  # [L, T, d] / [L, H|Hkv, T, dh]
    q = kept["q"]
    meta = {"model": loaded.facts.name, "model_kind": "toy", "source": loaded.source, "facts": loaded.facts.to_dict(),
            "chat": chat, "toy_config": model.cfg.to_dict()}
    if enc.truncated_from:
        meta.update(cut_by=enc.cut_by, kept_tail=enc.kept_tail)
    return Trace(
        prompt=prompt, text=enc.text, chat=chat,
        tokens=np.asarray(readable_tokens(loaded.tokenizer, ids), dtype=object),
        token_ids=np.asarray(ids, dtype=np.int64),
        embeddings=_np(probes["embeddings"]), resid=_np(probes["resid"]), **kept,
        attn_out_norm=np.linalg.norm(kept["attn_out"], axis=-1), mlp_out_norm=np.linalg.norm(kept["mlp_out"], axis=-1),
        last_attn=_np(torch.stack([p["attn_pattern"][:, -1, :] for p in lay])),
        attn_pattern=_np(torch.stack([p["attn_pattern"] for p in lay]), np.float16),
        head_shape=(int(q.shape[1]), int(model.cfg.n_kv_heads), int(q.shape[3])), kv_itemsize=4,
        final_hidden=_np(probes["final_hidden"]), last_logits=_np(logits[-1]),
        meta=meta, truncated_from=enc.truncated_from, notes=notes, kept_sites=own,
        model_spec=loaded.spec, max_tokens=max_tokens,
    )


def full_logits(loaded: LoadedModel, tr: Trace) -> np.ndarray:
    """[T, V]: the LM head applied to the traced final hidden states."""
    with loaded.lock, torch.inference_mode():
        return _np(loaded.model.lm_head(torch.from_numpy(np.array(tr.final_hidden))))
