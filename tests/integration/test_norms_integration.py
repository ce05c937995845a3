"""Architecture choices (issue 25): LayerNorm vs RMSNorm, Pre- vs Post-Norm, ALiBi, the learned position
table, recurrence vs attention — each number the pages show, against an independent reference."""

from __future__ import annotations

import json
import math

import floats
import numpy as np
import pytest
import torch

from conftest import app_run
from core import backends
from core.common import i18n
from core.maths import norms as N
from core.maths import positions as R
from core.maths import recurrence

PROMPT = "The capital of France is Paris. The capital of Italy is"


@pytest.fixture(scope="module")
def smol_trace(smol):
    return backends.trace(smol, PROMPT)


# ---------------------------------------------------------------------------------------------
# LayerNorm and RMSNorm on real residual vectors


def layer_norm_bound(x: np.ndarray, y: np.ndarray, eps: float) -> np.ndarray:
    """How far float32's LayerNorm can lie from the exact one, per element, on inputs x [..., d] (float32
    values) with exact output y. The mean is a d-term sum and a division: off by δμ ≤ γ_{d+1}·mean|x|;
    x − μ rounds once more (u·|x − μ|); both divided by σ = √(var + eps). The variance is a d-term sum of
    squares, a division and the eps addition: relative γ_{d+3}; its reciprocal square root halves that and
    adds ≤ 2 ulps; the product with (x − μ) one more rounding: |y|·(γ_{d+3} + 3u) covers them."""
    x = np.asarray(x, np.float64)
    d = x.shape[-1]
    mu = x.mean(-1, keepdims=True)
    sigma = np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps)
    return (floats.gamma(d + 1) * np.abs(x).mean(-1, keepdims=True) + floats.U32 * np.abs(x - mu)) / sigma + \
        np.abs(y) * (floats.gamma(d + 3) + 3 * floats.U32)


