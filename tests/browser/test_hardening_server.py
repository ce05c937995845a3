"""The app's own server (``python -m core.web.server``, what ``make run`` starts) against a visitor who speaks
its protocol by hand (issue 39): Streamlit's upload route, open to any session, refuses a file (the app has no
uploader; .streamlit/config.toml sets server.maxUploadSize = 0), and the server's memory does not grow; a
visitor's clear_cache message (Streamlit's "Clear cache": the ``c`` key, or sent by hand) does not drop the model
every session shares: the next run does not load it again."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import urllib.parse
import urllib.request
from pathlib import Path

import psutil
import websockets
from browser_helpers import streamlit_server
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

MIB = 2**20


def _cookies(base: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for path in ("/", "/_stcore/health"):
        with urllib.request.urlopen(base + path, timeout=60) as r:
            r.read()
            for v in r.headers.get_all("Set-Cookie") or []:
                name, _, rest = v.partition("=")
                out[name.strip()] = rest.split(";", 1)[0]
    return out


def _put(url: str, body: bytes, cookies: dict[str, str]) -> int:
    """PUT a one-file form as the frontend does; the status (a server that answers 413 and closes before the body
    is all sent: that status, read after the send fails)."""
    boundary = "xrayboundary"
    data = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"UploadedFile\"; filename=\"a.bin\"\r\n"
            f"Content-Type: application/octet-stream\r\n\r\n").encode() + body + f"\r\n--{boundary}--\r\n".encode()
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    try:
        conn.putrequest("PUT", u.path)
        for k, v in {"Content-Type": f"multipart/form-data; boundary={boundary}", "Content-Length": str(len(data)),
                     "Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items()),
                     "X-Xsrftoken": cookies.get("_streamlit_xsrf", "")}.items():
            conn.putheader(k, v)
        conn.endheaders()
        with contextlib.suppress(OSError):
            for i in range(0, len(data), 1 << 20):
                conn.sock.sendall(data[i:i + (1 << 20)])
        try:
            return conn.getresponse().status
        except OSError:
            return -1  # reset without an answer
    finally:
        conn.close()


async def _run(ws) -> str:
    """Everything the server sends until the script run finishes, as text."""
    seen = []
    while True:
        fwd = ForwardMsg()
        fwd.ParseFromString(await asyncio.wait_for(ws.recv(), timeout=300))
        seen.append(str(fwd))
        if fwd.WhichOneof("type") == "script_finished":
            return "\n".join(seen)


async def _uploads(base: str, pid: int, n: int, size: int) -> tuple[list[int], float, str]:
    """Open a session over the websocket, let its first run finish, then PUT ``n`` files of ``size`` bytes to its
    upload route; then send clear_cache and run the page again. The statuses, the server's RSS growth in MiB from
    the uploads, and what the run after clear_cache sent."""
    cookies = await asyncio.to_thread(_cookies, base)
    xsrf = cookies.get("_streamlit_xsrf", "")
    async with websockets.connect(base.replace("http://", "ws://") + "/_stcore/stream",
                                  subprotocols=["streamlit", xsrf] if xsrf else ["streamlit"],
                                  additional_headers={"Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items()),
                                                      "Origin": base}, max_size=None) as ws:
        msg = BackMsg()
        msg.rerun_script.query_string = "lang=en"
        await ws.send(msg.SerializeToString())
        session, finished = "", False
        while not finished:  # the first run done (the model loaded): what follows is the uploads' memory only
            fwd = ForwardMsg()
            fwd.ParseFromString(await asyncio.wait_for(ws.recv(), timeout=300))
            kind = fwd.WhichOneof("type")
            session = fwd.new_session.initialize.session_id if kind == "new_session" else session
            finished = kind == "script_finished"
        before = psutil.Process(pid).memory_info().rss
        body = b"\0" * size
        codes = [await asyncio.to_thread(_put, f"{base}/_stcore/upload_file/{session}/file-{i}", body, cookies)
                 for i in range(n)]
        grown = (psutil.Process(pid).memory_info().rss - before) / MIB
        clear = BackMsg()
        clear.clear_cache = True
        await ws.send(clear.SerializeToString())
        await ws.send(msg.SerializeToString())
        again = await _run(ws)
    return codes, grown, again


def test_the_upload_route_refuses_files_and_clear_cache_keeps_the_model(tmp_path: Path):
    with streamlit_server(8740) as server:
        codes, grown, again = asyncio.run(_uploads(server.base, server.proc.pid, 3, 20 * MIB))
    assert codes == [413, 413, 413], codes  # Streamlit's default took each (204)
    assert grown < 40, f"the server grew {grown:.0f} MiB from refused uploads"
    assert "script_finished" in again
    assert "Loading the model" not in again, "a visitor's clear_cache dropped the shared model: it was loaded again"
