"""Random churn of real confluent-kafka (librdkafka) consumers speaking the consumer
group protocol (KIP-848, `group.protocol=consumer`) to `fastcoord serve --data-dir`
(the durable store, fsync always), while the coordinator itself is restarted 2-3 times
at random moments on the same port and data directory: a clean stop (SIGTERM, exit 0)
or a SIGKILL, the next `serve` started within a couple of seconds, well within the
consumers' 6 s session (test_consumer_clients.SERVER_FLAGS; a loaded group's sessions
start when its shard is loaded). The consumers reconnect by themselves.

The churn and the checks are test_consumer_chaos_clients.py's (imported, not copied):
named, regex and static members killed, closed, started, bounced. Checked throughout,
whenever the server is up (ConsumerGroupDescribe every SAMPLE_S):

- no partition in two members' current assignments, nor in two targets, nor outside a
  member's subscription; no two running processes reporting one partition for longer
  than CLIENT_OVERLAP_S;
- epochs never go back, across a restart too (the group is durable): the group epoch,
  the assignment epoch, and the epoch of every member that is still there (by member
  id; a static member's -2, "left for now", aside);
- the group is there after each restart (a load answers no GROUP_ID_NOT_FOUND), and a
  committed offset survives each restart (OffsetFetch, exactly the last acknowledged
  commit of each partition; commits are made only where nothing else commits).

Some restarts are quiet: the churn pauses, QUIET_MIN_LIVE consumers at least run
(started if need be, a regex one among them), the group converges on the running
processes (Stable, every member at its target, no dead member left to time out), no
churn action for QUIET_PAD_S before the stop nor for QUIET_AFTER_S (longer than a
session) after the new server loaded, and the consumers commit just before the stop.
For those the promise of docs/consumer-protocol.md (Durability) is checked strictly: "a
restart within the session timeout costs no member its partitions": the same members
(ids), at the same epochs, the same group epoch, each holding the same partitions in
every snapshot of the window, and no consumer process reporting any change of its
assignment. The other restarts are hot: in the middle of the churn (a thread restarts
the server, HOT_LAG_S after it is due, while churn actions go on: a rebalance is often
under way), checked by the invariants above only. FASTCOORD_CHAOS_KILL_ON_CHANGE=1
makes each hot SIGKILL land the moment a describe shows the group changed (see
KILL_ON_CHANGE).

At the end the churn stops, FINAL_LIVE consumers are left, the group converges
(bounded): Stable, exactly the live processes, every subscribed partition assigned
once, each process holding what the coordinator says; the admin client agrees; the
committed offsets read back (OffsetFetch, and each live consumer's committed()); the
last server exits 0 and no server run logged a traceback (every run's log is kept:
server.log, server-2.log, ... in the test's tmp_path, which is also the data dir).

Seeded (printed; FASTCOORD_CHAOS_SEED replays the choices: the churn, the restarts'
moments, kinds, lags and gaps; FASTCOORD_CHAOS_SECONDS sets the churn's length). Real timing
varies run to run: the seed replays the choices, not the interleaving."""
from __future__ import annotations

import os
import random
import signal
import threading
import time
import traceback
from typing import Dict, List, Optional, Tuple

import pytest

from helpers.server import ClientCluster, RawConn, ServerProc
from test_consumer_chaos_clients import (
    BURST_P, CLIENT_OVERLAP_S, GROUP, NAMED, NOT_FOUND, REGEX,
    SAMPLE_S, START_BOUND, STATIC_IDS, STEP_S, TOPICS, UNREACHABLE_S, Chaos, Snapshot,
    Watcher, _fmt, client_overlaps, settle_and_check, snapshot_problems,
)
# the consumer-protocol client tests' timeouts: 6 s sessions, 300 ms heartbeats
from test_consumer_clients import SERVER_FLAGS

pytestmark = pytest.mark.clients

