"""Golden replay: a generated trace and replay_local's tables on it, both twins, against
committed digests.

The digest is spark.tables_digest: the sha256 of the tables' uncompressed Arrow IPC
streams in the order of their names (expirations, groups, offsets, rebalances, responses), each
in replay_local's canonical order, its first 16 hex digits. The trace's digest is the
same function over {"trace": the generated table}, so a failure says whether the
generator's output moved (it runs a real coordinator too) or only the replay's.

"The 1,000-group trace" of the replay's commit messages is the pipeline benchmark's
trace at a tenth of its size: gen.generate(groups=1000, members=10.6, duration_s=205,
seed=1) (992,412 events; shard 7 holds 16,535). Its tables' digest was 84a33b72478bcd51
up to a9acf37 ("Every parked join and sync is answered when its member goes"): since
then five syncs parked when their member was removed are answered UNKNOWN_MEMBER_ID at
the removal, where they were never answered (error -1). Since the trace's offsets column
(a commit names its partitions) and the replay's offsets table and unfinished
rebalance rows (end -1), the digests are the ones below; without that column, that
table and those rows they are still c6b2ccc6502064f6 (trace) and 82f9a01354129716
(tables), 3a7f638ea518f8fe and 5f66c7b5c692ccb2 for the 100-group trace.

The traces' digests moved again when the trace gained its `connection` column (null
in a generated trace): without that column they are 074881bd7bb8cdb7 and
6b7cbb007655ec97, and the tables' digests did not move.

A change that moves a digest on purpose updates it here, saying why in its commit.
"""
import functools

import pytest

from fastcoord.pipeline import gen
from fastcoord.pipeline.replay import replay_local
from fastcoord.pipeline.spark import tables_digest

BENCH = dict(members=10.6, duration_s=205, seed=1)

# (generator arguments, the trace's digest, the replay tables' digest)
GOLDEN = {
    "100-groups": (dict(BENCH, groups=100), "625f0e3cf4b442fb", "1fc9240b72b91b96"),
    "1000-groups": (dict(BENCH, groups=1000), "1fd3467c1eb95924", "5f86f5dcf81134b2"),
}
CASES = [pytest.param("100-groups"),
         pytest.param("1000-groups", marks=pytest.mark.slow)]   # about 10 s to generate


@functools.lru_cache(maxsize=None)
def trace(case: str):
    """The case's trace, generated once for both twins."""
    return gen.generate(**GOLDEN[case][0])


@pytest.mark.parametrize("case", CASES)
def test_generated_trace_is_golden(case):
    assert tables_digest({"trace": trace(case)}) == GOLDEN[case][1]


@pytest.mark.parametrize("case", CASES)
def test_replay_tables_are_golden(impl, case):
    assert tables_digest(replay_local(trace(case), impl=impl)) == GOLDEN[case][2]


def test_digest_orders_by_name_and_ignores_chunking():
    """The digest is of the tables' contents in name order, not of the dict's order or
    how a table happens to be chunked; a changed value changes it."""
    import pyarrow as pa
    a = pa.table({"x": [1, 2, 3]})
    b = pa.table({"y": ["p", "q"]})
    chunked = pa.concat_tables([a.slice(0, 1), a.slice(1)])
    assert chunked.column("x").num_chunks == 2
    assert tables_digest({"a": a, "b": b}) == tables_digest({"b": b, "a": chunked})
    assert tables_digest({"a": a, "b": b}) != tables_digest({"a": pa.table({"x": [1, 2, 4]}),
                                                             "b": b})
