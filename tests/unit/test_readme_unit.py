"""Every example in the README and in docs/*.md runs as written, so none can rot.

Their command lines (``.venv/bin/python -m core …``) run in a scratch folder laid out like the
repository (``core``, ``assets`` and ``.venv`` linked in), the README's first, then each page of docs/ in
order, so the block that reads ``trace.npz`` finds the file a command wrote. Their Python blocks then run in a fresh
interpreter each, as a notebook would, and a line that ends in a shape comment (``x.shape  # (30, 9, 5, 5)``)
must give that shape. Two kinds of line are not run here, for a stated reason: the ``make`` commands and
the ``pytest`` lines (CI runs ``make test``, which is this suite; ``tests/browser/test_proxy.py`` runs what ``make
serve`` runs). The one line that names a placeholder folder (``/path/to/…``) runs with a tiny local model
folder in its place.
"""

from __future__ import annotations

import shlex

from helpers.readme import _checked, blocks, command_lines


def test_every_command_line_is_run_or_says_why_not():
    """A new kind of line (another program, another placeholder) must be given a way to run here."""
    for line in command_lines():
        prog = shlex.split(line)[0]
        assert prog in (".venv/bin/python", "make"), f"the line {line!r} of the README or docs/: teach tests/integration/test_readme.py to run it"
        if prog == "make":
            assert shlex.split(line)[1] in ("run", "test", "test-fast", "serve"), line


def test_shape_comments_are_checked():
    """The check above is not vacuous: the notebook block's shape comment is among those turned into assertions."""
    checked = [_checked(b) for _, b in blocks("python")]
    assert any("assert tuple(tr.attn_pattern.shape) ==" in c for c in checked)
