"""Start the app: ``python -m core.web.server [streamlit options]`` (what ``make run`` does).

Same as ``streamlit run app.py``, with one fix: Streamlit still treats a folder named ``pages/``
next to the entry script as its old automatic multipage folder until ``st.navigation`` runs once.
On a fresh server, the very first visitor arriving on a deep link (``/heads?layer=3`` — the links
a teacher shares) would get that page's script alone, without the router and its sidebar. Our
``pages/`` are ``st.navigation`` pages, so we say so before the server starts.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from pathlib import Path

from streamlit.runtime.pages_manager import PagesManager
from streamlit.web import cli

from core.common import memo, settings
from core.common.settings import SettingsError
from core.web import guards, offer

MMAP_THRESHOLD = 1 << 20  # bytes: every block at least this big is its own mapping
ARENAS = 2  # malloc arenas for all threads together (glibc's default: 8 per core, one per busy session thread)
TRIM_S = 15.0  # seconds between two malloc_trim(0) calls
# The address the server listens on unless told otherwise: this machine only. Streamlit's own default is every
# interface, which with XRAY_ALLOW_LOCAL=1 would hand the local-folder box to anyone on the same network;
# `make run HOST=0.0.0.0` (``--server.address``) opens it on purpose.
DEFAULT_ADDRESS = "127.0.0.1"


def give_back_freed_memory() -> bool:
    """Make freed arrays go back to the system. glibc raises its mmap threshold (up to 32 MB) each time
    a big block is freed, after which blocks of that size come from its heap and are kept there when
    freed: a server that once traced a long prompt would hold that memory for good. A fixed threshold
    (``mallopt``) keeps every block of 1 MB and more in its own mapping, unmapped when freed.

    Smaller blocks come from malloc's arenas, up to 8 per core, one per busy thread (a session), where freed
    pieces stay spread; so the arenas are capped at ``ARENAS`` (what ``MALLOC_ARENA_MAX=2`` sets; an
    operator's own ``MALLOC_ARENA_MAX`` wins) before any thread starts. Returns whether the C library took
    the settings (False where it is not glibc)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold, m_arena_max = -1, -3, -8  # from <malloc.h>
        ok = bool(libc.mallopt(m_mmap_threshold, MMAP_THRESHOLD)) and bool(libc.mallopt(m_trim_threshold, 16 << 20))
        if not os.environ.get("MALLOC_ARENA_MAX"):
            ok = bool(libc.mallopt(m_arena_max, ARENAS)) and ok
        return ok
    except (OSError, AttributeError):
        return False


def trim() -> bool:
    """``malloc_trim(0)``: hand the free pages inside every arena back to the system (free memory in the
    middle of a heap, which the trim threshold alone never returns). Whether anything was returned."""
    try:
        return bool(ctypes.CDLL("libc.so.6").malloc_trim(0))
    except (OSError, AttributeError):
        return False


def start_trimming(every_s: float = TRIM_S, stop: threading.Event | None = None) -> threading.Thread:
    """A daemon thread calling ``trim`` every ``every_s`` seconds (until ``stop`` is set), so the memory
    of sessions that have ended (Streamlit drops a closed session after ``server.disconnectedSessionTTL``)
    and of evicted traces goes back to the system without waiting for anyone's request."""
    stop = stop or threading.Event()

    def loop() -> None:
        while not stop.wait(every_s):
            memo.expire_idle(settings.get().cache_idle_s)  # traces and layers no session has read for a while
            trim()

    t = threading.Thread(target=loop, name="xray-malloc-trim", daemon=True)
    t.start()
    return t


def with_address(args: list[str]) -> list[str]:
    """Streamlit's options with ``--server.address 127.0.0.1`` first, unless they (or the environment's
    ``STREAMLIT_SERVER_ADDRESS``) name an address."""
    named = any(a == "--server.address" or a.startswith("--server.address=") for a in args)
    if named or os.environ.get("STREAMLIT_SERVER_ADDRESS"):
        return list(args)
    return ["--server.address", DEFAULT_ADDRESS, *args]


def main(argv: list[str] | None = None) -> int:
    try:  # a malformed XRAY_MODELS / XRAY_ALLOW_LOCAL stops the launch with the reason, before serving anyone
        offer.from_env()
    except SettingsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    give_back_freed_memory()
    start_trimming()
    guards.install_server_guards()  # before the first websocket: clear_cache and the origin check's lookup
    PagesManager.uses_pages_directory = False
    app = str(Path(__file__).resolve().parents[2] / "app.py")
    sys.argv = ["streamlit", "run", app, *with_address(sys.argv[1:] if argv is None else argv)]
    try:
        cli.main()
    except SystemExit as e:
        return int(e.code or 0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
