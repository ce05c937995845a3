"""The one registry of recorded sites (``core.engine.trace.SITES``): every list of sites reads it, and a
site added as one row and one role name (the MLP's gate activation, ``gate_act``) is derived exactly."""

from __future__ import annotations

import floats
import numpy as np
import pytest
import torch

from core import backends
from core.engine import hf_trace, xray
from core.engine.roles import find_sites

PROMPT = "The capital of France is Paris, and 苹果很好吃。"


def _hf_gate_act(loaded, tr, layer: int) -> np.ndarray:
    """HF's own block ``layer`` on the kept ``resid[l]`` with its recorded arguments and the replay's eager
    attention, and a forward hook on its MLP's ``act_fn``: what HF's activation module returns."""
    sites = find_sites(loaded.model)
    got = {}
    h = sites.mlps[layer].act_fn.register_forward_hook(lambda _m, _a, out: got.__setitem__("g", out[0].numpy().copy()))
    try:
        args, kwargs = tr.replay.call(layer, torch.from_numpy(np.array(tr.resid[layer]))[None])
        with torch.inference_mode(), xray.recording(keep_weights=True, weights_dtype=torch.float16):
            sites.blocks[layer](*args, **kwargs)
    finally:
        h.remove()
    return got["g"]


def _mlp_outputs(model, ids, layer: int) -> np.ndarray:
    """What ``model``'s MLP of ``layer`` adds for ``ids`` ([T, d] float64), by a forward hook."""
    got = {}
    h = find_sites(model).mlps[layer].register_forward_hook(lambda _m, _a, out: got.__setitem__("m", out[0].double().numpy()))
    try:
        with torch.inference_mode():
            model(input_ids=torch.tensor([[int(i) for i in ids]]), use_cache=False)
    finally:
        h.remove()
    return got["m"]


def _check_gate_and_mlp(loaded, ref) -> None:
    tr = backends.trace(loaded, PROMPT)
    for layer in range(tr.n_layers):
        d = backends.layer_detail(loaded, tr, layer)
        gate_act = tr.site("gate_act", layer)  # the door: derived when asked by name
        assert gate_act.shape == (tr.n_tokens, loaded.facts.d_ff)
        floats.assert_same(gate_act, _hf_gate_act(loaded, tr, layer), f"L{layer} gate_act")  # same route → exact
        # the MLP replayed vs the difference route (fl(fl(resid[l+1] − resid[l]) − attn_out)): two routes to what
        # the MLP adds, each as accurate as HF's own float32 eager route (ROUTE_FACTOR × its error against
        # float64), so within twice that of each other — plus the difference route's own roundings: the block's
        # two additions and the two subtractions, each ≤ u·|its result| (γ_2 with the second-order terms; the
        # stream's huge first-token vector makes them the larger part there)
        replayed = hf_trace.mlp_replay(loaded, tr, layer, torch.from_numpy(d.attn_out))[0].numpy()
        r32, r64 = (_mlp_outputs(ref.model(dt), tr.token_ids, layer) for dt in ("float32", "float64"))
        r0, r1 = tr.resid[layer].astype(np.float64), tr.resid[layer + 1].astype(np.float64)
        a, m = d.attn_out.astype(np.float64), d.mlp_out.astype(np.float64)
        rounding = floats.gamma(2) * (np.abs(r1 - r0) + np.abs(r0 + a) + np.abs(m) + np.abs(r1))
        floats.assert_within(replayed, d.mlp_out, 2 * floats.allowed_error(r32, r64) + rounding, f"L{layer} mlp_out",
                             "two routes, each within ROUTE_FACTOR × HF float32's error, + the difference's roundings")


def test_gate_activation_is_hfs_own_smollm2(smol, eager_refs):
    _check_gate_and_mlp(smol, eager_refs["smollm2"])


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_gate_activation_is_hfs_own_tiny(arch, tiny_loaded, eager_refs):
    _check_gate_and_mlp(tiny_loaded[arch], eager_refs[arch])


def test_residual_page_derives_gate_act_of_a_long_prompt_on_request():
    """Past ``ACT_AT_ONCE`` (1,024) tokens the residual page does not replay a layer's MLP over every position on
    its first visit (+0.25× the visit on the long document, bench_pages): it offers the comparison with the
    model's own gate activation as a button, and a press derives the site and shows the comparison."""
    from conftest import all_text, app_run
    from core.common.i18n import t

    check = "SiLU(gate) by hand − gate_act"  # a fixed part of the comparison's sentence
    assert check in t("sites.gate_act_check", diff="", scale="")
    at = app_run("residual", prompt=" ".join(["apple"] * 1_200), chat="0", lang="en")
    assert not at.exception, at.exception
    ask = [b for b in at.button if b.key == "residual_gate_act"]
    assert len(ask) == 1 and check not in all_text(at)
    at = ask[0].click().run()
    assert not at.exception, at.exception
    assert not [b for b in at.button if b.key == "residual_gate_act"] and check in all_text(at)
