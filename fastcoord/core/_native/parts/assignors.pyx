"""The consumer group protocol's assignors in C (twin: _pure/assignors.py).

Read fastcoord/core/_pure/assignors.py first: it is the specification. Here the input
is converted once into int arrays: topics (the existing ones some member subscribes to)
numbered by name, each topic's partitions a slice of one flat owner array (member
index or -1), each member's subscribed topic indices, each topic's subscribers in
member order. The assignors run on those arrays without a Python object per
partition; the result's dicts and lists are built at the end.
"""
from libc.stdint cimport int32_t, int64_t, uint64_t
from libc.stdlib cimport qsort
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_CheckExact
from cpython.object cimport PyObject
from cpython.mem cimport PyMem_Calloc, PyMem_Realloc, PyMem_Free


cdef extern from "Python.h":
    # the result's lists are made at their final size and filled in place: each slot
    # is set once, with a new reference, before the list is returned
    PyObject* _asg_list_new "PyList_New"(Py_ssize_t size) except NULL
    PyObject* _asg_list_item "PyList_GET_ITEM"(PyObject* items, Py_ssize_t at)
    void _asg_list_set "PyList_SET_ITEM"(PyObject* items, Py_ssize_t at, PyObject* item)
    int _asg_dict_set "PyDict_SetItem"(object mapping, object key, PyObject* value) except -1
    void _asg_incref "Py_INCREF"(PyObject* item)
    void _asg_decref "Py_DECREF"(PyObject* item)
    # the cyclic collector's switch (public since 3.10): each returns the previous state
    int _asg_gc_disable "PyGC_Disable"()
    int _asg_gc_enable "PyGC_Enable"()

from collections.abc import Mapping as _AsgMapping

from fastcoord.core._pure.assignors import ASSIGNORS
from fastcoord.core._pure import assignors as _asg_pure

cdef int _ASG_MAX_BALANCE_PASSES = _asg_pure.MAX_BALANCE_PASSES
# test hook (_assignors_test_sort_limit): the balancer's counting sort takes load spans
# up to this many values, wider ones go through qsort
cdef int64_t _asg_tally_limit = 1 << 62


def _assignors_test_sort_limit(int64_t limit):
    """Tests: cap the load span the counting sort handles (0: always qsort)."""
    global _asg_tally_limit
    _asg_tally_limit = limit


cdef struct asg_member_key:
    int64_t size
    int32_t member


cdef struct asg_topic_key:
    int64_t partitions
    int64_t subscribers
    int32_t topic


cdef int _asg_cmp_member(const void* a, const void* b) noexcept nogil:
    # load ascending, then member index ascending
    cdef const asg_member_key* x = <const asg_member_key*>a
    cdef const asg_member_key* y = <const asg_member_key*>b
    if x.size != y.size:
        return -1 if x.size < y.size else 1
    return -1 if x.member < y.member else (1 if x.member > y.member else 0)


cdef int _asg_cmp_topic(const void* a, const void* b) noexcept nogil:
    # partitions per subscriber descending (exact: cross-multiplied), then subscriber
    # count ascending, then topic index (name order) ascending
    cdef const asg_topic_key* x = <const asg_topic_key*>a
    cdef const asg_topic_key* y = <const asg_topic_key*>b
    cdef int64_t lhs = y.partitions * x.subscribers
    cdef int64_t rhs = x.partitions * y.subscribers
    if lhs != rhs:
        return -1 if lhs < rhs else 1
    if x.subscribers != y.subscribers:
        return -1 if x.subscribers < y.subscribers else 1
    return -1 if x.topic < y.topic else (1 if x.topic > y.topic else 0)


