"""The serving lab's page (pages/serving.py) shows what core.gen.serving measured, in both languages:
the padded batch's masks and errors, a workload's steps, requests and blocks, prefix reuse on and off,
and a pool too small for the workload — and the pages that speak of request shapes link to it."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import app_run, figure_spec, plotly_array
from core.common import i18n
from core.gen import serving, workloads


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_padded_batch_part_shows_the_masks_and_errors_of_the_core(smol, lang):
    at = app_run("serving", part="padded", lang=lang)
    assert not at.exception and not at.error
    plain = serving.plain_model(smol)
    prompts = ["The capital of France is", "Hi", "The quick brown fox jumps over the lazy dog"]
    left = serving.padded_batch(plain, prompts, "left")
    fig = figure_spec(at, "pad" if lang == "en" else "填充")
    z = plotly_array(fig["data"][0]["z"])
    np.testing.assert_array_equal(z, left.mask_4d[0].astype(float))  # prompt 1, left padding: as the model received it
    table = at.dataframe[-1].value if at.dataframe else at.table[-1].value
    assert len(table) == 2 * len(prompts)
    # the wrong numbers, measured: without the mask, left padding moves the logits by whole units
    assert left.error_without_mask > 1.0 and left.error < 1e-3


def test_a_workload_runs_and_every_request_equals_itself_alone(smol):
    at = app_run("serving", part="batching", workload="rag", lang="en")
    assert not at.exception
    at.button(key="serving_go_batching").click().run(timeout=900)
    assert not at.exception and not at.error
    text = " ".join(m.value for m in at.markdown)
    n = len(workloads.preset("rag"))
    assert f"**{n} of {n}** ✓" in text
    reqs = next(d.value for d in at.dataframe if "TTFT (s)" in d.value.columns)
    assert list(reqs["request"]) == ["rag-1", "rag-2", "rag-3"] and set(reqs["= alone"]) == {"✓"}
    timeline = figure_spec(at, "Which request ran")
    steps = plotly_array(timeline["data"][0]["z"])
    assert steps.shape[0] == n and np.isfinite(steps).any(axis=1).all()  # every request ran in some step
    blocks = figure_spec(at, "paged KV cache")
    assert np.nanmax(plotly_array(blocks["data"][0]["z"])) >= 0  # blocks were held


def test_a_pool_too_small_queues_requests_instead_of_failing(smol):
    at = app_run("serving", part="blocks", workload="rag", lang="zh")
    at.button(key="serving_go_blocks").click().run(timeout=900)
    assert not at.exception and not at.error
    reqs = next(d.value for d in at.dataframe if "TTFT（秒）" in d.value.columns)
    queued = [float(q) for q in reqs["排队（秒）"]]
    assert sorted(queued)[-1] > 0.1  # a request waited for blocks to be freed
    assert set(reqs["= 单独生成"]) == {"✓"}  # and still produced exactly its solo tokens


def test_prefix_reuse_computes_only_what_differs(smol):
    at = app_run("serving", part="prefix", workload="chat", lang="en")
    at.button(key="serving_go_prefix").click().run(timeout=1200)
    assert not at.exception and not at.error
    table = next(d.value for d in at.dataframe if "computed, sharing on" in d.value.columns)
    assert (table["computed, sharing on"] < table["computed, sharing off"]).all()
    assert (table["computed, sharing on"] + table["reused from shared blocks"] == table["computed, sharing off"]).all()
    text = " ".join(m.value for m in at.markdown)
    assert ("beat every run without it" in text) != ("within its noise" in text)  # said one way, not both


@pytest.mark.parametrize(("stem", "query"), [("kv_cache", {}), ("diagnose", {"symptom": "slow_first"})])
def test_request_shapes_link_to_the_lab(smol, stem, query):
    at = app_run(stem, lang="en", **query)
    pager = i18n.t("pager.next", "en", page=i18n.t("page.serving", "en"))  # the foot's "next page" link is not about a shape
    links = [p for p in at.get("page_link") if "serving" in p.proto.page and p.proto.label != pager]
    assert links, f"{stem}: no link to the serving lab"
    assert all("part=" in str(p.proto) for p in links)
