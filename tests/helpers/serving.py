"""Helpers shared by the tiers of test_serving's tests (tests/*/test_serving*.py)."""

from __future__ import annotations

import json


def _one_error(capsys) -> str:
    """The one ``error:`` line (transformers' own weight-loading bar may come before it, when the error
    needs the tokenizer: that is progress, not an error)."""
    err = capsys.readouterr().err
    lines = [ln for ln in err.replace("\r", "\n").splitlines() if ln.strip() and not ln.startswith("Loading weights")]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def _jsonl(requests) -> str:
    """A workload file's text: one request per line."""
    return "".join(json.dumps(r.to_json(), ensure_ascii=False) + "\n" for r in requests)