cdef class _AsgGroup:
    """A group converted to arrays (C blocks, freed with this object)."""
    cdef list member_ids
    cdef list topic_names
    cdef int32_t n_members
    cdef int32_t n_topics
    cdef int64_t total
    cdef void** blocks
    cdef Py_ssize_t n_blocks
    cdef Py_ssize_t blocks_cap
    cdef int64_t* toff      # [n_topics + 1]: topic t's partitions are owner[toff[t]:toff[t+1]]
    cdef int32_t* owner     # [total]
    cdef int32_t* soff      # [n_topics + 1]: topic t's subscribers are subs[soff[t]:soff[t+1]]
    cdef int32_t* subs      # member indices, ascending within a topic

    def __dealloc__(self):
        cdef Py_ssize_t i
        for i in range(self.n_blocks):
            PyMem_Free(self.blocks[i])
        PyMem_Free(self.blocks)

    cdef void* _block(self, int64_t n, size_t size) except NULL:
        """n zeroed items of `size` bytes (one at least), freed with this object."""
        cdef void** grown
        cdef void* block
        if self.n_blocks == self.blocks_cap:
            grown = <void**>PyMem_Realloc(self.blocks, (2 * self.blocks_cap + 16) * sizeof(void*))
            if grown == NULL:
                raise MemoryError()
            self.blocks = grown
            self.blocks_cap = 2 * self.blocks_cap + 16
        if n < 1:
            n = 1
        block = PyMem_Calloc(<size_t>n, size) if <uint64_t>n <= (<size_t>-1) // size else NULL
        if block == NULL:
            raise MemoryError()
        self.blocks[self.n_blocks] = block
        self.n_blocks += 1
        return block

    cdef int32_t* _buffer(self, int64_t n, int32_t fill) except NULL:
        cdef int32_t* buffer = <int32_t*>self._block(n, sizeof(int32_t))
        cdef int64_t i
        if fill != 0:
            for i in range(n):
                buffer[i] = fill
        return buffer

    cdef int64_t* _buffer64(self, int64_t n) except NULL:
        return <int64_t*>self._block(n, sizeof(int64_t))


cdef _AsgGroup _asg_convert(list member_ids, list subscriptions, dict topics, current):
    """Number the topics, count the subscribers, read `current` into the owner array
    (the rules of _pure's _current_owners). Members mostly share a subscription (the
    same object, or an equal frozenset): each distinct one (a kind) is read once into
    a C array of its existing topics' numbers; the per-member work is C loops."""
    cdef _AsgGroup g = _AsgGroup()
    cdef int32_t i, t, k = -1, n_kinds
    cdef int64_t j, n_subs = 0, upper = 0
    g.member_ids = member_ids
    g.n_members = len(member_ids)
    # each member's kind, kinds numbered in first-seen order
    cdef int32_t* kind = g._buffer(g.n_members, 0)
    cdef dict kinds = {}
    cdef list distinct = []
    last = None
    for i in range(g.n_members):
        subscribed = subscriptions[i]
        if subscribed is not last:
            found = kinds.get(subscribed)
            if found is None:
                found = kinds[subscribed] = len(distinct)
                distinct.append(subscribed)
                upper += len(subscribed)
            k = found
            last = subscribed
        kind[i] = k
    n_kinds = len(distinct)
    # each kind's existing topics: numbered in first-seen order here, by name below
    cdef int64_t* koff = g._buffer64(n_kinds + 1)
    cdef int32_t* ktopics = g._buffer(upper, 0)
    cdef dict first_seen = {}
    cdef list names = []
    j = 0
    for k in range(n_kinds):
        for name in distinct[k]:
            found = first_seen.get(name)
            if found is None:
                if name not in topics:
                    continue
                found = first_seen[name] = len(names)
                names.append(name)
            ktopics[j] = <int32_t>found
            j += 1
        koff[k + 1] = j
    g.topic_names = sorted(names)
    g.n_topics = len(names)
    tindex = dict(zip(g.topic_names, range(g.n_topics)))
    cdef int32_t* renumber = g._buffer(g.n_topics, 0)
    g.toff = g._buffer64(g.n_topics + 1)
    for t in range(g.n_topics):
        name = g.topic_names[t]
        renumber[<int32_t>first_seen[name]] = t
        g.toff[t + 1] = g.toff[t] + <int64_t>topics[name]
    g.total = g.toff[g.n_topics]
    g.owner = g._buffer(g.total, -1)
    # subscribers per topic, in member order: count, then place
    g.soff = g._buffer(g.n_topics + 1, 0)
    with nogil:
        for j in range(koff[n_kinds]):
            ktopics[j] = renumber[ktopics[j]]
        for i in range(g.n_members):
            k = kind[i]
            for j in range(koff[k], koff[k + 1]):
                g.soff[ktopics[j] + 1] += 1
            n_subs += koff[k + 1] - koff[k]
        for t in range(g.n_topics):
            g.soff[t + 1] += g.soff[t]
    g.subs = g._buffer(n_subs, 0)
    cdef int32_t* fill = g._buffer(g.n_topics, 0)
    with nogil:
        for t in range(g.n_topics):
            fill[t] = g.soff[t]
        for i in range(g.n_members):
            k = kind[i]
            for j in range(koff[k], koff[k + 1]):
                t = ktopics[j]
                g.subs[fill[t]] = i
                fill[t] += 1
    if current:
        _asg_read_current(g, subscriptions, tindex, current)
    return g


