"""The serving lab (issue 24): ``core.gen.serving`` on the embedded SmolLM2, checked against independent
references — HF's own eager model (float32 and float64) for the padded batch, HF ``generate`` one
request at a time for the engine's tokens — plus the workload's validation, the command line, and a pin
of every transformers internal the lab reads (so an upgrade that changes one fails here, loudly).

Tiny workloads only (2–4 requests, ≤ 8 new tokens): the engine really runs, on the CPU."""

from __future__ import annotations

import inspect

import pytest
import transformers
from helpers.serving import _jsonl, _one_error
from transformers.generation.continuous_batching import cache as cb_cache
from transformers.generation.continuous_batching import continuous_api, requests, scheduler
from transformers.generation.continuous_batching.cache_allocators import cache_allocator, cache_pool

import core.__main__ as cli
from core import backends
from core.common import i18n
from core.gen import serving, workloads
from core.gen.serving import Request, WorkloadError


def test_the_toy_is_refused():
    with pytest.raises(WorkloadError) as e:
        serving.plain_model(backends.load_model("toy"))
    assert e.value.code == "toy" and e.value.known


# ---------------------------------------------------------------------------------------------
# the workload: every bad case is one error naming its line


GOOD = '{"id": "a", "prompt": "Hello", "max_new_tokens": 4}'


@pytest.mark.parametrize("text, code, line", [
    ("", "empty", None),
    ("\n  \n", "empty", None),
    (GOOD + "\n{not json", "not_json", 2),
    (GOOD + "\n[1, 2]", "not_object", 2),
    ('{"id": "a", "prompt": "x", "max_new_tokens": 4, "temperature": 1}', "unknown_field", 1),
    ('{"id": "a", "max_new_tokens": 4}', "missing_field", 1),
    ('{"id": 3, "prompt": "x", "max_new_tokens": 4}', "wrong_type", 1),
    ('{"id": "a", "prompt": "x", "max_new_tokens": "4"}', "wrong_type", 1),
    ('{"id": "a", "prompt": "x", "max_new_tokens": true}', "wrong_type", 1),
    ('{"id": "a", "prompt": "x", "max_new_tokens": 4.5}', "wrong_type", 1),
    ('{"id": "a", "prompt": "x", "max_new_tokens": 4, "chat": 1}', "wrong_type", 1),
    ('{"id": "a", "prompt": "x", "max_new_tokens": 4, "arrival_s": "soon"}', "wrong_type", 1),
    ('{"id": "a", "prompt": "x", "max_new_tokens": 0}', "out_of_range", 1),
    ('{"id": "a", "prompt": "x", "max_new_tokens": -3}', "out_of_range", 1),
    ('{"id": "a", "prompt": "x", "max_new_tokens": 100000000000}', "out_of_range", 1),
    ('{"id": "a", "prompt": "x", "max_new_tokens": 4, "arrival_s": -1}', "out_of_range", 1),
    ('{"id": "a", "prompt": "x", "max_new_tokens": 4, "arrival_s": 1e300}', "out_of_range", 1),
    ('{"id": "a", "prompt": "x", "max_new_tokens": 4, "arrival_s": NaN}', "not_json", 1),
    ('{"id": "a", "prompt": "   ", "max_new_tokens": 4}', "empty_field", 1),
    ('{"id": "", "prompt": "x", "max_new_tokens": 4}', "empty_field", 1),
    ('{"id": "' + "i" * 65 + '", "prompt": "x", "max_new_tokens": 4}', "too_long", 1),
    ('{"id": "a", "prompt": "' + "x" * 20001 + '", "max_new_tokens": 4}', "too_long", 1),
    (GOOD + "\n\n" + GOOD, "duplicate_id", 3),
    ("".join(f'{{"id": "r{i}", "prompt": "x", "max_new_tokens": 1}}\n' for i in range(33)), "too_many_requests", 33),
    ("".join(f'{{"id": "r{i}", "prompt": "x", "max_new_tokens": 256}}\n' for i in range(5)), "too_many_new_tokens", 5),
])
def test_bad_workloads_are_refused_naming_the_line(text, code, line):
    with pytest.raises(WorkloadError) as e:
        serving.parse_workload(text)
    assert e.value.code == code and e.value.known, (code, str(e.value))
    if line is not None:
        assert e.value.params["line"] == line and f"{line}" in str(e.value) and f"{line}" in e.value.text("zh")
    assert "⟦" not in str(e.value) and "⟦" not in e.value.text("zh")


