"""Operations, hardening round 2 (issue 29): the CLI's output files and streams (items 7 and 10), the
converted-model cache (item 2), and the address ``make run`` listens on (item 13). The lecture hall's
proxy restarts (item 4) are in tests/test_proxy.py, beside the hall they run on.

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

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import core.__main__ as cli

ROOT = Path(__file__).resolve().parent.parent
PY = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv" / "bin" / "python").exists() else sys.executable
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


# ---------------------------------------------------------------------------------------------
# item 7: the output file is replaced whole or not at all


def test_a_failed_overwrite_leaves_the_old_file_whole(tmp_path):
    out = tmp_path / "trace.npz"
    out.write_bytes(b"the old trace")
    out.chmod(0o640)

    def full(f):
        f.write(b"PK" * 1000)  # half a new file, then the disk is full
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(cli.CliError, match="No space left on device"):
        cli.write_output(str(out), full)
    assert out.read_bytes() == b"the old trace"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.npz"]  # no temporary file left
    cli.write_output(str(out), lambda f: f.write(b"new"))
    assert out.read_bytes() == b"new" and (out.stat().st_mode & 0o777) == 0o640  # replaced, its mode kept
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.npz"]


def test_an_interrupted_write_leaves_the_old_file_whole(tmp_path):
    out = tmp_path / "g.npz"
    out.write_bytes(b"old")

    def boom(f):
        f.write(b"x")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        cli.write_output(str(out), boom)
    assert out.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["g.npz"]


def test_a_symlinked_output_is_written_through_the_link(tmp_path):
    real = tmp_path / "real.npz"
    real.write_bytes(b"old")
    link = tmp_path / "link.npz"
    link.symlink_to(real)
    cli.write_output(str(link), lambda f: f.write(b"new"))
    assert link.is_symlink() and real.read_bytes() == b"new"


def test_a_device_or_pipe_is_written_in_place(tmp_path):
    """``-o /dev/stdout`` (a pipe here) has no folder to put a temporary file in: it is written as before."""
    p = subprocess.run([PY, "-m", "core", "trace", "hi", "--model", "toy", "-o", "/dev/stdout"], cwd=tmp_path, env=ENV,
                       capture_output=True, timeout=600)
    assert p.returncode == 0, p.stderr.decode()
    assert p.stdout.startswith(b"PK")  # the .npz itself (a zip), then the summary line
    assert list(tmp_path.iterdir()) == []


def test_the_cli_overwrites_an_npz_atomically(tmp_path, capsys, monkeypatch):
    """The real command: numpy's writer fails midway through the new file; the old .npz still loads."""
    out = tmp_path / "t.npz"
    assert cli.main(["trace", "hi", "--model", "toy", "-o", str(out)]) == 0
    before = out.read_bytes()
    from core import backends

    real = backends.export_npz

    def fails_midway(loaded, tr, f):
        real(loaded, tr, f)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(backends, "export_npz", fails_midway)
    capsys.readouterr()
    assert cli.main(["trace", "other words", "--model", "toy", "-o", str(out)]) == 2
    assert "No space left on device" in _one_error_line(capsys.readouterr().err)
    assert out.read_bytes() == before
    with np.load(out) as z:
        assert json.loads(str(z["meta"]))["prompt"] == "hi"
    assert [p.name for p in tmp_path.iterdir()] == ["t.npz"]


# ---------------------------------------------------------------------------------------------
# item 10: closed pipes, folders, text that is not Unicode


def _run_into_closed_pipe(args: list[str], cwd: Path) -> int:
    """The command with stdout and stderr on a pipe whose reader is already gone (what ``2>&1 | head -c 10``
    becomes as soon as head has its 10 bytes): every write raises BrokenPipeError."""
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run([PY, "-m", "core", *args], cwd=cwd, env=ENV, stdout=w, stderr=w, timeout=600)
    finally:
        os.close(w)
    return p.returncode


def test_generate_into_a_closed_pipe_still_writes_its_file(tmp_path):
    """--steps above the toy's context: a note on stderr before the first token (the write that used to
    raise, losing the run); then progress lines, the file, the report."""
    out = tmp_path / "g.npz"
    assert _run_into_closed_pipe(["generate", "Hi", "--model", "toy", "--steps", "1000", "-o", str(out)], tmp_path) == 0
    with np.load(out) as z:
        assert len(z["token_ids"]) > 100


def test_trace_into_a_closed_pipe_exits_quietly(tmp_path):
    out = tmp_path / "t.npz"
    assert _run_into_closed_pipe(["trace", "Hi", "--model", "toy", "-o", str(out)], tmp_path) == 0
    assert out.is_file()


