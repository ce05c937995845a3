"""The shared class store: one small interface (``ClassStore``), two backends.

* ``SqliteStore`` (the default): one SQLite file in WAL mode under the app's data folder (``data_dir()``),
  shared by every app process of one machine (``make run``, ``make serve``); nothing to install or start.
* ``RedisStore``: a Redis server (``XRAY_CLASS_STORE=redis://host:6379/0``), for a hall whose app processes
  run on several machines.

``open_store()`` picks one from ``XRAY_CLASS_STORE`` (unset or ``sqlite:///path``: SQLite; ``redis://…``: Redis).

What a class holds: a join code (``CODE_LEN`` characters of ``ALPHABET``, 32⁸ ≈ 10¹² codes; expires with the
class), the SHA-256 of the teacher's secret (the secret itself lives only in the teacher's browser session;
compared with ``hmac.compare_digest``), the teacher's current view (page and URL parameters) with a version
number, its participants (a device token each, an optional nickname), its questions (one open at a time)
and their votes (one per device per question; ``vote`` returns only after the vote is committed). A class
ends when the teacher ends it or at ``expires``; its rows/keys are then deleted.

Every write is bounded (``Limits``): classes per store, students per class, questions per class, characters
of a nickname, an answer, a view, bytes of a question; joins and votes per device per minute. A refusal is a
``ClassError`` whose ``reason`` is one of ``REASONS`` (the page says it in the reader's language) and changes
nothing. No Streamlit here: the benchmark and the tests use the store directly.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import sqlite3
import threading
import time
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from core.common import settings

ALPHABET = "23456789ABCDEFGHJKMNPQRSTUVWXYZ"  # no 0/O, 1/I/L: read aloud and typed from a projector
CODE_LEN = 8
REASONS = ("bad_code", "expired", "class_full", "store_full", "forbidden", "not_joined", "closed", "voted",
           "too_long", "empty", "rate", "bad_device", "too_many_questions", "bad_question")
DEVICE_CHARS = (16, 64)
_DEVICE_OK = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


class ClassError(ValueError):
    """A refused action: ``reason`` is one of ``REASONS`` (the i18n key ``class.err.<reason>``)."""

    def __init__(self, reason: str) -> None:
        assert reason in REASONS, reason
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Limits:
    max_classes: int = 20  # live classes in one store
    max_students: int = 300  # participants of one class
    max_questions: int = 40  # questions of one class
    nickname_chars: int = 24
    answer_chars: int = 60
    view_chars: int = 4_000  # the teacher's page and URL parameters, as JSON
    question_bytes: int = 16_000  # a question's JSON
    blob_bytes: int = 1 << 20  # a question's array (the next-token distribution: 49,152 × 4 bytes for SmolLM2)
    ttl_s: float = 3 * 3600.0  # a class ends this long after it started
    joins_per_min: int = 6  # per device
    votes_per_min: int = 30  # per device


@dataclass(frozen=True)
class Started:
    """A new class: ``secret`` goes to the teacher's browser only."""

    cid: str
    code: str
    secret: str
    expires: float


@dataclass(frozen=True)
class Question:
    qid: int
    kind: str
    open: bool
    public: dict[str, Any]  # what students see while it is open
    answer: dict[str, Any]  # what the reveal shows (teacher only)


@dataclass(frozen=True)
class State:
    """What a student's device polls: the teacher's view (and its version) and the open question, if any."""

    code: str
    expires: float
    names: bool
    view_version: int
    view: dict[str, Any]
    question: Question | None = None  # its ``answer`` is emptied for students


@dataclass(frozen=True)
class Vote:
    device: str
    answer: str
    at: float
    nickname: str = ""


def data_dir() -> Path:
    """The app's data folder: ``XRAY_DATA_DIR``, else ``$XDG_DATA_HOME/transformer-xray`` (~/.local/share)."""
    return settings.get().data_dir


