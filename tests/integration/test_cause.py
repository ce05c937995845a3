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

import json
import pickle
import re
import threading

import floats
import numpy as np
import pytest
import torch
from helpers.cause import (
    EIFFEL,
    IG_TOL,
    _allowance,
    _cells,
    _check_against_reference,
    _check_ends,
    _gap,
    _ld,
    _no_hooks,
    _pair_allowance,
    _recorded,
    _ref_logits,
    _twins,
    _within,
)

from conftest import ROOT, plotly_array
from core import backends
from core.cause import attribution, pair, patching
from core.common import i18n
from core.engine import roles, tokens
from core.toy import load_trained

ONE_TOKEN = ("The capital of France is the city of", "The capital of Italy is the city of")  # differ in one token
INDUCTION = ("kqzmwpkqzmw", "kqzmwrkqzmw", "p", "r")
ARCHS = ("llama", "qwen2", "mistral", "gpt2")


def test_patching_ends_are_exact_and_normalise_to_0_and_1(smol, eager_refs):
    pt, base = _recorded(smol)
    _check_ends(smol, base)
    ans = pair.answers(smol.tokenizer, " Paris", " Rome")
    L = base.n_layers
    runs = [None, patching.Patch("resid", 0, None), patching.Patch("resid", L - 1, None)]
    ld = patching.logit_diffs(smol, base, runs, ans.answer, ans.foil)
    c, r = (pair.logit_diff(lg, ans.answer, ans.foil) for lg in (base.clean_logits(), base.corrupted_logits()))
    assert c > 0 > r  # the clean prompt says Paris, the corrupted one Rome
    assert patching.normalise(ld, c, r).tolist() == [0.0, 1.0, 1.0]
    assert patching.normalise(c, c, c) is None  # nothing to restore: no score
    # the recorded runs are the model's own forward passes: as accurate as HF's own eager model's
    for ids, got in ((pt.ids_clean, base.clean_logits()), (pt.ids_corrupted, base.corrupted_logits())):
        ref32, ref64 = (eager_refs["smollm2"].run(ids, dt).logits[0, -1] for dt in ("float32", "float64"))
        floats.assert_as_accurate(got, ref32, ref64, what="a recorded run")


def test_sweep_grid_at_layer_0_is_0_and_1_where_the_prompts_differ(smol, eager_refs):
    """Prompts that differ in one token: at layer 0 only that position's stream differs, so copying it
    IS the clean run (exactly, as a single run), and copying any other position changes nothing."""
    pt, base = _recorded(smol, *ONE_TOKEN)
    (t,) = pt.differing()
    ans = pair.answers(smol.tokenizer, " Paris", " Rome")
    np.testing.assert_array_equal(patching.patched_logits(smol, base, patching.Patch("resid", 0, t)), base.clean_logits())
    np.testing.assert_array_equal(patching.patched_logits(smol, base, patching.Patch("resid", 0, 0)), base.corrupted_logits())
    grid = patching.sweep(smol, base, "resid", ans.answer, ans.foil, chunk=7)  # 7: chunks that straddle layers
    c, r = (pair.logit_diff(lg, ans.answer, ans.foil) for lg in (base.clean_logits(), base.corrupted_logits()))
    norm = patching.normalise(grid, c, r)
    assert grid.shape == (smol.facts.n_layers, pt.n_tokens)
    # every other position at layer 0 copies what the corrupted run already has: not computed, its score exactly
    assert np.all(np.delete(norm[0], t) == 0.0)
    # in a batch of 7 the run at t may round its last float32 bits differently from its single run (see
    # patching): it is the clean run within a float32 route's error of its logit difference
    m32, m64 = _twins(smol, eager_refs, "smollm2")
    allow = _pair_allowance(pt, m32, m64)
    with torch.inference_mode():
        clean64 = _ld(_ref_logits(m64, pt.ids_clean).numpy(), ans.answer, ans.foil)
    floats.assert_within(grid[0, t], clean64, 2 * allow, what="the differing position at layer 0",
                         why="a logit difference of a float32 route: twice assert_as_accurate's allowance")
    # the batched sweep equals each run done alone (any chunking)
    cells = [patching.Patch("resid", layer, tt) for layer in (1, 13, 29) for tt in (0, t, pt.n_tokens - 1)]
    alone = patching.logit_diffs(smol, base, cells, ans.answer, ans.foil, chunk=1)
    swept = np.array([grid[p.layer, p.pos] for p in cells])
    same = np.array([patching.unchanged(base, p) for p in cells])
    floats.assert_same(swept[same], alone[same], "runs that are the corrupted run")
    floats.assert_within(swept, alone, 4 * allow, what="sweep vs runs alone",
                         why="two float32 routes of a logit difference, each within twice assert_as_accurate's allowance")