def rms_norm_bound(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """float32's RMSNorm against the exact one: mean(x²) is a sum of d positive terms and a division
    (relative γ_{d+1}), + eps one rounding, the reciprocal square root halves the relative error and adds
    ≤ 2 ulps, the product x · rstd one more: |y|·(γ_{d+2} + 3u)."""
    d = np.asarray(x).shape[-1]
    return np.abs(y) * (floats.gamma(d + 2) + 3 * floats.U32)


def test_layer_norm_and_rms_norm_match_torch_on_real_residual_vectors(smol_trace):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    tr = smol_trace
    d = tr.resid.shape[-1]
    ln = torch.nn.LayerNorm(d, eps=N.EPS, elementwise_affine=False)
    rn = torch.nn.RMSNorm(d, eps=N.EPS, elementwise_affine=False)
    llama = LlamaRMSNorm(d, eps=N.EPS)  # weight 1: HF's own RMSNorm, the one SmolLM2 runs
    for layer in (0, 3, tr.n_layers // 2, tr.n_layers):
        x32 = np.array(tr.resid[layer], np.float32)  # [T, d] real vectors, the massive activations included
        for shift, scale in ((0.0, 1.0), (1.5, 1.0), (-2.0, 3.0)):
            c = N.compare(x32[-1], shift * N.rms(x32[-1]), scale)
            floats.assert_same(c.layer, N.layer_norm(c.x), "compare's LayerNorm")  # same route
            floats.assert_same(c.rms, N.rms_norm(c.x), "compare's RMSNorm")
        with torch.inference_mode():
            t = torch.from_numpy(x32)
            ref_ln, ref_rn, ref_hf = ln(t).numpy(), rn(t).numpy(), llama(t).numpy()
        ours_ln, ours_rn = N.layer_norm(x32), N.rms_norm(x32)
        floats.assert_within(ref_ln, ours_ln, layer_norm_bound(x32, ours_ln, N.EPS), f"LayerNorm, boundary {layer}",
                             "float32 LayerNorm's sums, rsqrt and products")
        floats.assert_within(ref_rn, ours_rn, rms_norm_bound(x32, ours_rn), f"torch RMSNorm, boundary {layer}",
                             "float32 RMSNorm's sum, rsqrt and product")
        floats.assert_within(ref_hf, ours_rn, rms_norm_bound(x32, ours_rn), f"LlamaRMSNorm, boundary {layer}",
                             "float32 RMSNorm's sum, rsqrt and product")


def test_what_each_norm_does_to_a_shift_and_a_scale(smol_trace):
    """The page's claims: LayerNorm's output has mean 0 and std √(var/(var+eps)), and a shift of every
    component does not change it; RMSNorm's output has RMS √(ms/(ms+eps)) and a shift does change it."""
    x = np.asarray(smol_trace.resid[3, -1], np.float64)
    d = len(x)
    c0, c1 = N.compare(x), N.compare(x, shift=1.5 * N.rms(x))
    s0 = c0.stats()
    var, ms = x.var(), (x**2).mean()
    u64 = floats.gamma(d + 4, floats.U64)  # float64's own rounding of these d-term sums
    floats.assert_within(s0["layernorm"]["mean"], 0.0, u64 * np.abs(c0.layer).mean(), "LayerNorm mean")
    floats.assert_within(s0["layernorm"]["std"], math.sqrt(var / (var + N.EPS)), u64, "LayerNorm std")
    floats.assert_within(s0["rmsnorm"]["rms"], math.sqrt(ms / (ms + N.EPS)), u64, "RMSNorm RMS")
    # a shift: LayerNorm unchanged up to float64's rounding of x + c (relative to σ), RMSNorm moved
    c = 1.5 * N.rms(x)
    floats.assert_within(c1.layer, c0.layer, 2 * u64 * (np.abs(x) + c) / math.sqrt(var + N.EPS), "LayerNorm after a shift")
    assert np.abs(c1.rms - c0.rms).max() > 0.1 and c1.stats()["rmsnorm"]["mean"] > 0.5


def test_real_stream_norms_match_hf_hidden_states(smol, smol_trace, eager_refs):
    """The real model's ‖x‖ per boundary from the trace against HF's own output_hidden_states (float32 and
    float64 eager); HF's last entry is after the final norm, so boundaries 0 … L−1 are compared."""
    tr = smol_trace
    ours = N.trace_norms(tr)
    ref = eager_refs["smollm2"]
    h32, h64 = (torch.stack(ref.run(tr.token_ids, dt, output_hidden_states=True).hidden_states)[:, 0].double().numpy()
                for dt in ("float32", "float64"))
    L = tr.n_layers
    floats.assert_as_accurate(ours[:L], N.mean_norms(h32[:L]), N.mean_norms(h64[:L]), "mean ‖x‖ of the real stream")
    assert smol.facts.norm_placement == "pre-norm" and ours[L - 1] > 10 * ours[0]  # the caption's growth


def test_positions_page_refuses_a_row_past_the_table(smol):
    at = app_run("positions")
    at.slider(key="positions_learned_start").set_value(16).run()  # 16-row table, rows 16 … 19 asked
    assert not at.exception
    assert any(i18n.t("positions.learned_refused", "en", s=16, e=19, p=16, last=15) == e.value for e in at.error)
    assert R.gpt2_positions() == 1024 and "1,024" in " ".join(m.value for m in at.markdown)


@pytest.mark.parametrize("stem", ["norms", "positions"])
def test_presenter_mode_renders_the_new_figures(smol, stem):
    from core.web import presenter

    at = app_run(stem, present="1", step="3")
    assert not at.exception
    figs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert len(figs) >= (4 if stem == "norms" else 8)
    assert all(f["layout"]["font"]["size"] >= presenter.MIN_FONT for f in figs)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_norms_page_shows_the_computed_numbers(smol, lang):
    at = app_run("norms", lang=lang)
    assert not at.exception
    text = " ".join(m.value for m in at.markdown)
    g = N.growth_readout(N.growth("layernorm"))
    assert g["pre_last"] in text and g["post_last"] in text
    assert recurrence.reach_readout(recurrence.reach())["factor"] in text
    assert [t.value.shape[0] for t in at.table][1:] == [3, 2, 3]  # the stats, then the three tables