def test_the_bounds_are_said_in_the_errors():
    with pytest.raises(WorkloadError) as e:
        serving.parse_workload('{"id": "a", "prompt": "x", "max_new_tokens": 999}')
    assert str(serving.MAX_NEW_TOKENS) in str(e.value) and str(serving.MAX_NEW_TOKENS) in e.value.text("zh")
    text = "".join(f'{{"id": "r{i}", "prompt": "x", "max_new_tokens": 1}}\n' for i in range(33))
    with pytest.raises(WorkloadError) as e:
        serving.parse_workload(text)
    assert str(serving.MAX_REQUESTS) in str(e.value) and str(serving.MAX_REQUESTS) in e.value.text("zh")


def test_a_good_workload_round_trips():
    text = (GOOD + "\n" + '{"id": "b", "prompt": "Hi", "max_new_tokens": 2, "arrival_s": 0.5, "chat": true}\n')
    reqs = serving.parse_workload(text)
    assert reqs == (Request("a", "Hello", 4), Request("b", "Hi", 2, 0.5, True)) and [r.line for r in reqs] == [1, 2]
    assert serving.parse_workload(_jsonl(reqs)) == reqs


def test_every_serving_error_has_both_languages():
    keys = [k for k in i18n.catalogue() if k.startswith(serving.WorkloadError.PREFIX)]
    assert len(keys) >= 20 and not [p for p in i18n.problems() if p.startswith("serving.")]


# ---------------------------------------------------------------------------------------------
# the command line


@pytest.fixture
def no_model(monkeypatch):
    def refuse(*a, **kw):
        raise AssertionError("a model was loaded for an argument or workload error")

    monkeypatch.setattr(backends, "load_model", refuse)


@pytest.mark.parametrize("text, needle", [
    ("", "empty"),
    (GOOD + "\n{oops", "Line 2"),
    (GOOD + "\n" + GOOD, "Line 2"),
    ('{"id": "a", "prompt": "x", "max_new_tokens": -1}', "Line 1"),
    ('{"id": "a", "prompt": "x", "max_new_tokens": 4, "top_k": 3}', "Line 1"),
])
def test_cli_refuses_a_bad_workload_before_loading(tmp_path, capsys, no_model, text, needle):
    w = tmp_path / "w.jsonl"
    w.write_text(text, encoding="utf-8")
    out = tmp_path / "r.json"
    assert cli.main(["serve-lab", str(w), "-o", str(out)]) == 2
    assert needle in _one_error(capsys) and not out.exists()


@pytest.mark.parametrize("argv, needle", [
    (["--page-size", "2"], "--page-size"), (["--blocks", "0"], "--blocks"),
    (["--max-batch-tokens", "99999"], "--max-batch-tokens"), (["--model", "toy"], "Hugging Face"),
])
def test_cli_refuses_bad_options_before_loading(tmp_path, capsys, no_model, argv, needle):
    w = tmp_path / "w.jsonl"
    w.write_text(GOOD, encoding="utf-8")
    out = tmp_path / "r.json"
    assert cli.main(["serve-lab", str(w), "-o", str(out), *argv]) == 2
    assert needle in _one_error(capsys) and not out.exists()


def test_cli_refuses_missing_files_and_folders(tmp_path, capsys, no_model):
    assert cli.main(["serve-lab", str(tmp_path / "nope.jsonl"), "-o", str(tmp_path / "r.json")]) == 2
    assert "does not exist" in _one_error(capsys)
    assert cli.main(["serve-lab", str(tmp_path), "-o", str(tmp_path / "r.json")]) == 2
    assert "folder" in _one_error(capsys)
    w = tmp_path / "w.jsonl"
    w.write_text(GOOD, encoding="utf-8")
    assert cli.main(["serve-lab", str(w), "-o", str(tmp_path / "missing" / "r.json")]) == 2
    assert "does not exist" in _one_error(capsys)


# ---------------------------------------------------------------------------------------------
# the transformers internals the lab reads (continuous_batching/): an upgrade that changes one fails here


