"""The fault proxy (s3proxy.py) against the real S3 server, with boto3 and raw HTTP.

No gateway needed: these prove the proxy forwards faithfully (keep-alive, Content-Length
and chunked bodies, Expect: 100-continue, streamed large responses, HEAD) and injects
exactly the faults it is told to, so the gateway fault tests in test_s3.py can trust it.
"""

import http.client
import os
import socket
import threading
import time

import pytest

if os.environ.get("E2E_NO_S3") == "1":
    pytest.skip("E2E_NO_S3=1: no S3 server on this machine", allow_module_level=True)

from botocore.exceptions import ClientError, ConnectionClosedError, ReadTimeoutError, ResponseStreamingError
from botocore.exceptions import EndpointConnectionError

from s3proxy import FaultProxy
from s3server import client as s3client, get_bytes


@pytest.fixture
def proxy(s3_server):
    p = FaultProxy((s3_server.host, s3_server.port)).start()
    yield p
    p.stop()


def via(proxy, **kw):
    kw.setdefault("max_attempts", 1)
    return s3client(proxy.endpoint, **kw)


def test_forwards_everything_faithfully_over_kept_alive_connections(proxy, s3_bucket, s3):
    c = via(proxy)
    small = os.urandom(1000)
    big = os.urandom(6 << 20)          # > 1 MiB: botocore sends Expect: 100-continue
    c.put_object(Bucket=s3_bucket, Key="a/small", Body=small, Metadata={"mode": "100644", "uid": "7"})
    c.put_object(Bucket=s3_bucket, Key="a/big", Body=big)
    assert get_bytes(s3, s3_bucket, "a/big") == big        # as stored, read directly
    assert get_bytes(c, s3_bucket, "a/small") == small     # and through the proxy
    assert get_bytes(c, s3_bucket, "a/big") == big
    r = c.get_object(Bucket=s3_bucket, Key="a/big", Range="bytes=1000-1999")
    assert r["Body"].read() == big[1000:2000]
    h = c.head_object(Bucket=s3_bucket, Key="a/small")
    assert (h["ContentLength"], h["Metadata"]) == (1000, {"mode": "100644", "uid": "7"})
    # multipart: 5 MiB part + a short last part
    up = c.create_multipart_upload(Bucket=s3_bucket, Key="mp")["UploadId"]
    parts = []
    for i, piece in enumerate((big[:5 << 20], big[5 << 20:])):
        e = c.upload_part(Bucket=s3_bucket, Key="mp", UploadId=up, PartNumber=i + 1, Body=piece)["ETag"]
        parts.append({"ETag": e, "PartNumber": i + 1})
    c.complete_multipart_upload(Bucket=s3_bucket, Key="mp", UploadId=up, MultipartUpload={"Parts": parts})
    assert get_bytes(s3, s3_bucket, "mp") == big
    r = c.list_objects_v2(Bucket=s3_bucket, Prefix="a/", Delimiter="/")
    assert sorted(o["Key"] for o in r["Contents"]) == ["a/big", "a/small"]
    c.delete_object(Bucket=s3_bucket, Key="a/small")
    with pytest.raises(ClientError) as ei:
        c.head_object(Bucket=s3_bucket, Key="a/small")
    assert ei.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    assert proxy.counts["PUT"] == 4 and proxy.counts["GET"] >= 4 and proxy.counts["HEAD"] == 2
    assert proxy.counts["POST"] == 2 and proxy.counts["DELETE"] == 1
    # one client, sequential calls: a single kept-alive connection carried them all
    assert proxy.connections == 1, f"{proxy.connections} connections for one sequential client"
    assert not proxy.injected


