"""Helpers shared by the tiers of test_journey's tests (tests/*/test_journey*.py)."""

from __future__ import annotations

from pathlib import Path


def _check_sources(src, *, model_file: str | None = None):
    """Every stage names at least one place; each file exists and its line holds what the name says:
    the ``def`` of that function, or the call of that part."""
    assert set(src) == set(range(1, 10)) and all(src.values())
    for stage, places in src.items():
        for s in places:
            lines = Path(s.file).read_text(encoding="utf-8").splitlines()
            line = lines[s.line - 1]
            assert line.strip() == s.text, (stage, s)
            assert s.file.replace("\\", "/").endswith(s.path), (stage, s)
            if "→" in s.name:  # a call: "LlamaModel.forward → self.embed_tokens"
                assert s.name.split("→ ")[1] in line, (stage, s)
            else:
                assert f"def {s.name.rsplit('.', 1)[-1]}(" in line, (stage, s)
    if model_file is not None:  # the block, attention and MLP are the model class's own file
        assert {s.file for s in src[5]} >= {model_file}