cdef inline int64_t _asg_partition(value) except? -2:
    """A partition id as C int64: -1 for one out of int64's range (dropped like any
    partition that does not exist); TypeError as _pure's _partition_id."""
    cdef int overflow = 0
    cdef long long x
    if not PyLong_CheckExact(value):
        value = _asg_pure._partition_id(value)
    x = PyLong_AsLongLongAndOverflow(value, &overflow)
    if overflow != 0 or x < 0:
        return -1
    return x


cdef int _asg_read_current(_AsgGroup g, list subscriptions, dict tindex, current) except -1:
    cdef int32_t i
    cdef dict plain = current if type(current) is dict else None  # read without method calls
    for i in range(g.n_members):
        member_id = g.member_ids[i]
        assigned = plain.get(member_id) if plain is not None else current.get(member_id)
        if assigned is None:
            continue
        subscribed = subscriptions[i]
        if type(assigned) is dict:
            for topic, partitions in (<dict>assigned).items():
                _asg_read_topic(g, i, subscribed, tindex, topic, partitions)
        elif isinstance(assigned, _AsgMapping):
            for topic, partitions in assigned.items():
                _asg_read_topic(g, i, subscribed, tindex, topic, partitions)
        else:
            raise TypeError(f"current[{member_id!r}] must be a mapping of topic -> partitions")
    return 0


cdef int _asg_read_topic(_AsgGroup g, int32_t i, subscribed, dict tindex, topic, partitions) except -1:
    """Member i's current partitions of `topic` into the owner array."""
    cdef int32_t t = -1
    cdef int64_t p, count = 0, base = 0
    cdef Py_ssize_t k = 0
    if type(topic) is not str:
        _asg_pure._check_topic_name(topic, f"current[{g.member_ids[i]!r}]'s keys")
    if isinstance(partitions, (str, bytes)):
        raise TypeError(f"current[{g.member_ids[i]!r}][{topic!r}] must be an iterable of partition ids")
    if topic in subscribed:
        t = tindex.get(topic, -1)
    if t >= 0:
        base = g.toff[t]
        count = g.toff[t + 1] - base
    if type(partitions) is list:
        # the length is read at each step, as a list iterator does: a partition id's
        # __index__ may shrink the list
        while k < len(<list>partitions):
            p = _asg_partition((<list>partitions)[k])
            k += 1
            if 0 <= p < count and g.owner[base + p] == -1:
                g.owner[base + p] = i
    else:
        for value in partitions:
            p = _asg_partition(value)
            if 0 <= p < count and g.owner[base + p] == -1:
                g.owner[base + p] = i
    return 0


# partition ids 0.. as int objects, shared by the results (ints are immutable); made
# once, never replaced (no global written while threads may read it)
cdef list _ASG_INTS = list(range(1 << 14))


cdef list _asg_ints(int64_t count):
    """A list of at least `count` ints 0, 1, ..."""
    return _ASG_INTS if count <= len(_ASG_INTS) else list(range(count))


cdef dict _asg_result(_AsgGroup g):
    """{member: {topic: sorted partitions}} from the owner array (see _asg_fill)."""
    cdef list dicts
    # The result is acyclic (dicts of lists of ints) and made in one go: the cyclic
    # collector is paused meanwhile rather than run every few hundred containers made
    # (its counts go on: it runs once at the next allocation, over all of them).
    cdef int collecting = _asg_gc_disable()
    try:
        dicts = _asg_fill(g)
    finally:
        if collecting:
            _asg_gc_enable()
    return dict(zip(g.member_ids, dicts))


