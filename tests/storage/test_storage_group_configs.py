"""The group-configs file beside the shard logs: what store_group_configs writes,
load_group_configs reads back; a damaged file (a flipped bit, a cut, a hostile count)
is refused with its name and offset, never read as something else."""
import struct

import pytest

from fastcoord.storage import DurableStore
from fastcoord.storage.records import (GROUP_CONFIG, FrameError, decode_group_configs,
                                       encode_group_configs, frame)

CONFIGS = {"payments": {"consumer.session.timeout.ms": 55_000},
           "orders-é": {"consumer.heartbeat.interval.ms": 4_000,
                        "consumer.session.timeout.ms": 2**31 - 1}}


def test_round_trip_and_replace(tmp_path):
    store = DurableStore(tmp_path / "groups", num_shards=2)
    assert store.load_group_configs() == {}
    store.store_group_configs(CONFIGS)
    store.close()
    again = DurableStore(tmp_path / "groups", num_shards=2)
    assert again.load_group_configs() == CONFIGS
    again.store_group_configs({})                 # every config deleted
    assert again.load_group_configs() == {}
    again.close()


def test_a_damaged_file_is_refused(tmp_path):
    store = DurableStore(tmp_path / "groups", num_shards=2)
    store.store_group_configs(CONFIGS)
    path = tmp_path / "groups" / "group-configs.log"
    data = bytearray(path.read_bytes())
    flipped = bytearray(data)
    flipped[-2] ^= 0x10
    path.write_bytes(bytes(flipped))
    with pytest.raises(ValueError, match="group-configs.log: group configs: CRC mismatch"):
        store.load_group_configs()
    path.write_bytes(bytes(data[:-3]))
    with pytest.raises(ValueError, match="bad record length"):
        store.load_group_configs()
    store.close()


def test_a_hostile_count_allocates_nothing():
    head = struct.pack("<BqI", GROUP_CONFIG, 0, 1) + b"g"
    # a billion configs announced in a record of a few bytes
    with pytest.raises(FrameError, match="count runs past"):
        decode_group_configs(frame(head + struct.pack("<I", 10**9)))
    # bytes left after the announced configs
    whole = encode_group_configs({"g": {"consumer.session.timeout.ms": 50_000}}, 0)
    body = whole[8:] + b"\x00"
    with pytest.raises(FrameError, match="bytes left"):
        decode_group_configs(frame(body))
