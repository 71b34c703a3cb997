"""A fault-injecting HTTP/1.1 forwarding proxy for the `s3` backend's tests.

Sits between the gateway (or any S3 client) and the S3 server on loopback:

    proxy = FaultProxy(("127.0.0.1", moto_port)).start()
    endpoint = proxy.endpoint                     # give this to the gateway
    proxy.fail(503, times=5)                      # next 5 requests: 503 SlowDown
    proxy.fail(500, method="PUT", path=r"partNumber=")   # until cleared: every UploadPart -> 500
    proxy.stall(30, times=1, method="GET")        # next GET: no answer for 30 s, then close
    proxy.reset(times=2)                          # next 2 requests: TCP RST, no response
    proxy.reset(times=1, method="PUT", after_forward=True)  # PUT applied, response lost
    proxy.truncate(times=1, method="GET")         # response headers + half the body, then RST
    proxy.clear()                                 # drop every rule (and release stalls)
    proxy.strip_header("If-None-Match")           # forward requests without it (a store
                                                  # that ignores the precondition: Garage)
    proxy.counts["PUT"], proxy.injected["503"], proxy.log[-1]

Rules are checked in the order they were added; the first matching rule with shots
left takes the request (`times=None`: until cleared). Requests that match no rule are
forwarded unchanged. Every client connection gets its own upstream connection, both kept
alive across requests as the client wishes. Request bodies may be Content-Length,
chunked or absent; `Expect: 100-continue` is answered by the proxy itself (or, for a
faulted request, answered with the final error status and the connection closed, as
RFC 9110 §10.1.1 permits). Responses are streamed (Content-Length, chunked, or until
close); HEAD, 1xx, 204 and 304 responses have no body.

Stdlib only; one thread per client connection.
"""

from __future__ import annotations

import collections
import re
import socket
import struct
import threading
import time
import uuid
from typing import Optional

_REASONS = {500: "Internal Server Error", 501: "Not Implemented", 502: "Bad Gateway",
            503: "Service Unavailable", 504: "Gateway Timeout", 429: "Too Many Requests",
            403: "Forbidden", 404: "Not Found", 400: "Bad Request"}
_S3_CODES = {500: ("InternalError", "We encountered an internal error. Please try again."),
             503: ("SlowDown", "Please reduce your request rate."),
             502: ("BadGateway", "Bad gateway."),
             504: ("GatewayTimeout", "Gateway timeout."),
             429: ("SlowDown", "Please reduce your request rate."),
             403: ("AccessDenied", "Access Denied"),
             404: ("NoSuchKey", "The specified key does not exist."),
             400: ("InvalidRequest", "Invalid request.")}


class _Closed(Exception):
    """The peer closed the connection (or it broke)."""


class Rule:
    def __init__(self, action: str, times: Optional[int], method: Optional[str], path: Optional[str], **kw):
        self.action = action
        self.left = times
        self.method = method.upper() if method else None
        self.path = re.compile(path) if path else None
        self.kw = kw
        self.hits = 0

    def matches(self, method: str, target: str) -> bool:
        if self.left is not None and self.left <= 0:
            return False
        if self.method and self.method != method:
            return False
        if self.path and not self.path.search(target):
            return False
        return True

    def __repr__(self) -> str:
        return f"Rule({self.action}, left={self.left}, method={self.method}, path={self.path and self.path.pattern}, {self.kw})"


