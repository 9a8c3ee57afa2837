"""Speed of light: C kernels doing the minimum work of each fastcoord hot path.

Built with cffi in API mode the first time this module is imported, into a cache
directory keyed by the source's hash (``$FASTCOORD_FLOORS_DIR`` or the temp dir), so
the suite compiles them itself on a fresh machine (it needs cffi, from the dev extra,
and a C compiler, which building fastcoord needs anyway).

Kernels (one call does a whole array of operations; no Python per operation):
  batch_store    heartbeat_batch floor: for each (slot, generation) pair, a random access
                 into an array of 40-byte member structs, compare the generation, store
                 the new session deadline.
  hash_store     per-call heartbeat floor: for each 64-bit key, an open-addressing hash
                 lookup (multiplicative hash, linear probing) giving the slot, then the
                 same generation check and store.
  relink         timer floor: for each node, unlink it from its doubly linked bucket list
                 and link it at the tail of its new deadline's bucket (a reschedule).
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import pathlib
import sys
import tempfile

import numpy as np

CDEF = """
typedef struct { int64_t deadline; int64_t last_hb; int32_t generation; int32_t flags;
                 int64_t group; int64_t member; } member_t;
typedef struct node_s { struct node_s *prev, *next; int64_t deadline; int64_t tag; } node_t;
int64_t batch_store(member_t *members, const int64_t *slots, const int32_t *gens,
                    int64_t n, int64_t now);
int64_t hash_build(uint64_t *keys, int64_t *vals, int64_t cap, const uint64_t *ks, int64_t n);
int64_t hash_store(const uint64_t *keys, const int64_t *vals, int64_t cap, member_t *members,
                   const uint64_t *ks, const int32_t *gens, int64_t n, int64_t now);
void list_init(node_t *heads, int64_t nbuckets, node_t *nodes, int64_t n,
               const int64_t *deadlines);
int64_t relink(node_t *heads, int64_t nbuckets, node_t *nodes, const int64_t *order,
               const int64_t *deadlines, int64_t n);
"""

SOURCE = r"""
#include <stdint.h>
typedef struct { int64_t deadline; int64_t last_hb; int32_t generation; int32_t flags;
                 int64_t group; int64_t member; } member_t;
typedef struct node_s { struct node_s *prev, *next; int64_t deadline; int64_t tag; } node_t;

_Static_assert(sizeof(member_t) == 40, "40-byte member structs");
_Static_assert(sizeof(node_t) == 32, "32-byte timer nodes");

int64_t batch_store(member_t *members, const int64_t *slots, const int32_t *gens,
                    int64_t n, int64_t now) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        member_t *m = &members[slots[i]];
        if (m->generation == gens[i]) { m->deadline = now + 30000; m->last_hb = now; }
        else bad++;
    }
    return bad;
}

static inline uint64_t mix(uint64_t k) { return k * 0x9E3779B97F4A7C15ull; }

int64_t hash_build(uint64_t *keys, int64_t *vals, int64_t cap, const uint64_t *ks, int64_t n) {
    /* cap: a power of two > n; key 0 marks an empty cell */
    uint64_t mask = (uint64_t)cap - 1;
    for (int64_t i = 0; i < n; i++) {
        uint64_t h = mix(ks[i]) >> 20 & mask;
        while (keys[h]) h = (h + 1) & mask;
        keys[h] = ks[i]; vals[h] = i;
    }
    return n;
}

int64_t hash_store(const uint64_t *keys, const int64_t *vals, int64_t cap, member_t *members,
                   const uint64_t *ks, const int32_t *gens, int64_t n, int64_t now) {
    uint64_t mask = (uint64_t)cap - 1;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t k = ks[i], h = mix(k) >> 20 & mask;
        while (keys[h] != k) {
            if (!keys[h]) break;
            h = (h + 1) & mask;
        }
        if (keys[h] != k) { bad++; continue; }
        member_t *m = &members[vals[h]];
        if (m->generation == gens[i]) { m->deadline = now + 30000; m->last_hb = now; }
        else bad++;
    }
    return bad;
}

static inline void link_tail(node_t *head, node_t *x) {
    node_t *last = head->prev;
    x->prev = last; x->next = head; last->next = x; head->prev = x;
}

void list_init(node_t *heads, int64_t nbuckets, node_t *nodes, int64_t n,
               const int64_t *deadlines) {
    for (int64_t b = 0; b < nbuckets; b++) { heads[b].prev = heads[b].next = &heads[b]; }
    for (int64_t i = 0; i < n; i++) {
        nodes[i].deadline = deadlines[i]; nodes[i].tag = i;
        link_tail(&heads[deadlines[i] & (nbuckets - 1)], &nodes[i]);
    }
}