CHURN_S = float(os.environ.get("FASTCOORD_CHAOS_SECONDS") or 26)   # quiet windows aside
SESSION_S = 6.0         # SERVER_FLAGS' --group-consumer-session-timeout-ms
GAP_S = (0.2, 1.5)      # from the old server's end to the new one's start (~0.6 s)
STOP_TIMEOUT = 15.0     # a clean stop (SIGTERM) exits within this
QUIET_CONVERGE_S = 16.0  # a quiet window's convergence (a killed member's session: 6 s)
QUIET_MIN_LIVE = 4       # consumers running through a quiet restart, at least
QUIET_PAD_S = 4.0       # no churn action this long before a quiet restart's stop...
# ... nor this long after the new server loaded: longer than a session, so that a member
# that did not come back (a session starts at the load) is fenced within the window
QUIET_AFTER_S = SESSION_S + 1.5
# ConsumerGroupDescribe answers tolerated while a restart is under way (the new server
# may be listening, still loading): COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE,
# NOT_COORDINATOR. Once the new server has loaded, any error is a violation.
TRANSIENT = {14, 15, 16}
HOT_LAG_S = (0.0, 1.0)  # a hot restart's stop comes this long after it is due, churn going on
# FASTCOORD_CHAOS_KILL_ON_CHANGE=1: a hot SIGKILL comes the moment a describe shows the
# group changed (an epoch, a member's epoch, assignment or target; the watcher describes
# without pause until then, at most KILL_WAIT_S), not at a random moment: a describe
# shows what the store confirmed, so the change it showed must be there after the load
KILL_ON_CHANGE = os.environ.get("FASTCOORD_CHAOS_KILL_ON_CHANGE") == "1"
KILL_WAIT_S = 8.0

TP = Tuple[str, int]


class Restart:
    """One scheduled restart of the coordinator."""

    def __init__(self, at: float, kind: str, quiet: bool, gap: float, lag: float) -> None:
        self.at = at                # churn seconds (quiet windows aside)
        self.kind = kind            # "term" (clean stop, exit 0) or "kill" (SIGKILL)
        self.quiet = quiet
        self.gap = gap
        self.lag = lag              # (hot ones)
        self.started: Optional[float] = None    # test seconds: the stop sent
        self.down_s: Optional[float] = None     # the stop sent -> the new server loaded
        self.exit_code: Optional[int] = None
        self.killed_t: Optional[float] = None   # test seconds: the SIGKILL sent
        self.outcome = "not run"

    def __str__(self) -> str:
        when = f"at {self.started:.1f}s" if self.started is not None else \
            f"due at churn {self.at:.1f}s"
        down = f", down {self.down_s:.1f}s" if self.down_s is not None else ""
        lag = "" if self.quiet else f"lag {self.lag:.2f}s, "
        return (f"{'quiet' if self.quiet else 'hot'} {self.kind} {when} "
                f"({lag}gap {self.gap:.2f}s{down}, exit {self.exit_code}): {self.outcome}")


def schedule(rng: random.Random, churn_s: float) -> List[Restart]:
    """2 or 3 restarts, at least one clean stop and one SIGKILL, at least one quiet and
    one hot, one in each equal part of the churn."""
    n = rng.choice((2, 3))
    kinds = ["term", "kill"] + [rng.choice(("term", "kill")) for _ in range(n - 2)]
    quiet = [True, False] + [rng.random() < 0.5 for _ in range(n - 2)]
    rng.shuffle(kinds)
    rng.shuffle(quiet)
    part = churn_s / n
    return [Restart(i * part + rng.uniform(min(2.0, part / 3), part * 0.75), kinds[i],
                    quiet[i], rng.uniform(*GAP_S), rng.uniform(*HOT_LAG_S))
            for i in range(n)]


def _fingerprint(group) -> tuple:
    """What a write changes of a described group: its epochs, its members' epochs,
    assignments and targets."""
    return (group.group_epoch, group.assignment_epoch, tuple(sorted(
        (m.member_id, m.member_epoch, repr(m.assignment), repr(m.target_assignment))
        for m in group.members)))