# ---------------------------------------------------------------------------------------------
# against a hand-written reference


@pytest.mark.parametrize("arch", ARCHS)
def test_patched_runs_equal_a_hand_written_reference_tiny(tiny_loaded, eager_refs, arch):
    loaded = tiny_loaded[arch]
    pt, base = _recorded(loaded)
    twins = _twins(loaded, eager_refs, arch)
    f = loaded.facts
    cells = _cells(f.n_layers, pt.n_tokens, f.n_heads)
    got = np.stack([patching.patched_logits(loaded, base, p) for p in cells])
    allowed = _check_against_reference(got, twins, pt, cells, False, f.head_dim)
    for p, g, allow in zip(cells, got, allowed):
        if p.layer == f.n_layers - 1 and p.pos is not None and p.pos < pt.n_tokens - 1 and p.site != "resid":
            np.testing.assert_array_equal(g, base.corrupted_logits())  # the last layer, an earlier position: no path to the answer
        elif p.site != "z":
            # the patch did something, far beyond what a float32 route may err by: the reference tells it apart
            assert np.abs(g - base.corrupted_logits()).max() > 10 * allow, p
    assert _no_hooks(loaded.model) and all(_no_hooks(m) for m in twins)


def test_patched_runs_equal_a_hand_written_reference_smol(smol, eager_refs):
    pt, base = _recorded(smol)
    f = smol.facts
    cells = _cells(f.n_layers, pt.n_tokens, f.n_heads)
    got = patching.run(smol, base, cells)  # batched, several layers per pass
    _check_against_reference(got, _twins(smol, eager_refs, "smollm2"), pt, cells, False, f.head_dim)
    assert _no_hooks(smol.model)


