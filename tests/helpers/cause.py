"""Helpers shared by the tiers of test_cause's tests (tests/*/test_cause*.py)."""

from __future__ import annotations

import copy

import floats
import numpy as np
import torch

from core.cause import attribution, pair, patching
from core.engine import roles

EIFFEL = ("The Eiffel Tower is in the city of", "The Colosseum is in the city of", " Paris", " Rome")


def _ours(hooks) -> list:
    """The hooks not transformers' own: its first call with ``output_attentions`` installs output-capturing hooks
    that stay (``install_output_capuring_hook``, sic), which an earlier test's HF reference run may have left."""
    return [h for h in hooks.values() if "output_capuring" not in getattr(h, "__qualname__", "")]


def _no_hooks(model) -> bool:
    return all(not _ours(m._forward_hooks) and not _ours(m._forward_pre_hooks) for m in model.modules())


def _recorded(loaded, clean=EIFFEL[0], corrupted=EIFFEL[1]):
    pt = pair.encode_pair(loaded.tokenizer, clean, corrupted)
    pt.require_same_length()
    return pt, patching.capture(loaded, pt.ids_clean, pt.ids_corrupted)


def _twins(loaded, eager_refs=None, name: str | None = None):
    """An independent copy of the model, in float32 and in float64: HF's own eager model (conftest's
    ``eager_refs[name]``), or deep copies of the toy. The float64 twin is the exact answer to float32's
    eyes, its float32 twin HF's own float32 route (``floats.assert_as_accurate``)."""
    if loaded.is_toy:
        m = copy.deepcopy(loaded.model).eval()
        return m, copy.deepcopy(m).double()
    return eager_refs[name].model("float32"), eager_refs[name].model("float64")


def _ref_logits(model, ids, toy: bool = False) -> torch.Tensor:
    x = torch.tensor([list(ids)])
    out = model(x) if toy else model(input_ids=x, use_cache=False)
    return (out[0] if toy else out.logits)[0, -1]


def _allowance(ref32, ref64) -> float:
    """How far a float32 route may lie from the exact logits of these runs (rows of ``ref32`` /
    ``ref64``): ``floats.allowed_error``, what ``floats.assert_as_accurate`` allows. A logit difference of
    such a route is within twice this of the exact one, two such routes' logit differences within 4× of each other."""
    return floats.allowed_error(np.asarray(ref32, dtype=np.float64), np.asarray(ref64, dtype=np.float64))


def _pair_allowance(pt, m32, m64, toy: bool = False) -> float:
    """``_allowance`` measured on the pair's two unpatched runs (clean, corrupted): the size of float32's
    error on this model and these prompts, for patched runs that have no reference of their own (a
    patched run is the same network on the same prompt with one activation swapped in)."""
    with torch.inference_mode():
        runs = [[_ref_logits(m, ids, toy).double().numpy() for ids in (pt.ids_clean, pt.ids_corrupted)] for m in (m32, m64)]
    return _allowance(*runs)


def _ld(logits, answer: int, foil: int) -> np.ndarray:
    lg = np.asarray(logits, dtype=np.float64)
    return lg[..., answer] - lg[..., foil]