cdef list _asg_fill(_AsgGroup g):
    """Per topic, count each owner's partitions, give each owner with some a list of
    that size (in its dict at once, which holds it), fill the lists in partition order."""
    cdef list dicts = [{} for _ in range(g.n_members)]
    cdef int32_t t, o, j
    cdef int64_t p, base, count, max_count = 0
    for t in range(g.n_topics):
        max_count = max(max_count, g.toff[t + 1] - g.toff[t])
    cdef list ints = _asg_ints(max_count)
    cdef PyObject* items = <PyObject*>ints
    cdef PyObject* item
    cdef PyObject* made
    cdef int64_t* counts = g._buffer64(g.n_members)
    # each owner's list of the current topic: borrowed, its dict holds it
    cdef PyObject** slots = <PyObject**>g._block(g.n_members, sizeof(PyObject*))
    for t in range(g.n_topics):
        base = g.toff[t]
        count = g.toff[t + 1] - base
        for p in range(count):
            o = g.owner[base + p]
            if o >= 0:
                counts[o] += 1
        # a topic's owners are among its subscribers
        topic = g.topic_names[t]
        for j in range(g.soff[t], g.soff[t + 1]):
            o = g.subs[j]
            if counts[o] > 0:
                made = _asg_list_new(counts[o])
                try:
                    _asg_dict_set(dicts[o], topic, made)
                finally:
                    _asg_decref(made)
                slots[o] = made
                counts[o] = 0
        # the counts now count each list's filled slots, up to its size
        for p in range(count):
            o = g.owner[base + p]
            if o >= 0:
                item = _asg_list_item(items, p)
                _asg_incref(item)
                _asg_list_set(slots[o], counts[o], item)
                counts[o] += 1
        for j in range(g.soff[t], g.soff[t + 1]):
            counts[g.subs[j]] = 0
    return dicts


cdef tuple _asg_prepare(name, members, topics, current):
    """_pure's prepare, with the per-member work in C: a subscription object met before
    in this call (the same object, or an equal frozenset) is not checked again."""
    if type(topics) is not dict or type(current) is not dict or type(members) not in (list, tuple) \
            or name not in ASSIGNORS:
        return _asg_pure.prepare(name, members, topics, current)  # the general case, and its errors
    cdef dict checked_topics = {}
    for topic, count in (<dict>topics).items():
        if type(topic) is not str or type(count) is not int or count < 0 or count > _asg_pure.MAX_PARTITIONS:
            return _asg_pure.prepare(name, members, topics, current)
        checked_topics[topic] = count
    cdef list member_ids = []
    cdef list subscriptions = []
    cdef set seen = set()
    cdef Py_ssize_t n_seen
    cdef dict known = {}  # subscription object -> its checked frozenset
    last = checked = None  # the previous member's subscription object, checked
    cdef Py_ssize_t n = len(members)
    for entry in members:
        if type(entry) is not tuple or len(<tuple>entry) != 3:
            return _asg_pure.prepare(name, members, topics, current)
        member_id, rack, subscribed = <tuple>entry
        if type(member_id) is not str or (rack is not None and type(rack) is not str):
            return _asg_pure.prepare(name, members, topics, current)
        # one hash lookup: a duplicate id leaves the set's size as it was
        n_seen = len(seen)
        seen.add(member_id)
        if len(seen) == n_seen:
            return _asg_pure.prepare(name, members, topics, current)
        if subscribed is last:  # members mostly share one subscription object
            member_ids.append(member_id)
            subscriptions.append(checked)
            continue
        last = subscribed
        checked = known.get(subscribed) if type(subscribed) is frozenset else None
        if checked is None:
            if type(subscribed) not in (frozenset, set, tuple, list):
                return _asg_pure.prepare(name, members, topics, current)
            for topic in subscribed:
                if type(topic) is not str:
                    return _asg_pure.prepare(name, members, topics, current)
            checked = subscribed if type(subscribed) is frozenset else frozenset(subscribed)
            if type(subscribed) is frozenset:
                known[subscribed] = checked
        member_ids.append(member_id)
        subscriptions.append(checked)
    return member_ids, None, subscriptions, checked_topics


def compute_assignment(name, members, topics, current):
    """See fastcoord.core.assignors.compute_assignment."""
    member_ids, instance_ids, subscriptions, topics = _asg_prepare(name, members, topics, current)
    if name == "range":
        return _asg_range(member_ids, instance_ids, subscriptions, topics)
    cdef _AsgGroup g = _asg_convert(member_ids, subscriptions, topics, current)
    if g.n_members == 0:
        return {}
    first = subscriptions[0]
    cdef bint homogeneous = True
    for subscribed in subscriptions:
        if subscribed is not first and subscribed != first:
            homogeneous = False
            break
    if homogeneous:
        _asg_homogeneous(g)
    else:
        _asg_heterogeneous(g)
    return _asg_result(g)


# -- uniform, homogeneous subscriptions ---------------------------------------------