class RestartWatcher(Watcher):
    """The chaos test's watcher, aware of the restarts: while one is under way (the
    server down or loading) a describe may fail or answer TRANSIENT; otherwise it
    answers within UNREACHABLE_S of the new server's load. It also checks that a
    member's epoch never goes back (by member id), and keeps every snapshot."""

    def __init__(self, chaos: "RestartChaos") -> None:
        super().__init__(chaos)
        self.history: List[Snapshot] = []
        self.member_epochs: Dict[str, Tuple[int, float]] = {}   # id -> (highest, when)
        self.transient = 0

    def run(self) -> None:
        chaos = self.chaos
        conn = None
        unanswered_since = None
        while not self.halt.is_set():
            try:
                if conn is None:
                    conn = RawConn(chaos.port, timeout=5)
                (group,) = conn.call(69, 0, {"group_ids": [GROUP],
                                             "include_authorized_operations": False}).groups
                self._kill_on_change(group)
            except Exception as exc:  # the server down, or reported if it lasts
                self.errors.append(f"{chaos.now():.2f}s {type(exc).__name__}: {exc}")
                if conn is not None:
                    conn.close()
                    conn = None
                if chaos.down.is_set():
                    unanswered_since = None
                else:
                    now = time.monotonic()
                    unanswered_since = unanswered_since or now
                    if now - max(unanswered_since, chaos.up_at) > UNREACHABLE_S:
                        self._fail(f"the coordinator did not answer a describe for "
                                   f"{UNREACHABLE_S}s (not restarting): {self.errors[-3:]}",
                                   self.last)
            else:
                unanswered_since = None
                if int(group.error_code) in TRANSIENT and chaos.down.is_set():
                    self.transient += 1
                else:
                    try:
                        self._check(Snapshot(chaos.now(), group))
                    except Exception:  # the test's own fault: reported
                        self._fail(f"the watcher failed:\n{traceback.format_exc()}", self.last)
                        return
            if chaos.armed is None:
                self.halt.wait(SAMPLE_S)
        if conn is not None:
            conn.close()

    def _kill_on_change(self, group) -> None:
        chaos = self.chaos
        with chaos.arm_lock:        # (disarmed, the pid is no longer to be signalled)
            armed = chaos.armed
            if armed is None or group.error_code:
                return
            seen = _fingerprint(group)
            if armed[0] is None:
                chaos.armed = (seen, armed[1])
            elif seen != armed[0]:
                os.kill(armed[1], signal.SIGKILL)
                chaos.armed = None
                chaos.killed_at = f"group epoch {seen[0]}"
                chaos.killed_on_change.set()

    def _check(self, snap: Snapshot) -> None:
        # (across a SIGKILL too: what a describe showed was stored, Kafka's committed
        # state, so the group loaded after it holds at least that)
        prev = self.last
        if snap.error == NOT_FOUND and prev is None:
            return
        if snap.error:
            problems = [f"describe answered error {snap.error}" +
                        (" (the group is gone)" if snap.error == NOT_FOUND else "")]
        else:
            problems = snapshot_problems(snap, prev) + self._member_epochs(snap)
        with self.lock:
            self.last = snap
            self.recent.append(snap)
            self.history.append(snap)
            self.count += 1
        if problems:
            restarts = [str(r) for r in self.chaos.restarts_done]
            self._fail("\n".join(problems) + f"\n  restarts so far: {restarts}", snap, prev)
        self._check_clients(snap.t)

    def _member_epochs(self, snap: Snapshot) -> List[str]:
        problems = []
        for m in snap.members:
            if m.epoch < 0:          # -2: a static member that left for now
                continue
            seen = self.member_epochs.get(m.member_id)
            if seen is not None and m.epoch < seen[0]:
                problems.append(f"MEMBER EPOCH WENT BACK: {m.client_id} {m.member_id} at "
                                f"epoch {m.epoch}, described at {seen[0]} at {seen[1]:.2f}s")
            else:
                self.member_epochs[m.member_id] = (m.epoch, snap.t)
        return problems

    def between(self, t0: float, t1: float) -> List[Snapshot]:
        with self.lock:
            return [s for s in self.history if t0 <= s.t <= t1]


