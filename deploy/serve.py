"""Serve a lecture hall: N app processes behind nginx, from one command.

    make serve REPLICAS=4 PORT=8501          # or: .venv/bin/python -m deploy.serve --replicas 4 --port 8501

One process shares one model and runs one forward pass at a time, and Streamlit keeps a session in the
process that holds its websocket: so several replicas go behind nginx with sticky sessions. The launcher
checks its arguments and the offered-models setting; starts the replicas (``python -m core.web.server``
on 127.0.0.1, each with cores ÷ N torch threads) and waits for ``/_stcore/health``; runs nginx in the
foreground from deploy/nginx.conf.template in a temp folder (no root); marks a replica that exits or
fails its checks ``down`` and restarts it (a bounded number of times), and restarts nginx if it dies;
on Ctrl-C / SIGTERM stops everything and says "nothing left running" once the ports are free. The
children die with the launcher even if it is killed outright (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import errno
import importlib.util
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = Path(__file__).with_name("nginx.conf.template")
MAX_REPLICAS = 64
HEALTH = "/_stcore/health"
ENV_REPLICA = "XRAY_REPLICA"  # this replica's number, 1..N (core/common/settings.py reads it)
ENV_REPLICAS = "XRAY_REPLICAS"  # how many there are
REPLICA_HOST = "127.0.0.1"  # replicas listen only locally: the world reaches them through nginx
START_TIMEOUT_S = 180.0  # a first start converts the embedded model once (≈ 15 s); a busy machine is slower
CHECK_EVERY_S = 2.0
CHECK_TIMEOUT_S = 5.0
FAILS_TO_DOWN = 3  # consecutive failed health checks before a live replica is taken out of nginx
FAILS_TO_RESTART = 10  # … and before a replica that still runs but never answers (frozen) is killed and restarted
NGINX_HEALTH = "/nginx-health"  # answered by nginx itself: nginx is up even while every replica restarts
RESTARTS = 3  # a replica, or nginx, that stops is restarted at most this many times …
RESTART_WINDOW_S = 600.0  # … within this many seconds; past that it is left stopped (it would only crash again)
NGINX_TRIES = 3  # attempts to bring nginx back after it stopped, a second apart, then two
PORT_FREE_S = 10.0  # how long a port may take to be given back after its process died
STOP_GRACE_S = 20.0  # a replica takes ~10 s to exit on a busy machine (interpreter and torch teardown)
# Lines of Streamlit's start banner: they name the replica's private URL, which is not the one to share.
BANNER = ("You can now view your Streamlit app", "URL: http", "Local URL:", "Network URL:", "External URL:",
          "Uvicorn server started on")
_STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)? ")  # Streamlit's log time, before the message


def _banner(line: str) -> bool:
    return _STAMP.sub("", line.lstrip()).startswith(BANNER)


def _threads(n: int) -> str:
    return f"{n} torch thread{'s' if n != 1 else ''}"


class UsageError(ValueError):
    """An argument or setting the launcher cannot use; the message is one sentence for the operator."""


def cores() -> int:
    """The cores this process may run on (a container's or taskset's limit, not the machine's)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def default_replicas() -> int:
    """Half the cores (each replica then traces on two threads), at least one."""
    return max(1, cores() // 2)


def default_threads(replicas: int) -> int:
    """Each replica's share of the cores for torch, at least one thread.

    torch starts one thread per core in every process; N replicas would then run N × cores threads on
    the same cores, and OpenMP threads that wait for each other spin. Measured on 2 cores
    (tests/benchmarks/bench_load.py, K = 60): two replicas with torch's default 2 threads each served
    0.33× the sessions per second of one replica; with 1 thread each, see docs/operating.md."""
    return max(1, cores() // max(1, replicas))


def _digits() -> ModuleType:
    """core/common/digits.py, the one reader of whole numbers, loaded as a file: importing the core package
    would load torch into the launcher, which only starts and watches processes."""
    spec = importlib.util.spec_from_file_location("xray_digits", Path(__file__).resolve().parents[1] / "core" / "common" / "digits.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


digits = _digits()


def _whole(text: str, what: str, lo: int, hi: int) -> int:
    """An argument that must be a whole number in [lo, hi], or one sentence saying so."""
    c = digits.check(text, lo, hi)  # the one check: ASCII digits only
    if c.n is None:
        raise argparse.ArgumentTypeError(f"{what} must be a whole number from {lo} to {hi}, not '{text}'")
    if not c.ok:
        raise argparse.ArgumentTypeError(f"{what} must be from {lo} to {hi}, not {c.n}")
    return c.n


def threads_arg(text: str) -> int:
    return _whole(text, "THREADS", 1, 256)


def replicas_arg(text: str) -> int:
    return _whole(text, "REPLICAS", 1, MAX_REPLICAS)


def port_arg(text: str) -> int:
    return _whole(text, "a port", 1, 65535)


def bind_error(host: str, port: int) -> OSError | None:
    """Why a server could not listen on host:port now (None: it could), binding as nginx and uvicorn do
    (SO_REUSEADDR, so a port in TIME_WAIT counts as free)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            return e
    return None


def port_free(host: str, port: int) -> bool:
    return bind_error(host, port) is None


def check_listen(host: str, port: int) -> None:
    """UsageError with the reason when nginx could not listen on host:port."""
    e = bind_error(host, port)
    if e is None:
        return
    if e.errno == errno.EADDRINUSE:
        raise UsageError(f"port {port} is already in use on {host}; choose another with PORT=… (make serve PORT=8600)")
    if e.errno == errno.EACCES:
        raise UsageError(f"port {port} is below 1024 and needs root; choose a port from 1024 up (PORT=8501) "
                         "and see docs/operating.md, 'Behind TLS'")
    if e.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT) or isinstance(e, socket.gaierror):
        raise UsageError(f"'{host}' is not an address of this machine to listen on (HOST=0.0.0.0 means every one)")
    raise UsageError(f"cannot listen on {host}:{port} ({e.strerror or e})")


def pick_replica_ports(first: int, n: int, avoid: int) -> list[int]:
    """``n`` free local ports from ``first`` upwards (busy ones and ``avoid`` skipped)."""
    ports: list[int] = []
    port = first
    while len(ports) < n:
        if port > 65535:
            raise UsageError(f"there are not {n} free local ports from {first} up to 65535 for the replicas")
        if port != avoid and port_free(REPLICA_HOST, port):
            ports.append(port)
        port += 1
    return ports


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="make serve",
        description="Serve Transformer X-Ray to a lecture hall: N app processes behind nginx with sticky sessions.",
    )
    p.add_argument("--replicas", type=replicas_arg, default=None,
                   help=f"how many app processes (1 to {MAX_REPLICAS}; default: cores ÷ 2, here {default_replicas()})")
    p.add_argument("--threads", type=threads_arg, default=None,
                   help="torch threads per replica (default: cores ÷ replicas, at least 1)")
    p.add_argument("--port", type=port_arg, default=8501, help="the port students open (default 8501)")
    p.add_argument("--host", default="0.0.0.0",
                   help="the address nginx listens on (default 0.0.0.0: every interface; 127.0.0.1: this machine only)")
    p.add_argument("--replica-port", type=port_arg, default=None,
                   help="the first local port for the replicas (default: PORT + 1; busy ports are skipped)")
    p.add_argument("--start-timeout", type=float, default=START_TIMEOUT_S, help=argparse.SUPPRESS)
    return p


@dataclass(frozen=True)
class Plan:
    """What to start: checked arguments, free ports."""

    replicas: int
    host: str
    port: int
    replica_ports: tuple[int, ...]
    start_timeout: float = START_TIMEOUT_S
    threads: int = 1  # torch threads per replica

    @property
    def url(self) -> str:
        shown = "localhost" if self.host in ("0.0.0.0", "::", "127.0.0.1") else self.host
        return f"http://{shown}:{self.port}/"


def plan(argv: Sequence[str] | None = None) -> Plan:
    """The checked plan from the command line; argparse's own errors exit 2 with one line, the rest raise
    UsageError with a sentence."""
    a = parser().parse_args(argv)
    n = a.replicas if a.replicas is not None else default_replicas()
    host = a.host.strip().strip("[]") or "0.0.0.0"
    check_listen(host, a.port)
    first = a.replica_port if a.replica_port is not None else a.port + 1
    threads = a.threads if a.threads is not None else default_threads(n)
    return Plan(n, host, a.port, tuple(pick_replica_ports(first, n, a.port)), a.start_timeout, threads)


def find_nginx() -> str | None:
    """nginx on PATH or in /usr/sbin (not on a normal user's PATH on Debian)."""
    return shutil.which("nginx", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))


def render(template: str, *, listen: str, ports: Sequence[int], prefix: Path | str, down: frozenset[int] = frozenset()) -> str:
    """The nginx config: the template with its placeholders filled (``down``: replica ports taken out)."""
    servers = "\n".join(
        f"        server {REPLICA_HOST}:{p} max_fails=1 fail_timeout=10s{' down' if p in down else ''};"
        f"  # replica {i}" for i, p in enumerate(ports, 1))
    return template.replace("{{SERVERS}}", servers).replace("{{LISTEN}}", listen).replace("{{PREFIX}}", str(prefix))


def listen_directive(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def health_ok(base: str, timeout: float = CHECK_TIMEOUT_S, path: str = HEALTH) -> bool:
    try:
        with urllib.request.urlopen(base + path, timeout=timeout) as r:
            return r.status == 200 and r.read().strip() == b"ok"
    except (OSError, ValueError):
        return False


try:  # looked up once here, so that the child between fork and exec only makes the call
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux: no parent-death signal, Ctrl-C and the launcher's stop still apply
    _PRCTL = None


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the child is killed when the launcher dies, even by SIGKILL (no orphan keeps the port). SIGKILL,
    not SIGTERM: a replica may ignore or be slow to act on SIGTERM (Streamlit's shutdown waits on its
    threads), and with the launcher gone nobody would kill it later."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG


def say(msg: str) -> None:
    print(f"serve: {msg}", flush=True)


def _pump(stream, tag: str) -> None:
    """Copy a child's output to ours, each line tagged with its source (the banner lines dropped)."""
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", "replace").rstrip()
        if line and not _banner(line):
            print(f"{tag} | {line}", flush=True)
    stream.close()


@dataclass
class Replica:
    index: int
    port: int
    proc: subprocess.Popen
    started: float
    up: bool = False  # in nginx's rotation
    fails: int = 0
    exited: bool = False  # stopped for good: not restarted again
    starting: bool = False  # restarted, not yet answering its health check
    restarts: list[float] = field(default_factory=list)  # when it was restarted (monotonic seconds)
    pump: threading.Thread | None = field(default=None, repr=False)

    @property
    def base(self) -> str:
        return f"http://{REPLICA_HOST}:{self.port}"

    @property
    def name(self) -> str:
        return f"replica {self.index}"


def _recent(times: list[float], now: float) -> int:
    return sum(1 for t in times if now - t < RESTART_WINDOW_S)


def wait_port_free(host: str, port: int, timeout: float = PORT_FREE_S) -> bool:
    """Whether ``host:port`` can be listened on within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not port_free(host, port):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


class Launcher:
    def __init__(self, p: Plan, nginx: str):
        self.plan = p
        self.nginx_bin = nginx
        self.prefix = Path(tempfile.mkdtemp(prefix="xray-serve-"))
        # Started by root, nginx's workers run as "nobody" and must reach the temp folders the master makes
        # for them (request bodies over 16 KB go there): others may pass through this folder, not list it.
        self.prefix.chmod(0o711)
        self.template = TEMPLATE.read_text(encoding="utf-8")
        self.replicas: list[Replica] = []
        self.nginx: subprocess.Popen | None = None
        self.nginx_restarts: list[float] = []  # when nginx was started again (monotonic seconds)
        self.stopping = threading.Event()
        self.secret = secrets.token_hex(32)  # one cookie secret for all: a signed cookie is valid on every replica

    # --- starting ------------------------------------------------------------------------------------
    def _spawn(self, cmd: list[str], tag: str, env: dict[str, str] | None = None,
               own_group: bool = False) -> tuple[subprocess.Popen, threading.Thread]:
        """A child with its output tagged into ours; ``own_group``: in a process group of its own (nginx: its
        workers join the group, so that killing the group leaves none behind holding the port)."""
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, preexec_fn=_die_with_parent, process_group=0 if own_group else None)
        t = threading.Thread(target=_pump, args=(proc.stdout, tag), daemon=True)
        t.start()
        return proc, t

    def replica_cmd(self, port: int) -> list[str]:
        return [sys.executable, "-m", "core.web.server", "--server.port", str(port), "--server.address", REPLICA_HOST,
                "--server.headless", "true", "--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false"]

    def _spawn_replica(self, i: int, port: int) -> tuple[subprocess.Popen, threading.Thread]:
        env = dict(os.environ, **{ENV_REPLICA: str(i), ENV_REPLICAS: str(self.plan.replicas),
                                  "STREAMLIT_SERVER_COOKIE_SECRET": self.secret, "PYTHONUNBUFFERED": "1",
                                  # torch's intra-op threads (and MKL's, if present): this replica's share
                                  "OMP_NUM_THREADS": str(self.plan.threads), "MKL_NUM_THREADS": str(self.plan.threads)})
        return self._spawn(self.replica_cmd(port), f"replica {i}", env)

    def start_replicas(self) -> None:
        for i, port in enumerate(self.plan.replica_ports, 1):
            proc, pump = self._spawn_replica(i, port)
            self.replicas.append(Replica(i, port, proc, time.monotonic(), pump=pump))

    def wait_healthy(self) -> None:
        """The active check before nginx starts: every replica answers /_stcore/health (one line each)."""
        deadline = time.monotonic() + self.plan.start_timeout
        waiting = list(self.replicas)
        while waiting:
            if self.stopping.is_set():
                raise KeyboardInterrupt
            for r in list(waiting):
                if r.proc.poll() is not None:
                    if self.stopping.is_set():  # Ctrl-C in the terminal reaches the replicas too
                        raise KeyboardInterrupt
                    raise UsageError(f"{r.name} stopped while starting (exit code {r.proc.returncode}); its lines above say why")
                if health_ok(r.base, timeout=2):
                    r.up = True
                    waiting.remove(r)
                    say(f"{r.name}/{self.plan.replicas}  {r.base}  pid {r.proc.pid}  {_threads(self.plan.threads)}  "
                        f"healthy ({HEALTH} ok after {time.monotonic() - r.started:.1f} s)")
            if waiting and time.monotonic() > deadline:
                names = ", ".join(r.name for r in waiting)
                raise UsageError(f"{names} did not answer {HEALTH} within {self.plan.start_timeout:.0f} s")
            if waiting:
                self.stopping.wait(0.3)

    def write_conf(self) -> Path:
        down = frozenset(r.port for r in self.replicas if not r.up)
        conf = self.prefix / "nginx.conf"
        text = render(self.template, listen=listen_directive(self.plan.host, self.plan.port),
                      ports=self.plan.replica_ports, prefix=self.prefix, down=down)
        conf.write_text(text, encoding="utf-8")
        return conf

    def start_nginx(self) -> None:
        conf = self.write_conf()
        args = [self.nginx_bin, "-p", f"{self.prefix}/", "-c", str(conf), "-e", "stderr"]
        check = subprocess.run([*args, "-t", "-q"], capture_output=True, text=True)
        if check.returncode != 0:
            lines = check.stderr.strip().splitlines() or [f"exit code {check.returncode}"]
            raise UsageError(f"nginx refused its configuration: {lines[-1]}")
        self.nginx, _ = self._spawn(args, "nginx", own_group=True)
        deadline = time.monotonic() + 20
        local = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(self.plan.host, self.plan.host)
        probe = f"http://{listen_directive(local, self.plan.port)}"
        while not health_ok(probe, timeout=2, path=NGINX_HEALTH):  # nginx's own: the replicas may be restarting
            if self.nginx.poll() is not None:
                raise UsageError(f"nginx stopped at once (exit code {self.nginx.returncode}); its lines above say why")
            if time.monotonic() > deadline:
                raise UsageError(f"nginx did not answer on port {self.plan.port} within 20 s")
            time.sleep(0.2)
        say(f"nginx  pid {self.nginx.pid}  listening on {listen_directive(self.plan.host, self.plan.port)}  "
            f"(config and logs: {self.prefix})")

    # --- watching ------------------------------------------------------------------------------------
    def reload_nginx(self) -> None:
        self.write_conf()
        if self.nginx is not None and self.nginx.poll() is None:
            self.nginx.send_signal(signal.SIGHUP)  # re-read the config; open websockets stay where they are

    def restart_replica(self, r: Replica) -> bool:
        """Start a replica that stopped again, on its port, unless it has been restarted RESTARTS times within
        RESTART_WINDOW_S already (or its port stays taken): whether it was."""
        now = time.monotonic()
        if self.stopping.is_set():
            return False
        if _recent(r.restarts, now) >= RESTARTS:
            say(f"{r.name} stopped again after {RESTARTS} restarts within {RESTART_WINDOW_S / 60:.0f} min: not restarted; "
                "its lines above say why")
            return False
        if not wait_port_free(REPLICA_HOST, r.port):
            say(f"{r.name}: port {r.port} is still in use {PORT_FREE_S:.0f} s after it stopped: not restarted")
            return False
        r.restarts.append(now)
        r.proc, r.pump = self._spawn_replica(r.index, r.port)
        r.started, r.starting, r.fails = time.monotonic(), True, 0
        say(f"{r.name}: restarted ({len(r.restarts)} of at most {RESTARTS} within {RESTART_WINDOW_S / 60:.0f} min), "
            f"pid {r.proc.pid}; back in rotation once it answers {HEALTH}")
        return True

    def check_once(self) -> None:
        changed = False
        live = [r for r in self.replicas if not r.exited]
        for r in live:
            code = r.proc.poll()
            if code is not None:
                changed = changed or r.up
                r.up = False
                say(f"{r.name} ({r.base}) stopped with exit code {code}; its students reconnect to the other replicas")
                r.exited = not self.restart_replica(r)
                continue
            if r.starting and not r.up and time.monotonic() - r.started > self.plan.start_timeout:
                say(f"{r.name} did not answer {HEALTH} within {self.plan.start_timeout:.0f} s of its restart: stopped")
                r.proc.kill()  # the next check finds it stopped, and restarts it while the limit allows
                continue
            if health_ok(r.base):
                if not r.up:
                    say(f"{r.name} ({r.base}) answers {HEALTH} again: back in rotation"
                        + (f" after {time.monotonic() - r.started:.1f} s" if r.starting else ""))
                    r.up, changed = True, True
                r.fails, r.starting = 0, False
            elif r.starting:
                continue  # still loading: not in rotation yet, nothing to count
            else:
                r.fails += 1
                if r.fails >= FAILS_TO_RESTART:  # running, but frozen: the next check finds it stopped and restarts it
                    say(f"{r.name} ({r.base}) failed {r.fails} health checks in a row while running (frozen): killed")
                    changed = changed or r.up
                    r.up = False
                    r.proc.kill()
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        r.proc.wait(timeout=5)
                    continue
                others_up = any(o.up for o in self.replicas if o is not r)
                if r.up and r.fails >= FAILS_TO_DOWN and others_up:  # never take the last one out
                    say(f"{r.name} ({r.base}) failed {r.fails} health checks in a row: out of rotation")
                    r.up, changed = False, True
        if changed:
            self.reload_nginx()

    def kill_nginx_group(self) -> None:
        """Kill whatever is left of nginx: its process group (the master, and workers that outlived it)."""
        if self.nginx is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.nginx.pid, signal.SIGKILL)  # its group's id is the master's pid (process_group=0)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.nginx.wait(timeout=5)

    def restart_nginx(self) -> bool:
        """nginx stopped: kill what is left of it, wait for the port, start it again (NGINX_TRIES attempts),
        the replicas running on. Whether it is back; False also when it stopped too often."""
        old = self.nginx
        assert old is not None
        say(f"nginx (pid {old.pid}) stopped with exit code {old.returncode}; restarting it (the replicas keep running)")
        now = time.monotonic()
        if _recent(self.nginx_restarts, now) >= RESTARTS:
            say(f"nginx stopped again after {RESTARTS} restarts within {RESTART_WINDOW_S / 60:.0f} min: stopping the hall")
            return False
        self.nginx_restarts.append(now)
        for attempt in range(1, NGINX_TRIES + 1):
            self.kill_nginx_group()  # an orphaned worker would keep the port and answer 502
            if not wait_port_free(self.plan.host, self.plan.port):
                say(f"port {self.plan.port} is still in use {PORT_FREE_S:.0f} s after nginx stopped "
                    f"(attempt {attempt} of {NGINX_TRIES})")
            else:
                try:
                    self.start_nginx()
                    say(f"nginx restarted (attempt {attempt} of {NGINX_TRIES})")
                    return True
                except UsageError as e:
                    say(f"nginx did not come back (attempt {attempt} of {NGINX_TRIES}): {e}")
            if self.stopping.wait(float(attempt)):
                return False
        self.kill_nginx_group()
        say(f"nginx could not be restarted after {NGINX_TRIES} attempts; stopping the replicas")
        return False

    def watch(self) -> int:
        say(f"serving {self.plan.url} — {self.plan.replicas} replica(s) behind nginx, sticky sessions; Ctrl-C stops all")
        while not self.stopping.wait(CHECK_EVERY_S):
            if self.nginx is not None and self.nginx.poll() is not None and not self.restart_nginx():
                return 1
            self.check_once()
            if all(r.exited for r in self.replicas):
                say("every replica has stopped; stopping nginx")
                return 1
        return 0

    # --- stopping ------------------------------------------------------------------------------------
    def stop(self) -> None:
        procs = ([("nginx", self.nginx)] if self.nginx is not None else []) + [(r.name, r.proc) for r in self.replicas]
        for _, proc in procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)  # nginx: fast shutdown (SIGQUIT would wait for open websockets)
        deadline = time.monotonic() + STOP_GRACE_S
        for name, proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                say(f"{name} (pid {proc.pid}) did not stop within {STOP_GRACE_S:.0f} s: killed")
                proc.kill()
                proc.wait()
        self.kill_nginx_group()  # a worker whose master died must not keep the port
        shutil.rmtree(self.prefix, ignore_errors=True)
        ports = [(self.plan.host, self.plan.port)] if self.nginx is not None else []
        ports += [(REPLICA_HOST, r.port) for r in self.replicas]
        busy = [port for host, port in ports if not wait_port_free(host, port, timeout=5)]
        if busy:
            say(f"stopped nginx and {len(self.replicas)} replica(s), but port(s) {', '.join(map(str, busy))} are still in "
                f"use (ss -ltnp shows by whom)")
        else:
            say(f"stopped nginx and {len(self.replicas)} replica(s); nothing left running (ports free)")

    def run(self) -> int:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, lambda *_: self.stopping.set())
        try:
            self.start_replicas()
            self.wait_healthy()
            self.start_nginx()
            return self.watch()
        except KeyboardInterrupt:
            return 130
        except UsageError as e:
            say(f"error: {e}")
            return 1
        finally:
            self.stop()


def check_offer() -> None:
    """The offered-models setting (XRAY_MODELS / XRAY_ALLOW_LOCAL), checked once for every replica by the
    project's own checker, in a child process (it imports the model code, which this launcher does not)."""
    out = subprocess.run([sys.executable, "-m", "core.web.offer"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        lines = (out.stderr or out.stdout).strip().splitlines()
        raise UsageError(lines[-1] if lines else f"the model setting check failed (exit code {out.returncode})")
    for line in out.stdout.strip().splitlines():
        say(line)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        p = plan(argv)
        nginx = find_nginx()
        if nginx is None:
            raise UsageError("nginx is not installed; `make serve` installs it (apt-get install nginx-light)")
        check_offer()  # a malformed XRAY_MODELS stops the launch before any replica starts
    except UsageError as e:
        print(f"make serve: error: {e}", file=sys.stderr)
        return 2
    return Launcher(p, nginx).run()


if __name__ == "__main__":
    raise SystemExit(main())