cdef int _asg_homogeneous(_AsgGroup g) except -1:
    """_pure's _uniform_homogeneous on the arrays. The flat partition order is topic
    (name) order then partition order: the order of Kafka's lists here."""
    if g.n_topics == 0:
        return 0
    cdef int32_t n = g.n_members, i, o
    cdef int64_t p, k, n_unowned = 0, taken = 0
    cdef int64_t min_quota = g.total // n, extra = g.total % n
    cdef int64_t* quota = g._buffer64(n)
    cdef int64_t* kept = g._buffer64(n)
    # where each member's given-back partitions go in the hand-out list: after the
    # unowned ones, in member order (counted in a first pass, placed in a second)
    cdef int64_t* back = g._buffer64(n + 1)
    cdef int64_t* handout = g._buffer64(g.total)
    with nogil:
        for i in range(n):
            quota[i] = min_quota + (1 if i < extra else 0)
        for p in range(g.total):
            o = g.owner[p]
            if o < 0:
                n_unowned += 1
            elif kept[o] < quota[o]:
                kept[o] += 1
            else:
                back[o + 1] += 1
        back[0] = n_unowned
        for i in range(n):
            back[i + 1] += back[i]
            kept[i] = 0
        n_unowned = 0
        for p in range(g.total):
            o = g.owner[p]
            if o < 0:
                handout[n_unowned] = p
                n_unowned += 1
            elif kept[o] < quota[o]:
                kept[o] += 1
            else:
                handout[back[o]] = p
                back[o] += 1
                g.owner[p] = -1
        # the quotas sum to the total: the hand-out list is used up exactly
        for i in range(n):
            for k in range(quota[i] - kept[i]):
                g.owner[handout[taken]] = i
                taken += 1
    return 0


# -- uniform, heterogeneous subscriptions -------------------------------------------

cdef struct asg_balancer:
    int64_t* sizes
    int32_t* order
    asg_member_key* keys
    int32_t* tally       # counting sort's buckets, tally_cap of them
    int64_t tally_cap
    int32_t n
    int32_t least_end
    int32_t next_least
    int32_t most_start
    int32_t most_end
    int32_t next_most
    int64_t least_level
    int64_t most_level


cdef int64_t _asg_init(asg_balancer* b, const int32_t* members, int32_t n) noexcept nogil:
    """Order `members` (ascending indices) by load, then index; reset the ranges. Loads
    usually span a few values: a counting sort by load then keeps the index order (it is
    stable); a wide span goes through qsort on (load, index)."""
    cdef int32_t j
    cdef int64_t lo = b.sizes[members[0]], hi = lo, v, span, at
    for j in range(n):
        v = b.sizes[members[j]]
        lo = v if v < lo else lo
        hi = v if v > hi else hi
    span = hi - lo + 1
    if span <= b.tally_cap:
        for v in range(span):
            b.tally[v] = 0
        for j in range(n):
            b.tally[b.sizes[members[j]] - lo] += 1
        at = 0
        for v in range(span):
            at += b.tally[v]
            b.tally[v] = <int32_t>(at - b.tally[v])
        for j in range(n):
            v = b.sizes[members[j]] - lo
            b.order[b.tally[v]] = members[j]
            b.tally[v] += 1
    else:
        for j in range(n):
            b.keys[j].size = b.sizes[members[j]]
            b.keys[j].member = members[j]
        qsort(b.keys, n, sizeof(asg_member_key), _asg_cmp_member)
        for j in range(n):
            b.order[j] = b.keys[j].member
    b.n = n
    b.least_end = 0
    b.least_level = b.sizes[b.order[0]] - 1
    b.next_least = 0
    b.most_start = n
    b.most_end = n
    b.most_level = b.sizes[b.order[n - 1]] + 1
    b.next_most = n - 1
    return b.sizes[b.order[n - 1]] - b.sizes[b.order[0]]


cdef int32_t _asg_next_least(asg_balancer* b) noexcept nogil:
    cdef int32_t member
    if b.next_least >= b.least_end:
        b.least_level += 1
        while b.least_end < b.n and b.sizes[b.order[b.least_end]] == b.least_level:
            b.least_end += 1
        b.next_least = 0
    member = b.order[b.next_least]
    b.next_least += 1
    return member


