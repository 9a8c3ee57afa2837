"""DurableStore benchmarks (real files, real fdatasync, in pytest's tmp dir).

  storage-commit   durable offset commits/s, fsync "always", 1 / 16 / 256 concurrent
                   committers (each its own group, 50 shards), driven by completion
                   callbacks (as the server does) or by one blocking thread each: group
                   commit shares fsyncs, and a batch's shard files are fsync'd together.
                   ops = commits per call.
  storage-load     load_shard of one shard holding 1,000,000 offsets of 10,000 groups
                   (each group: a 4-member group record and 100 partitions committed as
                   4 commits of 25, as 4 consumers do), as written and after compaction.
                   ops = offsets loaded.
  storage-compact  compaction of a shard after 20 rounds of commits (every round each group
                   recommits all of its partitions): ops = offset entries read; extra_info
                   bytes on disk per live offset before / after, and per written entry.
  storage-recovery load_shard of a 128 MiB shard as written (8,200 groups committing their
                   100 partitions 4 times: 820,000 live offsets of 3.3M written): ops =
                   MB of log; extra_info mb_per_cpu_s, the MB loaded per second of the
                   process's CPU time (one core's rate). And the load of a small shard whose
                   last segment ends in 8 MiB of random bytes (a garbage tail, truncated by
                   the load): ops = 1; extra_info tail_mib.

With --benchmark-disable (make test) the sizes are small so this runs as a test.
"""
from __future__ import annotations

import gc
import os
import random
import shutil
import statistics
import threading
import time

import pytest

from fastcoord import Errors, OffsetAndMetadata, shard_for
from fastcoord.storage import DurableStore
from helpers.storage import Waiter, store_offsets_sync


def small(request) -> bool:
    return request.config.getoption("benchmark_disable")


def disk_bytes(directory) -> int:
    return sum(os.path.getsize(os.path.join(directory, n)) for n in os.listdir(directory))


