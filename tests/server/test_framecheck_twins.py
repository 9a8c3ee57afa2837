"""The native frame check (fastcoord/server/_native/framecheck.pyx: the schema compiled into a
flat program run in C) accepts and refuses exactly the frames the pure walk
(fastcoord/server/framecheck.py) does, and stops at the same position, for every
advertised (api, version): valid frames, every cut of them, null arrays, the boundary
counts at every position, and random mutations (hypothesis, derandomized). The server
uses it when the extensions are built, and the pure walk without them."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import fastcoord
from fastcoord.server import framecheck as pure
from fastcoord.server import protocol
from fastcoord.server.protocol import request_class

from helpers import frames as fs

EXAMPLES = 1500          # per hypothesis test: a few seconds each
needs_native = pytest.mark.skipif(not fastcoord.NATIVE_AVAILABLE,
                                  reason="a build without extensions has only the pure walk")


def _pure_verdict(cls, frame) -> int:
    """Where the pure walk ends, or -1 when it refuses the frame."""
    try:
        return pure.check_request(cls, frame)
    except pure.FrameError:
        return -1


class _Twins:
    """Both checkers' verdicts on frames of any advertised (api, version)."""

    def __init__(self) -> None:
        from fastcoord.server._native.framecheck import RequestProgram
        self.programs = {pair: RequestProgram(request_class(*pair)) for pair in fs.ADVERTISED}
        self.compared = self.refused = 0

    def agree(self, pair, frame: bytes) -> None:
        expected = _pure_verdict(request_class(*pair), frame)
        got = self.programs[pair].walk(frame)
        assert got == expected, (pair, frame.hex(), got, expected)
        self.compared += 1
        self.refused += expected < 0


@pytest.fixture(scope="module")
def twins():
    return _Twins()


@needs_native
def test_valid_frames_and_every_cut_of_them(twins):
    for pair in fs.ADVERTISED:
        for elements in (0, 1, 3):
            frame = fs.valid_frame(*pair, elements=elements)
            twins.agree(pair, frame)
            assert twins.programs[pair].walk(frame) == len(frame)
            for cut in range(len(frame)):
                twins.agree(pair, frame[:cut])
                # any contiguous buffer is walked as bytes is
                assert twins.programs[pair].walk(memoryview(frame)[:cut]) == \
                    twins.programs[pair].walk(frame[:cut])
    assert twins.refused > 1000


@needs_native
def test_null_arrays(twins):
    frames = fs.null_array_frames()
    before = twins.refused
    for api_key, version, _path, _nullable, frame in frames:
        twins.agree((api_key, version), frame)
    nullable = sum(1 for f in frames if f[3])
    assert twins.refused - before == len(frames) - nullable > 0


@needs_native
def test_boundary_counts_at_every_position(twins):
    """fs.boundary_mutations of each advertised (api, version)'s full frame: every
    edge count, as int16, int32 and varint, written over and inserted at each position."""
    before = twins.compared, twins.refused
    for pair in fs.ADVERTISED:
        for frame in fs.boundary_mutations(fs.valid_frame(*pair)):
            twins.agree(pair, frame)
    compared, refused = twins.compared - before[0], twins.refused - before[1]
    assert refused > 100_000 and compared - refused > 10_000


@needs_native
def test_random_mutations_checked_as_any_schema(twins):
    """A mutation of any (api, version)'s frame walked by any schema's checker: a frame
    that is far from valid for it, refused somewhere along the way."""
    frames = {pair: fs.valid_frame(*pair, elements=2) for pair in fs.ADVERTISED}
    before = twins.compared, twins.refused

    @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def run(data):
        frame = fs.mutated(data.draw, frames)
        twins.agree(data.draw(st.sampled_from(fs.ADVERTISED)), frame)

    run()
    compared, refused = twins.compared - before[0], twins.refused - before[1]
    assert compared == EXAMPLES and 500 < refused < compared


@needs_native
def test_random_mutations_checked_as_their_own_schema(twins):
    """Mutations of one (api, version)'s frame walked by that schema's checker (the
    frame's own one: most mutations stay near valid there, deep in nested arrays)."""
    frames = {pair: {pair: fs.valid_frame(*pair, elements=2)} for pair in fs.ADVERTISED}
    before = twins.compared, twins.refused

    @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(fs.ADVERTISED), st.data())
    def run(pair, data):
        twins.agree(pair, fs.mutated(data.draw, frames[pair]))

    run()
    compared, refused = twins.compared - before[0], twins.refused - before[1]
    assert compared == EXAMPLES and 500 < refused < compared - 100


@needs_native
def test_a_refusal_names_the_field_as_the_pure_walk_does():
    from fastcoord.server._native import framecheck as native

    frame = fs.valid_frame(11, 5)
    bad = frame[:14] + b"\xff\xfe" + frame[16:]            # group id length -2
    with pytest.raises(pure.FrameError, match="JoinGroupRequest.group_id: negative length -2"):
        native.check_request(request_class(11, 5), bad)
    huge = bytes.fromhex("0003000900000001ffff00ffffffff0f00000000")
    with pytest.raises(pure.FrameError, match=r"topics: array count 4294967294 with \d+ bytes"):
        native.check_request(request_class(3, 9), huge)


def test_the_server_checks_with_the_native_twin_when_built_and_the_pure_one_without():
    expected = "fastcoord.server._native.framecheck" if fastcoord.NATIVE_AVAILABLE \
        else "fastcoord.server.framecheck"
    assert protocol.check_request.__module__ == expected
    code = ("import fastcoord.server.protocol as p, sys; sys.path.insert(0, 'tests');"
            "from helpers import frames as fs;"
            "print(p.check_request.__module__, p.decode_request(fs.valid_frame(8, 7)).api_key)")
    env = dict(os.environ, FASTCOORD_NO_EXTENSIONS="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60, cwd=str(fs.ROOT))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["fastcoord.server.framecheck", "8"]