class RestartChaos(Chaos):
    def __init__(self, cluster: ClientCluster, rng: random.Random, seed: int,
                 declared: List[str]) -> None:
        super().__init__(cluster, rng, seed)
        self.declared = declared
        self.port = cluster.server.port
        self.servers: List[Tuple[ServerProc, str]] = [(cluster.server, "run 1")]
        self.down = threading.Event()       # set from a stop until the next load
        self.up_at = time.monotonic()
        self.restarts_done: List[Restart] = []
        self.restart_errors: List[str] = []
        self.hot: Optional[threading.Thread] = None
        # KILL_ON_CHANGE: (what the watcher last described, server pid): the watcher
        # SIGKILLs the server on describing the group changed
        self.armed: Optional[Tuple[Optional[tuple], int]] = None
        self.killed_on_change = threading.Event()
        self.arm_lock = threading.Lock()
        self.killed_at = ""
        self.last_churn = time.monotonic()
        self.expected_offsets: Dict[TP, int] = {}
        self.commit_round = 0
        self.watcher = RestartWatcher(self)

    # -- churn -------------------------------------------------------------------
    def step(self) -> None:
        count = len(self.actions)
        super().step()
        if len(self.actions) != count:
            self.last_churn = time.monotonic()

    # -- restarts ----------------------------------------------------------------
    def restart(self, r: Restart) -> None:
        """Stop the server (SIGTERM or SIGKILL), wait r.gap, start `serve` again on the
        same port and data dir; check it is back with every acknowledged commit."""
        old = self.cluster.server
        r.started = self.now()
        self.restarts_done.append(r)
        self.down.set()
        began = time.monotonic()
        self.log(f"RESTART ({'quiet' if r.quiet else 'hot'}): {r.kind} the server "
                 f"(pid {old.proc.pid})")
        if r.kind == "term":
            r.exit_code = old.stop(timeout=STOP_TIMEOUT)
            stopped = f"exit {r.exit_code} after {time.monotonic() - began:.2f}s"
        else:
            stopped = "SIGKILLed"
            if KILL_ON_CHANGE and not r.quiet:
                self.killed_on_change.clear()
                with self.arm_lock:
                    self.armed = (None, old.proc.pid)
                if self.killed_on_change.wait(KILL_WAIT_S):
                    stopped = (f"SIGKILLed the moment a describe showed a change (at "
                               f"{self.killed_at}), {time.monotonic() - began:.2f}s after it "
                               f"was due")
                with self.arm_lock:
                    self.armed = None
            r.killed_t = self.now()
            old.proc.kill()
            old.proc.wait(timeout=10)
            r.exit_code = old.stop()
        self.servers[-1] = (old, f"{self.servers[-1][1]}, {r.kind}: {stopped}")
        if r.kind == "term" and r.exit_code != 0:
            self.restart_errors.append(f"a clean stop (SIGTERM) exited {r.exit_code}")
        if "Traceback" in old.log():
            self.restart_errors.append(f"a traceback in {old.log_path.name}")
        time.sleep(r.gap)
        log_path = self.cluster.tmp_path / f"server-{len(self.servers) + 1}.log"
        new = ServerProc(log_path, *SERVER_FLAGS, "--port", str(self.port),
                         topics=self.declared)
        self.servers.append((new, f"run {len(self.servers) + 1}"))
        assert new.port == self.port, new.first_line
        self.cluster.server = new
        r.down_s = time.monotonic() - began
        self.up_at = time.monotonic()
        self.down.clear()
        self.log(f"the server is back ({stopped}; down {r.down_s:.2f}s; "
                 f"{(new.loaded_line or '').strip()})")
        lost = self.offsets_lost()
        if lost:
            self.restart_errors.append(f"COMMITS LOST by the {r.kind} restart at "
                                       f"{r.started:.2f}s: {lost}")
        r.outcome = "back"

    def restart_checked(self, r: Restart) -> None:
        try:
            self.restart(r)
        except Exception:
            r.outcome = "failed"
            raise AssertionError(self.report(f"the {r.kind} restart failed:\n"
                                             f"{traceback.format_exc()}")) from None
        self.check_violation()

    def _restart_guarded(self, r: Restart) -> None:
        try:
            time.sleep(r.lag)
            self.restart(r)
        except Exception:
            r.outcome = "failed"
            self.restart_errors.append(f"the {r.kind} restart failed:\n{traceback.format_exc()}")
            self.down.clear()

    def hot_restart(self, r: Restart) -> None:
        """A restart in a thread while the churn goes on."""
        self.join_hot()
        self.hot = threading.Thread(target=self._restart_guarded, args=(r,),
                                    name="chaos-restart", daemon=True)
        self.hot.start()

    def join_hot(self) -> None:
        if self.hot is not None:
            self.hot.join(timeout=60)
            assert not self.hot.is_alive(), self.report("a restart did not end within 60s")
            self.hot = None

    def check_violation(self) -> None:
        super().check_violation()
        if self.restart_errors:
            raise AssertionError(self.report("RESTART\n" + "\n".join(self.restart_errors)))

    def wait_snapshot_after(self, t: float, bound: float = 10.0) -> Snapshot:
        deadline = time.monotonic() + bound
        while time.monotonic() < deadline:
            snap = self.watcher.latest()
            if snap is not None and snap.t > t:
                return snap
            self.check_violation()
            time.sleep(0.05)
        raise AssertionError(self.report(f"no describe answered within {bound}s after "
                                         f"{t:.2f}s"))

    def quiet_restart(self, r: Restart) -> None:
        """The churn paused: the group converged on the running processes, no action
        for QUIET_PAD_S, a commit, the restart, QUIET_AFTER_S of nothing: the members
        keep their ids, epochs and partitions, throughout, and the processes never see
        their assignment change. Downgraded to a restart checked as a hot one when the
        group does not converge in QUIET_CONVERGE_S (logged, printed)."""
        self.join_hot()
        self.check_violation()
        self.log("quiet window: churn paused")
        self.top_up()
        deadline = time.monotonic() + QUIET_CONVERGE_S
        since = self.now()
        while True:
            before = self.watcher.latest()
            off = self.converged(self.running(), since)
            pad = QUIET_PAD_S - (time.monotonic() - self.last_churn)
            if off is None and pad <= 0 and self.watcher.latest() is before:
                break
            if time.monotonic() > deadline:
                self.log(f"quiet window not reached in {QUIET_CONVERGE_S}s ({off}): "
                         f"the {r.kind} restart is checked as a hot one")
                r.quiet = False
                self.restart_checked(r)
                return
            self.check_violation()
            time.sleep(0.1)
        held = {c.name: (c.proc.assignment, len(c.proc.history)) for c in self.running()}
        self.commit_all()
        self.restart_checked(r)
        after = self.wait_snapshot_after(self.now() + QUIET_AFTER_S, bound=QUIET_AFTER_S + 10)
        problems = []
        if after.group_epoch != before.group_epoch or \
                after.assignment_epoch != before.assignment_epoch:
            problems.append(f"the group epoch moved over a quiet restart: "
                            f"{before.group_epoch}/{before.assignment_epoch} -> "
                            f"{after.group_epoch}/{after.assignment_epoch}")
        was = {m.member_id: m for m in before.members}
        for snap in self.watcher.between(before.t, after.t):
            now = {m.member_id: m for m in snap.members}
            if now.keys() != was.keys():
                problems.append(f"at {snap.t:.2f}s the members are {sorted(now)}, before the "
                                f"restart {sorted(was)}")
            for member_id, m in was.items():
                if member_id in now and (now[member_id].assigned != m.assigned
                                         or now[member_id].epoch != m.epoch):
                    problems.append(
                        f"at {snap.t:.2f}s {m.client_id} holds {_fmt(now[member_id].assigned)} "
                        f"at epoch {now[member_id].epoch}; before the restart "
                        f"{_fmt(m.assigned)} at epoch {m.epoch}")
            if problems:
                problems.append(f"snapshot:\n  {snap}")
                break
        for c in self.running():
            if (c.proc.assignment, len(c.proc.history)) != held[c.name]:
                problems.append(f"the process {c.name} reported "
                                f"{[_fmt(h) for _, h in c.proc.history[held[c.name][1]:]]} "
                                f"over the quiet restart; it held {_fmt(held[c.name][0])}")
        r.outcome = "kept every member's partitions" if not problems else "VIOLATION"
        if problems:
            raise AssertionError(self.report(
                f"QUIET RESTART ({r}): a stable member lost or changed its partitions "
                f"(the restart should cost no member its partitions)\n" + "\n".join(problems) +
                f"\n  before the restart: {before}\n  after: {after}"))
        self.log(f"quiet {r.kind} restart kept {len(was)} members "
                 f"({', '.join(sorted(m.client_id for m in was.values()))}), their epochs "
                 f"and partitions")

    def top_up(self) -> None:
        """QUIET_MIN_LIVE running consumers at least for a quiet restart to keep: a regex
        one if none runs, the static one if its instance id is free again, else named
        ones (started before the quiet pad: they converge before the restart)."""
        for instance_id, (_, gone, stopped) in sorted(self.pending.items()):
            if len(self.running()) < QUIET_MIN_LIVE and self.released(instance_id, gone,
                                                                      stopped):
                del self.pending[instance_id]
                self.start(NAMED, instance_id)
        while len(self.running()) < QUIET_MIN_LIVE:
            regex = not any(c.subscription == REGEX for c in self.running())
            self.start(REGEX if regex or self.rng.random() < 0.3 else NAMED)
        self.last_churn = time.monotonic()

    # -- commits -----------------------------------------------------------------
    def commit_all(self) -> None:
        """Each running consumer commits an offset of its own for each partition it
        holds (only here, where the group is stable and nothing else commits)."""
        self.commit_round += 1
        for c in self.running():
            held = sorted(c.proc.assignment or ())
            offsets = {tp: self.commit_round * 1000 + i for i, tp in enumerate(held)}
            if offsets:
                try:
                    c.proc.commit(offsets)      # acknowledged: durable from here
                except AssertionError as exc:
                    raise AssertionError(self.report(f"a commit of {c.name} in a stable "
                                                     f"group failed: {exc}")) from None
                self.expected_offsets.update(offsets)
        self.log(f"commit round {self.commit_round}: {len(self.expected_offsets)} "
                 f"partitions committed")

    def fetch_offsets(self) -> Dict[TP, int]:
        """OffsetFetch (v8, every topic) of the group, as an admin; a few tries while
        the coordinator says it is loading."""
        for attempt in range(50):
            conn = RawConn(self.port, timeout=10)
            try:
                answer = conn.call(9, 8, {"groups": [{"group_id": GROUP, "topics": None}],
                                          "require_stable": False})
            finally:
                conn.close()
            (group,) = answer.groups
            if int(group.error_code) in TRANSIENT and attempt < 49:
                time.sleep(0.1)
                continue
            assert group.error_code == 0, f"OffsetFetch answered {group.error_code}"
            got = {}
            for t in group.topics:
                for p in t.partitions:
                    assert p.error_code == 0, f"OffsetFetch {t.name}-{p.partition_index}: " \
                                              f"{p.error_code}"
                    if p.committed_offset >= 0:
                        got[(t.name, p.partition_index)] = p.committed_offset
            return got
        raise AssertionError("unreachable")

    def offsets_lost(self) -> Dict[TP, Tuple[int, Optional[int]]]:
        """(committed, read back) of each acknowledged commit not read back."""
        got = self.fetch_offsets()
        return {tp: (o, got.get(tp)) for tp, o in self.expected_offsets.items()
                if got.get(tp) != o}

    def report(self, headline: str) -> str:
        current = self.cluster.server
        runs = "\n".join(f"--- server {how} ({server.log_path.name})\n"
                         f"{server.log()[-2000:]}"
                         for server, how in self.servers if server is not current)
        restarts = "\n  ".join(str(r) for r in self.restarts_done) or "none"
        return (super().report(headline) + f"\nrestarts:\n  {restarts}\n"
                f"committed offsets expected: {sorted(self.expected_offsets.items())}\n"
                f"earlier server runs (each run's whole log in {self.cluster.tmp_path}):\n"
                f"{runs}")


