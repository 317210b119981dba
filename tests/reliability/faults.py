"""A fault-injecting TCP proxy between a Redis client and a real redis-server, loopback only.

``FaultProxy(redis_port)`` listens on a free 127.0.0.1 port (``proxy.url``). For every
client connection it opens one to Redis and parses both directions: requests (RESP arrays
of bulk strings as redis-py sends them; a pipeline is several in one packet, a command may
span packets) and replies (RESP2, and RESP3, which redis-py 8 asks for with ``HELLO 3``),
and pairs each reply with its request first-in first-out.

Rules decide what happens to matching commands::

    rule = proxy.add_rule(script("claim"), drop_reply())           # the next claim's reply
    rule = proxy.add_rule(carries_acks, error(BUSY), nth=2, times=3)

A rule counts every command it matches (``rule.matched``, over all connections) and
applies its action to matches number ``nth`` .. ``nth + times - 1`` (``times=None``: every
one from ``nth`` on); ``rule.applied`` counts those, ``rule.replies`` keeps the first line
of each reply to a matched command, from Redis or injected (``b"-BUSY ..."``, ``b"*5"``),
and ``rule.met`` how many ``delay``/``hold_then_cut(until=...)`` holds saw their condition
come true. ``proxy.holding`` is the number of replies being held right now. When several
rules match a command, each counts it and the first one (in order of ``add_rule``) whose
window covers it acts.

Actions (see each function): :func:`observe` (forward, count), :func:`drop_reply` (Redis
ran it, the reply is lost with the connection), :func:`cut` (not forwarded: Redis never
ran it), :func:`delay` (the reply arrives late), :func:`hold_then_cut` (late, then lost),
:func:`error` (answered by the proxy with an error reply, not forwarded: Redis never ran
it; in a pipeline the injected reply takes the command's place among the real ones) and
:func:`before` (run a callable, e.g. a real ``SCRIPT FLUSH``, then forward).

Matchers are ``Callable[[list[bytes]], bool]`` over the command's words:
:func:`command`, :func:`script` (an EVALSHA of one django-delayq script, by SHA1), and the
worker-level ones :func:`a_claim`, :func:`carries_acks`, :func:`claims_jobs`,
:func:`schedules`. Those, and :func:`script_sha`, are the ONLY places that know
django_delayq's script names and argument layout: adapt them when scripts are renamed or
their ARGV changes.
"""

from __future__ import annotations

import contextlib
import functools
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from tests.reliability.harness import HOST, free_port

Matcher = Callable[[list[bytes]], bool]

BUSY = b"-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."
NOSCRIPT = b"-NOSCRIPT No matching script. Please use EVAL."
READONLY = b"-READONLY You can't write against a read only replica."
WRONGTYPE = b"-WRONGTYPE Operation against a key holding the wrong kind of value"


# -- django-delayq's scripts: the one place that knows their names and ARGV -----------------


@functools.cache
def script_sha(name: str) -> str:
    """SHA1 of the text django-delayq sends for script ``name`` (what EVALSHA carries)."""
    from django_delayq.storage.scripts import script

    return script(name).sha


def script_argv(cmd: list[bytes]) -> list[bytes]:
    """The ARGV of an EVALSHA/EVAL command (the words after its keys)."""
    return cmd[3 + int(cmd[2]) :]


def a_claim(cmd: list[bytes]) -> bool:
    """A claim of the worker's: claim.lua, or claim_plain.lua (a queue plain for the jobs it
    claims; the same ARGV)."""
    return script("claim")(cmd) or script("claim_plain")(cmd)


def carries_acks(cmd: list[bytes]) -> bool:
    """The worker's round trip that acknowledges finished jobs: the acks of a queue ride in
    its claim (claim.lua or claim_plain.lua, ARGV[8..]: id, token, info, attempt quadruples
    after the five claim arguments and the two of finished jobs' keeping); ack.lua takes
    them alone. A claim without acks has exactly seven ARGV."""
    if script("ack")(cmd):
        return True
    return a_claim(cmd) and len(script_argv(cmd)) > 7


def claims_jobs(cmd: list[bytes]) -> bool:
    """A claim that may take jobs (claim.lua or claim_plain.lua with ARGV[2], the limit,
    > 0)."""
    return a_claim(cmd) and int(script_argv(cmd)[1]) > 0