def _check_prefix_reuse(loaded, pt, base, twins, toy: bool, answer: str = " Paris", foil: str = " Rome") -> None:
    """The head sweep feeds only the last position after the corrupted run's cached keys and values
    (``reuse_prefix``): equal to every head run done in full (up to float32 rounding: the cache's sums
    are grouped differently), and to the hand-written reference; a second sweep gives the same numbers
    (the shared prefix is never extended); no hook is left."""
    f = loaded.facts
    ans = pair.answers(loaded.tokenizer, answer, foil)
    a, b = ans.answer, ans.foil
    T = pt.n_tokens
    heads = patching.sweep(loaded, base, "z", a, b)
    full = patching.logit_diffs(loaded, base, patching.head_patches(f.n_layers, f.n_heads, T - 1), a, b)
    bound = 4 * _pair_allowance(pt, *twins, toy=toy)  # two float32 routes of a logit difference (see _allowance)
    assert np.ptp(full) > 10 * bound  # the heads do differ, so the comparison below means something
    floats.assert_within(heads.ravel(), full, bound, what="head sweep after the cache vs full runs",
                         why="two float32 routes of a logit difference, each within twice assert_as_accurate's allowance")
    np.testing.assert_array_equal(patching.sweep(loaded, base, "z", a, b), heads)
    later = [patching.Patch("resid", f.n_layers // 2, T - 2), patching.Patch("attn_out", 0, T - 1),
             patching.Patch("mlp_out", f.n_layers - 1, T - 1), patching.Patch("z", f.n_layers - 1, T - 1, 0)]
    got = patching.run(loaded, base, later, reuse_prefix=True)
    _check_against_reference(got, twins, pt, later, toy, f.head_dim)
    assert _no_hooks(loaded.model)


LEAD = "Here is a sentence about a place. "  # repeated before both prompts: a long pair


def _check_plan(base, patches, passes) -> None:
    """Every run that changes something in exactly one pass, every run that copies what the corrupted
    run already has in none; a pass starts at its earliest patched position and stays within the pass
    budget (rows × positions fed), or holds at most two rows."""
    todo = [i for i, p in enumerate(patches) if not patching.unchanged(base, p)]
    assert sorted(i for _, idx in passes for i in idx) == todo and todo
    for skip, idx in passes:
        assert skip == min(0 if patches[i].pos is None else patches[i].pos for i in idx)
        assert len(idx) <= 2 or len(idx) * (base.n_tokens - skip) <= patching.TOKENS_PER_PASS
        assert len(idx) <= patching.MOST_ROWS


@pytest.mark.parametrize("arch", ARCHS)
def test_tiled_sweep_of_a_long_pair_equals_full_runs_tiny(tiny_loaded, eager_refs, arch):
    """A long pair's grid is swept in tiles of nearby layers and positions, each pass starting at its
    earliest patched position after the corrupted run's cached keys and values: equal to the same
    runs swept by layer with every position fed (up to float32 rounding)."""
    loaded = tiny_loaded[arch]
    pt, base = _recorded(loaded, LEAD * 4 + EIFFEL[0], LEAD * 4 + EIFFEL[1])
    ans = pair.answers(loaded.tokenizer, " Paris", " Rome")
    bound = 4 * _pair_allowance(pt, *_twins(loaded, eager_refs, arch))  # two float32 routes of a logit difference (see _allowance)
    for site in ("resid", "mlp_out"):
        patches, _ = patching.sweep_patches(base, site)
        passes = patching.plan(base, patches)
        _check_plan(base, patches, passes)
        assert any(skip for skip, _ in passes), "a long pair is tiled"
        assert patching.fed(base, patches, passes) < patching.fed(base, patches, patching.plan(base, patches, reuse_prefix=False))
        grid = patching.sweep(loaded, base, site, ans.answer, ans.foil)
        full = patching.logit_diffs(loaded, base, patches, ans.answer, ans.foil)  # by layer, no cache
        assert np.ptp(full) > 10 * bound  # the runs do differ, so the comparison below means something
        floats.assert_within(grid.ravel(), full, bound, what=f"tiled {site} sweep vs full runs",
                             why="two float32 routes of a logit difference, each within twice assert_as_accurate's allowance")
    assert _no_hooks(loaded.model)


@pytest.mark.parametrize("arch", ("llama", "gpt2"))
def test_unchanged_runs_are_the_corrupted_run_by_the_reference(tiny_loaded, eager_refs, arch):
    """A run whose copied values the corrupted run already has is not computed but given the corrupted
    run's scores: the hand-written reference, computing it, agrees; a run at a differing position is
    computed (and differs)."""
    loaded = tiny_loaded[arch]
    pt, base = _recorded(loaded)
    first = pt.differing()[0]
    assert first > 0
    f = loaded.facts
    same = [patching.Patch("resid", 1, first - 1), patching.Patch("attn_out", f.n_layers - 1, 0),
            patching.Patch("z", 0, first - 1, 1), patching.Patch("resid", 0, pt.n_tokens - 1)]
    for p in same:
        assert patching.unchanged(base, p), p
        np.testing.assert_array_equal(patching.patched_logits(loaded, base, p), base.corrupted_logits())
    # the reference computes those runs: the corrupted run is as accurate an answer for each of them
    _check_against_reference([base.corrupted_logits()] * len(same), _twins(loaded, eager_refs, arch), pt, same, False, f.head_dim)
    for p in (patching.Patch("resid", 0, first), patching.Patch("mlp_out", 1, pt.n_tokens - 1)):
        assert not patching.unchanged(base, p), p


def test_tiled_runs_equal_full_runs_smol_and_short_pairs_go_by_layer(smol, eager_refs):
    pt, base = _recorded(smol, LEAD * 6 + EIFFEL[0], LEAD * 6 + EIFFEL[1])
    ans = pair.answers(smol.tokenizer, " Paris", " Rome")
    L, T = base.n_layers, base.n_tokens
    some = [patching.Patch(site, layer, t) for site in ("resid", "attn_out") for layer in range(0, L, 4) for t in range(T - 6, T)]
    passes = patching.plan(base, some)
    _check_plan(base, some, passes)
    assert any(skip for skip, _ in passes)
    got = patching.logit_diffs(smol, base, some, ans.answer, ans.foil, reuse_prefix=True)
    want = patching.logit_diffs(smol, base, some, ans.answer, ans.foil)
    floats.assert_within(got, want, 4 * _pair_allowance(pt, *_twins(smol, eager_refs, "smollm2")), what="tiled vs full runs",
                         why="two float32 routes of a logit difference, each within twice assert_as_accurate's allowance")
    # the 12-token pair of the benchmark: tiles would feed more than passes by layer, so it goes by layer
    _, short = _recorded(smol, "The Eiffel Tower is a famous landmark in the city of", "The Colosseum is a famous landmark in the city of")
    sp = patching.sweep_plan(short, "resid")
    # position 0 ("The") is the same in both runs at every site and layer (30 runs); so is the stream
    # entering block 0 wherever the tokens are the same (8 more): 322 runs left, 42 a pass (512 // 12)
    assert (sp.runs, sp.unchanged, sp.passes, sp.cached) == (360, 38, 8, False)
    assert patching.sweep_plan(short, "z").cached


@pytest.mark.parametrize("arch", ARCHS)
def test_head_sweep_reusing_the_prefix_equals_full_runs_tiny(tiny_loaded, eager_refs, arch):
    loaded = tiny_loaded[arch]
    pt, base = _recorded(loaded)
    _check_prefix_reuse(loaded, pt, base, _twins(loaded, eager_refs, arch), False)


def test_head_sweep_reusing_the_prefix_equals_full_runs_smol_and_toy(smol, eager_refs, toy, toy_twins):
    pt, base = _recorded(smol)
    _check_prefix_reuse(smol, pt, base, _twins(smol, eager_refs, "smollm2"), False)
    pt, base = _recorded(toy, *INDUCTION[:2])
    _check_prefix_reuse(toy, pt, base, toy_twins, True, *INDUCTION[2:])


# ---------------------------------------------------------------------------------------------
# shared model: threads, hooks, refusals


def test_eight_threads_patching_at_once_each_get_their_solo_result(smol):
    _, base = _recorded(smol)
    L, T, H = base.n_layers, base.n_tokens, base.n_heads
    cells = [patching.Patch("resid", 3 * i, i % T) for i in range(4)] + [
        patching.Patch("attn_out", 20, T - 1), patching.Patch("mlp_out", 5, 3), patching.Patch("z", 25, T - 1, H - 2),
        patching.Patch("resid", L - 1, None)]
    alone = [patching.patched_logits(smol, base, p) for p in cells]
    together: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(cells))

    def work(i):
        try:
            barrier.wait()
            together[i] = patching.patched_logits(smol, base, cells[i])
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(cells))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i, p in enumerate(cells):
        np.testing.assert_array_equal(together[i], alone[i], err_msg=str(p))
    assert _no_hooks(smol.model)