@pytest.mark.slow
def test_restarts_of_serve_under_random_churn_cost_no_member_its_partitions(tmp_path):
    seed = int(os.environ.get("FASTCOORD_CHAOS_SEED") or int.from_bytes(os.urandom(4), "little"))
    print(f"chaos seed {seed}: FASTCOORD_CHAOS_SEED={seed} replays the churn and restarts")
    began = time.monotonic()
    declared = [f"{t}:{n}" for t, n in TOPICS.items()]
    with ClientCluster(tmp_path, *SERVER_FLAGS, topics=declared) as cluster:
        assert "store durable" in cluster.server.first_line, cluster.server.first_line
        chaos = RestartChaos(cluster, random.Random(seed), seed, declared)
        restarts = schedule(chaos.rng, CHURN_S)
        print("restarts planned: " + "; ".join(str(r) for r in restarts))
        chaos.watcher.start()
        try:
            for subscription, instance_id in [(NAMED, None), (NAMED, None), (REGEX, None),
                                              (NAMED, STATIC_IDS[0]), (NAMED, None)]:
                chaos.start(subscription, instance_id)
            took = chaos.wait_converged(chaos.running(), START_BOUND, "the initial five")
            chaos.log(f"the initial five converged in {took:.1f}s")
            chaos.commit_all()
            assert chaos.offsets_lost() == {}, chaos.report("a commit did not read back")

            churn_began = time.monotonic()
            paused = 0.0
            while chaos.watcher.violation is None and not chaos.restart_errors:
                churned = time.monotonic() - churn_began - paused
                if churned >= CHURN_S:
                    break
                if restarts and churned >= restarts[0].at:
                    r = restarts.pop(0)
                    if r.quiet:
                        quiet_began = time.monotonic()
                        chaos.quiet_restart(r)
                        paused += time.monotonic() - quiet_began
                        chaos.log("churn resumed")
                    else:
                        chaos.hot_restart(r)
                    continue
                burst = chaos.rng.random() < BURST_P
                time.sleep(chaos.rng.uniform(0.0, 0.2) if burst else chaos.rng.uniform(*STEP_S))
                chaos.step()
            chaos.join_hot()
            chaos.check_violation()
            assert not restarts, chaos.report(f"restarts not run: {restarts}")

            live = settle_and_check(chaos, cluster)

            # every acknowledged commit survived the restarts: on the wire, and as the
            # live consumers read their own partitions' offsets
            lost = chaos.offsets_lost()
            assert not lost, chaos.report(f"COMMITS LOST (committed, read back): {lost}")
            for c in live:
                mine = sorted(c.proc.assignment)
                read = c.proc.committed(mine)
                want = {tp: chaos.expected_offsets.get(tp) for tp in mine}
                assert read == want, chaos.report(
                    f"{c.name} reads the committed offsets {read}, expected {want}")

            fatal = {c.name: c.proc.poll_errors for c in chaos.consumers
                     if any("_FATAL" in e for e in c.proc.poll_errors)}
            assert not fatal, chaos.report(f"fatal consumer errors: {fatal}")
            chaos.check_violation()

            # the last server stops cleanly (ClientCluster's exit checks it again)
            for c in chaos.consumers:
                c.proc.close(timeout=10)
            chaos.down.set()            # (the watcher expects no answer from here)
            code = cluster.server.stop()
            assert code == 0, chaos.report(f"the last server exited {code}")
        finally:
            chaos.watcher.stop()
        tracebacks = [s.log_path.name for s, _ in chaos.servers if "Traceback" in s.log()]
        assert not tracebacks, chaos.report(f"a traceback in the server logs {tracebacks}")
        print(f"chaos seed {seed}: {chaos.watcher.count} snapshots, {len(chaos.actions)} "
              f"actions, {len(chaos.consumers)} processes, longest client-view overlap sampled "
              f"{chaos.watcher.max_overlap:.2f}s, describe errors {len(chaos.watcher.errors)} "
              f"(transient answers {chaos.watcher.transient}), "
              f"{len(chaos.expected_offsets)} committed offsets read back")
        print("restarts:\n  " + "\n  ".join(str(r) for r in chaos.restarts_done))
        overlaps = client_overlaps(chaos.consumers, time.monotonic())
        print(f"client-view overlaps from the reports' history (longest first): "
              f"{[(round(d, 3), tp, a, b) for d, tp, a, b in overlaps[:5]]}")
        assert not overlaps or overlaps[0][0] <= CLIENT_OVERLAP_S, chaos.report(
            f"two processes reported holding one partition at once (seconds, partition, "
            f"processes): {overlaps[:5]}")
        print("\n".join(chaos.actions))
        print(f"final: {chaos.watcher.latest()}")
        print(f"wall time {time.monotonic() - began:.1f}s")