def test_chunked_request_body_and_raw_keep_alive(proxy, s3_bucket, s3):
    conn = http.client.HTTPConnection(proxy.host, proxy.port, timeout=10)
    data = [os.urandom(n) for n in (1, 4096, 70000, 3)]
    conn.request("PUT", f"/{s3_bucket}/chunked", body=iter(data), encode_chunked=True,
                 headers={"Transfer-Encoding": "chunked"})
    r = conn.getresponse()
    r.read()
    assert r.status == 200, r.status
    assert get_bytes(s3, s3_bucket, "chunked") == b"".join(data)
    # same connection: a Content-Length PUT, then an Expect: 100-continue PUT done by hand
    conn.request("PUT", f"/{s3_bucket}/cl", body=b"xyz")
    r = conn.getresponse()
    r.read()
    assert r.status == 200
    assert get_bytes(s3, s3_bucket, "cl") == b"xyz"
    conn.close()
    with socket.create_connection((proxy.host, proxy.port), timeout=10) as s:
        body = os.urandom(5000)
        s.sendall(f"PUT /{s3_bucket}/expect HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
                  f"Expect: 100-continue\r\n\r\n".encode())
        assert s.recv(100).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        s.sendall(body)
        resp = s.recv(4096)
        assert resp.startswith(b"HTTP/1.1 200"), resp[:100]
    assert get_bytes(s3, s3_bucket, "expect") == body
    assert proxy.connections == 2


def test_status_faults_count_and_filter(proxy, s3_bucket, s3):
    c = via(proxy)
    s3.put_object(Bucket=s3_bucket, Key="k", Body=b"v")
    proxy.fail(503, times=2)
    for _ in range(2):
        with pytest.raises(ClientError) as ei:
            c.get_object(Bucket=s3_bucket, Key="k")
        err = ei.value.response
        assert err["ResponseMetadata"]["HTTPStatusCode"] == 503
        assert err["Error"]["Code"] == "SlowDown"          # a well-formed S3 XML error body
    assert get_bytes(c, s3_bucket, "k") == b"v"            # shots used up: forwarded again
    assert proxy.injected["503"] == 2
    # filtered, until cleared: only PUTs to keys matching the regex fail with 500
    proxy.fail(500, times=None, method="PUT", path=r"/bad-")
    with pytest.raises(ClientError) as ei:
        c.put_object(Bucket=s3_bucket, Key="bad-1", Body=b"x")
    assert ei.value.response["Error"]["Code"] == "InternalError"
    c.put_object(Bucket=s3_bucket, Key="good-1", Body=b"x")
    assert get_bytes(c, s3_bucket, "good-1") == b"x"
    # botocore's own retries (standard mode) see the 500 every time, and give up
    with pytest.raises(ClientError):
        via(proxy, max_attempts=3).put_object(Bucket=s3_bucket, Key="bad-2", Body=b"x")
    assert proxy.injected["500"] == 4
    proxy.clear()
    c.put_object(Bucket=s3_bucket, Key="bad-3", Body=b"x")
    assert get_bytes(s3, s3_bucket, "bad-3") == b"x"
    # a faulted PUT never reached the server
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=s3_bucket).get("Contents", [])}
    assert keys == {"k", "good-1", "bad-3"}


def test_fault_answers_expect_100_continue_without_taking_the_body(proxy, s3_bucket, s3):
    proxy.fail(503, times=1, method="PUT")
    with socket.create_connection((proxy.host, proxy.port), timeout=10) as s:
        s.sendall(f"PUT /{s3_bucket}/e HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n"
                  f"Expect: 100-continue\r\n\r\n".encode())
        resp = b""
        while b"</Error>" not in resp:
            chunk = s.recv(4096)
            assert chunk, f"closed before the error was complete: {resp!r}"
            resp += chunk
        assert resp.startswith(b"HTTP/1.1 503"), resp[:60]
        assert b"Connection: close" in resp
    assert s3.list_objects_v2(Bucket=s3_bucket).get("KeyCount") == 0


@pytest.mark.serial  # time bounds: needs a quiet CPU (tests/README.md)
def test_stall_times_out_the_client_while_others_are_served(proxy, s3_bucket, s3):
    s3.put_object(Bucket=s3_bucket, Key="k", Body=b"v")
    proxy.stall(30, times=1, method="GET")
    slow = via(proxy, read_timeout=1)
    fast = via(proxy)
    errors = []

    def stalled():
        try:
            slow.get_object(Bucket=s3_bucket, Key="k")["Body"].read()
        except ReadTimeoutError as e:
            errors.append(e)

    t = threading.Thread(target=stalled)
    t0 = time.monotonic()
    t.start()
    assert proxy.wait_for(lambda p: p.injected["stall"] == 1, 5)
    # meanwhile another connection is answered at once
    t1 = time.monotonic()
    assert get_bytes(fast, s3_bucket, "k") == b"v"
    assert time.monotonic() - t1 < 1.0
    t.join(10)
    assert len(errors) == 1, "the stalled GET did not time out"
    assert time.monotonic() - t0 < 8
    proxy.clear()   # releases the stalled request (its connection is closed)
    assert get_bytes(slow, s3_bucket, "k") == b"v"


