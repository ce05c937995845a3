"""The decoding page (pages/decoding.py) on the shipped reference run: every part in both languages and in presenter
mode, from a link (URL state), nothing measured on the way (a class never waits)."""

from __future__ import annotations

import json

import pytest

from conftest import all_text, app_run
from core.gen import speedups as S
from core.web import presenter


@pytest.fixture(autouse=True)
def _no_measuring(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the page measured something without being asked")

    for name in ("kernels", "speculate", "precision"):
        monkeypatch.setattr(S, name, refuse)


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("part,extra", [("kernels", {}), ("speculation", {"prompt": "copy", "method": "lookup"}),
                                        ("speculation", {"prompt": "free", "method": "early_exit"}),
                                        ("precision", {"variant": "TQ1_0"})])
def test_each_part_from_a_link(smol, lang, part, extra):
    ref = S.load_reference()
    assert ref is not None, "assets/decoding_reference.json is shipped (tests/benchmarks/bench_decoding.py --write)"
    at = app_run("decoding", lang=lang, part=part, **extra)
    assert not at.exception, [e.value for e in at.exception][:2]
    text = all_text(at)
    assert "⟦" not in text
    assert ref.date in text  # the shipped run says when and where it ran
    if part == "speculation":
        r = ref.speculation[extra["prompt"]][extra["method"]]
        assert f"{r.verify_passes} / {r.plain_passes}" in [m.value for m in at.metric]
    if part == "precision":
        assert at.radio(key="decoding_variant").value == "TQ1_0"  # the link's variant
        assert list(at.radio(key="decoding_variant").options) == [v.name for v in ref.precision.variants]


def test_presenter_mode_projects_every_figure(smol):
    at = app_run("decoding", present="1", part="precision")
    assert not at.exception
    figs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert figs
    assert all(f["layout"]["font"]["size"] >= presenter.MIN_FONT for f in figs)