def schedules(cmd: list[bytes]) -> bool:
    """schedule() of one job (schedule.lua, or schedule_plain.lua for a plain job;
    schedule_many() uses schedule_many.lua)."""
    return script("schedule")(cmd) or script("schedule_plain")(cmd)


# -- matchers -------------------------------------------------------------------------------


def command(name: bytes | str) -> Matcher:
    """Commands named ``name`` (case-insensitive): ``command(b"EVALSHA")``."""
    wanted = (name.encode() if isinstance(name, str) else name).upper()
    return lambda cmd: bool(cmd) and cmd[0].upper() == wanted


def script(name: str) -> Matcher:
    """An EVALSHA of django-delayq's script ``name`` ("claim", "ack", "schedule"...)."""
    sha = script_sha(name).encode()
    return lambda cmd: len(cmd) >= 3 and cmd[0].upper() == b"EVALSHA" and cmd[1].lower() == sha


# -- actions --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Action:
    kind: str  # observe | drop | cut | delay | hold | error | before
    seconds: float = 0.0
    reply: bytes = b""
    until: Callable[[], object] | None = None
    hook: Callable[[], object] | None = None


def observe() -> Action:
    """Forward the command and its reply untouched (the rule only counts)."""
    return Action("observe")


def drop_reply() -> Action:
    """Forward the command (Redis runs it), then cut the client's connection instead of
    passing the reply on: a network failure after Redis executed the command."""
    return Action("drop")


def cut() -> Action:
    """Cut the client's connection instead of forwarding the command: Redis never runs it
    (commands sent before it on the connection were forwarded; their replies may be lost)."""
    return Action("cut")


def delay(seconds: float, until: Callable[[], object] | None = None) -> Action:
    """Forward the command; pass its reply on ``seconds`` later, or as soon as ``until()``
    is true (polled); replies behind it on the connection wait."""
    return Action("delay", seconds=seconds, until=until)


def hold_then_cut(seconds: float, until: Callable[[], object] | None = None) -> Action:
    """Forward the command (Redis runs it); hold the reply until ``until()`` is true (polled)
    or ``seconds`` passed, then cut the client's connection: the reply is lost late."""
    return Action("hold", seconds=seconds, until=until)


def error(reply: bytes) -> Action:
    """Answer with the error ``reply`` (e.g. :data:`BUSY`) without forwarding the command:
    Redis never runs it. The reply keeps the command's place in the connection's order."""
    line = reply if reply.startswith(b"-") else b"-" + reply
    return Action("error", reply=line.rstrip(b"\r\n") + b"\r\n")


def before(hook: Callable[[], object]) -> Action:
    """Call ``hook()`` (e.g. a real SCRIPT FLUSH on another connection), then forward the
    command; commands ahead of it in the same packet are forwarded first."""
    return Action("before", hook=hook)


@dataclass
class Rule:
    match: Matcher
    action: Action
    nth: int = 1
    times: int | None = 1
    matched: int = 0
    applied: int = 0
    met: int = 0
    replies: list[bytes] = field(default_factory=list)

    def covers(self, ordinal: int) -> bool:
        return ordinal >= self.nth and (self.times is None or ordinal < self.nth + self.times)


# -- RESP framing -----------------------------------------------------------------------------

_SIMPLE = frozenset(b"+-:_,#(")  # one line: RESP2 + - :, RESP3 null, double, bool, big number
_BULK = frozenset(b"$=!")  # length-prefixed: bulk string, verbatim string, bulk error
_AGGREGATE = frozenset(b"*~>%|")  # array, set, push, map (pairs), attribute (pairs + value)


class ProtocolError(Exception):
    pass


