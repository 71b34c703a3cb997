"""`bench --nfs 4.1` against the gateway over TCP: a client (EXCHANGE_ID), one session
per connection (CREATE_SESSION, SEQUENCE on every COMPOUND), the file set OPENed,
verified reads and writes, GETATTR, COMMIT, and the teardown (CLOSE, DESTROY_SESSION,
DESTROY_CLIENTID) all succeed. The same over RPC-over-RDMA (soft provider, RFC 8267 §6):
WRITE data in read chunks, READ data in write chunks, unpredictable replies (EXCHANGE_ID,
READDIR) bounded by Reply chunks, sessions bound to the connection's back channel
(CONN_BACK_CHAN, RFC 8167: the gateway's CB_NULL probe and any callback are answered on
the same connection), every workload with verified data.

NOTE: the NFSv4.1 server (sessions in h-sess, OPEN/LOCK in h-opens) is being
written in parallel; the tests that need it pass once those slices are merged into the
branch under test. Until then they fail at EXCHANGE_ID (NFS4ERR_NOTSUPP) -- they are
not skipped, on purpose, so the merge shows whether v4.1 works."""

from test_bench import bench, gw_rdma, rdma, tcp  # noqa: F401 (fixture)


def test_nfs41_reads_and_writes_verified(gw_fs):
    j, err = bench(tcp(gw_fs), "--nfs", "4.1", "--workload", "randread", "--files", 2,
                   "--file-size", "256k", "--qd", 4, "--ops", 400, "--verify")
    t = j["total"]
    assert t["ops"] == 400 and t["errors"] == 0 and t["verify_failures"] == 0, (t, err)
    assert t["verified_bytes"] == 400 * 4096, t
    # Two connections (two sessions), writes read back after COMMIT.
    j, err = bench(tcp(gw_fs), "--nfs", "4.1", "--workload", "seqwrite", "--bs", "64k", "--file", "w41.dat",
                   "--file-size", "1m", "--conns", 2, "--qd", 4, "--ops", 16, "--verify")
    t = j["total"]
    assert t["ops"] == 16 and t["errors"] == 0 and t["verify_failures"] == 0, (t, err)
    assert t["verified_bytes"] == 1 << 20, t
    with gw_fs.client() as c:
        fh = c.lookup(c.mount("/"), "w41.dat").check().fh
        assert c.getattr(fh).check().attr.size == 1 << 20


def test_nfs41_mix_with_getattr_for_a_few_seconds(gw_fs):
    j, err = bench(tcp(gw_fs), "--nfs", "4.1", "--mix", "randread:2,randwrite:1,getattr:1", "--files", 2,
                   "--file-size", "512k", "--qd", 8, "--duration", 2, "--verify")
    t = j["total"]
    assert t["ops"] > 0 and t["errors"] == 0 and t["verify_failures"] == 0, (t, err)
    assert set(j["per_op"]) == {"read", "write", "getattr"}, j["per_op"].keys()
    assert 1 <= j["qd"] <= 8


def test_nfs41_over_rdma_writes_and_reads_verified_through_chunks(gw_rdma):
    # 64 KiB and 1 MiB WRITEs (data reduced into read chunks), then read back after
    # COMMIT; two connections, two sessions, each bound as back channel.
    for bs, ops in (("64k", 32), ("1m", 4)):
        j, err = bench(rdma(gw_rdma), "--nfs", "4.1", "--provider", "soft", "--workload", "seqwrite",
                       "--bs", bs, "--file", f"r41w{bs}.dat", "--file-size", "2m", "--conns", 2, "--qd", 4,
                       "--ops", ops, "--verify")
        t = j["total"]
        assert t["ops"] == ops and t["errors"] == 0 and t["verify_failures"] == 0, (bs, t, err)
        assert t["verified_bytes"] == 2 << 20, (bs, t)
        # R8267-12: every WRITE's data went in a read chunk (no Long call); READs of the
        # read-back got write chunks; EXCHANGE_ID offered a Reply chunk (R8267-15).
        r = j["rdma"]
        assert r["chunked_calls"] >= ops and r["long_calls"] == 0, r
        assert r["write_chunks"] >= 1 and r["reply_chunks"] >= 1 and r["rdma_errors"] == 0, r
    on_disk = (gw_rdma.data_dir / "r41w1m.dat").read_bytes()
    assert len(on_disk) == 2 << 20
    # Reads at three sizes (READ data pushed into write chunks), every byte checked
    # against the pattern bench wrote when it prepared the files.
    for bs, ops in (("4k", 400), ("64k", 100), ("1m", 8)):
        j, err = bench(rdma(gw_rdma), "--nfs", "4.1", "--provider", "soft", "--workload", "randread",
                       "--bs", bs, "--files", 2, "--file", "r41r.dat", "--file-size", "2m", "--qd", 4,
                       "--ops", ops, "--verify")
        t = j["total"]
        assert t["ops"] == ops and t["errors"] == 0 and t["verify_failures"] == 0, (bs, t, err)
        assert t["verified_bytes"] > 0, (bs, t)
        # R8267-18: every READ offered a write chunk of its count.
        assert j["rdma"]["write_chunks"] >= ops, j["rdma"]


def test_nfs41_over_rdma_every_workload(gw_rdma):
    for wl in ("null", "getattr", "lookup", "readdirplus", "createremove", "randread", "seqread",
               "randwrite", "seqwrite"):
        j, err = bench(rdma(gw_rdma), "--nfs", "4.1", "--provider", "soft", "--workload", wl,
                       "--files", 3, "--file", "every.dat", "--file-size", "256k", "--qd", 4,
                       "--ops", 200, "--verify")
        t = j["total"]
        assert t["ops"] == 200 and t["errors"] == 0 and t["verify_failures"] == 0, (wl, t, err)


def test_r8167_nfs41_over_rdma_sessions_bind_the_back_channel_and_answer_its_probe(gw_factory):
    # CREATE_SESSION over RDMA asks CONN_BACK_CHAN; the gateway probes each session's
    # back channel with CB_NULL on bench's RDMA connection (RFC 8167: a callback is an
    # RDMA_MSG CALL on the forward connection) and bench answers it there.
    from conftest import free_port
    from statsutil import scrape
    stats_port = free_port()
    g = gw_factory(backend="fs+rdma", extra={"stats": {"listen": f"127.0.0.1:{stats_port}"}})
    j, err = bench(rdma(g), "--nfs", "4.1", "--provider", "soft", "--workload", "getattr", "--files", 2,
                   "--file-size", "4k", "--conns", 2, "--qd", 4, "--ops", 2000)
    t = j["total"]
    assert t["ops"] == 2000 and t["errors"] == 0, (t, err)
    m = scrape(stats_port)
    replied = m.sum("nfsgw_callbacks_total", transport="rdma", result="replied")
    failed = m.sum("nfsgw_callbacks_total", transport="rdma", result="failed")
    # The setup session and the two load sessions: three probes, all answered.
    assert replied >= 3 and failed == 0, (replied, failed, err)
    r = j["rdma"]
    assert r["callbacks"] >= 3 and r["callback_replies"] == r["callbacks"], r
    assert r["callbacks_dropped"] == 0 and r["connections"] == 3, r