def test_pinned_transformers_internals():
    """Each attribute and signature ``serving._Recorder`` and ``run_workload`` rely on (read in transformers
    5.24; the functional tests above check the behaviour: steps seen, blocks counted, matches, refusals)."""
    where = f"transformers {transformers.__version__}"
    sched = inspect.signature(scheduler.Scheduler.schedule_batch)
    assert list(sched.parameters) == ["self", "token_budget", "cache_budget"], where
    assert set(requests.FutureRequestState.__slots__) >= {"state", "has_new_token", "query_length"}, where
    rs = requests.RequestState(request_id="x", initial_tokens=[1, 2])
    assert rs.generated_len() == 0 and rs.status.name == "PENDING" and hasattr(rs, "request_id"), where
    assert list(inspect.signature(cb_cache.PagedAttentionCache.search_prefix_match).parameters) == \
        ["self", "request_id", "prompt_ids"], where
    for name in ("cache_allocators", "num_blocks", "cache_tensor", "use_prefix_sharing"):
        assert name in inspect.getsource(cb_cache.PagedAttentionCache.__init__), (name, where)
    alloc_src = inspect.getsource(cache_allocator.CacheAllocator)
    for name in ("self.block_table", "self.blocks_per_sector", "self.ledger = BlockLedger()"):
        assert name in alloc_src, (name, where)
    assert cache_allocator.BlockLedger().cached_blocks == {}, where
    # the two trash sectors before the first allocatable block
    assert "list(range(self.num_reserved_sectors" in inspect.getsource(cache_pool.CachePool.reset), where
    proc = continuous_api.ContinuousBatchProcessor
    for name in ("update_batch", "prepare_next_batch"):
        assert callable(getattr(proc, name)), (name, where)
    init_src = inspect.getsource(proc.__init__)
    assert "self.offloading_manager" in init_src and "self.scheduler" in init_src and "self.cache" in init_src, where
    mgr = continuous_api.ContinuousBatchingManager
    create = inspect.getsource(mgr._create_batch_processor)
    assert "batch_processor.reset()" in create and "return batch_processor" in create, where  # warmup's processor is reused
    assert "self.batch_processor = self._create_batch_processor()" in inspect.getsource(mgr.warmup), where
    assert "fatal_error" in inspect.getsource(continuous_api.BackgroundThreadStatus), where
    assert list(inspect.signature(mgr.add_request).parameters)[:6] == \
        ["self", "input_ids", "request_id", "max_new_tokens", "streaming", "record_timestamps"], where
    off = inspect.getsource(continuous_api.OffloadingManager.offload_requests)
    assert "scheduler.finish_request" in off and "add_waiting_request" in off, where  # preemption = leave active, re-queue



@pytest.mark.parametrize("name", workloads.PRESETS)
def test_chinese_workloads_are_the_same_requests_in_chinese(name):
    """Each preset's Chinese file: as many requests, the same shape (new tokens, arrivals, chat), Chinese
    prompts; the chat preset keeps its shared system prompt (what prefix reuse needs)."""
    en, zh = workloads.preset(name, "en"), workloads.preset(name, "zh")
    assert len(zh) == len(en)
    for a, b in zip(en, zh):
        assert (a.max_new_tokens, a.arrival_s, a.chat) == (b.max_new_tokens, b.arrival_s, b.chat)
        assert sum("\u4e00" <= c <= "\u9fff" for c in b.prompt) > len(b.prompt) / 2
    if name == "chat":
        first = zh[0].prompt
        shared = next((i for i in range(len(first)) if any(r.prompt[i : i + 1] != first[i] for r in zh)), len(first))
        assert shared > 0.8 * min(len(r.prompt) for r in zh)
    with pytest.raises(KeyError):
        workloads.preset(name, "fr")


def test_edited_rows_drop_empty_cells():
    """An emptied cell of the lab's table (None, or NaN in a numeric column) is left out, so the default
    applies; an emptied required cell is refused naming its row."""
    rows = [{"id": "a", "prompt": "Hi", "max_new_tokens": 4.0, "arrival_s": float("nan")}, {"id": "b", "prompt": "Yo", "max_new_tokens": 2, "chat": None}]
    assert serving.requests_from_rows(rows) == (Request("a", "Hi", 4), Request("b", "Yo", 2))
    with pytest.raises(WorkloadError) as e:
        serving.requests_from_rows([rows[0], {"id": None, "prompt": "Yo", "max_new_tokens": 2}])
    assert e.value.code == "missing_field" and e.value.params["line"] == 2
