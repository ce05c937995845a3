"""The trace's .npz download, bounded: a file over ``XRAY_NPZ_MB`` (256 MiB by default) is refused before
anything is built, with the size it would have and the command that writes it to disk instead.

The file holds every contract site of every layer and the full logits, float32 (attention weights up to
``PATTERN_EXPORT_MAX`` tokens), and building it holds the stacked arrays and the compressed file in memory at
once. ``size_bound`` bounds the file's size from the trace's shapes alone (deflate never grows an array by more
than a few per thousand, plus the headers and ``meta``). Under the limit, one file is built at a time per
server (``BUILD``): a burst of clicks queues instead of stacking copies.
"""

from __future__ import annotations

import threading

from core.common import settings
from core.engine.trace import EXPORT_KEYS, PATTERN_EXPORT_MAX, Trace

BUILD = threading.Lock()  # one .npz built at a time in this process


def limit_bytes() -> int:
    """The largest .npz the server builds: ``XRAY_NPZ_MB`` MiB (``core.common.settings``; 0 turns the download off)."""
    return settings.get().npz_mb << 20


def size_bound(tr: Trace) -> int:
    """An upper bound of the bytes of ``tr``'s .npz file (``core.backends.export_npz_bytes``), from its shapes."""
    keys = [k for k in EXPORT_KEYS if k not in ("meta", "tokens") and (k != "attn_pattern" or tr.n_tokens <= PATTERN_EXPORT_MAX)]
    arrays = sum(tr.site_bytes(k) for k in keys)
    tokens = 4 * tr.n_tokens * max((len(str(t)) for t in tr.tokens), default=1)  # numpy's '<U' strings: 4 bytes a character
    # meta: a '<U' string (4 bytes a character) of JSON; a control character escapes to 6 characters
    meta = 24 * (len(tr.prompt) + len(tr.text or "")) + 4 * tr.n_tokens + (64 << 10)
    return int(1.01 * (arrays + tokens + meta)) + 1024 * len(EXPORT_KEYS)