def test_pair_refusals_are_sentences_in_both_languages(smol):
    tok = smol.tokenizer
    cases = [
        (lambda: pair.encode_pair(tok, "", "x"), "empty_clean"),
        (lambda: pair.encode_pair(tok, "x", "   "), "empty_corrupted"),
        (lambda: pair.encode_pair(tok, "word " * 80, "x"), "too_long"),
        (lambda: pair.encode_pair(tok, "x" * (pair.MAX_CHARS + 1), "x"), "too_many_chars"),
        (lambda: pair.encode_pair(tok, "埃菲尔铁塔位于", "罗马斗兽场位于").require_same_length(), "counts"),
        (lambda: pair.answers(tok, " Paris", ""), "empty_foil"),
        (lambda: pair.answers(tok, " Paris", " Paris"), "same_answer"),
        (lambda: pair.answers(tok, "巴黎", " Rome"), "answer_tokens"),
    ]
    for call, code in cases:
        with pytest.raises(pair.PairError) as e:
            call()
        assert e.value.code == code
        en, zh = e.value.text("en"), e.value.text("zh")
        assert en.endswith(".") and "⟦" not in en and "⟦" not in zh and en != zh
        again = pickle.loads(pickle.dumps(e.value))  # a cached or queued error keeps its code and sentence
        assert (type(again), again.code, again.text("zh")) == (pair.PairError, code, zh) and e.value.known
    with pytest.raises(pair.PairError) as e:
        pair.answers(tok, "巴黎", " Rome")
    pieces = tokens.visible_tokens(tok, tok("巴黎", add_special_tokens=False)["input_ids"])
    assert len(pieces) == 5 and f"is 5 tokens for this model ({' | '.join(pieces)})" in str(e.value)  # how it tokenises, said
    with pytest.raises(pair.PairError) as e:
        pair.encode_pair(tok, "埃菲尔铁塔位于", "罗马斗兽场位于").require_same_length()
    assert "18 clean, 15 corrupted" in str(e.value)
    _, base = _recorded(smol)
    assert pair.suggest(tok, base.clean_logits(), base.corrupted_logits()) == (" Paris", " Rome")