class _Framer:
    """Cuts a byte stream into complete RESP values, resuming where the last chunk stopped
    (a large reply arriving in many packets is scanned once)."""

    def __init__(self, requests: bool) -> None:
        self.requests = requests  # requests may also be inline commands ("PING\r\n")
        self.buf = bytearray()
        self.start = 0  # where the value being scanned begins
        self.pos = 0  # how far it is scanned
        self.open: list[int] = []  # elements still expected by each open aggregate

    def feed(self, data: bytes) -> list[bytes]:
        self.buf += data
        values = []
        while (end := self._scan()) is not None:
            values.append(bytes(self.buf[self.start : end]))
            self.start = end
        if self.start:
            del self.buf[: self.start]
            self.pos -= self.start
            self.start = 0
        return values

    def _scan(self) -> int | None:
        """The end of the value starting at ``start`` once it is complete, else None."""
        buf = self.buf
        while True:
            eol = buf.find(b"\r\n", self.pos)
            if eol < 0:
                return None
            kind = buf[self.pos] if eol > self.pos else None
            after = eol + 2
            if kind in _SIMPLE:
                pass
            elif kind in _BULK:
                size = int(buf[self.pos + 1 : eol])
                if size >= 0:
                    if len(buf) < after + size + 2:
                        return None
                    after += size + 2
            elif kind in _AGGREGATE:
                count = int(buf[self.pos + 1 : eol])
                if kind in b"%|" and count > 0:
                    count *= 2
                if kind == ord("|"):
                    count += 1  # an attribute prefixes the value it describes
                if count > 0:
                    self.open.append(count)
                    self.pos = after
                    continue
            elif self.requests and not self.open and self.pos == self.start:
                pass  # an inline command: the whole line
            else:
                raise ProtocolError(f"unexpected RESP line {bytes(buf[self.pos : eol])[:80]!r}")
            self.pos = after
            while self.open:  # one element done: close the aggregates it completes
                self.open[-1] -= 1
                if self.open[-1]:
                    break
                self.open.pop()
            else:
                return self.pos


def parse_command(raw: bytes) -> list[bytes]:
    """The words of one complete request (a RESP array of bulk strings, or inline)."""
    if not raw.startswith(b"*"):
        return raw.split()
    eol = raw.index(b"\r\n")
    words, pos = [], eol + 2
    for _ in range(int(raw[1:eol])):
        eol = raw.index(b"\r\n", pos)
        size = int(raw[pos + 1 : eol])
        words.append(raw[eol + 2 : eol + 2 + size])
        pos = eol + 2 + size + 2
    return words


# -- the proxy ------------------------------------------------------------------------------


@dataclass
class _Awaited:
    """A request of one connection whose reply the client has not received yet."""

    cmd: list[bytes]
    rule: Rule | None  # the rule acting on it
    matched: list[Rule]  # every rule that matched it (they all see its reply)
    injected: bytes | None = None  # the reply, when the proxy answers instead of Redis