# -- durable commits -------------------------------------------------------------------------
@pytest.mark.parametrize("drive", ["callbacks", "threads"])
@pytest.mark.parametrize("committers", [1, 16, 256])
def test_durable_commits(benchmark, request, tmp_path, committers, drive):
    """callbacks: each committer commits again from its previous commit's `done` (as the
    server's event loop drives the store); threads: one thread per committer blocking on
    each commit (an embedding with many threads: thread hand-offs cost as much as I/O)."""
    per_committer = {1: 400, 16: 100, 256: 16}[committers]
    if small(request):
        per_committer = 2
    store = DurableStore(tmp_path, num_shards=50, fsync="always")
    fsyncs = [0]
    real_fsync = store._fsync

    def counted_fsync(fd):        # the real fdatasync, counted: how many commits share one
        fsyncs[0] += 1
        real_fsync(fd)

    store._fsync = counted_fsync
    groups = [f"bench-group-{i}" for i in range(committers)]
    errors = []
    counter = [0]

    def committer(gid, base):
        for i in range(per_committer):
            error = store_offsets_sync(store, gid, {("events", 3): OffsetAndMetadata(base + i)})
            if error != Errors.NONE:
                errors.append(error)

    def run_threads():
        counter[0] += per_committer
        threads = [threading.Thread(target=committer, args=(g, counter[0])) for g in groups]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)

    def run_callbacks():
        counter[0] += per_committer
        base = counter[0]
        left = {g: per_committer for g in groups}
        finished = threading.Event()
        lock = threading.Lock()
        outstanding = [committers * per_committer]

        def commit(g):
            offset = base + per_committer - left[g]
            store.store_offsets(g, {("events", 3): OffsetAndMetadata(offset)},
                                lambda error, g=g: answered(g, error))

        def answered(g, error):
            if error != Errors.NONE:
                errors.append(error)
            with lock:
                left[g] -= 1
                again = left[g] > 0
                outstanding[0] -= 1
                if outstanding[0] == 0:
                    finished.set()
            if again:
                commit(g)

        for g in groups:
            commit(g)
        assert finished.wait(120)

    run = run_callbacks if drive == "callbacks" else run_threads
    benchmark.group = "storage-commit"
    benchmark.extra_info["peer"] = (f"{committers} committer" + ("s" if committers > 1 else "")
                                    + f", {drive}")
    benchmark.extra_info["ops"] = committers * per_committer
    benchmark.pedantic(run, rounds=1 if small(request) else 5, warmup_rounds=0)
    store.close()
    assert errors == []
    commits = (counter[0] // per_committer) * committers * per_committer   # rounds x ops
    benchmark.extra_info["commits_per_fsync"] = round(commits / max(fsyncs[0], 1), 2)
    _, offsets = DurableStore(tmp_path, num_shards=50).load_shard(shard_for(groups[0], 50))
    assert offsets[groups[0]][("events", 3)].offset == counter[0] + per_committer - 1


# -- loading -----------------------------------------------------------------------------------
def group_record(gid):
    return {"protocol_type": "consumer", "generation": 5, "protocol": "range",
            "leader": f"{gid}-member-0",
            "members": [{"member_id": f"{gid}-member-{m}", "instance_id": None,
                         "client_id": "consumer-1", "client_host": "/10.1.2.3",
                         "rebalance_timeout_ms": 300_000, "session_timeout_ms": 45_000,
                         "subscription": b"s" * 40, "assignment": b"a" * 60}
                        for m in range(4)]}


def write_shard(path, n_groups, rounds=1):
    """n_groups groups x 100 partitions (10 topics x 10), 4 commits of 25 per round."""
    store = DurableStore(path, num_shards=1, fsync="interval", compact_after_segments=None)
    last = Waiter()
    for r in range(rounds):
        for g in range(n_groups):
            gid = f"consumer-group-{g:05d}"
            if r == 0:
                store.store_group(gid, group_record(gid), lambda e: None)
            for m in range(4):
                offsets = {(f"topic-{t}", p): OffsetAndMetadata(1_000_000 * r + 10 * t + p, "", 7,
                                                                 1_700_000_000_000 + r)
                           for t in range(10) for p in range(10) if (10 * t + p) % 4 == m}
                store.store_offsets(gid, offsets, last if (g, m) == (n_groups - 1, 3) else
                                    (lambda e: None))
        assert last.wait(300) == Errors.NONE
        last = Waiter()
    store.close()
    return store.shard_dir(0)


@pytest.fixture(scope="module")
def loaded_shard(request, tmp_path_factory):
    n_groups = 100 if small(request) else 10_000
    path = tmp_path_factory.mktemp("load")
    write_shard(path, n_groups)
    compacted = tmp_path_factory.mktemp("load-compacted")
    shutil.copytree(path, compacted, dirs_exist_ok=True)
    store = DurableStore(compacted, num_shards=1, compact_after_segments=None)
    store.compact(0)
    store.close()
    return n_groups, path, compacted


@pytest.mark.parametrize("form", ["as-written", "compacted"])
def test_load_shard(benchmark, request, loaded_shard, form):
    n_groups, path, compacted = loaded_shard
    directory = path if form == "as-written" else compacted
    store = DurableStore(directory, num_shards=1, compact_after_segments=None)
    result = {}

    def setup():                  # free the previous round's state outside the timing
        result.clear()
        gc.collect()
        return (), {}

    def run():
        result["groups"], result["offsets"] = store.load_shard(0)

    benchmark.group = "storage-load"
    benchmark.extra_info["peer"] = f"1M offsets, {form}" if not small(request) else form
    benchmark.extra_info["ops"] = n_groups * 100
    benchmark.extra_info["groups"] = n_groups
    benchmark.extra_info["mb_on_disk"] = round(disk_bytes(store.shard_dir(0)) / 1e6, 1)
    benchmark.pedantic(run, setup=setup, rounds=1 if small(request) else 3, warmup_rounds=0)
    store.close()
    assert len(result["groups"]) == n_groups
    assert sum(map(len, result["offsets"].values())) == n_groups * 100


# -- compaction ----------------------------------------------------------------------------------
def test_compaction_bytes_per_offset(benchmark, request, tmp_path):
    n_groups, rounds = (20, 3) if small(request) else (1_000, 20)
    pristine = tmp_path / "pristine"
    write_shard(pristine, n_groups, rounds)
    shard = os.path.join(pristine, "shard-000")
    before = disk_bytes(shard)
    live = n_groups * 100
    written = live * rounds
    copies = iter(range(10**6))
    holder = {}

    def setup():
        work = tmp_path / f"work-{next(copies)}"
        shutil.copytree(pristine, work)
        holder["store"] = DurableStore(work, num_shards=1, compact_after_segments=None)
        return (), {}

    def run():
        holder["stats"] = holder["store"].compact(0)

    benchmark.group = "storage-compact"
    benchmark.extra_info["peer"] = f"{n_groups} groups x 100 offsets x {rounds} rounds"
    benchmark.extra_info["ops"] = written
    benchmark.pedantic(run, setup=setup, rounds=1 if small(request) else 3, warmup_rounds=0)
    store = holder["store"]
    after = disk_bytes(store.shard_dir(0))
    _, offsets = store.load_shard(0)
    store.close()
    assert sum(map(len, offsets.values())) == live
    assert after < before
    benchmark.extra_info["bytes_per_written_offset"] = round(before / written, 1)
    benchmark.extra_info["bytes_per_live_offset_before"] = round(before / live, 1)
    benchmark.extra_info["bytes_per_live_offset_after"] = round(after / live, 1)


# -- recovery --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def big_shard(request, tmp_path_factory):
    n_groups, rounds = (100, 2) if small(request) else (8_200, 4)
    path = tmp_path_factory.mktemp("recovery")
    write_shard(path, n_groups, rounds)
    return path, n_groups


def test_recovery_load(benchmark, request, big_shard):
    path, n_groups = big_shard
    store = DurableStore(path, num_shards=1, compact_after_segments=None)
    size = disk_bytes(store.shard_dir(0))
    result = {}
    cpu = []

    def setup():
        result.clear()
        gc.collect()
        return (), {}

    def run():
        started = time.process_time()
        result["groups"], result["offsets"] = store.load_shard(0)
        cpu.append(time.process_time() - started)

    benchmark.group = "storage-recovery"
    benchmark.extra_info["peer"] = (f"{size / 2**20:.0f} MiB shard as written"
                                    if not small(request) else "as written")
    benchmark.extra_info["ops"] = round(size / 1e6, 1)
    benchmark.pedantic(run, setup=setup, rounds=1 if small(request) else 3, warmup_rounds=0)
    store.close()
    benchmark.extra_info["mb_per_cpu_s"] = round(size / 1e6 / statistics.median(cpu), 1)
    assert len(result["groups"]) == n_groups
    assert sum(map(len, result["offsets"].values())) == n_groups * 100


def test_recovery_garbage_tail(benchmark, request, tmp_path):
    tail = (1 if small(request) else 8) << 20
    pristine = tmp_path / "pristine"
    write_shard(pristine, 10)
    (segment,) = os.listdir(os.path.join(pristine, "shard-000"))
    garbage = random.Random(7).randbytes(tail)
    copies = iter(range(10**6))
    holder = {}

    def setup():                  # a fresh copy each round: the load truncates the tail
        work = tmp_path / f"work-{next(copies)}"
        shutil.copytree(pristine, work)
        with open(os.path.join(work, "shard-000", segment), "ab") as f:
            f.write(garbage)
        holder["store"] = DurableStore(work, num_shards=1, compact_after_segments=None)
        return (), {}

    def run():
        holder["groups"], holder["offsets"] = holder["store"].load_shard(0)

    benchmark.group = "storage-recovery"
    benchmark.extra_info["peer"] = f"{tail >> 20} MiB garbage tail"
    benchmark.extra_info["ops"] = 1
    benchmark.extra_info["tail_mib"] = tail >> 20
    benchmark.pedantic(run, setup=setup, rounds=1 if small(request) else 3, warmup_rounds=0)
    holder["store"].close()
    assert len(holder["groups"]) == 10
    assert sum(map(len, holder["offsets"].values())) == 1000
