"""The serving lab (issue 24): ``core.gen.serving`` on the embedded SmolLM2, checked against independent
references — HF's own eager model (float32 and float64) for the padded batch, HF ``generate`` one
request at a time for the engine's tokens — plus the workload's validation, the command line, and a pin
of every transformers internal the lab reads (so an upgrade that changes one fails here, loudly).

Tiny workloads only (2–4 requests, ≤ 8 new tokens): the engine really runs, on the CPU."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch
from floats import assert_as_accurate, assert_same
from helpers.serving import _jsonl, _one_error
from transformers import AutoModelForCausalLM, ContinuousBatchingConfig, GenerationConfig

import core.__main__ as cli
from conftest import EagerReference, _smol_folder
from core.gen import serving
from core.gen.serving import Request, WorkloadError

QUESTIONS = ("Write a short poem about the sea.", "Explain gravity in one sentence.",
             "Name three colours.", "What is the capital of France?")
NEW = 6


def _reqs(n: int = 4, arrivals=None, new: int = NEW) -> list[Request]:
    arrivals = arrivals or [0.0] * n
    return [Request(f"q{i}", QUESTIONS[i], new, arrivals[i], chat=True, line=i + 1) for i in range(n)]


@pytest.fixture(scope="module")
def plain(smol):
    return serving.plain_model(smol)


@pytest.fixture(scope="module")
def served(plain):
    """Four greedy chat requests through the engine (two arriving later, while the first decode), each
    checked against HF ``generate`` alone: the run the other tests compare with."""
    return serving.run_workload(plain, _reqs(4, [0.0, 0.0, 0.4, 0.8]), page_size=16)


@pytest.fixture(scope="module")
def solo(served):
    return {r.id: r.solo_token_ids for r in served.requests}


# ---------------------------------------------------------------------------------------------
# the plain copy


def test_engine_refuses_the_traced_attention(smol):
    """Why the lab needs a copy: transformers' engine refuses the app's traced "xray" attention (and the
    refusal leaves the traced model as it was)."""
    assert smol.model.config._attn_implementation == "xray"
    cfg = ContinuousBatchingConfig(auto_switch_to_flash=False)
    with pytest.raises(ValueError, match="not supported for continuous batching"):
        smol.model.init_continuous_batching(generation_config=GenerationConfig(eos_token_id=2), continuous_batching_config=cfg)
    assert smol.model.config._attn_implementation == "xray"


def test_plain_copy_shares_the_weights_and_computes_what_hf_loads(smol, plain):
    """The copy holds the traced model's very tensors (no second copy of the weights), has sdpa on its own
    config, and computes bit for bit what HF's own sdpa model loaded from the converted folder computes
    (same kernels, same weights: a dropped buffer — RoPE's inv_freq — would show here)."""
    weights = dict(smol.model.named_parameters(remove_duplicate=False))
    assert all(weights.get(n) is p for n, p in plain.model.named_parameters(remove_duplicate=False))  # no weight copied
    assert plain.model.config is not smol.model.config
    assert (smol.model.config._attn_implementation, plain.model.config._attn_implementation) == ("xray", "sdpa")
    ref = AutoModelForCausalLM.from_pretrained(str(_smol_folder()), dtype=torch.float32, attn_implementation="sdpa").eval()
    x = torch.tensor([plain.tokenizer("The capital of France is")["input_ids"]])
    with torch.inference_mode():
        assert_same(plain.model(x).logits.numpy(), ref(x).logits.numpy(), "plain copy vs HF's sdpa model")


# ---------------------------------------------------------------------------------------------
# one padded batch


PROMPTS = ("The capital of France is", "Hello", "One, two, three, four, five, six")


@pytest.fixture(scope="module")
def alone_refs(plain):
    """Each prompt alone through HF's own eager SmolLM2, loaded apart from the app's (conftest's
    EagerReference), in float32 (HF's float32 route) and float64 (the exact answer to float32's eyes)."""
    eager = EagerReference(_smol_folder())
    out = []
    for p in PROMPTS:
        ids = plain.tokenizer(p)["input_ids"]
        out.append((ids, eager.run(ids, "float32").logits[0].double().numpy(), eager.run(ids, "float64").logits[0].numpy()))
    return out


@pytest.mark.parametrize("side", ["left", "right"])
def test_padded_batch_matches_each_prompt_alone(plain, alone_refs, side):
    pb = serving.padded_batch(plain, PROMPTS, side)
    B, T = pb.mask_2d.shape
    assert len(set(pb.lengths)) == 3 and max(pb.lengths) == T
    real = pb.mask_2d.astype(bool)
    for b in range(B):
        # the mask the attention layers received: causal × padding, on every real query row
        assert (pb.mask_4d[b][real[b]] == pb.expected_4d[b][real[b]]).all(), (side, b)
        assert pb.mask_4d[b][real[b]][:, ~real[b]].sum() == 0  # no real token reads a pad
        # real tokens count 0, 1, 2 … whichever side the pads are on
        assert pb.position_ids[b][real[b]].tolist() == list(range(pb.lengths[b]))
        ids, ref32, ref64 = alone_refs[b]
        assert pb.token_ids[b] == ids
        # batched (sdpa, a padded 4-D mask) vs alone (eager): two routes, as accurate as HF's float32 one
        assert_as_accurate(pb.logits[b], ref32, ref64, f"{side} padding, prompt {b}")
        assert_as_accurate(pb.alone[b], ref32, ref64, f"prompt {b} alone")
        # RoPE: a constant shift of a row's positions cancels in every score (rounding only)
        assert_as_accurate(pb.logits_without_positions[b], ref32, ref64, f"{side}, positions not shifted, prompt {b}")
        if side == "right":  # the pads come after every real token: causality alone hides them
            assert_as_accurate(pb.logits_without_mask[b], ref32, ref64, f"right, no padding mask, prompt {b}")
    if side == "left":  # without the mask, real tokens read the pads: far beyond any rounding
        noise = max(float(np.abs(a - r).max()) for a, r in zip(pb.logits, pb.alone))
        assert pb.error_without_mask > 1e4 * max(noise, 1e-6)
        assert pb.argmax_changed_without_mask > 0 and pb.argmax_changed == 0


def test_padded_batch_refuses_bad_input(plain):
    for args, code in ((([PROMPTS[0]], "left"), "padded_count"), (([*PROMPTS, "x"], "left"), "padded_count"),
                       (((PROMPTS[0], "  "), "left"), "padded_empty"), (((PROMPTS[0], "word " * 80), "left"), "padded_too_long"),
                       ((PROMPTS, "middle"), "bad_side")):
        with pytest.raises(WorkloadError) as e:
            serving.padded_batch(plain, *args)
        assert e.value.code == code and e.value.known


# ---------------------------------------------------------------------------------------------
# continuous batching on the real engine


def test_engine_tokens_equal_generate_alone(served, plain):
    """The issue's claim: four greedy requests through the engine give exactly the tokens of four
    separate HF ``generate`` calls (the ✓ per request)."""
    assert [r.outcome for r in served.requests] == ["finished"] * 4 and served.refused is None
    for r in served.requests:
        assert r.solo_token_ids and r.token_ids == r.solo_token_ids, r.id
        assert r.equals_solo and r.text == plain.tokenizer.decode(r.token_ids, skip_special_tokens=True)
    assert served.sequential_tokens_per_s > 0 and served.tokens_per_s > 0


def test_the_timeline_accounts_for_every_token(served):
    """Per request, the steps say what the engine computed: its prompt tokens (chunks included) in the
    prefill steps, one decode step per token after the first, times in order; and our clock agrees with
    the engine's own per-token stamps (each taken inside the update of that step)."""
    steps = served.steps
    assert steps and [s.index for s in steps] == list(range(len(steps)))
    for a, b in itertools.pairwise(steps):
        assert a.start_s <= a.t_s <= b.start_s <= b.t_s
    for r in served.requests:
        prefilled = sum(s.prefill.get(r.id, 0) for s in steps)
        assert prefilled == r.computed_prompt_tokens == r.prompt_tokens - r.reused_prompt_tokens, r.id
        decodes = [s for s in steps if r.id in s.decode]
        assert len(decodes) == len(r.token_ids) - 1, r.id
        assert sum(r.id in s.joined for s in steps) == 1 and sum(r.id in s.finished for s in steps) == 1
        assert 0 <= r.queue_s <= r.ttft_s <= r.e2e_s and r.tpot_s > 0
        assert r.arrival_s <= r.first_scheduled_s < r.first_token_s <= r.finish_s
        last_prefill = [s for s in steps if r.id in s.prefill][-1]
        token_steps = [last_prefill, *decodes]  # the step that ends the prefill gives the first token
        assert token_steps[0].t_s == r.first_token_s and token_steps[-1].t_s == r.finish_s
        assert len(r.engine_token_s) == len(r.token_ids) == len(token_steps)
        for e, s in zip(r.engine_token_s, token_steps):  # the engine stamps each token inside that step's update
            assert s.start_s <= e <= s.t_s, (r.id, e, s)
        held = [len(s.blocks[r.id]) for s in steps if r.id in s.blocks]
        assert held and max(held) == -(-(r.prompt_tokens + len(r.token_ids) - 1) // 16)  # ceil(tokens / page)


def test_memory_matches_the_kv_rule(served, smol):
    """The measured pool (the engine's own cache tensor, less its two trash sectors) is exactly the KV
    page's formula for num_blocks × page_size tokens; a contiguous max-length cache per request is far more."""
    m = served.memory
    g = smol.facts.geometry
    n_blocks, page = served.settings["num_blocks"], served.settings["page_size"]
    assert m["pool_bytes_formula"] == g.kv_bytes(n_blocks * page, 4) == m["pool_bytes_data"]
    assert m["pool_bytes_measured"] == m["pool_bytes_data"] + 2 * m["bytes_per_block"]  # sector = block here
    assert m["contiguous_max_length_bytes"] == g.kv_bytes(smol.facts.max_positions, 4, requests=4)
    assert m["peak_bytes_used"] <= m["pool_bytes_formula"] < m["contiguous_max_length_bytes"]


def test_block_sharing_reduces_the_prompt_tokens_computed(plain, solo):
    """Two chat prompts share SmolLM2's template prefix (its default system message). A token budget of
    exactly the first prompt makes the second wait one step, so the first one's full blocks are hashed
    when the second is admitted: with sharing it computes only what follows them, without it everything.
    Same tokens either way."""
    reqs = _reqs(2)
    ids = serving.encode_workload(plain.tokenizer, reqs, plain.facts.max_positions)
    runs = {share: serving.run_workload(plain, reqs, page_size=16, max_batch_tokens=len(ids[0]),
                                        prefix_sharing=share, solo=False) for share in (True, False)}
    on, off = (next(r for r in runs[share].requests if r.id == "q1") for share in (True, False))
    assert off.reused_prompt_tokens == 0 and off.computed_prompt_tokens == off.prompt_tokens
    assert on.reused_prompt_tokens >= 16 and on.reused_prompt_tokens % 16 == 0
    assert on.computed_prompt_tokens == on.prompt_tokens - on.reused_prompt_tokens
    shared_prefix = next(i for i, (a, b) in enumerate(zip(*ids)) if a != b)
    assert on.reused_prompt_tokens <= shared_prefix
    both = [s for s in runs[True].steps if {"q0", "q1"} <= set(s.blocks)]
    assert both and set(both[0].blocks["q0"]) & set(both[0].blocks["q1"])  # the same physical blocks
    for res in runs.values():
        assert [r.token_ids for r in res.requests] == [solo["q0"], solo["q1"]]
    summary = serving.sharing_summary(runs[True], runs[False])
    assert summary["reused_prompt_tokens"] == on.reused_prompt_tokens
    assert summary["computed_prompt_tokens"][0] < summary["computed_prompt_tokens"][1]


def test_a_small_pool_queues_and_an_impossible_request_is_refused(plain, solo):
    """Running out of blocks is what the engine does, reported, never a crash: with 4 blocks of 16 tokens
    the second request waits (queued, or preempted and recomputed) until the first frees its blocks, and
    both still give generate's tokens; with 2 blocks a 38-token prompt can never fit and the engine refuses."""
    small = serving.run_workload(plain, _reqs(2), page_size=16, num_blocks=4, solo=False)
    assert small.settings["num_blocks"] == 4 and small.refused is None
    assert [r.token_ids for r in small.requests] == [solo["q0"], solo["q1"]]
    assert max(s.blocks_used for s in small.steps) <= 4
    assert all(0 <= b < 4 for s in small.steps for blocks in s.blocks.values() for b in blocks)
    q1_joined = next(s.index for s in small.steps if "q1" in s.joined)
    q0_done = next(s.index for s in small.steps if "q0" in s.finished)
    assert q1_joined > q0_done  # it waited for the blocks the first request gave back
    tiny = serving.run_workload(plain, _reqs(1), page_size=16, num_blocks=2, solo=False)
    r = tiny.requests[0]
    assert r.outcome == "refused" and r.token_ids == [] and "No requests can be scheduled" in (r.error or "")
    assert tiny.refused and r.ttft_s is None


def test_the_pool_is_bounded(plain):
    with pytest.raises(WorkloadError) as e:
        serving.run_workload(plain, _reqs(1), page_size=256, num_blocks=4096, solo=False)
    assert e.value.code == "pool_too_big" and e.value.known
    with pytest.raises(WorkloadError) as e:
        serving.EngineSettings(page_size=2)
    assert e.value.code == "bad_setting"


# ---------------------------------------------------------------------------------------------
# the workload: every bad case is one error naming its line


GOOD = '{"id": "a", "prompt": "Hello", "max_new_tokens": 4}'


def test_token_lengths_are_checked_with_the_tokenizer(plain):
    long = Request("big", "word " * 2100, 4, line=7)
    with pytest.raises(WorkloadError) as e:
        serving.encode_workload(plain.tokenizer, [long], plain.facts.max_positions)
    assert e.value.code == "prompt_too_long" and e.value.params["line"] == 7 and "2048" in str(e.value)
    with pytest.raises(WorkloadError) as e:
        serving.encode_workload(plain.tokenizer, [Request("c", "Hello there", 200, line=2)], 100)
    assert e.value.code == "over_context" and "line 2" in str(e.value).lower()


def test_cli_refuses_a_prompt_over_the_limit_naming_its_line(tmp_path, capsys, smol):
    w = tmp_path / "w.jsonl"
    w.write_text(GOOD + "\n" + json.dumps({"id": "b", "prompt": "word " * 2100, "max_new_tokens": 4}) + "\n", encoding="utf-8")
    out = tmp_path / "r.json"
    assert cli.main(["serve-lab", str(w), "-o", str(out)]) == 2
    assert "Line 2" in _one_error(capsys) and not out.exists()


def test_cli_writes_the_issue_json(tmp_path, capsys, smol, solo):
    w = tmp_path / "w.jsonl"
    w.write_text(_jsonl(_reqs(2, [0.0, 0.2])), encoding="utf-8")
    out = tmp_path / "r.json"
    assert cli.main(["serve-lab", str(w), "-o", str(out), "--page-size", "16"]) == 0
    cap = capsys.readouterr()
    assert "engine:" in cap.err or "starting the engine" in cap.err  # progress in words, on stderr
    assert f"wrote {out}" in cap.out and "✓ q0" in cap.out
    d = json.loads(out.read_text(encoding="utf-8"))
    assert {"requests", "steps", "tokens_per_s", "sequential_tokens_per_s"} <= set(d)
    for r in d["requests"]:
        assert {"id", "prompt_tokens", "token_ids", "text", "arrival_s", "first_token_s", "finish_s", "ttft_s",
                "tpot_s", "reused_prompt_tokens", "equals_solo"} <= set(r)
        assert r["equals_solo"] is True and r["token_ids"] == solo[r["id"]]
    for s in d["steps"]:
        assert {"t_s", "prefill", "decode", "blocks_used"} <= set(s)
    assert d["requests"][0]["arrival_s"] < 0.1 <= d["requests"][1]["arrival_s"]  # seconds from the first arrival
