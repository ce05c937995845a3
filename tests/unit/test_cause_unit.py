"""Cause and effect (issue 12): activation patching and attribution, checked against exact identities
and against hand-written references on untouched models.

* patching nothing IS the corrupted run; copying the whole residual stream at layer 0, or at the last
  block's input, IS the clean run (bit for bit); normalised scores are exactly 0 and 1 there;
* every patched run (residual stream, attention output, MLP output, one head) equals an untouched HF
  model (eager attention) with its own ``register_forward_hook`` / pre-hook copying the same
  activation — tiny random Llama, Qwen2, Mistral, GPT-2, the real SmolLM2 — and the toy: as accurate
  as that reference's float32 route, measured against its float64 twin (``floats.assert_as_accurate``);
  runs with no reference of their own (a whole sweep) are held to the float32 error measured on the
  pair's unpatched runs (``_pair_allowance``);
* gradient × input equals autograd on an untouched model fed ``inputs_embeds`` (the same way);
  integrated gradients satisfy completeness within a tolerance that shrinks as the steps grow;
* eight threads patching different cells at once each get their solo result; no hook outlives a run;
* bad input is refused with a sentence (both languages); the pages render and draw the core's numbers.
"""

from __future__ import annotations

import re

import floats
import numpy as np
import pytest
import torch
from helpers.cause import (
    EIFFEL,
    IG_TOL,
    _cells,
    _check_against_reference,
    _check_ends,
    _gap,
    _ld,
    _no_hooks,
    _pair_allowance,
    _recorded,
    _ref_logits,
    _within,
)

from conftest import ROOT
from core import backends
from core.cause import pair, patching
from core.engine.types import UnsupportedArchitectureError
from core.toy.model import ToyConfig, ToyTransformer
from core.toy.run import wrap

INDUCTION = ("kqzmwpkqzmw", "kqzmwrkqzmw", "p", "r")
ARCHS = ("llama", "qwen2", "mistral", "gpt2")


@pytest.mark.parametrize("arch", ARCHS)
def test_patching_ends_are_exact_on_tiny_models(tiny_loaded, arch):
    loaded = tiny_loaded[arch]
    _, base = _recorded(loaded)
    _check_ends(loaded, base)
    assert _no_hooks(loaded.model)


def test_toy_patching_equals_reference_and_ends_are_exact(toy, toy_twins):
    pt, base = _recorded(toy, *INDUCTION[:2])
    _check_ends(toy, base)
    f = toy.facts
    cells = _cells(f.n_layers, pt.n_tokens, f.n_heads)
    got = np.stack([patching.patched_logits(toy, base, p) for p in cells])
    _check_against_reference(got, toy_twins, pt, cells, True, f.head_dim)
    # the toy's induction circuit: the answer's letter (position 6 after <bos>) carries the fact
    ans = pair.answers(toy.tokenizer, "p", "r")
    grid = patching.sweep(toy, base, "resid", ans.answer, ans.foil)
    c, r = (pair.logit_diff(lg, ans.answer, ans.foil) for lg in (base.clean_logits(), base.corrupted_logits()))
    norm = patching.normalise(grid, c, r)
    # a sweep's run may round its last float32 bits differently (batch slot, cached keys and values):
    # the clean run within a float32 route's error of its logit difference; the single run of that cell
    # is the clean run exactly (the one differing position, at layer 0)
    with torch.inference_mode():
        clean64 = _ld(_ref_logits(toy_twins[1], pt.ids_clean, True).numpy(), ans.answer, ans.foil)
    floats.assert_within(grid[0, 6], clean64, 2 * _pair_allowance(pt, *toy_twins, toy=True), what="the differing position at layer 0",
                         why="a logit difference of a float32 route: twice assert_as_accurate's allowance")
    assert pt.differing() == [6] and patching.best_cell(norm) == (0, 6)
    np.testing.assert_array_equal(patching.patched_logits(toy, base, patching.Patch("resid", 0, 6)), base.clean_logits())
    assert np.all(norm[:, :6] == 0.0)  # before the difference nothing differs: those runs are the corrupted run itself
    heads = patching.sweep(toy, base, "z", ans.answer, ans.foil)
    assert heads.shape == (f.n_layers, f.n_heads)


