"""The class store (core/web/classroom/store.py) on a real SQLite file and on a real redis-server started here
on a free port: the same tests on both backends, hostile cases included (markup, replayed votes, forged
teacher actions, an expired code, a flood of joins), and two processes sharing one SQLite file."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time

import pytest

from conftest import ROOT
from core.common import settings
from core.web.classroom import store as cs

REDIS = shutil.which("redis-server")


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    if REDIS is None:
        pytest.skip("redis-server is not installed (`make test` installs it with apt)")
    port = _free_port()
    folder = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen([REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(folder)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 20
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail(f"redis-server did not start on port {port}")
            time.sleep(0.05)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(params=["sqlite", "redis"])
def make(request, tmp_path):
    """A factory of stores of one backend, all on the same data (a fresh SQLite file / a flushed Redis db)."""
    if request.param == "sqlite":
        path = tmp_path / "classes.sqlite3"
        return lambda limits=None, clock=None: cs.SqliteStore(path, limits, clock or time.time)
    url = request.getfixturevalue("redis_url")
    cs.RedisStore(url).r.flushdb()
    return lambda limits=None, clock=None: cs.RedisStore(url, limits, clock or time.time)


def _dev(i: int) -> str:
    return f"device-{i:012d}"


def _reason(fn, *args) -> str:
    with pytest.raises(cs.ClassError) as e:
        fn(*args)
    return e.value.reason


def test_a_class_from_start_to_end(make):
    s = make()
    c = s.start()
    assert cs.normal_code(c.code) == c.code and len(c.code) == cs.CODE_LEN
    cid = s.join(cs.shown_code(c.code).lower(), _dev(1), "Ann")  # typed as read from the projector
    assert cid == c.cid and s.join(c.code, _dev(1), "Ann B") == cid  # joining again keeps one seat
    s.join(c.code, _dev(2))
    assert s.count(c.cid, c.secret) == 2
    v1 = s.set_view(c.cid, c.secret, "lessons", {"lesson": "attention", "step": "2"})
    assert s.set_view(c.cid, c.secret, "lessons", {"step": "2", "lesson": "attention"}) == v1  # same view: same version
    st = s.state(cid)
    assert st.view == {"page": "lessons", "params": {"lesson": "attention", "step": "2"}} and st.view_version == v1
    assert st.question is None
    q = s.open_question(c.cid, c.secret, "mc", {"id": "kv_stores"}, {"correct": 2}, b"\x00\x01")
    st = s.state(cid)
    assert st.question.qid == q and st.question.public == {"id": "kv_stores"} and st.question.answer == {}
    s.vote(cid, q, _dev(1), "2")
    s.vote(cid, q, _dev(2), "0")
    assert [v.answer for v in s.votes(c.cid, c.secret, q)] == ["2", "0"]
    assert s.blob(c.cid, c.secret, q) == b"\x00\x01"
    q2 = s.open_question(c.cid, c.secret, "number", {}, {"value": 5})  # opening one closes the one before
    assert [(x.qid, x.open) for x in s.questions(c.cid, c.secret)] == [(q, False), (q2, True)]
    assert _reason(s.vote, cid, q, _dev(1), "1") == "closed"
    s.close_question(c.cid, c.secret, q2)
    assert s.state(cid).question is None
    s.end(c.cid, c.secret)
    assert s.state(cid) is None
    assert _reason(s.join, c.code, _dev(3)) == "bad_code"
    assert _reason(s.votes, c.cid, c.secret, q) == "forbidden"


def test_nicknames_only_with_names_on_and_markup_kept_as_characters(make):
    s = make()
    c = s.start()
    nasty = '<img src=x onerror=alert(1)>**[x](y)**'
    s.join(c.code, _dev(1), nasty[:24])
    q = s.open_question(c.cid, c.secret, "next", {}, {})
    s.vote(c.cid, q, _dev(1), "<script>alert(1)</script>\n# hi")
    v = s.votes(c.cid, c.secret, q)[0]
    assert v.answer == "<script>alert(1)</script># hi"  # stored as text (line break dropped), escaped where shown
    assert v.nickname == ""  # names off: the teacher sees no names
    s.set_names(c.cid, c.secret, True)
    assert s.votes(c.cid, c.secret, q)[0].nickname == nasty[:24]
    assert _reason(s.join, c.code, _dev(2), "x" * 25) == "too_long"
    assert _reason(s.vote, c.cid, q, _dev(1), "y" * 61) == "too_long"
    assert _reason(s.vote, c.cid, q, _dev(1), " \u200b\x00 ") in ("empty", "voted")


def test_a_replayed_vote_changes_nothing(make):
    s = make()
    c = s.start()
    s.join(c.code, _dev(1))
    q = s.open_question(c.cid, c.secret, "mc", {}, {})
    s.vote(c.cid, q, _dev(1), "1")
    for answer in ("1", "2"):
        assert _reason(s.vote, c.cid, q, _dev(1), answer) == "voted"
    assert [v.answer for v in s.votes(c.cid, c.secret, q)] == ["1"]
    assert _reason(s.vote, c.cid, q, _dev(9), "1") == "not_joined"  # a device that never joined
    assert _reason(s.vote, c.cid, q + 1, _dev(1), "1") == "closed"  # no such question
    assert _reason(s.vote, c.cid, q, "short", "1") == "bad_device"


def test_forged_teacher_actions_are_refused_and_change_nothing(make):
    s = make()
    c, other = s.start(), s.start()
    s.join(c.code, _dev(1))
    for secret in ("", "x" * 43, other.secret, c.secret + "x", None):
        assert _reason(s.set_view, c.cid, secret, "heads", {}) == "forbidden"
        assert _reason(s.open_question, c.cid, secret, "mc", {}, {}) == "forbidden"
        assert _reason(s.end, c.cid, secret) == "forbidden"
        assert _reason(s.set_names, c.cid, secret, True) == "forbidden"
    assert _reason(s.set_view, "no-such-class", c.secret, "heads", {}) == "forbidden"
    st = s.state(c.cid)
    assert st.view == {} and st.question is None and not st.names


def test_an_expired_code_is_refused_and_the_class_deleted(make):
    clock = Clock()
    s = make(cs.Limits(ttl_s=60), clock)
    c = s.start()
    s.join(c.code, _dev(1))
    clock.now += 61
    assert _reason(s.join, c.code, _dev(2)) == "expired"
    assert s.state(c.cid) is None
    assert _reason(s.set_view, c.cid, c.secret, "heads", {}) == "forbidden"
    c2 = s.start()
    clock.now += 61
    s.start()  # starting a class purges the ended ones
    assert s.state(c2.cid) is None and s._class(c2.cid) is None


def test_a_flood_of_joins_is_bounded(make):
    s = make(cs.Limits(max_students=50, joins_per_min=3, max_classes=3))
    c = s.start()
    for i in range(50):
        s.join(c.code, _dev(i))
    assert _reason(s.join, c.code, _dev(50)) == "class_full"
    assert s.count(c.cid, c.secret) == 50
    flooder = _dev(999)
    reasons = [_reason(s.join, "AAAA-AAAA", flooder) for _ in range(5)]  # guessing codes from one device
    assert reasons[:3] == ["bad_code"] * 3 and reasons[3:] == ["rate", "rate"]
    s.start(), s.start()
    assert _reason(s.start) == "store_full"


def test_bounds_on_views_and_questions(make):
    s = make(cs.Limits(max_questions=2, view_chars=200, question_bytes=300, blob_bytes=10))
    c = s.start()
    assert _reason(s.set_view, c.cid, c.secret, "heads", {"prompt": "x" * 300}) == "too_long"
    assert _reason(s.open_question, c.cid, c.secret, "mc", {"x": "y" * 400}, {}) == "bad_question"
    assert _reason(s.open_question, c.cid, c.secret, "mc", {}, {}, b"z" * 11) == "bad_question"
    s.open_question(c.cid, c.secret, "mc", {}, {})
    s.open_question(c.cid, c.secret, "mc", {}, {})
    assert _reason(s.open_question, c.cid, c.secret, "mc", {}, {}) == "too_many_questions"


@pytest.mark.parametrize("typed", ["", "ABCD", "ABCD-EFG1", "ABCD-EFGH-J", "ÄBCD-EFGH", None, 123, "a" * 1000])
def test_codes_that_cannot_be_codes(typed):
    assert cs.normal_code(typed) is None


_WORKER = """
import sys, json
from core.web.classroom import store as cs
s = cs.SqliteStore(sys.argv[1])
cid, q, first, n = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
for i in range(first, first + n):
    d = f"device-{i:012d}"
    s.join(sys.argv[6], d)
    s.vote(cid, q, d, str(i % 3))