def _reference_patches(model, ids_clean, ids_corrupted, patches, toy: bool, head_dim: int) -> np.ndarray:
    """The patched runs written by hand: plain register_forward_(pre_)hook on an untouched model; the
    clean activations are taken in one clean run, then each patch is one corrupted run. [n, V] float64."""
    s = roles.find_sites(model)

    def where(patch):
        if patch.site == "resid":
            return s.blocks[patch.layer], "pre"
        if patch.site == "attn_out":
            return s.attns[patch.layer], "out"
        if patch.site == "mlp_out":
            return s.mlps[patch.layer], "out"
        return roles.out_proj(s.attns[patch.layer]), "pre"

    seen = {}

    def grab_pre(key):
        def hook(_m, args, kwargs):
            seen[key] = (args[0] if args else kwargs["hidden_states"]).clone()
        return hook

    def grab_out(key):
        def hook(_m, _a, out):
            seen[key] = (out[0] if isinstance(out, tuple) else out).clone()
        return hook

    def put(key, rows, cols, kind):
        def pre(_m, args, kwargs):
            h = (args[0] if args else kwargs["hidden_states"]).clone()
            h[0, rows, cols] = seen[key][0, rows, cols]
            return ((h, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": h})

        def out(_m, _a, o):
            h = (o[0] if isinstance(o, tuple) else o).clone()
            h[0, rows, cols] = seen[key][0, rows, cols]
            return (h, *o[1:]) if isinstance(o, tuple) else h
        return pre if kind == "pre" else out

    sites = {(p.site, p.layer): where(p) for p in patches}
    res = []
    with torch.inference_mode():
        handles = [m.register_forward_pre_hook(grab_pre(k), with_kwargs=True) if kind == "pre" else m.register_forward_hook(grab_out(k))
                   for k, (m, kind) in sites.items()]
        try:
            _ref_logits(model, ids_clean, toy)
        finally:
            for h in handles:
                h.remove()
        for p in patches:
            module, kind = sites[(p.site, p.layer)]
            cols = slice(p.head * head_dim, (p.head + 1) * head_dim) if p.head is not None else slice(None)
            rows = slice(None) if p.pos is None else p.pos
            hook = put((p.site, p.layer), rows, cols, kind)
            h = module.register_forward_pre_hook(hook, with_kwargs=True) if kind == "pre" else module.register_forward_hook(hook)
            try:
                res.append(_ref_logits(model, ids_corrupted, toy).double().numpy())
            finally:
                h.remove()
    return np.stack(res)


def _check_against_reference(got, twins, pt, patches, toy: bool, head_dim: int) -> list[float]:
    """Each patched run (rows of ``got``) is as accurate as the hand-written reference's float32 route,
    measured against its float64 route (``floats.assert_as_accurate``); returns each run's allowance."""
    ref32, ref64 = (_reference_patches(m, pt.ids_clean, pt.ids_corrupted, patches, toy, head_dim) for m in twins)
    for p, g, r32, r64 in zip(patches, got, ref32, ref64):
        floats.assert_as_accurate(g, r32, r64, what=str(p))
    return [_allowance(r32, r64) for r32, r64 in zip(ref32, ref64)]


def _cells(L: int, T: int, H: int) -> list[patching.Patch]:
    mid = L // 2
    return [patching.Patch("resid", mid, 2), patching.Patch("resid", L - 1, T - 1), patching.Patch("attn_out", 0, T - 1),
            patching.Patch("attn_out", mid, 3), patching.Patch("mlp_out", L - 1, 2), patching.Patch("mlp_out", 0, 3),
            patching.Patch("z", L - 1, T - 1, H - 1), patching.Patch("z", mid, T - 1, 0),
            patching.Patch("resid", mid, None)]


# ---------------------------------------------------------------------------------------------
# exact ends


def _check_ends(loaded, base):
    L = base.n_layers
    clean, corrupted = base.clean_logits(), base.corrupted_logits()
    assert not np.array_equal(clean, corrupted)
    np.testing.assert_array_equal(patching.patched_logits(loaded, base, None), corrupted)
    np.testing.assert_array_equal(patching.patched_logits(loaded, base, patching.Patch("resid", 0, None)), clean)
    np.testing.assert_array_equal(patching.patched_logits(loaded, base, patching.Patch("resid", L - 1, None)), clean)


def _gap(loaded, ids, a, f, steps):
    ig = attribution.integrated_gradients(loaded, ids, a, f, steps)
    assert ig.scores[0] == 0.0  # the first position stays on its own embedding: no score by construction
    return ig


# The stated completeness tolerance, one schedule for every model: the relative gap
# |Σ IG − (f(x) − f(baseline))| / |f(x) − f(baseline)| with s Gauss–Legendre steps is at most IG_TOL[s].
# (Measured here: tiny Llama 0.13 / 4e-5 / 8e-7, tiny Qwen2 0.14 / 3e-6 / 7e-7, the toy 0.21 / 3e-3 / 7e-6,
# SmolLM2 0.015 / 0.004 / 1e-5 at 32 / 128 / 256 steps.)
IG_TOL = {32: 0.5, 128: 1e-2, 256: 1e-4}


def _within(igs) -> None:
    gaps = {ig.steps: ig.relative_gap for ig in igs}
    assert all(g <= IG_TOL[s] for s, g in gaps.items()), gaps
    assert abs(igs[-1].gap) < abs(igs[0].gap), gaps  # more steps, smaller gap
