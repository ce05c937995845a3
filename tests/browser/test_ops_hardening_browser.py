"""Operations, hardening round 2 (issue 29): the CLI's output files and streams (items 7 and 10), the
converted-model cache (item 2), and the address ``make run`` listens on (item 13). The lecture hall's
proxy restarts (item 4) are in tests/browser/test_proxy.py, beside the hall they run on.

* the CLI writes its file atomically (a temporary file beside it, renamed): a write that fails midway
  leaves the old file whole and no temporary file behind;
* a reader that closes the pipe (``… | head -c 10``) costs neither the file nor the exit code, and no
  ``error: BrokenPipeError``; ``-o out/`` is refused as a folder; a prompt that is not UTF-8 (a lone
  surrogate) is one ``error:`` line;
* the converted embedded model carries a manifest (size and sha256): a file of random bytes of the same
  size, a truncated file or a broken manifest is found and rebuilt with one message; a conversion's
  temporary folder whose process is gone is removed, one whose process lives is kept;
* ``make run`` passes 127.0.0.1 unless HOST says otherwise, and the README says so.
"""

from __future__ import annotations


def test_the_server_listens_on_127_0_0_1_only(monkeypatch):
    """``python -m core.web.server`` without an address (what ``make run`` starts): every socket it listens
    on is bound to 127.0.0.1, none to 0.0.0.0 or another interface."""
    import psutil
    from browser_helpers import streamlit_server

    monkeypatch.delenv("STREAMLIT_SERVER_ADDRESS", raising=False)
    with streamlit_server(port_from=8720, start_s=120) as server:
        port = int(server.base.rsplit(":", 1)[1])
        listening = {c.laddr.ip for c in psutil.Process(server.proc.pid).net_connections(kind="inet")
                     if c.status == psutil.CONN_LISTEN and c.laddr.port == port}
        assert listening == {"127.0.0.1"}, listening