def clean_text(text: object, cap: int, *, allow_empty: bool = False) -> str:
    """Text from a stranger, made storable: a string, NFC, control characters (line breaks too) dropped,
    spaces trimmed; ``ClassError('too_long')`` past ``cap`` characters, ``'empty'`` when nothing is left.
    Markup is kept as characters: it is escaped where it is shown (``core.common.escape``), never stripped."""
    if not isinstance(text, str):
        raise ClassError("empty")
    s = unicodedata.normalize("NFC", text)
    s = "".join(ch for ch in s if unicodedata.category(ch)[0] != "C").strip()
    if len(s) > cap:
        raise ClassError("too_long")
    if not s and not allow_empty:
        raise ClassError("empty")
    return s


def normal_code(text: object) -> str | None:
    """A typed join code in canonical form ("ab cd-2345" → "ABCD2345"), or None if it cannot be one."""
    if not isinstance(text, str) or len(text) > 3 * CODE_LEN:
        return None
    s = "".join(ch for ch in text.upper() if ch not in " -\t")
    return s if len(s) == CODE_LEN and all(ch in ALPHABET for ch in s) else None


def shown_code(code: str) -> str:
    """``ABCD2345`` → ``ABCD-2345`` (how a projector shows it)."""
    return f"{code[:4]}-{code[4:]}"


def new_device() -> str:
    """A device token for one browser session (never derived from anything a student types)."""
    return secrets.token_urlsafe(24)


def _check_device(device: object) -> str:
    lo, hi = DEVICE_CHARS
    if not isinstance(device, str) or not lo <= len(device) <= hi or not set(device) <= _DEVICE_OK:
        raise ClassError("bad_device")
    return device


def _digest(secret: object) -> str:
    return hashlib.sha256(secret.encode("utf-8") if isinstance(secret, str) else b"").hexdigest()


