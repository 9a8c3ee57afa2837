"""The pipeline benchmarks' traces (generated once per parameters and generator source,
then cached) and the reading of a Spark event log's stage times: shared by
test_bench_pipeline.py and stage_split.py."""
from __future__ import annotations

import glob
import hashlib
import json
import os
import tempfile
from typing import Dict, List, Tuple

from fastcoord.pipeline import gen, whatif
from fastcoord.pipeline.trace import write_trace

# ~10 M events: 10k groups of mean size ~10 (about 100k members: the sizes are a floored
# Pareto draw, hence 10.6) for 205 s of trace time. The generator is closed-loop (its
# consumers react to the coordinator's answers), so that is what real consumers with
# this behaviour would send; measured mix on a 1,000-group sample: heartbeats 60%,
# commits 28%, joins 6%, syncs 5% (the forming of every group, and a rolling deploy in
# 30% of them), leaves 0.2%
FULL = dict(groups=10_000, members=10.6, duration_s=205, seed=1)
QUICK = dict(groups=30, members=6, duration_s=60, seed=1)


def trace_path(params) -> str:
    digest = hashlib.sha256()
    for module in (gen, whatif):         # the generator runs what-if's simulation
        with open(module.__file__, "rb") as f:
            digest.update(f.read())
    src = digest.hexdigest()[:12]
    d = os.environ.get("FASTCOORD_BENCH_CACHE") or os.path.join(tempfile.gettempdir(),
                                                                "fastcoord-bench")
    os.makedirs(d, exist_ok=True)
    name = "-".join(f"{k}{v}" for k, v in sorted(params.items()))
    path = os.path.join(d, f"trace-{name}-{src}.parquet")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}.tmp"
        write_trace(gen.generate(**params), tmp)
        os.replace(tmp, path)
    return path


def replay_stage_task_s(event_log_dir: str) -> List[Tuple[float, float, int]]:
    """Per round, in order: (the replay stage's task seconds, the read stage's, the
    replay stage's tasks), from Spark's event log: each task's executor run time as its
    TaskEnd event records it (the time a task held its executor core, its Python
    worker's work included), summed per stage. A round's replay stage is the one reading
    the shuffle by shard (a stage with a parent); its read stage (reading, validating
    and packing the trace) has none. Rounds run one after the other, so their stages
    are numbered in round order (adaptive execution runs the replay stage as a job of
    its own, so jobs do not mark the rounds)."""
    parents: Dict[int, list] = {}
    run_ms: Dict[int, int] = {}
    tasks: Dict[int, int] = {}
    for name in sorted(glob.glob(os.path.join(event_log_dir, "**", "*"), recursive=True)):
        if not os.path.isfile(name) or os.path.basename(name).startswith("."):
            continue
        with open(name) as f:
            for line in f:
                event = json.loads(line)
                kind = event.get("Event")
                if kind == "SparkListenerStageCompleted":
                    info = event["Stage Info"]
                    parents[info["Stage ID"]] = info.get("Parent IDs", [])
                elif kind == "SparkListenerTaskEnd":
                    stage = event["Stage ID"]
                    run_ms[stage] = run_ms.get(stage, 0) + \
                        event["Task Metrics"]["Executor Run Time"]
                    tasks[stage] = tasks.get(stage, 0) + 1
    ran = sorted(s for s in parents if s in run_ms)           # (not skipped)
    replay = [s for s in ran if parents[s]]
    read = [s for s in ran if not parents[s]]
    assert len(replay) == len(read), parents                # each round's two stages
    return [(run_ms[r] / 1000, run_ms[p] / 1000, tasks[r]) for r, p in zip(replay, read)]