def test_stall_then_forward_is_a_slow_server(proxy, s3_bucket, s3):
    s3.put_object(Bucket=s3_bucket, Key="k", Body=b"v")
    proxy.stall(0.5, times=1, then="forward")
    t0 = time.monotonic()
    assert get_bytes(via(proxy), s3_bucket, "k") == b"v"
    assert time.monotonic() - t0 >= 0.5


def test_resets_and_lost_responses(proxy, s3_bucket, s3):
    c = via(proxy)
    proxy.reset(times=1, method="PUT")
    with pytest.raises((ConnectionClosedError, EndpointConnectionError)):
        c.put_object(Bucket=s3_bucket, Key="r1", Body=b"x")
    assert s3.list_objects_v2(Bucket=s3_bucket).get("KeyCount") == 0   # never reached the server
    proxy.reset(times=1, method="PUT", rst=False)                        # FIN, no response
    with pytest.raises((ConnectionClosedError, EndpointConnectionError)):
        c.put_object(Bucket=s3_bucket, Key="r2", Body=b"x")
    # applied by the server, response lost
    proxy.reset(times=1, method="PUT", after_forward=True)
    with pytest.raises((ConnectionClosedError, EndpointConnectionError)):
        c.put_object(Bucket=s3_bucket, Key="r3", Body=b"applied")
    assert get_bytes(s3, s3_bucket, "r3") == b"applied"
    assert proxy.injected["reset"] == 3
    c.put_object(Bucket=s3_bucket, Key="r4", Body=b"ok")                 # new connection, fine
    assert get_bytes(c, s3_bucket, "r4") == b"ok"


def test_truncated_body_is_detected_by_the_client(proxy, s3_bucket, s3):
    data = os.urandom(1 << 20)
    s3.put_object(Bucket=s3_bucket, Key="t", Body=data)
    proxy.truncate(times=1, method="GET")
    with pytest.raises((ResponseStreamingError, ConnectionClosedError)):
        via(proxy).get_object(Bucket=s3_bucket, Key="t")["Body"].read()
    assert get_bytes(via(proxy), s3_bucket, "t") == data


@pytest.mark.serial  # time bounds: needs a quiet CPU (tests/README.md)
def test_stop_releases_stalled_requests_and_threads(s3_server, s3_bucket):
    p = FaultProxy((s3_server.host, s3_server.port)).start()
    p.stall(60, times=None)
    socks = []
    for _ in range(3):
        s = socket.create_connection((p.host, p.port), timeout=10)
        s.sendall(f"GET /{s3_bucket}/x HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        socks.append(s)
    assert p.wait_for(lambda q: q.injected["stall"] == 3, 5)
    t0 = time.monotonic()
    p.stop()
    assert time.monotonic() - t0 < 3
    assert not any(t.is_alive() for t in p._threads)
    for s in socks:
        s.close()


def test_strip_header_makes_the_server_ignore_if_none_match(proxy, s3_bucket, s3):
    # moto honours If-None-Match: * on PUT (412 when the key exists); through a proxy
    # that strips it, the second PUT overwrites, as on Garage
    raw = via(proxy)
    raw.put_object(Bucket=s3_bucket, Key="k", Body=b"first")
    with pytest.raises(ClientError) as e:
        raw.put_object(Bucket=s3_bucket, Key="k", Body=b"second", IfNoneMatch="*")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    proxy.strip_header("If-None-Match")
    raw.put_object(Bucket=s3_bucket, Key="k", Body=b"third", IfNoneMatch="*")
    assert get_bytes(s3, s3_bucket, "k") == b"third"
    assert proxy.injected["strip"] == 1
    proxy.clear()                       # rules only: stripping stays
    raw.put_object(Bucket=s3_bucket, Key="k", Body=b"fourth", IfNoneMatch="*")
    assert get_bytes(s3, s3_bucket, "k") == b"fourth"