class ClassStore:
    """The interface. The public methods check everything that arrives (they are the only door); a backend
    implements the ``_``-prefixed primitives, each atomic."""

    def __init__(self, limits: Limits | None = None, clock: Callable[[], float] = time.time) -> None:
        self.limits = limits or Limits()
        self.clock = clock

    # --- teacher --------------------------------------------------------------------------------------
    def start(self) -> Started:
        now = self.clock()
        self._purge(now)
        if self._count_classes(now) >= self.limits.max_classes:
            raise ClassError("store_full")
        secret = secrets.token_urlsafe(32)
        expires = now + self.limits.ttl_s
        for _ in range(8):  # a clash among 10¹² codes is rare; a fresh one is drawn
            cid, code = secrets.token_urlsafe(12), "".join(secrets.choice(ALPHABET) for _ in range(CODE_LEN))
            if self._insert_class(cid, code, _digest(secret), now, expires):
                return Started(cid, code, secret, expires)
        raise ClassError("store_full")

    def teacher(self, cid: str, secret: str) -> dict[str, Any]:
        """The class's row, if ``secret`` is its teacher's; ``ClassError('forbidden')`` otherwise (also for a class
        that has ended: a forged or stale secret learns nothing)."""
        row = self._class(cid) if isinstance(cid, str) else None
        if row is None or row["expires"] <= self.clock() or not hmac.compare_digest(_digest(secret), row["secret"]):
            raise ClassError("forbidden")
        return row

    def set_view(self, cid: str, secret: str, page: str, params: dict[str, str]) -> int:
        """Record the teacher's view; returns its version (unchanged when the view is)."""
        row = self.teacher(cid, secret)
        view = json.dumps({"page": str(page), "params": {str(k): str(v) for k, v in params.items()}},
                          ensure_ascii=False, sort_keys=True)
        if len(view) > self.limits.view_chars:
            raise ClassError("too_long")
        if view == row["view"]:
            return row["ver"]
        return self._set_view(cid, view)

    def set_names(self, cid: str, secret: str, on: bool) -> None:
        self.teacher(cid, secret)
        self._set_names(cid, bool(on))

    def open_question(self, cid: str, secret: str, kind: str, public: dict[str, Any], answer: dict[str, Any],
                      blob: bytes = b"") -> int:
        """Open a question (closing the one open before); returns its number (1, 2, …)."""
        self.teacher(cid, secret)
        text = json.dumps({"kind": kind, "public": public, "answer": answer}, ensure_ascii=False)
        if not kind or len(text.encode()) > self.limits.question_bytes or len(blob) > self.limits.blob_bytes:
            raise ClassError("bad_question")
        qid = self._add_question(cid, text, bytes(blob), self.limits.max_questions)
        if qid is None:
            raise ClassError("too_many_questions")
        return qid

    def close_question(self, cid: str, secret: str, qid: int) -> None:
        self.teacher(cid, secret)
        self._close(cid, int(qid))

    def questions(self, cid: str, secret: str) -> list[Question]:
        self.teacher(cid, secret)
        return [_question(q, text, st) for q, text, st in self._questions(cid)]

    def blob(self, cid: str, secret: str, qid: int) -> bytes:
        self.teacher(cid, secret)
        return self._blob(cid, int(qid))

    def votes(self, cid: str, secret: str, qid: int) -> list[Vote]:
        """Every vote on question ``qid``, oldest first; nicknames only while the teacher has names on."""
        row = self.teacher(cid, secret)
        names = self._participants(cid) if row["names"] else {}
        return [Vote(d, a, t, names.get(d, "")) for d, a, t in self._votes(cid, int(qid))]

    def count(self, cid: str, secret: str) -> int:
        """How many have joined."""
        self.teacher(cid, secret)
        return len(self._participants(cid))

    def end(self, cid: str, secret: str) -> None:
        """End the class: everything it held is deleted."""
        self.teacher(cid, secret)
        self._delete(cid)

    # --- student --------------------------------------------------------------------------------------
    def join(self, code: object, device: object, nickname: object = "") -> str:
        """Join by code; returns the class id. Joining again from the same device keeps one seat."""
        device = _check_device(device)
        if not self._allow(device, "join", self.limits.joins_per_min):
            raise ClassError("rate")
        c = normal_code(code)
        if c is None:
            raise ClassError("bad_code")
        nick = clean_text(nickname, self.limits.nickname_chars, allow_empty=True)
        now = self.clock()
        cid = self._cid_of_code(c)
        row = self._class(cid) if cid else None
        if row is None:
            raise ClassError("bad_code")
        if row["expires"] <= now:
            self._delete(cid)
            raise ClassError("expired")
        if not self._join(cid, device, nick, self.limits.max_students):
            raise ClassError("class_full")
        return cid

    def state(self, cid: str) -> State | None:
        """What students see (None: the class has ended). The open question's answer is left out."""
        row = self._class(cid) if isinstance(cid, str) else None
        if row is None or row["expires"] <= self.clock():
            return None
        view = json.loads(row["view"]) if row["view"] else {}
        q = None
        if row["open"]:
            full = self._question_row(cid, row["open"])
            if full is not None and full[1]:
                whole = _question(row["open"], *full)
                q = Question(whole.qid, whole.kind, True, whole.public, {})
        return State(row["code"], row["expires"], bool(row["names"]), row["ver"], view, q)

    def vote(self, cid: str, qid: int, device: object, answer: object) -> None:
        """One vote; returns once it is committed. ``ClassError``: not joined, closed, voted already, too long, rate."""
        device = _check_device(device)
        if not self._allow(device, "vote", self.limits.votes_per_min):
            raise ClassError("rate")
        text = clean_text(answer, self.limits.answer_chars)
        row = self._class(cid) if isinstance(cid, str) else None
        if row is None or row["expires"] <= self.clock():
            raise ClassError("expired")
        if not self._is_participant(cid, device):
            raise ClassError("not_joined")
        outcome = self._vote(cid, int(qid), device, text, self.clock())
        if outcome != "ok":
            raise ClassError(outcome)

    # --- backend primitives ---------------------------------------------------------------------------
    def _insert_class(self, cid: str, code: str, secret: str, now: float, expires: float) -> bool: raise NotImplementedError
    def _class(self, cid: str) -> dict[str, Any] | None: raise NotImplementedError
    def _cid_of_code(self, code: str) -> str | None: raise NotImplementedError
    def _count_classes(self, now: float) -> int: raise NotImplementedError
    def _purge(self, now: float) -> int: raise NotImplementedError
    def _set_view(self, cid: str, view: str) -> int: raise NotImplementedError
    def _set_names(self, cid: str, on: bool) -> None: raise NotImplementedError
    def _add_question(self, cid: str, text: str, blob: bytes, cap: int) -> int | None: raise NotImplementedError
    def _close(self, cid: str, qid: int) -> None: raise NotImplementedError
    def _questions(self, cid: str) -> list[tuple[int, str, bool]]: raise NotImplementedError
    def _question_row(self, cid: str, qid: int) -> tuple[str, bool] | None: raise NotImplementedError
    def _blob(self, cid: str, qid: int) -> bytes: raise NotImplementedError
    def _join(self, cid: str, device: str, nick: str, cap: int) -> bool: raise NotImplementedError
    def _is_participant(self, cid: str, device: str) -> bool: raise NotImplementedError
    def _participants(self, cid: str) -> dict[str, str]: raise NotImplementedError
    def _vote(self, cid: str, qid: int, device: str, answer: str, now: float) -> str: raise NotImplementedError
    def _votes(self, cid: str, qid: int) -> list[tuple[str, str, float]]: raise NotImplementedError
    def _delete(self, cid: str) -> None: raise NotImplementedError
    def _allow(self, device: str, what: str, cap: int) -> bool: raise NotImplementedError