def test_hooks_are_removed_on_error_and_bad_cells_refused(tiny_loaded, monkeypatch):
    loaded = tiny_loaded["llama"]
    _, base = _recorded(loaded)
    for bad in (patching.Patch("resid", 99, 0), patching.Patch("mlp_out", 0, 99), patching.Patch("z", 0, 0, 99)):
        with pytest.raises(ValueError):
            patching.patched_logits(loaded, base, bad)
    with pytest.raises(ValueError):
        patching.Patch("z", 0, 0)  # a head needs its index
    with pytest.raises(ValueError):
        patching.Patch("nowhere", 0, 0)

    def boom(*_a, **_k):
        raise RuntimeError("boom")

    monkeypatch.setattr(backends, "last_logits", boom)
    with pytest.raises(RuntimeError):
        patching.patched_logits(loaded, base, patching.Patch("attn_out", 1, 2))
    assert _no_hooks(loaded.model)


def test_post_norm_blocks_are_refused_with_the_reason():
    torch.manual_seed(0)
    post = wrap(ToyTransformer(ToyConfig(norm_placement="post", n_layers=2)), "test")
    with pytest.raises(UnsupportedArchitectureError, match="pre-norm"):
        patching.capture(post, [1, 2, 3, 4], [1, 2, 5, 4])
    assert _no_hooks(post.model)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_integrated_gradients_completeness_tiny(tiny_loaded, arch):
    loaded = tiny_loaded[arch]
    ids = pair.encode_pair(loaded.tokenizer, *EIFFEL[:2]).ids_clean
    _within([_gap(loaded, ids, 300, 301, s) for s in IG_TOL])


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_patch_grid_colour_bar_names_its_ends(lang):
    from core.cause import figures

    score = np.array([[0.0, 1.0, 0.25], [-0.3, 0.5, 1.4]])
    fig = figures.fig_patch_grid(score, score * 10, ["a", "b", "c"], "t", lang).to_plotly_json()
    bar = fig["data"][0]["colorbar"]
    names = dict(zip(bar["tickvals"], bar["ticktext"]))
    assert names[0.0].startswith("0 = ") and names[1.0].startswith("1 = ")
    assert ("corrupted" in names[0.0] and "clean" in names[1.0]) if lang == "en" else ("破坏" in names[0.0] and "干净" in names[1.0])
    lo, hi = fig["data"][0]["zmin"], fig["data"][0]["zmax"]
    assert all(lo <= v <= hi for v in bar["tickvals"]) and -1.0 in bar["tickvals"]  # every tick inside the colour range
    # the hover says the share restored as the text under the figure does (a percentage)
    assert "= 25%" in fig["data"][1]["text"][2] and "= 140%" in fig["data"][1]["text"][5]
    assert fig["data"][1]["text"][5].startswith("layer 1 · " if lang == "en" else "第 1 层 · ")  # Chinese word order on zh
    raw = figures.fig_patch_grid(score, score, ["a", "b", "c"], "t", lang, normalised=False).to_plotly_json()
    assert "tickvals" not in raw["data"][0]["colorbar"]  # raw logit differences: no 0 / 1 ends to name


def test_the_makefile_patches_only_sites_the_code_takes():
    """Issue 38 renamed the head site 'head' → 'z' (the registry's name); `make bench` still passed
    ``bench_patch.py --site head``, which argparse refused (found comparing the pages before and after)."""
    named = re.findall(r"bench_patch\.py[^\n]*--site (\S+)", (ROOT / "Makefile").read_text())
    assert named and set(named) <= set(patching.PATCHED), named