class _Link:
    """One client connection and its connection to Redis, with a thread each way."""

    def __init__(self, proxy: FaultProxy, client: socket.socket, server: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.server = server
        self.awaited: deque[_Awaited] = deque()
        self.lock = threading.Lock()  # guards awaited and writes to the client
        self.closed = False
        for target in (self._requests, self._replies):
            threading.Thread(target=target, daemon=True, name="fault-proxy").start()

    def close(self) -> None:
        self.closed = True
        for sock in (self.client, self.server):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    def _flush_injected(self) -> None:
        """Send injected replies now at the head of the line (call with the lock held)."""
        while self.awaited and self.awaited[0].injected is not None:
            awaited = self.awaited.popleft()
            self.proxy._replied(awaited.matched, awaited.injected)
            self.client.sendall(awaited.injected)

    def _requests(self) -> None:
        framer = _Framer(requests=True)
        try:
            while data := self.client.recv(65536):
                out = bytearray()
                for raw in framer.feed(data):
                    cmd = parse_command(raw)
                    rule, matched = self.proxy._decide(cmd)
                    kind = rule.action.kind if rule else "observe"
                    if kind == "cut":
                        self.server.sendall(out)
                        self.close()
                        return
                    if kind == "before":
                        self.server.sendall(out)
                        out.clear()
                        self.proxy._call(rule.action.hook)
                    injected = rule.action.reply if kind == "error" else None
                    with self.lock:
                        self.awaited.append(_Awaited(cmd, rule, matched, injected))
                    if injected is None:
                        out += raw
                self.server.sendall(out)
                with self.lock:
                    self._flush_injected()
        except OSError:
            pass
        except ProtocolError as exc:
            self.proxy.errors.append(f"request: {exc}")
        self.close()

    def _replies(self) -> None:
        framer = _Framer(requests=False)
        try:
            while data := self.server.recv(65536):
                for raw in framer.feed(data):
                    if not self._reply(raw):
                        self.close()
                        return
        except OSError:
            pass
        except ProtocolError as exc:
            self.proxy.errors.append(f"reply: {exc}")
        self.close()

    def _reply(self, raw: bytes) -> bool:
        """Pass one reply from Redis on (or not); False when the connection is to be cut."""
        if raw.startswith(b">"):  # RESP3 push: out of band, answers no request
            with self.lock:
                self.client.sendall(raw)
            return True
        with self.lock:
            self._flush_injected()
            if not self.awaited:
                raise ProtocolError("a reply from Redis with no request waiting for it")
            rule, matched = self.awaited[0].rule, self.awaited[0].matched
        action = rule.action if rule else None
        self.proxy._replied(matched, raw)
        if action is not None and action.kind == "drop":
            return False
        if action is not None and action.kind in ("delay", "hold"):
            with self.proxy._counting():
                deadline = time.monotonic() + action.seconds
                while time.monotonic() < deadline and not self.closed:
                    if action.until is not None and action.until():
                        self.proxy._met(rule)
                        break
                    time.sleep(0.02)
            if action.kind == "hold":
                return False
        with self.lock:
            self.client.sendall(raw)
            self.awaited.popleft()
            self._flush_injected()
        return True


class FaultProxy:
    """See the module docstring. ``close()`` stops it and cuts every connection."""

    def __init__(self, target_port: int, host: str = HOST, db: int = 0) -> None:
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError(f"FaultProxy only forwards to loopback, not {host!r}")
        self.target = (host, target_port)
        self.db = db  # the database of url (the proxy forwards SELECT as any command)
        self.port = free_port()
        self.rules: list[Rule] = []
        self.connections = 0  # client connections accepted so far
        self.holding = 0  # replies being delayed or held right now
        self.errors: list[str] = []  # protocol errors and exceptions of before() hooks
        self._lock = threading.Lock()
        self._links: list[_Link] = []
        self._listener = socket.create_server((HOST, self.port))
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="fault-proxy-accept").start()

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/{self.db}"

    def add_rule(
        self, match: Matcher, action: Action | None = None, nth: int = 1, times: int | None = 1
    ) -> Rule:
        """Apply ``action`` (default :func:`observe`) to matches ``nth`` .. ``nth+times-1``
        of ``match`` counted from now, over all connections."""
        if nth < 1 or (times is not None and times < 1):
            raise ValueError(f"nth and times must be >= 1 (times may be None), got {nth}, {times}")
        rule = Rule(match, action or observe(), nth, times)
        with self._lock:
            self.rules.append(rule)
        return rule

    def cut_all(self) -> None:
        """Cut every open client connection (clients reconnect through the proxy)."""
        with self._lock:
            links, self._links = self._links, []
        for link in links:
            link.close()

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread (Linux)
        with contextlib.suppress(OSError):
            self._listener.close()
        self.cut_all()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- used by the connection threads --

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self.connections += 1
                self._links = [link for link in self._links if not link.closed]
                self._links.append(_Link(self, client, server))

    def _decide(self, cmd: list[bytes]) -> tuple[Rule | None, list[Rule]]:
        """The rule acting on ``cmd`` (or None) and every rule matching it."""
        chosen, matched = None, []
        with self._lock:
            for rule in self.rules:
                if rule.match(cmd):
                    matched.append(rule)
                    rule.matched += 1
                    if chosen is None and rule.covers(rule.matched):
                        chosen = rule
                        rule.applied += 1
        return chosen, matched

    def _replied(self, rules: list[Rule], raw: bytes) -> None:
        if rules:
            with self._lock:
                for rule in rules:
                    rule.replies.append(raw[: raw.find(b"\r\n")])

    def _call(self, hook: Callable[[], object] | None) -> None:
        try:
            if hook is not None:
                hook()
        except Exception as exc:  # reported, never fatal to the connection
            self.errors.append(f"before() hook {hook!r} raised {exc!r}")

    def _met(self, rule: Rule) -> None:
        with self._lock:
            rule.met += 1

    @contextlib.contextmanager
    def _counting(self) -> Iterator[None]:
        with self._lock:
            self.holding += 1
        try:
            yield
        finally:
            with self._lock:
                self.holding -= 1