# ---------------------------------------------------------------------------------------------
# attribution


def _ref_grad_x_input(model, ids, answer, foil, toy=False):
    """Autograd on an untouched model: the embeddings as a leaf, fed as inputs_embeds (HF) or swapped
    in by a plain forward hook on the embedding (the toy has no inputs_embeds)."""
    emb = roles.find_sites(model).embed
    with torch.no_grad():
        e = emb(torch.tensor([list(ids)])).clone()
    leaf = e.requires_grad_(True)
    if toy:
        h = emb.register_forward_hook(lambda *_: leaf)
        try:
            lg = model(torch.tensor([list(ids)]))[0][0, -1]
        finally:
            h.remove()
    else:
        lg = model(inputs_embeds=leaf, use_cache=False).logits[0, -1]
    f = lg[answer] - lg[foil]
    (g,) = torch.autograd.grad(f, leaf)
    grad_x = (g[0] * leaf[0]).detach().double().numpy()  # [T, d]
    return grad_x.sum(-1), float(f.detach()), lg.detach().double().numpy(), g[0].detach().double().numpy(), leaf[0].detach().double().numpy()


def _check_grad_x_input(got, twins, ids, answer, foil, toy: bool = False) -> None:
    """gradient × input against autograd on the untouched twins (their float64 one: the exact answer).
    A gradient as accurate as HF's float32 one — each token's gradient row [d] within ROUTE_FACTOR ×
    HF's float32 row error (2-norm, the largest over the tokens) + one float32 rounding of it, as
    ``floats.assert_as_accurate`` allows — moves a score Σ_d g·e by at most that × ‖e‖₂
    (Cauchy–Schwarz), and the float32 dot product adds γ_d Σ_d |g·e|; the total is within the sum of
    the T scores' bounds; f, a difference of two logits, within twice the logits' allowance."""
    (_, _, lg32, g32, _), (s64, v64, lg64, g64, e) = (_ref_grad_x_input(m, ids, answer, foil, toy) for m in twins)
    rows = floats.ROUTE_FACTOR * np.linalg.norm(g32 - g64, axis=-1).max() + floats.U32 * np.linalg.norm(g64, axis=-1).max()
    bound = rows * np.linalg.norm(e, axis=-1) + floats.sum_bound((np.abs(g64) * np.abs(e)).sum(-1), e.shape[-1], routes=1)
    why = "a gradient row as accurate as HF's float32 one (2-norm), by Cauchy–Schwarz, and a float32 dot product"
    floats.assert_within(got.scores, s64, bound, what="gradient × input", why=why)
    floats.assert_within(got.total, s64.sum(), bound.sum(), what="Σ gradient × input", why=why)
    floats.assert_within(got.value, v64, 2 * _allowance(lg32, lg64), what="f at the input",
                         why="a logit difference of a float32 route: twice assert_as_accurate's allowance")


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_grad_x_input_equals_autograd_on_an_untouched_model(tiny_loaded, eager_refs, arch):
    loaded = tiny_loaded[arch]
    ids = pair.encode_pair(loaded.tokenizer, *EIFFEL[:2]).ids_clean
    a, f = 300, 301
    got = attribution.grad_x_input(loaded, ids, a, f)
    _check_grad_x_input(got, _twins(loaded, eager_refs, arch), ids, a, f)
    assert all(not p.requires_grad for p in loaded.model.parameters()) and all(p.grad is None for p in loaded.model.parameters())
    assert _no_hooks(loaded.model)


def test_grad_x_input_smol_and_toy(smol, eager_refs, toy, toy_twins):
    pt = pair.encode_pair(smol.tokenizer, *EIFFEL[:2])
    ans = pair.answers(smol.tokenizer, " Paris", " Rome")
    got = attribution.grad_x_input(smol, pt.ids_clean, ans.answer, ans.foil)
    _check_grad_x_input(got, _twins(smol, eager_refs, "smollm2"), pt.ids_clean, ans.answer, ans.foil)
    tp = pair.encode_pair(toy.tokenizer, *INDUCTION[:2])
    ta = pair.answers(toy.tokenizer, "p", "r")
    got = attribution.grad_x_input(toy, tp.ids_clean, ta.answer, ta.foil)
    _check_grad_x_input(got, toy_twins, tp.ids_clean, ta.answer, ta.foil, toy=True)