def _question(qid: int, text: str, is_open: bool) -> Question:
    d = json.loads(text)
    return Question(int(qid), d["kind"], bool(is_open), d["public"], d["answer"])


# --- SQLite ----------------------------------------------------------------------------------------------

_SCHEMA = """
CREATE TABLE IF NOT EXISTS classes (cid TEXT PRIMARY KEY, code TEXT UNIQUE NOT NULL, secret TEXT NOT NULL,
    created REAL NOT NULL, expires REAL NOT NULL, names INTEGER NOT NULL DEFAULT 0, view TEXT NOT NULL DEFAULT '',
    ver INTEGER NOT NULL DEFAULT 0, open INTEGER NOT NULL DEFAULT 0, nq INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS participants (cid TEXT NOT NULL, device TEXT NOT NULL, nick TEXT NOT NULL,
    PRIMARY KEY (cid, device));
CREATE TABLE IF NOT EXISTS questions (cid TEXT NOT NULL, qid INTEGER NOT NULL, body TEXT NOT NULL,
    blob BLOB NOT NULL, open INTEGER NOT NULL, PRIMARY KEY (cid, qid));
CREATE TABLE IF NOT EXISTS votes (cid TEXT NOT NULL, qid INTEGER NOT NULL, device TEXT NOT NULL,
    answer TEXT NOT NULL, at REAL NOT NULL, PRIMARY KEY (cid, qid, device));
CREATE TABLE IF NOT EXISTS rate (device TEXT NOT NULL, what TEXT NOT NULL, minute INTEGER NOT NULL,
    n INTEGER NOT NULL, PRIMARY KEY (device, what, minute));
"""