cdef int32_t _asg_next_most(asg_balancer* b) noexcept nogil:
    cdef int32_t member
    if b.next_most < b.most_start:
        if b.most_end <= b.most_start and b.most_start > 0:
            b.most_level = b.sizes[b.order[b.most_start - 1]]
        else:
            b.most_level -= 1
        while b.most_start > 0 and b.sizes[b.order[b.most_start - 1]] == b.most_level:
            b.most_start -= 1
        b.next_most = b.most_end - 1
    if b.next_most < 0:
        return -1
    member = b.order[b.next_most]
    b.next_most -= 1
    return member


cdef inline void _asg_exclude_most(asg_balancer* b) noexcept nogil:
    cdef int32_t at = b.next_most + 1
    cdef int32_t member = b.order[at]
    b.order[at] = b.order[b.most_end - 1]
    b.order[b.most_end - 1] = member
    b.most_end -= 1


cdef inline bint _asg_balanced(asg_balancer* b) noexcept nogil:
    return b.most_level - b.least_level <= 1


cdef int32_t _asg_topic_order(_AsgGroup g, asg_topic_key* keys, int32_t* out, int mode) noexcept nogil:
    """The topics to visit in Kafka's topic order: mode 0 those with an unowned
    partition, mode 1 those with two subscribers or more. Returns their number."""
    cdef int32_t t, n = 0, j
    cdef int64_t p
    cdef bint take
    for t in range(g.n_topics):
        if mode == 0:
            take = False
            for p in range(g.toff[t], g.toff[t + 1]):
                if g.owner[p] < 0:
                    take = True
                    break
        else:
            take = g.soff[t + 1] - g.soff[t] >= 2
        if take:
            keys[n].partitions = g.toff[t + 1] - g.toff[t]
            keys[n].subscribers = g.soff[t + 1] - g.soff[t]
            keys[n].topic = t
            n += 1
    qsort(keys, n, sizeof(asg_topic_key), _asg_cmp_topic)
    for j in range(n):
        out[j] = keys[j].topic
    return n


cdef int64_t _asg_balance_topic(_AsgGroup g, asg_balancer* b, int32_t t, int32_t* grouped,
                                int64_t* start, int64_t* end) noexcept nogil:
    """_pure's _balance_topic on the arrays; start/end are per member, zero outside calls."""
    cdef const int32_t* members = g.subs + g.soff[t]
    cdef int32_t n = g.soff[t + 1] - g.soff[t], j, o, giver, taker
    cdef int64_t base = g.toff[t], count = g.toff[t + 1] - g.toff[t], p, pos, moved = 0
    if _asg_init(b, members, n) <= 1:
        return 0
    # partitions grouped by owner (a counting sort: owners ascending, partitions ascending)
    for p in range(count):
        end[g.owner[base + p]] += 1
    pos = 0
    for j in range(n):
        o = members[j]
        start[o] = pos
        pos += end[o]
        end[o] = start[o]
    for p in range(count):
        o = g.owner[base + p]
        grouped[end[o]] = <int32_t>p
        end[o] += 1
    while not _asg_balanced(b):
        while True:
            giver = _asg_next_most(b)
            if giver == -1 or end[giver] - start[giver] > 0:
                break
            _asg_exclude_most(b)
        if giver == -1:
            break
        end[giver] -= 1
        p = grouped[end[giver]]
        taker = _asg_next_least(b)
        if _asg_balanced(b):
            break
        g.owner[base + p] = taker
        b.sizes[giver] -= 1
        b.sizes[taker] += 1
        moved += 1
    for j in range(n):
        start[members[j]] = 0
        end[members[j]] = 0
    return moved