def test_integrated_gradients_completeness_toy_and_smol(toy, smol, eager_refs):
    tp = pair.encode_pair(toy.tokenizer, *INDUCTION[:2])
    ta = pair.answers(toy.tokenizer, "p", "r")
    _within([_gap(toy, tp.ids_clean, ta.answer, ta.foil, s) for s in IG_TOL])
    pt = pair.encode_pair(smol.tokenizer, *EIFFEL[:2])
    ans = pair.answers(smol.tokenizer, " Paris", " Rome")
    igs = [_gap(smol, pt.ids_clean, ans.answer, ans.foil, s) for s in (32, 256)]
    _within(igs)
    # f(input) is the clean logit difference the other pages show (another float32 route to it)
    _, base = _recorded(smol)
    floats.assert_within(igs[0].value, pair.logit_diff(base.clean_logits(), ans.answer, ans.foil),
                         4 * _pair_allowance(pt, *_twins(smol, eager_refs, "smollm2")), what="f(input)",
                         why="two float32 routes of a logit difference, each within twice assert_as_accurate's allowance")
    assert _no_hooks(smol.model)


def _hand_ig(ref, ids, steps: int) -> np.ndarray:
    """The Gauss–Legendre sum by hand with inputs_embeds on an untouched model (in its own dtype); the
    baseline is the mean embedding row rounded to float32, as the app's, so both twins start from the same point."""
    emb = ref.get_input_embeddings()
    with torch.no_grad():
        e = emb(torch.tensor([ids]))[0]
        b = emb.weight.double().mean(0).float().to(e.dtype)[None].repeat(len(ids), 1)
    b[0] = e[0]
    nodes, weights = np.polynomial.legendre.leggauss(steps)
    total = torch.zeros_like(e, dtype=torch.float64)
    for x, w in zip((nodes + 1) / 2, weights / 2):
        leaf = (b + float(x) * (e - b))[None].clone().requires_grad_(True)
        lg = ref(inputs_embeds=leaf, use_cache=False).logits[0, -1]
        (g,) = torch.autograd.grad(lg[300] - lg[301], leaf)
        total += w * g[0].double()
    return (total * (e - b).double()).sum(-1).numpy()


def test_ig_by_hand_on_an_untouched_model(tiny_loaded, eager_refs):
    """The same Gauss–Legendre sum computed by hand with inputs_embeds on an untouched model."""
    loaded = tiny_loaded["llama"]
    ids = pair.encode_pair(loaded.tokenizer, *EIFFEL[:2]).ids_clean
    got = attribution.integrated_gradients(loaded, ids, 300, 301, 16)
    want32, want64 = (_hand_ig(m, ids, 16) for m in _twins(loaded, eager_refs, "llama"))
    floats.assert_as_accurate(got.scores, want32, want64, what="integrated gradients")


def test_attention_row_and_chip_colours(smol):
    tr = backends.trace(smol, EIFFEL[0])
    row = attribution.last_row_attention(tr, 5)
    w = backends.attention(smol, tr, 5)
    floats.assert_same(row, w[:, -1].astype(np.float64).mean(0), "the heads' mean of the last row")
    # the weights are kept in float16: each of the T weights of a head's row moved by its float16 rounding;
    # the float32 softmax's own rounding (the exp, the max's subtraction, the T-term sum, the division) is negligible beside it
    T = tr.n_tokens
    kept = floats.f16_rounding(w[:, -1]).sum(-1).mean() + floats.sum_bound(1.0, T + 4, routes=1)
    assert row.shape == (T,)
    floats.assert_within(row.sum(), 1.0, kept, what="the row's sum", why="float16 storage of the weights")
    c = attribution.chip_colours([2.0, -1.0, 0.0])
    # the strongest at alpha 0.45: the page's text still reads at 4.5:1 or more on it (issue 26; 0.70 fell to 3.9:1)
    assert c[0].startswith("rgba(220,38,38,0.45") and c[1].startswith("rgba(37,99,235") and c[2] == "rgba(255,255,255,1)"


# ---------------------------------------------------------------------------------------------
# pages


def _app(stem: str, lang: str = "en", **params):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.session_state["lang"] = lang
    for k, v in params.items():
        at.query_params[k] = v
    at.switch_page(f"pages/{stem}.py")
    at.run()
    return at




