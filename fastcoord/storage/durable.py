"""DurableStore: the coordinator's store on fsync'd, checksummed, compacted shard logs."""
from __future__ import annotations

import contextlib
import errno
import gc
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Callable, Dict, List, Optional, Tuple

from .._ratelog import RateLimitedLog
from ..core.config import shard_for
from ..core.errors import Errors
from .log import (
    COMPACT_SUFFIX, TOMBSTONE, CorruptLogError, ShardState, checked_segments, complete_frame,
    find_frame_after, fsync_dir, list_segments, remove_compaction_leftovers, segment_path,
)
from .records import (
    FrameError, decode_group_configs, decode_topic_ids, encode_consumer_group, encode_group,
    encode_group_configs, encode_group_tombstone, encode_offset_tombstones, encode_offsets,
    encode_topic_ids,
)

__all__ = ["DurableStore", "load_into", "FAULT_POINTS"]

log = logging.getLogger("fastcoord.storage")
# (what a client's request makes unencodable may be sent again and again: a line per
# kind per interval)
_rate_log = RateLimitedLog(log)

Done = Callable[[Errors], None]
META_FILE = "fastcoord-storage.meta"
TOPIC_IDS_FILE = "topic-ids.log"
GROUP_CONFIGS_FILE = "group-configs.log"
FORMAT_VERSION = 1
# Where compaction calls `store._fault(point, shard)`: a test hook that may raise or
# kill the process to simulate a crash at that step.
FAULT_POINTS = ("compact_start", "after_write_before_fsync", "after_fsync_before_rename",
                "after_rename_before_dirsync", "after_dirsync_before_delete",
                "after_first_delete", "compact_done")
OFFSETS_PER_COMPACTED_RECORD = 65536
# fsyncs of one writer batch in flight at once (one per shard file the batch touched).
SYNC_THREADS = 16
# Shards read at once by load_into.
LOAD_THREADS = 4


_gc_lock = threading.Lock()
_gc_pauses = 0                # _no_gc blocks running (loads run in several threads)
_gc_was_enabled = False


@contextlib.contextmanager
def _no_gc():
    """Bulk decoding allocates millions of tuples and no cycles: the cyclic GC would
    rescan the growing state again and again, so pause it, until
    the last of the blocks running at once ends. Then what they built moves straight to
    the oldest generation (gc.freeze, gc.unfreeze): it is long-lived state, and left in
    the youngest the first collection after would traverse all of it at once."""
    global _gc_pauses, _gc_was_enabled
    with _gc_lock:
        if _gc_pauses == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0:
                if gc.get_freeze_count() == 0:     # (not when the process froze some itself)
                    gc.freeze()
                    gc.unfreeze()
                if _gc_was_enabled:
                    gc.enable()


def _wall_ms() -> int:
    return int(time.time() * 1000)