cdef int _asg_heterogeneous(_AsgGroup g) except -1:
    cdef int32_t t, j, n_topics, position, last_moved, member, passes, max_count = 0
    cdef int64_t p, moved
    cdef asg_balancer b
    b.sizes = g._buffer64(g.n_members)
    b.order = g._buffer(g.n_members, 0)
    b.keys = <asg_member_key*>g._block(g.n_members, sizeof(asg_member_key))
    b.tally_cap = min(4 * <int64_t>g.n_members + 64, _asg_tally_limit)
    b.tally = g._buffer(b.tally_cap, 0)
    cdef asg_topic_key* tkeys = <asg_topic_key*>g._block(g.n_topics, sizeof(asg_topic_key))
    cdef int32_t* visit = g._buffer(g.n_topics, 0)
    for t in range(g.n_topics):
        max_count = max(max_count, <int32_t>(g.toff[t + 1] - g.toff[t]))
    cdef int32_t* grouped = g._buffer(max_count, 0)
    cdef int64_t* start = g._buffer64(g.n_members)
    cdef int64_t* end = g._buffer64(g.n_members)
    with nogil:
        for p in range(g.total):
            if g.owner[p] >= 0:
                b.sizes[g.owner[p]] += 1
        # hand out the unowned partitions, topic by topic, to the least loaded subscribers
        n_topics = _asg_topic_order(g, tkeys, visit, 0)
        for j in range(n_topics):
            t = visit[j]
            _asg_init(&b, g.subs + g.soff[t], g.soff[t + 1] - g.soff[t])
            for p in range(g.toff[t], g.toff[t + 1]):
                if g.owner[p] < 0:
                    member = _asg_next_least(&b)
                    g.owner[p] = member
                    b.sizes[member] += 1
        # then move partitions from the most to the least loaded subscribers of each topic
        n_topics = _asg_topic_order(g, tkeys, visit, 1)
        last_moved = -1
        for passes in range(_ASG_MAX_BALANCE_PASSES):
            for position in range(n_topics):
                if position == last_moved:
                    return 0
                moved = _asg_balance_topic(g, &b, visit[position], grouped, start, end)
                if moved > 0 or last_moved == -1:
                    last_moved = position
    return 0


# -- range --------------------------------------------------------------------------

cdef list _asg_range_order(list member_ids, instance_ids):
    """_pure's range_order. Without static members and with ASCII member ids, UTF-16
    code unit order is str order: a plain sort by id (ids are unique)."""
    if instance_ids is not None:
        return _asg_pure.range_order(member_ids, instance_ids)
    for member_id in member_ids:
        if not (<str>member_id).isascii():
            return _asg_pure.range_order(member_ids, instance_ids)
    return sorted(range(len(member_ids)), key=member_ids.__getitem__)


cdef dict _asg_range(list member_ids, instance_ids, list subscriptions, dict topics):
    """_pure's _range: per topic, its subscribers in range order take consecutive
    ranges. Only ranges are computed: no per-partition work but the output lists."""
    by_id = _asg_range_order(member_ids, instance_ids)
    cdef _AsgGroup g = _asg_convert([member_ids[i] for i in by_id], [subscriptions[i] for i in by_id],
                                    topics, {})
    cdef list dicts
    cdef int collecting = _asg_gc_disable()  # as in _asg_result
    try:
        dicts = _asg_range_fill(g)
    finally:
        if collecting:
            _asg_gc_enable()
    cdef int32_t rank
    # back to the given member order
    cdef list in_order = [None] * g.n_members
    for rank in range(g.n_members):
        in_order[<Py_ssize_t>by_id[rank]] = dicts[rank]
    return dict(zip(member_ids, in_order))


cdef list _asg_range_fill(_AsgGroup g):
    """Each member's dict (in range order) of its ranges. A member that gets a range of
    every topic (the usual case) starts as a copy of a dict of all topics (its keys
    table copied whole) whose values are then replaced: no dict grows key by key."""
    cdef int32_t t, j, n, rank, o
    cdef int64_t count, min_quota, extra, begin, stop, max_count = 0
    for t in range(g.n_topics):
        max_count = max(max_count, g.toff[t + 1] - g.toff[t])
    cdef list ints = _asg_ints(max_count)
    cdef int32_t* ranges = g._buffer(g.n_members, 0)  # how many topics give each a range
    for t in range(g.n_topics):
        n = g.soff[t + 1] - g.soff[t]
        count = g.toff[t + 1] - g.toff[t]
        for rank in range(min(<int64_t>n, count)):
            ranges[g.subs[g.soff[t] + rank]] += 1
    cdef dict every = dict.fromkeys(g.topic_names)
    cdef list dicts = [every.copy() if ranges[o] == g.n_topics else {} for o in range(g.n_members)]
    for t in range(g.n_topics):
        n = g.soff[t + 1] - g.soff[t]
        count = g.toff[t + 1] - g.toff[t]
        min_quota = count // n
        extra = count % n
        begin = 0
        topic = g.topic_names[t]
        for rank in range(n):
            stop = begin + min_quota + (1 if rank < extra else 0)
            if stop > begin:
                (<dict>dicts[g.subs[g.soff[t] + rank]])[topic] = ints[begin:stop]
            begin = stop
    return dicts