def _figs(at) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def _text(at) -> str:
    return " ".join(m.value for m in [*at.markdown, *at.caption, *at.warning, *at.info, *at.error])


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_pages_render_the_cores_numbers(smol, lang):
    pt, base = _recorded(smol)
    ans = pair.answers(smol.tokenizer, " Paris", " Rome")
    c, r = (pair.logit_diff(lg, ans.answer, ans.foil) for lg in (base.clean_logits(), base.corrupted_logits()))
    at = _app("cause_pair", lang)
    assert not at.exception and not at.error and not at.warning, [e.value for e in at.exception]
    assert [m.value for m in at.metric] == [f"{c:.3f}", f"{r:.3f}", f"{c - r:.3f}"]
    assert "⟦" not in _text(at) and (("logit 差" in _text(at)) if lang == "zh" else ("logit difference" in _text(at)))

    at = _app("cause_patching", lang, layer="4", pos="2")  # a link that names a cell
    assert not at.exception and not at.error, [e.value for e in at.exception]
    fig = _figs(at)[0]
    z = plotly_array(fig["data"][0]["z"])
    grid = patching.sweep(smol, base, "resid", ans.answer, ans.foil)
    floats.assert_same(z, patching.normalise(grid, c, r), "the page's grid (the same sweep)")
    assert (at.slider(key="cpatch_layer").value, at.slider(key="cpatch_col_resid").value) == (4, 2)
    assert at.query_params["clean"] == EIFFEL[0] and at.query_params["site"] == "resid"
    run = patching.patched_logits(smol, base, patching.Patch("resid", 4, 2))
    assert at.metric[0].value == f"{pair.logit_diff(run, ans.answer, ans.foil):.3f}"
    assert "⟦" not in _text(at)
    cells = at.dataframe[-1].value.iloc[:, 1:].to_numpy().ravel()  # issue 14: every probability to two decimals
    assert all(re.fullmatch(r"\d+\.\d\d%", v) for v in cells), cells

    at = _app("cause_attribution", lang, steps="16")
    assert not at.exception and not at.error, [e.value for e in at.exception]
    fig = _figs(at)[0]
    ig = attribution.integrated_gradients(smol, pt.ids_clean, ans.answer, ans.foil, 16)
    floats.assert_same(plotly_array(fig["data"][1]["y"]), ig.scores, "the page's scores (the same computation)")
    assert "⟦" not in _text(at) and ("16" in _text(at))


def test_pages_say_why_on_bad_input(smol):
    at = _app("cause_patching", clean="埃菲尔铁塔位于", corrupt="罗马斗兽场位于")
    assert not at.exception and "18 clean, 15 corrupted" in _text(at) and not at.get("plotly_chart")
    at = _app("cause_pair", clean="埃菲尔铁塔位于", corrupt="罗马斗兽场位于", answer="巴黎", foil="罗马")
    assert not at.exception and "18 clean, 15 corrupted" in _text(at)
    assert "is 5 tokens for this model" in _text(at)  # the answer: how it tokenises
    at = _app("cause_attribution", answer="Paris Paris")
    assert not at.exception and "is 2 tokens" in _text(at)
    at = _app("cause_patching", foil=" Paris")
    assert not at.exception and "same token" in _text(at)


def test_toy_pages_and_site_from_the_link():
    at = _app("cause_patching", model="toy", clean=INDUCTION[0], corrupt=INDUCTION[1], answer="p", foil="r", site="z")
    assert not at.exception and not at.error, [e.value for e in at.exception]
    assert at.radio(key="cpatch_site").value == "z"
    fig = _figs(at)[0]
    assert plotly_array(fig["data"][0]["z"]).shape == (2, 4)  # the toy's 2 layers × 4 heads
    # the caption says how the head runs were made: two heads of layer 0 give the same output at the last
    # position in both runs (those runs are the corrupted run, not computed); the other 6 go in one pass
    # feeding only the last of the 12 positions (<bos> + 11 letters) through both blocks:
    # 6 × 1 × 2 of 8 × 12 × 2, i.e. 6.25 %
    assert [patching.unchanged(base_toy := _recorded(load_trained(), *INDUCTION[:2])[1], p)
            for p in patching.head_patches(2, 4, 11)] == [False, True, False, True, *[False] * 4], base_toy.n_tokens
    captions = [c.value for c in at.caption]
    assert i18n.t("cause.runs_cached", "en", n="8", passes="1", pct="6.25") in captions, captions
    assert i18n.t("cause.runs_same", "en", m="2") in captions, captions
    at = _app("cause_attribution", model="toy", clean=INDUCTION[0], corrupt=INDUCTION[1], answer="p", foil="r", site="nowhere")
    assert not at.exception and not at.error