class _Conn:
    """A buffered reader over a socket (readline / read exactly / read some)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buf = bytearray()

    def _fill(self) -> None:
        try:
            chunk = self.sock.recv(1 << 16)
        except OSError as e:
            raise _Closed(str(e))
        if not chunk:
            raise _Closed("eof")
        self.buf += chunk

    def readline(self, limit: int = 65536) -> bytes:
        while True:
            i = self.buf.find(b"\n")
            if i >= 0:
                line = bytes(self.buf[:i + 1])
                del self.buf[:i + 1]
                return line
            if len(self.buf) > limit:
                raise _Closed("line too long")
            self._fill()

    def read_exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def read_some(self, maxn: int) -> bytes:
        if not self.buf:
            self._fill()
        out = bytes(self.buf[:maxn])
        del self.buf[:maxn]
        return out

    def read_head(self) -> tuple:
        """Start line and headers: (start_line, [(name, value)], raw bytes)."""
        line = self.readline()
        while line in (b"\r\n", b"\n"):  # tolerate stray CRLF between messages
            line = self.readline()
        raw = [line]
        headers = []
        while True:
            h = self.readline()
            raw.append(h)
            if h in (b"\r\n", b"\n"):
                break
            name, _, value = h.decode("latin-1").partition(":")
            headers.append((name.strip(), value.strip()))
        return line.decode("latin-1").rstrip("\r\n"), headers, b"".join(raw)


def _hget(headers, name: str) -> Optional[str]:
    name = name.lower()
    for k, v in headers:
        if k.lower() == name:
            return v
    return None


def _is_chunked(headers) -> bool:
    te = _hget(headers, "Transfer-Encoding")
    return bool(te) and te.split(",")[-1].strip().lower() == "chunked"


def _relay_chunked(src: _Conn, sink) -> None:
    """Copies one chunked body (chunks, last chunk, trailers) verbatim to sink(bytes)."""
    while True:
        size_line = src.readline()
        sink(size_line)
        size = int(size_line.split(b";")[0].strip() or b"0", 16)
        if size == 0:
            while True:  # trailers up to the empty line
                t = src.readline()
                sink(t)
                if t in (b"\r\n", b"\n"):
                    return
        remaining = size + 2  # data + CRLF
        while remaining:
            piece = src.read_some(min(remaining, 1 << 16))
            remaining -= len(piece)
            sink(piece)


def _relay_length(src: _Conn, n: int, sink) -> None:
    while n:
        piece = src.read_some(min(n, 1 << 16))
        n -= len(piece)
        sink(piece)


def _rst_close(sock: socket.socket) -> None:
    """Close with an RST (SO_LINGER 0) instead of a FIN."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class FaultProxy:
    def __init__(self, upstream: tuple, host: str = "127.0.0.1", port: int = 0):
        self.upstream = upstream
        self.lock = threading.Lock()
        self.rules: list = []
        self.counts: collections.Counter = collections.Counter()     # requests seen, by method
        self.injected: collections.Counter = collections.Counter()   # faults done, by action/status
        self.log: collections.deque = collections.deque(maxlen=10000)  # (time, method, target, outcome)
        self.in_flight = 0
        self.connections = 0
        self.stripped: set = set()          # header names (lower case) never forwarded
        self._release = threading.Event()   # set: wakes every stalled request
        self._stopping = threading.Event()
        self._socks: set = set()
        self._threads: list = []
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind((host, port))
        self.lsock.listen(128)
        self.host, self.port = self.lsock.getsockname()
        self.endpoint = f"http://{self.host}:{self.port}"
        self._acceptor: Optional[threading.Thread] = None

    # -- control ---------------------------------------------------------------------
    def _add(self, rule: Rule) -> Rule:
        with self.lock:
            self.rules.append(rule)
        return rule

    def fail(self, status: int = 503, times: Optional[int] = 1, method: Optional[str] = None,
             path: Optional[str] = None, code: Optional[str] = None) -> Rule:
        """Answer matching requests with `status` and an S3 XML error body (the request
        is not forwarded). `times=None`: until cleared."""
        return self._add(Rule("status", times, method, path, status=status, code=code))

    def stall(self, seconds: float, times: Optional[int] = 1, method: Optional[str] = None,
              path: Optional[str] = None, then: str = "close") -> Rule:
        """Hold matching requests without an answer for `seconds` (or until `release()` /
        `clear()`), then `then`: "close" (drop the connection, the request never reached
        the server) or "forward" (a slow server: forward and answer normally)."""
        assert then in ("close", "forward")
        return self._add(Rule("stall", times, method, path, seconds=seconds, then=then))

    def reset(self, times: Optional[int] = 1, method: Optional[str] = None, path: Optional[str] = None,
              rst: bool = True, after_forward: bool = False) -> Rule:
        """Close the client connection without a response: with an RST (SO_LINGER 0) or,
        `rst=False`, a FIN. `after_forward=True`: the request is forwarded and applied
        by the server first, only its response is lost."""
        return self._add(Rule("reset", times, method, path, rst=rst, after_forward=after_forward))

    def truncate(self, times: Optional[int] = 1, method: Optional[str] = None, path: Optional[str] = None,
                 fraction: float = 0.5) -> Rule:
        """Forward, then send the response headers and only `fraction` of the body, then RST."""
        return self._add(Rule("truncate", times, method, path, fraction=fraction))

    def strip_header(self, name: str) -> None:
        """Forward every request without header `name` (until the proxy stops; `clear()`
        keeps it): e.g. If-None-Match, to make a server that honours it behave like one
        that ignores it. Counted in `injected["strip"]`."""
        with self.lock:
            self.stripped.add(name.lower())

    def clear(self) -> None:
        """Drop all rules and release stalled requests."""
        with self.lock:
            self.rules.clear()
        self.release()

    def release(self) -> None:
        """Wake every currently stalled request (it then does its `then`)."""
        ev = self._release
        self._release = threading.Event()
        ev.set()

    def reset_counts(self) -> None:
        with self.lock:
            self.counts.clear()
            self.injected.clear()

    def wait_for(self, pred, timeout: float = 10.0, interval: float = 0.02) -> bool:
        """Polls pred(self) until true or timeout; returns the last value."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                ok = pred(self)
            if ok or time.monotonic() >= deadline:
                return bool(ok)
            time.sleep(interval)

    def _pick(self, method: str, target: str) -> Optional[Rule]:
        with self.lock:
            self.counts[method] += 1
            for r in self.rules:
                if r.matches(method, target):
                    if r.left is not None:
                        r.left -= 1
                    r.hits += 1
                    key = r.action if r.action != "status" else str(r.kw["status"])
                    self.injected[key] += 1
                    return r
            return None

    def _note(self, method: str, target: str, outcome: str) -> None:
        self.log.append((time.monotonic(), method, target, outcome))

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> "FaultProxy":
        self._acceptor = threading.Thread(target=self._accept_loop, name="s3proxy-accept", daemon=True)
        self._acceptor.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self.clear()
        try:
            self.lsock.shutdown(socket.SHUT_RDWR)   # wakes the blocked accept()
        except OSError:
            pass
        try:
            self.lsock.close()
        except OSError:
            pass
        with self.lock:
            socks = list(self._socks)
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                s.close()
            except OSError:
                pass
        if self._acceptor:
            self._acceptor.join(5)
        for t in list(self._threads):
            t.join(5)

    def __enter__(self):
        return self.start()

    def __exit__(self, *a):
        self.stop()

    def _track(self, s: socket.socket) -> None:
        with self.lock:
            self._socks.add(s)

    def _untrack(self, s: Optional[socket.socket]) -> None:
        if s is None:
            return
        with self.lock:
            self._socks.discard(s)
        try:
            s.close()
        except OSError:
            pass

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                cs, _ = self.lsock.accept()
            except OSError:
                return
            cs.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._track(cs)
            with self.lock:
                self.connections += 1
            t = threading.Thread(target=self._serve, args=(cs,), name="s3proxy-conn", daemon=True)
            self._threads = [x for x in self._threads if x.is_alive()]
            self._threads.append(t)
            t.start()

    # -- one client connection -------------------------------------------------------
    def _serve(self, cs: socket.socket) -> None:
        client = _Conn(cs)
        up: Optional[socket.socket] = None
        upc: Optional[_Conn] = None
        try:
            while not self._stopping.is_set():
                try:
                    start, headers, _raw = client.read_head()
                except _Closed:
                    return
                parts = start.split(" ")
                if len(parts) != 3:
                    self._send_error(cs, 400, close=True)
                    return
                method, target, version = parts
                conn_hdr = (_hget(headers, "Connection") or "").lower()
                keep = ("close" not in conn_hdr) and (version != "HTTP/1.0" or "keep-alive" in conn_hdr)
                expect = (_hget(headers, "Expect") or "").lower() == "100-continue"
                rule = self._pick(method, target)
                with self.lock:
                    self.in_flight += 1
                try:
                    if rule is not None and rule.action in ("status", "stall", "reset") and not (
                            rule.action == "reset" and rule.kw["after_forward"]) and not (
                            rule.action == "stall" and rule.kw["then"] == "forward"):
                        # Faults decided before the body is read.
                        if rule.action == "reset" and not expect:
                            # drop the request mid-way: read nothing more, send nothing
                            self._note(method, target, "reset")
                            _rst_close(cs) if rule.kw["rst"] else cs.close()
                            return
                        if expect:
                            # RFC 9110: a final status instead of 100 Continue; the client
                            # may or may not send the body, so the connection is closed after.
                            keep = False
                        else:
                            self._read_body(client, headers, lambda b: None)
                        if rule.action == "stall":
                            self._note(method, target, f"stall {rule.kw['seconds']}s")
                            self._stall(rule.kw["seconds"])
                            self._note(method, target, "stall-close")
                            _rst_close(cs)
                            return
                        if rule.action == "reset":
                            self._note(method, target, "reset")
                            _rst_close(cs) if rule.kw["rst"] else cs.close()
                            return
                        self._note(method, target, str(rule.kw["status"]))
                        self._send_error(cs, rule.kw["status"], code=rule.kw.get("code"),
                                         resource=target.split("?")[0], close=not keep)
                        if not keep:
                            return
                        continue

                    # Forwarded requests: body read from the client and sent upstream.
                    if expect:
                        cs.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                    if rule is not None and rule.action == "stall":  # then == "forward"
                        self._note(method, target, f"stall {rule.kw['seconds']}s then forward")
                        self._stall(rule.kw["seconds"])
                    with self.lock:
                        drop = {"expect"} | self.stripped
                        if any(k.lower() in self.stripped for k, _ in headers):
                            self.injected["strip"] += 1
                    fwd_headers = [(k, v) for k, v in headers if k.lower() not in drop]
                    head = [f"{method} {target} {version}\r\n".encode("latin-1")]
                    head += [f"{k}: {v}\r\n".encode("latin-1") for k, v in fwd_headers]
                    head.append(b"\r\n")
                    body = bytearray()
                    self._read_body(client, headers, body.extend)
                    request = b"".join(head) + bytes(body)
                    for attempt in range(2):
                        if up is None:
                            up = socket.create_connection(self.upstream, timeout=120)
                            up.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                            self._track(up)
                            upc = _Conn(up)
                        try:
                            up.sendall(request)
                            rstart, rheaders, rraw = upc.read_head()
                            while rstart.split(" ")[1].startswith("1"):  # interim responses
                                rstart, rheaders, rraw = upc.read_head()
                            break
                        except (_Closed, OSError):
                            # a kept-alive upstream connection closed under us: one retry on a
                            # fresh one (the server did not answer, so it did not apply it)
                            self._untrack(up)
                            up, upc = None, None
                            if attempt:
                                raise
                    status = int(rstart.split(" ")[1])
                    if rule is not None and rule.action == "reset":  # after_forward
                        self._drain_response(upc, method, status, rheaders)
                        self._note(method, target, f"{status} then reset")
                        _rst_close(cs) if rule.kw["rst"] else cs.close()
                        return
                    if rule is not None and rule.action == "truncate":
                        self._note(method, target, f"{status} truncated")
                        cs.sendall(rraw)
                        n = int(_hget(rheaders, "Content-Length") or 0)
                        _relay_length(upc, int(n * rule.kw["fraction"]), cs.sendall)
                        self._untrack(up)
                        up, upc = None, None
                        _rst_close(cs)
                        return
                    self._note(method, target, str(status))
                    # Connection is hop-by-hop: the client connection stays alive as the
                    # client asked even when the server closes its side after each
                    # response (moto's werkzeug server always does), as long as the body
                    # is delimited; the next request then opens a new upstream connection.
                    delimited = (method == "HEAD" or status in (204, 304) or _is_chunked(rheaders)
                                 or _hget(rheaders, "Content-Length") is not None)
                    keep = keep and delimited
                    out = [rstart.encode("latin-1") + b"\r\n"]
                    out += [f"{k}: {v}\r\n".encode("latin-1") for k, v in rheaders
                            if k.lower() not in ("connection", "keep-alive")]
                    out.append(b"Connection: keep-alive\r\n\r\n" if keep else b"Connection: close\r\n\r\n")
                    cs.sendall(b"".join(out))
                    up_close = self._relay_response(upc, method, status, rheaders, cs.sendall)
                    if up_close:
                        self._untrack(up)
                        up, upc = None, None
                    if not keep:
                        return
                finally:
                    with self.lock:
                        self.in_flight -= 1
        except (_Closed, OSError):
            return
        finally:
            self._untrack(up)
            self._untrack(cs)

    def _stall(self, seconds: float) -> None:
        ev = self._release
        ev.wait(seconds)

    @staticmethod
    def _read_body(client: _Conn, headers, sink) -> None:
        if _is_chunked(headers):
            _relay_chunked(client, sink)
        else:
            n = int(_hget(headers, "Content-Length") or 0)
            _relay_length(client, n, sink)

    @staticmethod
    def _relay_response(upc: _Conn, method: str, status: int, headers, sink):
        """Streams the response body; returns False (upstream reusable), True (upstream
        said close) or "eof" (body delimited by close: the client must be closed too)."""
        close = "close" in (_hget(headers, "Connection") or "").lower()
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return close
        if _is_chunked(headers):
            _relay_chunked(upc, sink)
            return close
        cl = _hget(headers, "Content-Length")
        if cl is not None:
            _relay_length(upc, int(cl), sink)
            return close
        try:
            while True:
                sink(upc.read_some(1 << 16))
        except _Closed:
            return "eof"

    def _drain_response(self, upc: _Conn, method: str, status: int, headers) -> None:
        self._relay_response(upc, method, status, headers, lambda b: None)

    @staticmethod
    def _send_error(cs: socket.socket, status: int, code: Optional[str] = None, resource: str = "/",
                    close: bool = False) -> None:
        dcode, msg = _S3_CODES.get(status, ("InternalError", "Injected error."))
        rid = uuid.uuid4().hex[:16].upper()
        body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code or dcode}</Code>'
                f"<Message>{msg}</Message><Resource>{resource}</Resource>"
                f"<RequestId>{rid}</RequestId></Error>").encode()
        head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
                f"Content-Type: application/xml\r\nContent-Length: {len(body)}\r\n"
                f"x-amz-request-id: {rid}\r\n"
                + ("Retry-After: 1\r\n" if status == 503 else "")
                + ("Connection: close\r\n" if close else "")
                + "\r\n").encode()
        cs.sendall(head + body)
