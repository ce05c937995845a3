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

import errno
import json
import os
from pathlib import Path

import numpy as np
import pytest
from helpers.ops_hardening import _one_error_line

import core.__main__ as cli

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


# ---------------------------------------------------------------------------------------------
# item 2: the converted-model cache is checked, not trusted (the fixture fake_embedded: tests/conftest.py)


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