def test_pair_page_on_a_projector_draws_the_alignment_as_a_table(smol):
    # a dataframe is a canvas the presenter CSS cannot enlarge: on a projector the alignment is a st.table
    for lang in ("en", "zh"):
        at = _app("cause_pair", lang, present="1")
        assert not at.exception and not at.dataframe and len(at.table) == 1, [e.value for e in at.exception]
        cells = at.table[0].value.to_numpy()
        pt = pair.encode_pair(smol.tokenizer, *EIFFEL[:2])
        # one row per position; the "same token" column in marks, not true / false
        assert cells.shape[0] == pt.n_tokens and set(cells[:, -1]) == {"✓", "✗"}
        assert [i for i, c in enumerate(cells[:, -1]) if c == "✗"] == pt.differing()
    assert _app("cause_pair").dataframe, "without the projector the table stays a sortable dataframe"


def test_presets_that_do_not_fit_the_model_say_so(smol, toy):
    assert pair.fits(smol.tokenizer, pair.preset("eiffel")) and pair.fits(toy.tokenizer, pair.preset("induction"))
    assert not pair.fits(smol.tokenizer, pair.preset("eiffel_zh"))  # 18 vs 15 tokens, 巴黎 is 5 byte pieces
    assert not pair.fits(toy.tokenizer, pair.preset("eiffel"))  # the toy's tokens are characters: " Paris" is 6
    zh = pair.preset("eiffel_zh")
    at = _app("cause_pair", "zh", clean=zh.clean, corrupt=zh.corrupted, answer=zh.answer, foil=zh.foil)
    assert not at.exception and "SmolLM2-135M-Instruct 的分词器" in at.info[0].value
    assert not _app("cause_pair").info, "the English pair fits SmolLM2: no note"


def test_patching_page_numbers_have_thousands_separators(smol, monkeypatch):
    # a 62-token pair on SmolLM2 is 1,860 runs; the counts are read from patching.sweep_plan, so large ones stand in
    monkeypatch.setattr(patching, "sweep_plan", lambda *_a, **_k: patching.SweepPlan(12345, 1234, 0.5, False))
    at = _app("cause_patching")
    assert not at.exception and any(c.value.startswith("12,345 patched runs, batched into forward passes (1,234 in all)") for c in at.caption), [c.value for c in at.caption]


def test_attribution_page_warns_when_the_steps_are_too_few(toy):
    tp = pair.encode_pair(toy.tokenizer, *INDUCTION[:2])
    ta = pair.answers(toy.tokenizer, "p", "r")
    for steps, lang in ((16, "en"), (16, "zh"), (128, "en")):
        rough = attribution.integrated_gradients(toy, tp.ids_clean, ta.answer, ta.foil, steps).relative_gap > attribution.ROUGH_GAP
        assert rough == (steps == 16)  # the toy's path: 16 steps are too few, 128 are plenty
        at = _app("cause_attribution", lang, model="toy", clean=INDUCTION[0], corrupt=INDUCTION[1], answer="p", foil="r",
                  steps=str(steps))
        assert not at.exception and not at.error
        said = [w.value for w in at.warning if ("Take more steps" in w.value or "请增加步数" in w.value)]
        assert len(said) == int(rough), [w.value for w in at.warning]


def test_attribution_link_round_trips_steps_and_attention_layer():
    at = _app("cause_attribution", "zh", model="toy", clean=INDUCTION[0], corrupt=INDUCTION[1], answer="p", foil="r",
              steps="64", attn_layer="0")
    assert not at.exception and at.select_slider(key="cattr_steps").value == 64 and at.slider(key="cattr_layer").value == 0
    assert (at.query_params["steps"], at.query_params["attn_layer"]) == ("64", "0")
    titles = [a["text"] for a in _figs(at)[0]["layout"]["annotations"]]
    assert "积分梯度（64 步）" in titles and any(t.startswith("最后一个位置的注意力，第 0 层") for t in titles), titles