print("ok")
"""


def test_two_processes_share_one_sqlite_file_and_every_acknowledged_vote_is_kept(tmp_path):
    path = tmp_path / "c.sqlite3"
    s = cs.SqliteStore(path)
    c = s.start()
    q = s.open_question(c.cid, c.secret, "mc", {}, {})
    procs = [subprocess.Popen([sys.executable, "-c", _WORKER, str(path), c.cid, str(q), str(first), "40", c.code],
                              cwd=ROOT, stdout=subprocess.PIPE, text=True) for first in (0, 1000)]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert outs == ["ok", "ok"]
    votes = s.votes(c.cid, c.secret, q)
    assert len(votes) == 80 and len({v.device for v in votes}) == 80


def test_open_store_reads_the_setting(tmp_path, monkeypatch):
    monkeypatch.setenv(settings.DATA_DIR, str(tmp_path))
    monkeypatch.delenv(settings.CLASS_STORE, raising=False)
    s = cs.open_store()
    assert isinstance(s, cs.SqliteStore) and s.path == tmp_path / "classes.sqlite3"
    assert cs.open_store(f"sqlite:///{tmp_path}/x.db").path == tmp_path / "x.db"
    with pytest.raises(ValueError, match="XRAY_CLASS_STORE"):
        cs.open_store("mysql://x")


def test_redis_keys_expire_with_the_class(redis_url):
    s = cs.RedisStore(redis_url)
    c = s.start()
    s.join(c.code, _dev(1))
    q = s.open_question(c.cid, c.secret, "mc", {}, {})
    s.vote(c.cid, q, _dev(1), "1")
    keys = [k.decode() for k in s.r.keys(s.P + c.cid + "*")] + [s.P + "code:" + c.code]
    assert len(keys) >= 4
    for k in keys:
        assert 0 < s.r.ttl(k) <= s.limits.ttl_s + 2, k
    s.end(c.cid, c.secret)
    assert not s.r.exists(*keys)
    assert s.r.zscore(s.P + "all", c.cid) is None


_VOTER = """
import sys
from core.web.classroom import store as cs
s = cs.SqliteStore(sys.argv[1], cs.Limits(votes_per_min=10_000, joins_per_min=10_000))
cid, code = sys.argv[2], sys.argv[3]
qids = [int(q) for q in sys.argv[4].split(",")]
for i in range(10_000):
    d = f"device-{i:012d}"
    s.join(code, d)
    for q in qids:
        s.vote(cid, q, d, "a")
        print(f"{d} {q}", flush=True)  # acknowledged: the call returned
"""


def test_a_process_killed_mid_class_loses_no_acknowledged_vote(tmp_path):
    path = tmp_path / "c.sqlite3"
    s = cs.SqliteStore(path, cs.Limits(max_students=10_000))
    c = s.start()
    qids = [s.open_question(c.cid, c.secret, "mc", {}, {})]
    p = subprocess.Popen([sys.executable, "-c", _VOTER, str(path), c.cid, c.code, ",".join(map(str, qids))],
                         cwd=ROOT, stdout=subprocess.PIPE, text=True)
    acked = []
    for line in p.stdout:
        acked.append(tuple(line.split()))
        if len(acked) == 40:
            p.kill()  # SIGKILL, mid-write of the next votes
            break
    p.wait(timeout=30)
    stored = {(v.device, str(q)) for q in qids for v in s.votes(c.cid, c.secret, q)}
    assert set(acked) <= stored
