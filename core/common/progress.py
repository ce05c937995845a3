"""The one shape of a long computation's progress: ``progress(done, total, words)``.

``done`` and ``total`` are whole numbers of the computation's own units (runs, steps, tensors, per cent),
``0 ≤ done ≤ total``, and the last call says ``done == total``. ``words`` says what is being done: a
``core.engine.types.Phrase`` (a sentence of the catalogue, said in the reader's language by the page's
bar, ``core.web.bar``, and in English by the CLI), plain text (said as it is), or None (the consumer's
own words). Every producer (the model loader, patching, attribution, diagnose, serving, the toy's
training, the ByteLRU and the jobs that share a computation's progress) calls it so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Progress = Callable[[int, int, Any], None]  # (done, total, words)


def noop(done: int, total: int, words: Any = None) -> None:
    """A progress that tells no one."""


def share(done: int, total: int) -> float:
    """How far ``done`` of ``total`` is, in [0, 1] (a total of 0 counts as 1)."""
    return min(1.0, max(0.0, done / max(1, total)))


def span(progress: Progress, start: int, stop: int, total: int) -> Progress:
    """A part of a computation reported in its own units (``d`` of ``n``: "tensor 40 of 272") as the
    whole's, moving ``progress`` from ``start`` to ``stop`` of ``total``; its words passed on."""
    def part(done: int, n: int, words: Any = None) -> None:
        progress(start + (stop - start) * min(max(done, 0), n) // max(1, n), total, words)

    return part