def _check_int(name: str, value, lo: int, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < lo:
        raise ValueError(f"{name} must be >= {lo}, got {value}")


def _call(done: Done, error: Errors) -> None:
    try:
        done(error)
    except Exception:  # a callback that raises changes nothing here
        log.exception("store completion callback raised")


class _ShardLog:
    """One shard's append-only log (its file state; writes come from a _Writer)."""

    def __init__(self, store: "DurableStore", shard: int) -> None:
        self.store = store
        self.shard = shard
        self.directory = os.path.join(store.data_dir, f"shard-{shard:03d}")
        self.io_lock = threading.Lock()          # file state: fd, active segment, size
        self.compact_lock = threading.Lock()     # one compaction / load at a time
        self.fd: Optional[int] = None
        self.ready = False           # tail recovered; active_id/size are valid
        self.active_id = 0
        self.size = 0                # valid bytes of the active segment
        self.dirty = False           # interval policy: written, not yet fsync'd
        self.unsynced = 0            # policy always: bytes written, awaiting their fsync
        self.live_bytes: Optional[int] = None    # closed segments' live bytes at the last look

    # -- recovery -------------------------------------------------------------------------
    def recover(self, full: bool, repair: bool) -> ShardState:
        """Scan the segments (all, or only the last when `full` is False), truncate a torn
        tail, refuse (CorruptLogError) or repair corruption. Caller holds io_lock."""
        os.makedirs(self.directory, exist_ok=True)
        # (No compaction runs meanwhile: a first recovery comes before any compaction of
        # the shard, a load holds compact_lock.)
        remove_compaction_leftovers(self.directory)
        ids = list_segments(self.directory)
        state = ShardState()
        start = 0 if full else max(len(ids) - 1, 0)
        cut = None        # (segment, offset, later segments): truncated once all is applied
        with checked_segments(state) as check:
            for i in range(start, len(ids)):
                path = segment_path(self.directory, ids[i])
                data, end, reason = check(path)
                if reason is None:
                    continue
                size = len(data)
                torn = False
                if i == len(ids) - 1 and find_frame_after(data, end) is None:
                    # The bad frame is the log's last. Cut short by the end of the file (or
                    # no frame at all, as the zeros a crash can leave past the last write):
                    # a torn write. Whole but failing its CRC or its decoding: corruption,
                    # as anywhere.
                    torn = not complete_frame(data, end)
                    if not torn:
                        reason += (" in the log's last record, which is complete: corruption, "
                                   "not a torn write (it may have been acknowledged)")
                if torn:
                    log.warning("shard %d: torn record at the end of %s at byte offset %d "
                                "(%s): truncating the last %d bytes (the record is cut short "
                                "by the end of the file and nothing valid follows: its write "
                                "never completed, so it was never acknowledged)",
                                self.shard, path, end, reason, size - end)
                    cut = (path, end, None)
                    break
                if not repair:
                    raise CorruptLogError(path, end, reason, self.shard)
                later = ids[i + 1:]
                log.error("shard %d: REPAIR: corrupt record in %s at byte offset %d (%s): "
                          "truncating there, dropping %d bytes of this segment and %d later "
                          "segment(s)", self.shard, path, end, reason, size - end, len(later))
                cut = (path, end, later)
                ids = ids[:i + 1]
                break
        # (The segments are unmapped now: none is truncated under its mapping.)
        if cut is not None:
            path, end, later = cut
            self._truncate(path, end)
            if later is not None:             # a repair
                for sid in later:
                    os.unlink(segment_path(self.directory, sid))
                fsync_dir(self.directory)
        self._open_active(ids)
        return state

    def _truncate(self, path: str, size: int) -> None:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.ftruncate(fd, size)
            os.fsync(fd)
        finally:
            os.close(fd)

    def _open_active(self, ids: List[int]) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if ids:
            self.active_id = ids[-1]
            path = segment_path(self.directory, self.active_id)
            self.fd = os.open(path, os.O_WRONLY)
            self.size = os.fstat(self.fd).st_size
        else:
            self.active_id = 0
            self.fd = self._create(0)
            self.size = 0
        self.ready = True

    def _create(self, seg_id: int) -> int:
        fd = os.open(segment_path(self.directory, seg_id), os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                     0o644)
        try:
            fsync_dir(self.directory)         # the new file's directory entry is durable
        except OSError:
            os.close(fd)
            raise
        return fd

    def ensure_open(self) -> None:
        """Caller holds io_lock."""
        if not self.ready:
            self.recover(full=False, repair=self.store.repair)
        elif self.fd is None:             # closed after a failed write: reopen at the good size
            fd = os.open(segment_path(self.directory, self.active_id), os.O_WRONLY)
            try:
                os.ftruncate(fd, self.size)
            except OSError:
                os.close(fd)
                raise
            self.fd = fd

    def roll(self) -> None:
        """Close the active segment (fsync'd) and start the next one. Caller holds io_lock."""
        self.store._fsync(self.fd)
        new_fd = self._create(self.active_id + 1)
        os.close(self.fd)
        self.fd = new_fd
        self.active_id += 1
        self.size = 0
        self.dirty = False
        self.store._segment_rolled(self)

    # -- writing ----------------------------------------------------------------------------
    def write(self, data: bytes) -> Errors:
        """Write one batch at the end of the log. Under policy "always" it is not yet
        acknowledged: `unsynced` says how many bytes wait for an fsync of `fd`, and
        `finish` must follow (the writer fsyncs a batch's logs together in between).
        Caller holds io_lock (until `finish`)."""
        store = self.store
        try:
            self.ensure_open()
            if self.size and self.size + len(data) > store.segment_bytes:
                self.roll()
            view = memoryview(data)
            done = 0
            while done < len(data):
                n = store._write(self.fd, view[done:], self.size + done)
                if n <= 0:
                    raise OSError(errno.EIO, "write returned 0")
                done += n
        except CorruptLogError as exc:
            log.error("shard %d: not writing: %s", self.shard, exc)
            return Errors.NOT_COORDINATOR
        except OSError as exc:
            return self._failed(len(data), exc)
        if store.fsync_always:
            self.unsynced = len(data)
        else:
            self.dirty = True
            self.size += len(data)
        return Errors.NONE

    def finish(self, fsync_error: Optional[OSError]) -> Errors:
        """After the fsync of a `write` under policy "always": acknowledge the bytes, or
        cut them off if the fsync failed. Caller holds io_lock."""
        n, self.unsynced = self.unsynced, 0
        if fsync_error is not None:
            return self._failed(n, fsync_error)
        self.size += n
        return Errors.NONE

    def _failed(self, nbytes: int, exc: OSError) -> Errors:
        log.warning("shard %d: write of %d bytes failed (%s): failing the %s with "
                    "NOT_COORDINATOR", self.shard, nbytes, exc,
                    "batch" if self.store.fsync_always else "writes")
        self._undo()
        return Errors.NOT_COORDINATOR

    def _undo(self) -> None:
        """Cut a failed write off the file so the log stays what was acknowledged."""
        if self.fd is None:
            return
        try:
            os.ftruncate(self.fd, self.size)
            self.store._fsync(self.fd)
        except OSError as exc:
            log.warning("shard %d: could not truncate after a failed write (%s); will reopen",
                        self.shard, exc)
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None

    def sync(self) -> None:
        with self.io_lock:
            if not self.dirty or self.fd is None:
                return
            try:
                self.store._fsync(self.fd)
                self.dirty = False
            except OSError as exc:
                log.error("shard %d: background fsync failed (%s): writes acknowledged in the "
                          "last interval may not be durable", self.shard, exc)
                self._undo()

    def close(self) -> None:
        """Close the file (fsync'd); the writer threads have drained already."""
        with self.io_lock:
            if self.fd is not None:
                if self.dirty:
                    try:
                        self.store._fsync(self.fd)
                    except OSError as exc:
                        log.error("shard %d: fsync at close failed: %s", self.shard, exc)
                os.close(self.fd)
                self.fd = None


class _Writer:
    """A writer thread (group commit): takes every write pending for its shards, appends
    each shard's writes with one write + one fsync, then answers them all."""

    def __init__(self, store: "DurableStore", index: int) -> None:
        self.store = store
        self.index = index
        self.cond = threading.Condition(threading.Lock())
        self.pending: List[Tuple[_ShardLog, bytes, Done]] = []
        self.closing = False
        self.thread: Optional[threading.Thread] = None
        self.logs: Dict[int, _ShardLog] = {}       # the shards it has written (interval fsync)

    def submit(self, lg: _ShardLog, data: bytes, done: Done) -> None:
        with self.cond:
            if self.closing:
                closed = True
            else:
                closed = False
                self.pending.append((lg, data, done))
                if self.thread is None:
                    self.thread = threading.Thread(
                        target=self._run, name=f"fastcoord-store-writer-{self.index}", daemon=True)
                    self.thread.start()
                self.cond.notify()
        if closed:
            _call(done, Errors.NOT_COORDINATOR)

    def _dirty(self) -> bool:
        return any(lg.dirty for lg in self.logs.values())

    def _run(self) -> None:
        interval = self.store.fsync_interval_ms / 1000.0
        last_sync = time.monotonic()
        while True:
            with self.cond:
                while not self.pending and not self.closing:
                    if self._dirty():
                        left = last_sync + interval - time.monotonic()
                        if left <= 0:
                            break
                        self.cond.wait(left)
                    else:
                        self.cond.wait()
                batch = self.pending
                self.pending = []
                stop = self.closing and not batch
            by_log: Dict[_ShardLog, Tuple[List[bytes], List[Done]]] = {}
            for lg, data, done in batch:
                entry = by_log.get(lg)
                if entry is None:
                    entry = by_log[lg] = ([], [])
                    self.logs[lg.shard] = lg
                entry[0].append(data)
                entry[1].append(done)
            if by_log:
                self._append_all(by_log)
            if stop or time.monotonic() - last_sync >= interval:
                for lg in list(self.logs.values()):
                    if lg.dirty:
                        lg.sync()
                last_sync = time.monotonic()
            if stop:
                return

    def _append_all(self, by_log: "Dict[_ShardLog, Tuple[List[bytes], List[Done]]]") -> None:
        """One write per shard log, then their fsyncs at the same time (the file system
        commits concurrent fdatasyncs of many files together, many more per second
        than one after another), then every answer. Each log's io_lock is
        held from its write to its acknowledgement; the answers run after, unlocked."""
        store = self.store
        logs = list(by_log)
        errors: Dict[_ShardLog, Errors] = {}
        waiting: List[_ShardLog] = []
        for lg in logs:
            lg.io_lock.acquire()
        try:
            for lg in logs:
                datas = by_log[lg][0]
                errors[lg] = lg.write(datas[0] if len(datas) == 1 else b"".join(datas))
                if errors[lg] is Errors.NONE and lg.unsynced:
                    waiting.append(lg)
            for lg, exc in zip(waiting, store._fsync_all([lg.fd for lg in waiting])):
                errors[lg] = lg.finish(exc)
        finally:
            for lg in logs:
                lg.io_lock.release()
        for lg in logs:
            for done in by_log[lg][1]:
                _call(done, errors[lg])

    def close(self) -> None:
        with self.cond:
            self.closing = True
            self.cond.notify()
            thread = self.thread
        if thread is not None:
            thread.join()


def _read_side_file(path: str, decode) -> dict:
    """decode(the file's bytes), {} when there is no file; a FrameError as a ValueError
    naming the file."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return {}
    try:
        return decode(data)
    except FrameError as exc:
        raise ValueError(f"{path}: {exc}") from None


class DurableStore:
    """The coordinator's store on disk: one append-only, CRC32C-framed log per shard
    (shard = `shard_for(group_id, num_shards)`, Kafka's offsets-partition mapping).

    fsync="always": `done(Errors.NONE)` is called only after the record is fsync'd
    (fdatasync). Group commit: `writer_threads` writer threads (default 1; shard s goes to
    writer s % writer_threads) each take every write pending for their shards, append
    each shard's share with one write, fsync those shards' files at the same time (up
    to SYNC_THREADS at once), then answer them all. fsync="interval": `done` is called once the
    record is written to the OS (it survives a crash of this process, kill -9 included)
    and the writer fsyncs every `fsync_interval_ms`: an OS crash or power loss can lose
    the writes acknowledged in the last interval.

    A failed write or fsync (ENOSPC, EIO, ...) fails the requests of that batch with
    Errors.NOT_COORDINATOR, cuts the partial write off the file, and the next batch tries
    again (so writes succeed again once space returns).

    Segments roll at `segment_bytes`; once a shard has `compact_after_segments` closed
    segments a background thread compacts it (None: only explicit `compact()`). A hot
    shard is compacted sooner: at a roll, once its closed segments hold at least
    `segment_bytes` and twice what was live at its last look, the compactor reads them
    and compacts when their live share (live keys over records and offset entries read)
    is below `compact_live_ratio` (None: by segment count only).
    """

    def __init__(self, data_dir, num_shards: int = 50, *, fsync: str = "always",
                 fsync_interval_ms: int = 1000, segment_bytes: int = 64 * 1024 * 1024,
                 repair: bool = False, tombstone_retention_ms: int = 24 * 3600 * 1000,
                 offsets_retention_ms: Optional[int] = 7 * 24 * 3600 * 1000,
                 compact_after_segments: Optional[int] = 4,
                 compact_live_ratio: Optional[float] = 0.5, writer_threads: int = 1,
                 wall_clock_ms: Optional[Callable[[], int]] = None) -> None:
        if not isinstance(data_dir, (str, os.PathLike)):
            raise TypeError(f"data_dir must be a str or os.PathLike, got {type(data_dir).__name__}")
        _check_int("num_shards", num_shards, 1)
        if not isinstance(fsync, str):
            raise TypeError(f"fsync must be a str, got {type(fsync).__name__}")
        if fsync not in ("always", "interval"):
            raise ValueError(f"fsync must be 'always' or 'interval', got {fsync!r}")
        _check_int("fsync_interval_ms", fsync_interval_ms, 1)
        _check_int("segment_bytes", segment_bytes, 1024)
        if not isinstance(repair, bool):
            raise TypeError(f"repair must be a bool, got {type(repair).__name__}")
        _check_int("tombstone_retention_ms", tombstone_retention_ms, 0)
        _check_int("offsets_retention_ms", offsets_retention_ms, 0, optional=True)
        _check_int("compact_after_segments", compact_after_segments, 1, optional=True)
        if compact_live_ratio is not None:
            if isinstance(compact_live_ratio, bool) or not isinstance(compact_live_ratio,
                                                                      (int, float)):
                raise TypeError(f"compact_live_ratio must be a number or None, got "
                                f"{type(compact_live_ratio).__name__}")
            if not 0 < compact_live_ratio <= 1:
                raise ValueError(f"compact_live_ratio must be in (0, 1], got {compact_live_ratio}")
        _check_int("writer_threads", writer_threads, 1)
        if wall_clock_ms is not None and not callable(wall_clock_ms):
            raise TypeError("wall_clock_ms must be callable or None")
        self.data_dir = os.fspath(data_dir)
        self.num_shards = num_shards
        self.fsync = fsync
        self.fsync_always = fsync == "always"
        self.fsync_interval_ms = fsync_interval_ms
        self.segment_bytes = segment_bytes
        self.repair = repair
        self.tombstone_retention_ms = tombstone_retention_ms
        self.offsets_retention_ms = offsets_retention_ms
        self.compact_after_segments = compact_after_segments
        self.compact_live_ratio = compact_live_ratio
        self._writers = [_Writer(self, i) for i in range(min(writer_threads, num_shards))]
        self.wall_clock_ms = wall_clock_ms or _wall_ms
        # Fault-injection hooks (tests): the writer's pwrite / fdatasync, and compaction's
        # `_fault(point, shard)` called at each of FAULT_POINTS.
        self._write = os.pwrite
        self._fsync = getattr(os, "fdatasync", os.fsync)
        self._fault: Optional[Callable[[str, int], None]] = None
        self._sync_pool: Optional[ThreadPoolExecutor] = None   # concurrent fsyncs of a batch
        self._sync_pool_lock = threading.Lock()
        self._closed = False
        self._lock = threading.Lock()
        self._logs: Dict[int, _ShardLog] = {}
        self._compactor: Optional[threading.Thread] = None
        self._compact_queue: List[int] = []
        self._compacting: Optional[int] = None   # the shard the compactor is working on
        self._compact_cond = threading.Condition(threading.Lock())
        os.makedirs(self.data_dir, exist_ok=True)
        self._check_meta()

    def _check_meta(self) -> None:
        path = os.path.join(self.data_dir, META_FILE)
        text = f"format={FORMAT_VERSION}\nnum_shards={self.num_shards}\n"
        try:
            with open(path) as f:
                found = f.read()
        except FileNotFoundError:
            tmp = path + ".tmp"
            with open(tmp, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            fsync_dir(self.data_dir)
            return
        if found != text:
            raise ValueError(f"data_dir {self.data_dir!r} holds a store written with "
                             f"{found.strip()!r}; this store has num_shards={self.num_shards} "
                             f"(format {FORMAT_VERSION}): pass the same num_shards")

    def _log(self, shard: int) -> _ShardLog:
        lg = self._logs.get(shard)
        if lg is None:
            with self._lock:
                lg = self._logs.get(shard)
                if lg is None:
                    lg = self._logs[shard] = _ShardLog(self, shard)
        return lg

    def _check_shard(self, shard) -> int:
        if isinstance(shard, bool) or not isinstance(shard, int):
            raise TypeError(f"shard must be an int, got {type(shard).__name__}")
        if not 0 <= shard < self.num_shards:
            raise ValueError(f"shard must be in [0, {self.num_shards}), got {shard}")
        return shard

    def shard_dir(self, shard: int) -> str:
        return self._log(self._check_shard(shard)).directory

    # -- the store interface ----------------------------------------------------------------
    def _submit(self, group_id: str, encode, done: Done) -> None:
        if self._closed:
            _call(done, Errors.NOT_COORDINATOR)
            return
        try:
            data = encode()
        except Exception as exc:      # values the format cannot hold (struct.error, ...)
            _rate_log.error(("encode", type(exc)), "group %s: cannot encode the record: %s",
                            group_id, exc)
            _call(done, Errors.UNKNOWN_SERVER_ERROR)
            return
        shard = shard_for(group_id, self.num_shards)
        self._writers[shard % len(self._writers)].submit(self._log(shard), data, done)

    def store_group(self, group_id: str, record: Optional[dict], done: Done) -> None:
        """Write a group's metadata record (None: a tombstone, the group was deleted and its
        offsets with it); `done(error)` once durable."""
        now = self.wall_clock_ms()
        if record is None:
            self._submit(group_id, lambda: encode_group_tombstone(group_id, now), done)
        else:
            self._submit(group_id, lambda: encode_group(group_id, record, now), done)

    def store_consumer_group(self, group_id: str, record: dict, done: Done) -> None:
        """Write a consumer group's changes (consumer_record's dict: the group's fields
        and the members that changed, or every member when `full`); a load folds them
        (fold_consumer_record). `done(error)` once durable."""
        now = self.wall_clock_ms()
        self._submit(group_id, lambda: encode_consumer_group(group_id, record, now), done)

    def store_offsets(self, group_id: str, offsets: dict, done: Done) -> None:
        """Write committed offsets {(topic, partition): OffsetAndMetadata}; `done(error)`
        once durable."""
        now = self.wall_clock_ms()
        self._submit(group_id, lambda: encode_offsets(group_id, offsets, now), done)

    def delete_offsets(self, group_id: str, partitions, done: Done) -> None:
        """Write tombstones for single offsets [(topic, partition)] (Kafka's OffsetDelete)."""
        now = self.wall_clock_ms()
        self._submit(group_id, lambda: encode_offset_tombstones(group_id, partitions, now), done)

    # -- topic ids ----------------------------------------------------------------------------
    @property
    def topic_ids_path(self) -> str:
        return os.path.join(self.data_dir, TOPIC_IDS_FILE)

    def load_topic_ids(self) -> Dict[str, bytes]:
        """The kept `{topic name: 16-byte UUID}` ({} before the first store_topic_ids).
        A damaged file raises ValueError: a topic's id must never change silently."""
        return _read_side_file(self.topic_ids_path, decode_topic_ids)

    def store_topic_ids(self, ids: Dict[str, bytes]) -> None:
        """Replace the kept topic ids with `ids`, durably (_replace_file)."""
        self._replace_file(self.topic_ids_path, encode_topic_ids(ids, self.wall_clock_ms()))

    def _replace_file(self, path: str, data: bytes) -> None:
        """`path` holds `data` (written aside, fsync'd, renamed over the file, the
        directory fsync'd): a crash leaves the old file or the new."""
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(self.data_dir)

    # -- dynamic group configs ----------------------------------------------------------------
    @property
    def group_configs_path(self) -> str:
        return os.path.join(self.data_dir, GROUP_CONFIGS_FILE)

    def load_group_configs(self) -> Dict[str, Dict[str, int]]:
        """The kept `{group id: {name: value}}` ({} before the first
        store_group_configs). A damaged file raises ValueError, as the topic ids' does."""
        return _read_side_file(self.group_configs_path, decode_group_configs)

    def store_group_configs(self, configs: Dict[str, Dict[str, int]]) -> None:
        """Replace every kept group config with `configs`, durably (_replace_file)."""
        self._replace_file(self.group_configs_path,
                           encode_group_configs(configs, self.wall_clock_ms()))

    # -- loading ------------------------------------------------------------------------------
    def load_shard(self, shard: int, *, repair: Optional[bool] = None
                   ) -> Tuple[Dict[str, Optional[dict]], Dict[str, dict]]:
        """Read a shard back: (groups {group_id: record or None (offsets only)},
        offsets {group_id: {(topic, partition): OffsetAndMetadata}}); the latest record per
        key wins and tombstones delete. A torn last record is truncated (logged); a corrupt
        record elsewhere raises CorruptLogError unless `repair` (default: the store's)."""
        lg = self._log(self._check_shard(shard))
        if repair is None:
            repair = self.repair
        with lg.compact_lock, lg.io_lock, _no_gc():
            state = lg.recover(full=True, repair=repair)
            # What a look at the closed segments would find (the active one included):
            # the first roll after a load need not read them again to know.
            lg.live_bytes = int(state.bytes * _live_share(state))
        return state.result()

    # -- compaction ------------------------------------------------------------------------
    def _fault_at(self, point: str, shard: int) -> None:
        if self._fault is not None:
            self._fault(point, shard)

    def compact(self, shard: int, *, now_ms: Optional[int] = None) -> dict:
        """Rewrite the shard's closed segments (after rolling the active one) as one segment
        holding the latest record per key: tombstones older than tombstone_retention_ms and
        the offsets of groups without members whose last write is older than
        offsets_retention_ms are dropped. Atomic: write `<first>.log.compact`, fsync, rename
        over the first segment, fsync the directory, then delete the other replaced segments
        oldest first (any crash leaves a log that loads to the same state).
        Returns {"segments", "bytes_before", "bytes_after", "records_before",
        "records_after", "expired_groups"}."""
        lg = self._log(self._check_shard(shard))
        now = self.wall_clock_ms() if now_ms is None else now_ms
        stats = {"segments": 0, "bytes_before": 0, "bytes_after": 0, "records_before": 0,
                 "records_after": 0, "expired_groups": 0}
        with lg.compact_lock:
            with lg.io_lock:
                lg.ensure_open()
                if lg.size > 0:
                    lg.roll()
                closed = [sid for sid in list_segments(lg.directory) if sid < lg.active_id]
            if not closed:
                return stats
            self._fault_at("compact_start", shard)
            state = ShardState()
            with _no_gc():
                with checked_segments(state) as check:
                    for sid in closed:
                        path = segment_path(lg.directory, sid)
                        _, end, reason = check(path)
                        if reason is not None:
                            raise CorruptLogError(path, end, reason, shard)
                out, expired = self._compacted(state, now)
            stats.update(segments=len(closed), bytes_before=state.bytes,
                         records_before=state.records, records_after=len(out),
                         bytes_after=sum(map(len, out)), expired_groups=expired)
            first = segment_path(lg.directory, closed[0])
            tmp = first[:-len(".log")] + COMPACT_SUFFIX
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                data = b"".join(out)
                view = memoryview(data)
                written = 0
                while written < len(data):
                    written += os.write(fd, view[written:])
                self._fault_at("after_write_before_fsync", shard)
                os.fsync(fd)
            except OSError:               # e.g. ENOSPC: the old segments stay as they were
                os.close(fd)
                fd = -1
                _unlink_quietly(tmp)
                raise
            finally:
                if fd >= 0:
                    os.close(fd)
            self._fault_at("after_fsync_before_rename", shard)
            os.replace(tmp, first)
            self._fault_at("after_rename_before_dirsync", shard)
            fsync_dir(lg.directory)
            self._fault_at("after_dirsync_before_delete", shard)
            for i, sid in enumerate(closed[1:]):    # oldest first: what is left is a suffix
                os.unlink(segment_path(lg.directory, sid))
                if i == 0:
                    self._fault_at("after_first_delete", shard)
            fsync_dir(lg.directory)
            lg.live_bytes = stats["bytes_after"]
            self._fault_at("compact_done", shard)
        log.info("shard %d: compacted %d segment(s): %d -> %d bytes, %d -> %d records, "
                 "%d expired group(s)", shard, len(closed), stats["bytes_before"],
                 stats["bytes_after"], stats["records_before"], stats["records_after"], expired)
        return stats

    def _compacted(self, state: ShardState, now: int) -> Tuple[List[bytes], int]:
        out: List[bytes] = []
        expired = 0
        retention = self.offsets_retention_ms
        order = list(state.groups)
        order += [gid for gid in state.offsets if gid not in state.groups]
        for gid in order:
            rec = state.groups.get(gid)
            offsets = state.offsets.get(gid)
            group_ms = state.group_ms.get(gid, 0)
            offsets_ms = state.offsets_ms.get(gid, 0)
            if rec is TOMBSTONE:
                if now - group_ms < self.tombstone_retention_ms:
                    out.append(encode_group_tombstone(gid, group_ms))
                rec = None
            if retention is not None and (rec is None or not rec.get("members")):
                last = max(offsets_ms, group_ms if rec is not None else 0)
                if (rec is not None or offsets) and last + retention <= now:
                    expired += 1
                    continue
            if rec is not None:           # (a consumer group's: its fold, one full record)
                encode = encode_consumer_group if rec.get("consumer") else encode_group
                out.append(encode(gid, rec, group_ms))
            if offsets:
                items = list(offsets.items())
                for i in range(0, len(items), OFFSETS_PER_COMPACTED_RECORD):
                    out.append(encode_offsets(
                        gid, dict(items[i:i + OFFSETS_PER_COMPACTED_RECORD]), offsets_ms))
        return out, expired

    def _segment_rolled(self, lg: _ShardLog) -> None:
        if not self._compaction_due(lg):
            return
        with self._compact_cond:
            if lg.shard not in self._compact_queue:
                self._compact_queue.append(lg.shard)
            if self._compactor is None:
                self._compactor = threading.Thread(target=self._compact_loop, daemon=True,
                                                   name="fastcoord-store-compactor")
                self._compactor.start()
            # notify_all: wait_for_compactions waits on the same condition.
            self._compact_cond.notify_all()

    def _compact_loop(self) -> None:
        while True:
            with self._compact_cond:
                while not self._compact_queue and not self._closed:
                    self._compact_cond.wait()
                if self._closed:
                    return
                shard = self._compact_queue.pop(0)
                self._compacting = shard
            try:
                self._compact_if_due(shard)
            finally:
                with self._compact_cond:
                    self._compacting = None
                    self._compact_cond.notify_all()

    def _compact_if_due(self, shard: int) -> None:
        lg = self._logs.get(shard)
        # A compaction's own roll queues its shard again (the replaced segments are
        # still listed then): look before rewriting the compacted segment for nothing.
        if lg is None or not self._compaction_due(lg):
            return
        if not self._segment_limit_reached(lg) and not self._mostly_dead(lg):
            return
        try:
            self.compact(shard)
        except Exception:
            log.exception("shard %d: background compaction failed", shard)
            return
        # Segments may have closed while it ran, their trigger racing with this
        # compaction's own listing: look again rather than wait for the next roll.
        if self._compaction_due(lg):
            with self._compact_cond:
                if shard not in self._compact_queue:
                    self._compact_queue.append(shard)

    def wait_for_compactions(self, timeout: Optional[float] = None) -> bool:
        """Block until no background compaction is queued or running (as after the last
        write, before a backup of the directory, say). True when idle; False when
        `timeout` seconds passed first. A compaction may start again at the next roll."""
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
                raise TypeError(f"timeout must be a number or None, got {type(timeout).__name__}")
            if timeout < 0:
                raise ValueError(f"timeout must be >= 0, got {timeout}")
        with self._compact_cond:
            return self._compact_cond.wait_for(
                lambda: (self._closed or not self._compact_queue) and self._compacting is None,
                timeout)

    def _compaction_due(self, lg: _ShardLog) -> bool:
        """Whether the shard has compact_after_segments closed segments, or its closed
        segments are worth a look at their live share (see _mostly_dead). Background
        compaction is off altogether when compact_after_segments is None."""
        if self.compact_after_segments is None:
            return False
        if self._segment_limit_reached(lg):
            return True
        if self.compact_live_ratio is None:
            return False
        closed = self._closed_bytes(lg)
        return closed >= self.segment_bytes and (lg.live_bytes is None
                                                 or closed > 2 * lg.live_bytes)

    def _segment_limit_reached(self, lg: _ShardLog) -> bool:
        limit = self.compact_after_segments
        if limit is None or lg.active_id < limit:
            return False
        return sum(1 for sid in list_segments(lg.directory) if sid < lg.active_id) >= limit

    def _closed_bytes(self, lg: _ShardLog) -> int:
        total = 0
        for sid in list_segments(lg.directory):
            if sid < lg.active_id:
                with contextlib.suppress(FileNotFoundError):    # deleted by a compaction
                    total += os.path.getsize(segment_path(lg.directory, sid))
        return total

    def _mostly_dead(self, lg: _ShardLog) -> bool:
        """Read the closed segments: whether their live share (live keys, i.e. groups and
        offsets, over the records and offset entries read) is below compact_live_ratio.
        Remembers the live bytes it implies, so the next look waits until the closed
        bytes have doubled past them (a shard of distinct keys is not reread every roll)."""
        state = ShardState()
        with lg.compact_lock:
            closed = [sid for sid in list_segments(lg.directory) if sid < lg.active_id]
            with _no_gc(), checked_segments(state) as check:
                for sid in closed:
                    if check(segment_path(lg.directory, sid))[2] is not None:
                        return False          # corrupt: compact() reports it, by count
            share = _live_share(state)
            lg.live_bytes = int(state.bytes * share)
        return share < self.compact_live_ratio

    # -- lifecycle ----------------------------------------------------------------------------
    def flush(self) -> None:
        """fsync every shard now (policy "interval")."""
        for lg in list(self._logs.values()):
            lg.sync()

    def _fsync_all(self, fds: List[int]) -> List[Optional[OSError]]:
        """fsync every fd, at the same time when there are several (the writer's batch
        spans shards); the error of each, or None."""
        def one(fd: int) -> Optional[OSError]:
            try:
                self._fsync(fd)
            except OSError as exc:
                return exc
            return None
        if len(fds) <= 1:
            return [one(fd) for fd in fds]
        with self._sync_pool_lock:
            if self._sync_pool is None:
                self._sync_pool = ThreadPoolExecutor(
                    max_workers=min(SYNC_THREADS, self.num_shards),
                    thread_name_prefix="fastcoord-store-fsync")
            pool = self._sync_pool
        # The calling writer syncs the first itself: one fewer hand-off for small batches.
        rest = [pool.submit(one, fd) for fd in fds[1:]]
        return [one(fds[0])] + [f.result() for f in rest]

    def close(self) -> None:
        """Finish every pending write, fsync, close the files; later writes fail with
        NOT_COORDINATOR."""
        if self._closed:
            return
        self._closed = True
        with self._compact_cond:
            self._compact_cond.notify_all()
            compactor = self._compactor
        if compactor is not None:
            compactor.join()
        for writer in self._writers:
            writer.close()
        with self._sync_pool_lock:
            pool, self._sync_pool = self._sync_pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        for lg in list(self._logs.values()):
            lg.close()

    def __enter__(self) -> "DurableStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _live_share(state: ShardState) -> float:
    """Live keys (groups, offsets) over the records and offset entries read."""
    live = len(state.groups) + sum(map(len, state.offsets.values()))
    return live / max(state.entries, 1)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def load_into(coord, store: DurableStore, shards=None, *, repair: Optional[bool] = None,
              threads: Optional[int] = None) -> dict:
    """Load shards from `store` into `coord`: begin_loading, load_group for every group,
    finish_loading (loaded members get fresh session deadlines there). `shards`: default
    every shard the coordinator owns. A shard whose log is corrupt is unloaded (it answers
    NOT_COORDINATOR) and, after every other shard is loaded, its CorruptLogError is raised.
    Returns {shard: (groups, offsets)} counts.

    Shards are read by `threads` threads (default: up to LOAD_THREADS), each installed
    in `coord` by the calling thread as soon as it is read: a shard that is slow to read
    (a long log, a slow disk, a damaged tail) holds up no other. The installs are
    serialised: the coordinator sees one shard's calls at a time, as before."""
    if store.num_shards != coord.config.num_shards:
        raise ValueError(f"store has num_shards={store.num_shards} but the coordinator has "
                         f"num_shards={coord.config.num_shards}")
    _check_int("threads", threads, 1, optional=True)
    if shards is None:
        shards = [s for s in range(store.num_shards) if coord.owns_shard(s)]
    shards = list(shards)
    for shard in shards:
        coord.begin_loading(shard)
    loaded = {}
    failed: List[CorruptLogError] = []
    workers = min(threads or LOAD_THREADS, max(len(shards), 1))
    with ThreadPoolExecutor(max_workers=workers,
                            thread_name_prefix="fastcoord-store-load") as pool:
        reads = {pool.submit(store.load_shard, shard, repair=repair): shard for shard in shards}
        for read in as_completed(reads):
            shard = reads[read]
            try:
                groups, offsets = read.result()
            except CorruptLogError as exc:
                log.error("shard %d not loaded: %s", shard, exc)
                coord.unload_shard(shard)
                failed.append(exc)
                continue
            except BaseException:
                for other in reads:
                    other.cancel()
                raise
            loaded[shard] = _install(coord, shard, groups, offsets)
    if failed:
        raise min(failed, key=lambda exc: shards.index(exc.shard))
    return dict(sorted(loaded.items()))


def _install(coord, shard: int, groups: dict, offsets: dict) -> Tuple[int, int]:
    """One read shard into the coordinator; its (groups, offsets) counts."""
    n_offsets = 0
    for gid, record in groups.items():
        offs = offsets.get(gid, {})
        n_offsets += len(offs)
        coord.load_group(gid, record, offs)
    coord.finish_loading(shard)
    return len(groups), n_offsets