class SqliteStore(ClassStore):
    """One SQLite file shared by the processes of one machine (WAL: readers never wait for the writer).
    Each thread has its own connection; a write is one ``BEGIN IMMEDIATE`` transaction, committed before the
    call returns (``synchronous=NORMAL``: a committed vote survives the app process being killed; only a
    power cut can take the last ones)."""

    def __init__(self, path: Path | str | None = None, limits: Limits | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__(limits, clock)
        self.path = Path(path) if path else data_dir() / "classes.sqlite3"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._db().executescript(_SCHEMA)

    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=10.0, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA foreign_keys=OFF")
            self._local.db = db
        return db

    class _Tx:
        def __init__(self, db: sqlite3.Connection) -> None:
            self.db = db

        def __enter__(self) -> sqlite3.Connection:
            self.db.execute("BEGIN IMMEDIATE")
            return self.db

        def __exit__(self, kind: Any, *_: Any) -> None:
            self.db.execute("COMMIT" if kind is None else "ROLLBACK")

    def _tx(self) -> SqliteStore._Tx:
        return SqliteStore._Tx(self._db())

    def _one(self, sql: str, *args: Any) -> Any:
        return self._db().execute(sql, args).fetchone()

    def _insert_class(self, cid, code, secret, now, expires):
        try:
            with self._tx() as db:
                db.execute("INSERT INTO classes (cid, code, secret, created, expires) VALUES (?,?,?,?,?)",
                           (cid, code, secret, now, expires))
            return True
        except sqlite3.IntegrityError:
            return False

    def _class(self, cid):
        r = self._one("SELECT code, secret, expires, names, view, ver, open FROM classes WHERE cid=?", cid)
        if r is None:
            return None
        return dict(zip(("code", "secret", "expires", "names", "view", "ver", "open"), r))

    def _cid_of_code(self, code):
        r = self._one("SELECT cid FROM classes WHERE code=?", code)
        return r[0] if r else None

    def _count_classes(self, now):
        return self._one("SELECT COUNT(*) FROM classes WHERE expires > ?", now)[0]

    def _purge(self, now):
        old = [r[0] for r in self._db().execute("SELECT cid FROM classes WHERE expires <= ?", (now,))]
        for cid in old:
            self._delete(cid)
        with self._tx() as db:
            db.execute("DELETE FROM rate WHERE minute < ?", (int(now // 60) - 1,))
        return len(old)

    def _set_view(self, cid, view):
        with self._tx() as db:
            db.execute("UPDATE classes SET view=?, ver=ver+1 WHERE cid=?", (view, cid))
            return db.execute("SELECT ver FROM classes WHERE cid=?", (cid,)).fetchone()[0]

    def _set_names(self, cid, on):
        with self._tx() as db:
            db.execute("UPDATE classes SET names=? WHERE cid=?", (int(on), cid))

    def _add_question(self, cid, text, blob, cap):
        with self._tx() as db:
            nq = db.execute("SELECT nq FROM classes WHERE cid=?", (cid,)).fetchone()[0]
            if nq >= cap:
                return None
            db.execute("UPDATE questions SET open=0 WHERE cid=?", (cid,))
            db.execute("INSERT INTO questions VALUES (?,?,?,?,1)", (cid, nq + 1, text, blob))
            db.execute("UPDATE classes SET nq=?, open=? WHERE cid=?", (nq + 1, nq + 1, cid))
            return nq + 1

    def _close(self, cid, qid):
        with self._tx() as db:
            db.execute("UPDATE questions SET open=0 WHERE cid=? AND qid=?", (cid, qid))
            db.execute("UPDATE classes SET open=0 WHERE cid=? AND open=?", (cid, qid))

    def _questions(self, cid):
        return [(q, b, bool(o)) for q, b, o in
                self._db().execute("SELECT qid, body, open FROM questions WHERE cid=? ORDER BY qid", (cid,))]

    def _question_row(self, cid, qid):
        r = self._one("SELECT body, open FROM questions WHERE cid=? AND qid=?", cid, qid)
        return None if r is None else (r[0], bool(r[1]))

    def _blob(self, cid, qid):
        r = self._one("SELECT blob FROM questions WHERE cid=? AND qid=?", cid, qid)
        return bytes(r[0]) if r else b""

    def _join(self, cid, device, nick, cap):
        with self._tx() as db:
            if db.execute("SELECT 1 FROM participants WHERE cid=? AND device=?", (cid, device)).fetchone():
                db.execute("UPDATE participants SET nick=? WHERE cid=? AND device=?", (nick, cid, device))
                return True
            if db.execute("SELECT COUNT(*) FROM participants WHERE cid=?", (cid,)).fetchone()[0] >= cap:
                return False
            db.execute("INSERT INTO participants VALUES (?,?,?)", (cid, device, nick))
            return True

    def _is_participant(self, cid, device):
        return self._one("SELECT 1 FROM participants WHERE cid=? AND device=?", cid, device) is not None

    def _participants(self, cid):
        return dict(self._db().execute("SELECT device, nick FROM participants WHERE cid=?", (cid,)).fetchall())

    def _vote(self, cid, qid, device, answer, now):
        with self._tx() as db:
            r = db.execute("SELECT open FROM questions WHERE cid=? AND qid=?", (cid, qid)).fetchone()
            if r is None or not r[0]:
                return "closed"
            try:
                db.execute("INSERT INTO votes VALUES (?,?,?,?,?)", (cid, qid, device, answer, now))
            except sqlite3.IntegrityError:
                return "voted"
        return "ok"

    def _votes(self, cid, qid):
        return self._db().execute("SELECT device, answer, at FROM votes WHERE cid=? AND qid=? ORDER BY at, device",
                                  (cid, qid)).fetchall()

    def _delete(self, cid):
        with self._tx() as db:
            for table in ("votes", "questions", "participants", "classes"):
                db.execute(f"DELETE FROM {table} WHERE cid=?", (cid,))  # a fixed table name

    def _allow(self, device, what, cap):
        minute = int(self.clock() // 60)
        with self._tx() as db:
            db.execute("INSERT INTO rate VALUES (?,?,?,1) ON CONFLICT (device, what, minute) DO UPDATE SET n=n+1",
                       (device, what, minute))
            return db.execute("SELECT n FROM rate WHERE device=? AND what=? AND minute=?",
                              (device, what, minute)).fetchone()[0] <= cap


# --- Redis -----------------------------------------------------------------------------------------------

# Atomic steps as server-side scripts (one round trip, nothing in between).
_ADD_Q = """
local nq = tonumber(redis.call('HGET', KEYS[1], 'nq') or '0')
if nq >= tonumber(ARGV[1]) then return 0 end
local prev = tonumber(redis.call('HGET', KEYS[1], 'open') or '0')
if prev > 0 then redis.call('HSET', KEYS[1] .. ':q:' .. prev, 'open', '0') end
nq = nq + 1
redis.call('HSET', KEYS[1] .. ':q:' .. nq, 'body', ARGV[2], 'blob', ARGV[3], 'open', '1')
redis.call('EXPIREAT', KEYS[1] .. ':q:' .. nq, ARGV[4])
redis.call('HSET', KEYS[1], 'nq', nq, 'open', nq)
return nq
"""
_CLOSE = """
redis.call('HSET', KEYS[1] .. ':q:' .. ARGV[1], 'open', '0')
if redis.call('HGET', KEYS[1], 'open') == ARGV[1] then redis.call('HSET', KEYS[1], 'open', '0') end
return 1
"""
_JOIN = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) return 1 end
if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('EXPIREAT', KEYS[1], ARGV[4])
return 1
"""
_VOTE = """
if redis.call('HGET', KEYS[1], 'open') ~= '1' then return 'closed' end
if redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2]) == 0 then return 'voted' end
redis.call('EXPIREAT', KEYS[2], ARGV[3])
return 'ok'
"""


class RedisStore(ClassStore):
    """The same class state in Redis, for app processes on several machines. Every key of a class expires
    with the class (``EXPIREAT``), so Redis deletes an abandoned class by itself; ``end`` deletes at once.
    Each multi-step write is one Lua script (atomic). A vote is acknowledged once Redis has it; to keep it
    through a Redis restart, run Redis with ``appendonly yes`` (docs/class.md)."""

    P = "xray:class:"

    def __init__(self, url: str, limits: Limits | None = None, clock: Callable[[], float] = time.time) -> None:
        super().__init__(limits, clock)
        self.r = redis.Redis.from_url(url, socket_timeout=5.0, socket_connect_timeout=5.0)
        self.r.ping()
        self._add_q, self._close_q = self.r.register_script(_ADD_Q), self.r.register_script(_CLOSE)
        self._join_s, self._vote_s = self.r.register_script(_JOIN), self.r.register_script(_VOTE)

    def _k(self, cid: str, *rest: object) -> str:
        return ":".join([self.P + cid, *map(str, rest)])

    def _exp(self, cid: str) -> int:
        e = self.r.hget(self._k(cid), "expires")
        return int(float(e or 0)) + 1

    def _insert_class(self, cid, code, secret, now, expires):
        if not self.r.set(self.P + "code:" + code, cid, nx=True, exat=int(expires) + 1):
            return False
        with self.r.pipeline() as p:
            p.hset(self._k(cid), mapping={"code": code, "secret": secret, "expires": repr(expires), "names": 0,
                                          "view": "", "ver": 0, "open": 0, "nq": 0})
            p.expireat(self._k(cid), int(expires) + 1)
            p.zadd(self.P + "all", {cid: expires})
            p.execute()
        return True

    def _class(self, cid):
        h = self.r.hgetall(self._k(cid))
        if not h:
            return None
        g = {k.decode(): v.decode() for k, v in h.items()}
        return {"code": g["code"], "secret": g["secret"], "expires": float(g["expires"]), "names": int(g["names"]),
                "view": g["view"], "ver": int(g["ver"]), "open": int(g["open"])}

    def _cid_of_code(self, code):
        v = self.r.get(self.P + "code:" + code)
        return v.decode() if v else None

    def _count_classes(self, now):
        return self.r.zcount(self.P + "all", f"({now!r}", "+inf")

    def _purge(self, now):
        old = [c.decode() for c in self.r.zrangebyscore(self.P + "all", "-inf", repr(now))]
        for cid in old:
            self._delete(cid)
        return len(old)

    def _set_view(self, cid, view):
        with self.r.pipeline() as p:
            p.hset(self._k(cid), "view", view)
            p.hincrby(self._k(cid), "ver", 1)
            return int(p.execute()[1])

    def _set_names(self, cid, on):
        self.r.hset(self._k(cid), "names", int(on))

    def _add_question(self, cid, text, blob, cap):
        n = int(self._add_q(keys=[self._k(cid)], args=[cap, text, blob, self._exp(cid)]))
        return n or None

    def _close(self, cid, qid):
        self._close_q(keys=[self._k(cid)], args=[str(qid)])

    def _questions(self, cid):
        nq = int(self.r.hget(self._k(cid), "nq") or 0)
        out = []
        for q in range(1, nq + 1):
            r = self._question_row(cid, q)
            if r is not None:
                out.append((q, *r))
        return out

    def _question_row(self, cid, qid):
        body, is_open = self.r.hmget(self._k(cid, "q", qid), ["body", "open"])
        return None if body is None else (body.decode(), is_open == b"1")

    def _blob(self, cid, qid):
        return self.r.hget(self._k(cid, "q", qid), "blob") or b""

    def _join(self, cid, device, nick, cap):
        return bool(self._join_s(keys=[self._k(cid, "p")], args=[device, nick, cap, self._exp(cid)]))

    def _is_participant(self, cid, device):
        return bool(self.r.hexists(self._k(cid, "p"), device))

    def _participants(self, cid):
        return {k.decode(): v.decode() for k, v in self.r.hgetall(self._k(cid, "p")).items()}

    def _vote(self, cid, qid, device, answer, now):
        body = json.dumps([answer, now], ensure_ascii=False)
        out = self._vote_s(keys=[self._k(cid, "q", qid), self._k(cid, "v", qid)], args=[device, body, self._exp(cid)])
        return out.decode() if isinstance(out, bytes) else str(out)

    def _votes(self, cid, qid):
        rows = [(d.decode(), *json.loads(v)) for d, v in self.r.hgetall(self._k(cid, "v", qid)).items()]
        return sorted(rows, key=lambda r: (r[2], r[0]))

    def _delete(self, cid):
        code = self.r.hget(self._k(cid), "code")
        keys = list(self.r.scan_iter(match=self._k(cid) + ":*", count=500))
        self.r.delete(self._k(cid), *keys, *([self.P + "code:" + code.decode()] if code else []))
        self.r.zrem(self.P + "all", cid)

    def _allow(self, device, what, cap):
        key = f"{self.P}rate:{what}:{device}:{int(self.clock() // 60)}"
        with self.r.pipeline() as p:
            p.incr(key)
            p.expire(key, 120)
            return int(p.execute()[0]) <= cap


def open_store(setting: str | None = None, limits: Limits | None = None) -> ClassStore:
    """The store ``XRAY_CLASS_STORE`` names (or ``setting``): ``redis://…`` / ``rediss://…`` → Redis;
    ``sqlite:///path`` → that SQLite file; unset → SQLite under ``data_dir()``. A Redis server that does
    not answer raises ``redis.ConnectionError`` (the page says the class store cannot be reached)."""
    url = (settings.get().class_store if setting is None else setting).strip()
    if url.startswith(("redis://", "rediss://", "unix://")):
        return RedisStore(url, limits)
    if url.startswith("sqlite:///"):
        return SqliteStore(url[len("sqlite:///"):], limits)  # sqlite:////abs/path, sqlite:///relative
    if url:
        raise ValueError(f"{settings.CLASS_STORE} must start with redis://, rediss:// or sqlite:///, not '{url[:40]}'")
    return SqliteStore(None, limits)