int64_t relink(node_t *heads, int64_t nbuckets, node_t *nodes, const int64_t *order,
               const int64_t *deadlines, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        node_t *x = &nodes[order[i]];
        x->prev->next = x->next; x->next->prev = x->prev;      /* unlink: O(1) cancel */
        x->deadline = deadlines[i];
        link_tail(&heads[x->deadline & (nbuckets - 1)], x);    /* link: schedule */
    }
    return n;
}
"""

MEMBER = np.dtype([("deadline", "<i8"), ("last_hb", "<i8"), ("generation", "<i4"),
                   ("flags", "<i4"), ("group", "<i8"), ("member", "<i8")])
assert MEMBER.itemsize == 40
NBUCKETS = 1 << 9            # a 512-slot wheel level


def _build():
    tag = hashlib.sha256((CDEF + SOURCE + sys.version).encode()).hexdigest()[:12]
    name = f"_fastcoord_floors_{tag}"
    folder = pathlib.Path(os.environ.get("FASTCOORD_FLOORS_DIR")
                          or pathlib.Path(tempfile.gettempdir()) / "fastcoord-floors")
    folder.mkdir(parents=True, exist_ok=True)
    found = list(folder.glob(f"{name}*.so"))
    if not found:                      # build privately, then rename: safe when racing
        import shutil
        import cffi
        ffi = cffi.FFI()
        ffi.cdef(CDEF)
        ffi.set_source(name, SOURCE, extra_compile_args=["-O2"])
        work = tempfile.mkdtemp(prefix="build-", dir=folder)
        try:
            built = pathlib.Path(ffi.compile(tmpdir=work, verbose=False))
            os.replace(built, folder / built.name)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        found = list(folder.glob(f"{name}*.so"))
    spec = importlib.util.spec_from_file_location(name, found[0])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_mod = _build()
ffi, lib = _mod.ffi, _mod.lib


def _ptr(ctype, arr: np.ndarray):
    assert arr.flags.c_contiguous
    return ffi.cast(ctype, arr.ctypes.data)


class BatchFloor:
    """`members` 40-byte structs; run() heartbeats every member once, in random order."""

    def __init__(self, members: int, seed: int = 1):
        rng = np.random.default_rng(seed)
        self.members = np.zeros(members, MEMBER)
        self.members["generation"] = 1
        self.slots = np.ascontiguousarray(rng.permutation(members).astype(np.int64))
        self.gens = np.ones(members, np.int32)
        self.now = 0

    def run(self) -> int:
        self.now += 1
        return lib.batch_store(_ptr("member_t *", self.members), _ptr("int64_t *", self.slots),
                               _ptr("int32_t *", self.gens), len(self.slots), self.now)


class HashFloor(BatchFloor):
    """Keys looked up in an open-addressing table (load <= 0.5), then the store."""

    def __init__(self, members: int, seed: int = 1):
        super().__init__(members, seed)
        rng = np.random.default_rng(seed + 1)
        keys = np.unique(rng.integers(1, 2**63, size=members + 64, dtype=np.uint64))
        keys = rng.permutation(keys)[:members]
        assert len(keys) == members
        cap = 1
        while cap < 2 * members:
            cap *= 2
        self.cap = cap
        self.tkeys = np.zeros(cap, np.uint64)
        self.tvals = np.zeros(cap, np.int64)
        lib.hash_build(_ptr("uint64_t *", self.tkeys), _ptr("int64_t *", self.tvals), cap,
                       _ptr("uint64_t *", np.ascontiguousarray(keys)), members)
        self.calls = np.ascontiguousarray(keys[self.slots])

    def run(self) -> int:
        self.now += 1
        return lib.hash_store(_ptr("uint64_t *", self.tkeys), _ptr("int64_t *", self.tvals),
                              self.cap, _ptr("member_t *", self.members),
                              _ptr("uint64_t *", self.calls), _ptr("int32_t *", self.gens),
                              len(self.calls), self.now)


class TimerFloor:
    """`n` 32-byte nodes in 512 doubly linked buckets; run() relinks every node once."""

    def __init__(self, n: int, seed: int = 1):
        rng = np.random.default_rng(seed)
        self.heads = ffi.new("node_t[]", NBUCKETS)
        self.nodes = ffi.new("node_t[]", n)
        start = np.ascontiguousarray(rng.integers(0, 30_000, n, dtype=np.int64))
        lib.list_init(self.heads, NBUCKETS, self.nodes, n, _ptr("int64_t *", start))
        self.order = np.ascontiguousarray(rng.permutation(n).astype(np.int64))
        self.deadlines = np.ascontiguousarray(rng.integers(0, 30_000, n, dtype=np.int64))
        self.n = n

    def run(self) -> int:
        return lib.relink(self.heads, NBUCKETS, self.nodes, _ptr("int64_t *", self.order),
                          _ptr("int64_t *", self.deadlines), self.n)


FLOORS = {"heartbeat_batch": BatchFloor, "heartbeat": HashFloor, "timer_reschedule": TimerFloor}
