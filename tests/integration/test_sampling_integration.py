"""core.gen.sampling against hand-made logits and against Hugging Face's own logits processors."""

from __future__ import annotations

from conftest import title_of


def test_logits_page_lens_caption_matches_its_figure():
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "app.py"), default_timeout=180)
    at.switch_page("pages/logits.py")
    at.run()
    assert not at.exception
    import json

    lens = [json.loads(c.proto.spec) for c in at.get("plotly_chart") if "Logit lens" in title_of(json.loads(c.proto.spec))]
    assert len(lens) == 1 and lens[0]["layout"]["yaxis"].get("autorange") != "reversed"
    assert any("**top row**" in c.value for c in at.caption) and not any("**bottom row**" in c.value for c in at.caption)
    # no metric carries a delta that is only a caption (item: "↑ id 2")
    assert all(not m.proto.delta for m in at.metric)