def test_a_pipe_closed_by_head(tmp_path):
    """The shell's own pipeline, as a user types it: the command's exit code and its file."""
    out = tmp_path / "g.npz"
    cmd = (f"set -o pipefail; {PY} -m core generate Hi --model toy --steps 1000 -o {out} 2>&1 | head -c 10; "
           "echo; echo \"rc=${PIPESTATUS[0]}\"")
    p = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=600)
    assert p.stdout.strip().endswith("rc=0"), p.stdout + p.stderr
    assert "BrokenPipe" not in p.stdout + p.stderr
    assert out.is_file()


@pytest.mark.parametrize("name", ["nonexist/", "exists/"])
def test_output_ending_in_a_slash_is_refused_as_a_folder(name, tmp_path, capsys, monkeypatch):
    """``-o nonexist/`` used to write a file named ``nonexist``: a trailing slash names a folder, refused
    like an existing folder, before any model loads; nothing is created."""
    (tmp_path / "exists").mkdir()
    monkeypatch.chdir(tmp_path)
    assert cli.main(["trace", "hi", "--model", "toy", "-o", name]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert f"{name} is a folder" in line and "trace.npz" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exists"] and not any((tmp_path / "exists").iterdir())


@pytest.mark.parametrize("args", [
    ["trace", "caf\udce9 au lait", "--model", "toy"],
    ["generate", "\ud800", "--model", "toy"],
    ["patch", "ab\udcff", "abc", "--answer", "x", "--foil", "y", "--model", "toy"],
    ["patch", "abc", "abd", "--answer", "\udcff", "--foil", "y", "--model", "toy"],
])
def test_a_prompt_that_is_not_unicode_is_one_line(args, tmp_path, capsys):
    assert cli.main([*args, "-o", str(tmp_path / "x.npz")]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "not valid UTF-8" in line, line
    assert not (tmp_path / "x.npz").exists()


def test_undecodable_bytes_on_the_command_line(tmp_path):
    """What a terminal in another encoding sends: bytes that are not UTF-8 (Python makes them lone surrogates)."""
    p = subprocess.run([PY.encode(), b"-m", b"core", b"trace", b"caf\xe9", b"--model", b"toy", b"-o", b"x.npz"],
                       cwd=tmp_path, env=ENV, capture_output=True, timeout=600)
    err = p.stderr.decode("utf-8", "replace")
    assert p.returncode == 2 and "not valid UTF-8" in _one_error_line(err), err
    assert not (tmp_path / "x.npz").exists()


# ---------------------------------------------------------------------------------------------
# item 13: `make run` is this machine's only, unless HOST says otherwise


def test_the_server_defaults_to_this_machine(monkeypatch):
    from core.web import server

    monkeypatch.delenv("STREAMLIT_SERVER_ADDRESS", raising=False)
    assert server.with_address(["--server.port", "8501"]) == ["--server.address", "127.0.0.1", "--server.port", "8501"]
    assert server.with_address(["--server.address", "0.0.0.0"]) == ["--server.address", "0.0.0.0"]
    assert server.with_address(["--server.address=::"]) == ["--server.address=::"]
    monkeypatch.setenv("STREAMLIT_SERVER_ADDRESS", "0.0.0.0")
    assert server.with_address([]) == []


def _make_run_line(*args: str) -> str:
    out = subprocess.run(["make", "-n", "run", *args], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env={k: v for k, v in os.environ.items() if k not in ("HOST", "MAKEFLAGS")})
    assert out.returncode == 0, out.stderr
    return next(ln for ln in out.stdout.splitlines() if "core.web.server" in ln)


@pytest.mark.skipif(subprocess.run(["which", "make"], capture_output=True).returncode != 0, reason="needs make")
def test_make_run_passes_host_only_when_asked():
    assert "--server.address" not in _make_run_line()  # the server's own default: 127.0.0.1
    assert "--server.address 0.0.0.0" in _make_run_line("HOST=0.0.0.0")


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


# ---------------------------------------------------------------------------------------------
# item 2: the converted-model cache is checked, not trusted


@pytest.fixture
def fake_embedded(tmp_path, monkeypatch, tiny_dirs):
    """The embedded model's loader on a temporary cache folder (XRAY_CACHE_DIR), with a tiny Llama in place
    of the GGUF's 15-second conversion: every conversion copies its files and is counted."""
    import shutil

    from core.engine import hf

    cache = tmp_path / "cache"
    monkeypatch.setenv("XRAY_CACHE_DIR", str(cache))
    gguf = tmp_path / "fake.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setattr(hf, "embedded_gguf_path", lambda: gguf)
    made: list[Path] = []

    def dequantise(_gguf, tmp, *_progress):
        made.append(tmp)
        for f in tiny_dirs["llama"].iterdir():
            if f.is_file():
                shutil.copy(f, tmp / f.name)

    monkeypatch.setattr(hf, "_dequantise", dequantise)
    monkeypatch.setattr(hf, "_VERIFIED", set())  # a fresh process: nothing hashed yet
    return hf, hf.converted_dir(gguf), made


def _weights(conv: Path) -> Path:
    return conv / "model.safetensors"


def test_the_conversion_writes_a_manifest_and_a_warm_load_trusts_it(fake_embedded, capsys):
    hf, conv, made = fake_embedded
    hf.load_embedded()
    manifest = json.loads((conv / "manifest.json").read_text())
    w = _weights(conv)
    assert manifest["files"]["model.safetensors"] == {"size": w.stat().st_size, "sha256": hf.sha256_file(w)}
    assert "config.json" in manifest["files"] and "tokenizer.json" in manifest["files"]
    hf._VERIFIED.clear()  # another process: hashes again, finds it whole, converts nothing
    hf.load_embedded()
    assert len(made) == 1 and "note:" not in capsys.readouterr().err


def _rebuilt(hf, conv, made, capsys, says: str) -> None:
    rebuilt_from = len(made)
    notes: list = []
    loaded = hf.load_embedded(lambda _done, _total, m: notes.append(m))
    assert len(made) == rebuilt_from + 1, "not rebuilt"
    assert loaded.model.num_parameters() > 0
    out = capsys.readouterr().err
    err = [ln for ln in out.splitlines() if ln.startswith("note:")]  # (transformers' own bars aside)
    assert len(err) == 1 and err[0].startswith("note: The converted model in the cache cannot be trusted") and says in err[0], err
    assert "Traceback" not in out
    said = next(m for m in notes if getattr(m, "key", None) == "load.cache_rebuild")  # the page's bar: a Phrase
    assert said.text("zh").startswith("缓存中转换好的模型不可信（") and "Traceback" not in said.text("zh")
    assert hf.cache_problem(conv) is None
    assert sorted(p.name for p in conv.parent.iterdir()) == [conv.name]  # nothing set aside is left


def test_random_bytes_of_the_same_size_are_found_and_rebuilt(fake_embedded, capsys):
    hf, conv, made = fake_embedded
    hf.load_embedded()
    w = _weights(conv)
    good = w.read_bytes()
    w.write_bytes(os.urandom(len(good)))  # what the issue found loading silently
    hf._VERIFIED.clear()  # the next process (a server starting)
    _rebuilt(hf, conv, made, capsys, "model.safetensors` does not match its sha256")
    assert w.read_bytes() == good


def test_same_size_bytes_changed_within_a_process_are_found(fake_embedded, capsys):
    """This process hashed the weights already; a file rewritten since (a new mtime) is hashed again."""
    hf, conv, made = fake_embedded
    hf.load_embedded()
    w = _weights(conv)
    data = bytearray(w.read_bytes())
    data[-100:] = os.urandom(100)
    w.write_bytes(bytes(data))
    _rebuilt(hf, conv, made, capsys, "does not match its sha256")


def test_a_truncated_file_is_rebuilt(fake_embedded, capsys):
    hf, conv, made = fake_embedded
    hf.load_embedded()
    w = _weights(conv)
    size = w.stat().st_size
    with w.open("r+b") as f:
        f.truncate(size // 2)
    _rebuilt(hf, conv, made, capsys, f"holds {size // 2:,} bytes, not {size:,}")


@pytest.mark.parametrize("damage", ["no manifest", "broken manifest", "missing tokenizer"])
def test_a_cache_without_a_whole_manifest_is_rebuilt(damage, fake_embedded, capsys):
    hf, conv, made = fake_embedded
    hf.load_embedded()
    if damage == "no manifest":  # a cache written before manifests
        (conv / "manifest.json").unlink()
    elif damage == "broken manifest":
        (conv / "manifest.json").write_text('{"version": 1, "files": [')
    else:
        (conv / "tokenizer.json").unlink()
    says = {"no manifest": "no manifest", "broken manifest": "manifest cannot be read",
            "missing tokenizer": "tokenizer.json` is missing"}[damage]
    _rebuilt(hf, conv, made, capsys, says)


def test_weights_the_library_cannot_read_are_rebuilt_once_then_refused(fake_embedded, capsys, monkeypatch):
    """Hashes that match, but safetensors refuses the file (its manifest rewritten to match the damage): one
    rebuild; should the rebuilt folder fail too, one sentence, never a traceback or a loop."""
    hf, conv, made = fake_embedded
    hf.load_embedded()
    w = _weights(conv)
    w.write_bytes(os.urandom(w.stat().st_size))
    hf.write_manifest(conv)
    hf._VERIFIED.clear()
    _rebuilt(hf, conv, made, capsys, "the libraries could not load it")

    def unreadable(path, **kw):
        raise OSError("header too large")

    monkeypatch.setattr(hf, "_from_pretrained", unreadable)
    with pytest.raises(hf.ModelLoadError) as e:
        hf.load_embedded()
    assert e.value.code == "embedded_unreadable" and "header too large" in e.value.text("zh")
    assert len(made) == 3  # one rebuild, no loop


def test_a_failed_conversion_leaves_nothing_behind(fake_embedded, monkeypatch):
    hf, conv, _ = fake_embedded

    def disk_full(_gguf, tmp, *_progress):
        (tmp / "model.safetensors").write_bytes(b"x" * 1000)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(hf, "_dequantise", disk_full)
    with pytest.raises(hf.ModelLoadError) as e:
        hf.load_embedded()
    assert e.value.code == "embedded_convert" and "No space left on device" in str(e.value)
    assert "550 MB" in e.value.text("zh")
    assert not conv.parent.exists() or not list(conv.parent.iterdir())


def test_stale_temporary_folders_are_removed_and_a_live_ones_kept(fake_embedded):
    hf, conv, _ = fake_embedded
    conv.parent.mkdir(parents=True)
    sleeper = subprocess.Popen(["sleep", "60"])  # a conversion still running, in another process
    dead = subprocess.Popen(["true"])
    dead.wait()  # a conversion killed midway: its pid is gone
    try:
        live_tmp = conv.with_name(f"{conv.name}.tmp{sleeper.pid}")
        stale_tmp = conv.with_name(f"{conv.name}.tmp{dead.pid}")
        stale_old = conv.with_name(f"{conv.name}.old{dead.pid}")
        other = conv.parent / "notes.tmp"  # not a conversion's: left alone
        for d in (live_tmp, stale_tmp, stale_old):
            d.mkdir()
            (d / "model.safetensors").write_bytes(b"0" * 4096)
        other.write_text("mine")
        hf.load_embedded()
        assert live_tmp.is_dir() and other.is_file()
        assert not stale_tmp.exists() and not stale_old.exists()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_the_cli_says_a_rebuild_in_one_line(fake_embedded, tmp_path, capsys):
    hf, conv, made = fake_embedded
    hf.load_embedded()
    with _weights(conv).open("r+b") as f:
        f.truncate(100)
    capsys.readouterr()
    assert cli.main(["trace", "hello", "-o", str(tmp_path / "t.npz")]) == 0
    out = capsys.readouterr().err
    err = [ln for ln in out.splitlines() if ln.startswith(("note:", "error:"))]
    assert len(err) == 1 and "cannot be trusted" in err[0] and "Traceback" not in out, err
    assert len(made) == 2 and (tmp_path / "t.npz").is_file()


def test_the_real_conversion_is_rebuilt_from_random_bytes(tmp_path, monkeypatch, capsys):
    """The one real rebuild (two GGUF conversions, ≈ 15 s each), in a temporary cache folder: the weights
    replaced by random bytes of the same size are found at the next start and converted again, to the
    same bytes; the model then answers as the embedded model does."""
    import torch

    from core.engine import hf

    monkeypatch.setenv("XRAY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(hf, "_VERIFIED", set())
    hf.load_embedded()
    conv = hf.converted_dir(hf.embedded_gguf_path())
    assert conv.parent == tmp_path / "cache"
    w = _weights(conv)
    digest = json.loads((conv / "manifest.json").read_text())["files"]["model.safetensors"]["sha256"]
    with w.open("r+b") as f:  # same size, random bytes: a header safetensors may even accept
        f.seek(1 << 20)
        f.write(os.urandom(w.stat().st_size - (1 << 20)))
    hf._VERIFIED.clear()
    capsys.readouterr()
    loaded = hf.load_embedded()
    assert "does not match its sha256" in capsys.readouterr().err
    assert hf.sha256_file(w) == digest
    ids = loaded.tokenizer("The capital of France is", return_tensors="pt").input_ids
    with torch.inference_mode():
        nxt = loaded.model(ids).logits[0, -1].argmax().item()
    assert loaded.tokenizer.decode([nxt]).strip() == "Paris"
