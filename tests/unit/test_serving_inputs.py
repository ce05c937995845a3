"""The serving lab's inputs, checked where they enter, with no model (issues 38 and 39): the editor's raw
edit is capped before Streamlit applies it, a lone surrogate is a sentence, a table's rows are checked as a
file's lines are, and a request's result is built by keyword with its derived metrics as properties."""

from __future__ import annotations

import dataclasses
import json

import pytest

from core.gen import serving, workloads
from core.gen.serving import Request, RequestResult, WorkloadError


def _edit(added: int = 0, deleted=(), edited=None) -> dict:
    return {"added_rows": [{"id": f"x{i}", "prompt": "Hi", "max_new_tokens": 2} for i in range(added)],
            "deleted_rows": list(deleted), "edited_rows": edited or {}}


@pytest.mark.parametrize(("state", "code"), [
    (_edit(2000), "too_many_rows"),  # the crafted message of issue 39
    (_edit(2000, deleted=range(5000)), "too_many_rows"),  # deleting rows the table does not have frees none
    (_edit(30), "too_many_rows"),  # 3 + 30 > 32
    (_edit(edited={str(i): {"prompt": "x"} for i in range(100)}), "too_many_rows"),
    (_edit(1, edited={"0": {"prompt": "x" * (serving.MAX_WORKLOAD_BYTES + 1)}}), "too_big"),
    ({"added_rows": "x" * 10, "deleted_rows": [], "edited_rows": {}}, "bad_edit"),
    ([1, 2, 3], "bad_edit"),
])
def test_a_crafted_edit_is_refused_before_it_is_applied(state, code):
    with pytest.raises(WorkloadError) as e:
        serving.check_edits(state, 3)
    assert e.value.code == code and e.value.known and "⟦" not in e.value.text("zh")


@pytest.mark.parametrize("state", [None, _edit(), _edit(29), _edit(32, deleted=[0, 1, 2]), _edit(edited={"0": {"prompt": "Yo"}})])
def test_an_ordinary_edit_passes(state):
    serving.check_edits(state, 3)


@pytest.mark.parametrize("field", ["id", "prompt"])
def test_a_lone_surrogate_is_a_sentence_naming_the_line(field):
    """``"\\ud800"`` in a workload file is valid JSON but no text: refused where it enters, in both languages."""
    obj = {"id": "a", "prompt": "Hello", "max_new_tokens": 2}
    obj[field] = obj[field] + "\ud800"
    text = '{"id": "ok", "prompt": "Hi", "max_new_tokens": 2}\n' + json.dumps(obj) + "\n"
    assert "\\ud800" in text
    with pytest.raises(WorkloadError) as e:
        serving.parse_workload(text)
    assert e.value.code == "not_text" and e.value.params == {"line": 2, "field": field, "at": len(obj[field])}
    assert "Line 2" in str(e.value) and "第 2 行" in e.value.text("zh")
    with pytest.raises(WorkloadError):  # the table's rows go through the same check
        serving.requests_from_rows([obj])


def test_rows_are_checked_as_lines_are():
    rows = [r.to_json() for r in workloads.preset("chat")]
    assert serving.requests_from_rows(rows) == workloads.preset("chat")
    with pytest.raises(WorkloadError) as e:
        serving.requests_from_rows([*rows, {**rows[0], "max_new_tokens": 999}])
    assert e.value.code == "out_of_range" and e.value.params["line"] == len(rows) + 1
    with pytest.raises(WorkloadError) as e:
        serving.requests_from_rows([{**rows[0], "id": f"r{i}"} for i in range(serving.MAX_REQUESTS + 1)])
    assert e.value.code == "too_many_requests"


def test_a_workload_crosses_as_hashable_requests():
    """What the page hands its job: the requests themselves (a job's key), equal whatever they came from."""
    reqs = workloads.preset("rag")
    assert isinstance(reqs, tuple) and all(isinstance(r, Request) for r in reqs)
    assert hash(reqs) == hash(serving.requests_from_rows([r.to_json() for r in reqs]))
    assert workloads.preset("rag") is reqs  # parsed once


def _result(**kw) -> RequestResult:
    base = dict(id="a", prompt_tokens=5, max_new_tokens=4, token_ids=[1, 2, 3], text="x", arrival_s=0.5,
                first_scheduled_s=0.75, token_s=[1.0, 1.5, 3.0], reused_prompt_tokens=0, computed_prompt_tokens=5,
                preemptions=0, outcome="finished")
    return RequestResult(**{**base, **kw})


def test_a_request_result_is_built_by_keyword_and_derives_its_metrics():
    with pytest.raises(TypeError):
        RequestResult("a", 5, 4, [1], "x", 0.0, 0.1, [0.2], 0, 5, 0, "finished")
    r = _result()
    assert (r.first_token_s, r.finish_s, r.ttft_s, r.queue_s, r.e2e_s, r.tpot_s) == (1.0, 3.0, 0.5, 0.25, 2.5, 1.0)
    assert r.equals_solo is None and _result(solo_token_ids=[1, 2, 3]).equals_solo is True
    assert _result(solo_token_ids=[1, 2]).equals_solo is False
    assert _result(outcome="refused", solo_token_ids=[1, 2, 3]).equals_solo is False
    none = _result(token_s=[], token_ids=[], first_scheduled_s=None, outcome="refused")
    assert (none.ttft_s, none.tpot_s, none.queue_s, none.e2e_s) == (None, None, None, None)
    assert _result(token_s=[1.0]).tpot_s is None
    # what it stores is what was measured: no field holds a value a property derives
    props = {k for k, v in vars(RequestResult).items() if isinstance(v, property)}
    assert props >= {"ttft_s", "tpot_s", "queue_s", "e2e_s", "first_token_s", "finish_s", "equals_solo"}
    assert not props & {f.name for f in dataclasses.fields(RequestResult)}
    assert set(r.to_json()) == props | {f.name for f in dataclasses.fields(RequestResult)}  # the CLI's JSON: both


def test_a_400_digit_number_is_out_of_range_not_a_traceback():
    text = '{"id": "a", "prompt": "Hi", "max_new_tokens": 2, "arrival_s": 1' + "0" * 400 + "}"
    with pytest.raises(WorkloadError) as e:  # math.isfinite cannot read it (OverflowError before)
        serving.parse_workload(text)
    assert e.value.code == "out_of_range" and e.value.params["line"] == 1
