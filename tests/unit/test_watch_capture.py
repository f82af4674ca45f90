"""watch's log tail reads AITER's own capture CSVs (AITER_TUNE_GEMM=1, issue 36) as it reads logs: the rows
appended since the last cycle add shapes, a partial last row waits until it is complete, the header is read
each time (it names the columns); with the node probed as logging once per process, the watch weighs a
server log's shapes by the processes that logged them."""
from __future__ import annotations

from orchestrator.nodeside import logtail
from orchestrator.sim.growlog import append_misses

from tests.unit.test_watch import V, _next, _tail, _watch


def test_a_capture_csv_adds_the_rows_appended_since_and_waits_for_a_partial_row(tmp_path):
    cap = tmp_path / "a8w8_blockscale_untuned_gemm.csv"
    cap.write_bytes(b"M,N,K\n64,1536,7168\n64,1536,7168\n")       # two processes missed it
    first = _tail(cap)
    assert first["shapes"][V] == [{"m": 64, "n": 1536, "k": 7168}] and first["counts"][V] == [2]
    assert first["lines"] == 2 and not first["warnings"]
    again = _tail(cap, _next(first))
    assert not again["shapes"] and again["bytes"] == 0
    with open(cap, "ab") as fh:                                      # a row, and one being appended
        fh.write(b"8,4096,512\n16,40")
    grown = _tail(cap, _next(again))
    assert grown["shapes"][V] == [{"m": 8, "n": 4096, "k": 512}] and not grown["warnings"]
    with open(cap, "ab") as fh:
        fh.write(b"96,512\n")
    rest = _tail(cap, _next(grown))
    assert rest["shapes"][V] == [{"m": 16, "n": 4096, "k": 512}]
    assert rest["logs"][0]["offset"] == cap.stat().st_size


def test_a_capture_csv_that_only_has_its_header_adds_nothing(tmp_path):
    cap = tmp_path / "a8w8_blockscale_untuned_gemm.csv"
    cap.write_bytes(b"M,N,K\n")
    ans = _tail(cap)
    assert not ans["shapes"] and ans["logs"][0]["offset"] == len(b"M,N,K\n")


def test_a_watch_cycle_over_a_capture_csv_tunes_its_rows(tmp_path):
    cap = tmp_path / "a8w8_blockscale_untuned_gemm.csv"
    cap.write_bytes(b"M,N,K\n64,1536,7168\n")
    w, launcher, _ui, _h = _watch(tmp_path, cap)
    w.cycle()
    with open(cap, "ab") as fh:
        fh.write(b"8,4096,512\n8,4096,512\n")
    w.cycle()
    assert [shapes for _job, shapes in launcher.launched] == [[(64, 1536, 7168)], [(8, 4096, 512)]]


def test_the_watch_weighs_by_processes_where_the_node_logs_once_per_process(tmp_path):
    log = tmp_path / "server.log"
    append_misses(log, V, [(72, 512, 7168)], times=1)
    with open(log, "a") as fh:      # one process repeats (72, 7168, 2048) three times
        fh.write("(Worker_TP0 pid=1000) [aiter] shape is M:72, N:7168, K:2048, not found tuned config in "
                 "/tmp/aiter_configs/a8w8_blockscale_tuned_gemm.csv, will use default config!\n" * 3)
    append_misses(log, V, [(72, 512, 7168)], times=2)       # ranks 0 and 1
    facts = {"aiter_version": "0.1.30", "rocm_version": "7.0.2", "gfx": "gfx950", "miss_log_once": True}
    w, launcher, _ui, _h = _watch(tmp_path / "once", log, facts=facts)
    w.cycle()
    seen = {e["shape"]["n"]: e["count"] for e in w.store.events() if e["event"] == "seen"}
    assert seen == {512: 2, 7168: 1}        # processes (pid 1000, 1001), not lines (3 and 3)
    assert launcher.launched[0][1] == [(72, 512, 7168), (72, 7168, 2048)]
    ans = logtail.op_log_tail({"logs": [{"path": str(log)}], "variant": V})
    assert ans["counts"][V] == [3, 3] and ans["workers"][V] == [2, 1]


def test_a_watched_capture_directory_follows_every_capture_file_in_it(tmp_path):
    cap = tmp_path / "tuning"
    cap.mkdir()
    (cap / "a8w8_blockscale_untuned_gemm.csv").write_bytes(b"M,N,K\n64,1536,7168\n")
    (cap / "notes.txt").write_text("not a capture file\n")
    w, launcher, _ui, _h = _watch(tmp_path / "w", cap)
    w.cycle()
    with open(cap / "a8w8_blockscale_untuned_gemm.csv", "ab") as fh:
        fh.write(b"8,4096,512\n32,40")                          # a whole row, and one being appended
    (cap / "a8w8_blockscale_untuned_gemm.host.9.csv").write_bytes(b"M,N,K\n16,2112,7168\n")   # a new shard
    w.cycle()
    with open(cap / "a8w8_blockscale_untuned_gemm.csv", "ab") as fh:
        fh.write(b"96,512\n")
    w.cycle()
    assert [shapes for _job, shapes in launcher.launched] == [
        [(64, 1536, 7168)], [(8, 4096, 512), (16, 2112, 7168)], [(32, 4096, 512)]]
