"""The consumer group protocol's assignors in C (twin: _pure/assignors.py).

Read fastcoord/core/_pure/assignors.py first: it is the specification. Here the input
is read once into int arrays while it is checked: each member's subscription is a kind
(one of the distinct subscriptions, each read once), topics (the existing ones some
member subscribes to) are numbered by name, each topic's partitions are a slice of one
flat owner array (member index or -1), each topic's subscribers are listed in member
order (in range order for the range assignor). The assignors run on those arrays
without a Python object per partition; the result's dicts and tuples are built at the
end, each at its final size where the API allows it.
"""
cimport cython
from libc.stdint cimport int32_t, int64_t, uint64_t, uintptr_t
from libc.stdlib cimport qsort
from libc.string cimport memcmp, memset
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_CheckExact
from cpython.object cimport PyObject
from cpython.mem cimport PyMem_Malloc, PyMem_Calloc, PyMem_Realloc, PyMem_Free
from cpython.list cimport PyList_AsTuple
from cpython.tuple cimport PyTuple_GetSlice


cdef extern from "Python.h":
    # a list made at its final size and filled in place: each slot is set once, with a
    # new reference, before the list is read
    PyObject* _asg_list_new "PyList_New"(Py_ssize_t size) except NULL
    void _asg_list_set "PyList_SET_ITEM"(PyObject* items, Py_ssize_t at, PyObject* item)
    PyObject* _asg_tuple_item "PyTuple_GET_ITEM"(PyObject* items, Py_ssize_t at)
    # A tuple of ints can be in no reference cycle: untracked (as the collector itself
    # untracks such tuples), it costs no collection anything, and the dict it goes into
    # stays untracked (a dict is tracked once it holds a tracked value).
    void _asg_untrack "PyObject_GC_UnTrack"(void* item)
    void _asg_incref "Py_INCREF"(PyObject* item)
    void _asg_decref "Py_DECREF"(PyObject* item)
    # the cyclic collector's switch (public since 3.10): each returns the previous state
    int _asg_gc_disable "PyGC_Disable"()
    int _asg_gc_enable "PyGC_Enable"()
    # a str's code points (the documented accessors of PEP 393 strings): an ASCII
    # string's are its bytes
    Py_UCS4 _asg_str_max "PyUnicode_MAX_CHAR_VALUE"(object text)
    void* _asg_str_data "PyUnicode_DATA"(object text)
    Py_ssize_t _asg_str_length "PyUnicode_GET_LENGTH"(object text)
    # a current partition id read from its list or tuple without a reference of its
    # own: only an exact int (no user code runs while it is read)
    Py_ssize_t _asg_seq_size "PySequence_Fast_GET_SIZE"(object items)
    PyObject* _asg_seq_at "PySequence_Fast_GET_ITEM"(object items, Py_ssize_t at)
    bint _asg_exact_int "PyLong_CheckExact"(PyObject* value)
    long long _asg_int_value "PyLong_AsLongLongAndOverflow"(PyObject* value, int* overflow)

from collections.abc import Mapping as _AsgMapping

from fastcoord.core._pure.assignors import ASSIGNORS
from fastcoord.core._pure import assignors as _asg_pure

cdef int _ASG_MAX_BALANCE_PASSES = _asg_pure.MAX_BALANCE_PASSES
cdef object _ASG_MAX_PARTITIONS = _asg_pure.MAX_PARTITIONS
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


cdef struct asg_id_key:
    const char* text    # an ASCII member id's bytes (the str holds them)
    Py_ssize_t size
    int32_t member


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


cdef int _asg_cmp_id(const void* a, const void* b) noexcept nogil:
    # bytes, then length (a prefix first); ids are unique, so never equal
    cdef const asg_id_key* x = <const asg_id_key*>a
    cdef const asg_id_key* y = <const asg_id_key*>b
    cdef int order = memcmp(x.text, y.text, <size_t>(x.size if x.size < y.size else y.size))
    if order != 0:
        return order
    return -1 if x.size < y.size else (1 if x.size > y.size else 0)


@cython.final  # its C methods called directly, the small ones inlined
cdef class _AsgGroup:
    """A group converted to arrays (C blocks, freed with this object)."""
    cdef list member_ids
    cdef object instance_ids  # _pure's prepare's: None when no member is static
    cdef dict seen            # member id -> in member order: the result's keys; the value
                              # is the member's result dict (uniform: made empty as the
                              # member is read, filled by _asg_fill) or None (range)
    cdef dict topics          # the checked topics (read by _asg_convert only)
    cdef list distinct        # the kinds' subscriptions (frozensets)
    cdef dict first_seen      # topic name -> its number in first-seen order, -1 if not existing
    cdef list names_seen      # the existing topics' names in first-seen order
    cdef list topic_names
    cdef dict tindex          # topic name -> its number, made when first needed
    cdef int32_t n_members
    cdef int32_t n_topics
    cdef int64_t total
    cdef void** blocks
    cdef Py_ssize_t n_blocks
    cdef Py_ssize_t blocks_cap
    cdef int32_t* kind      # [n_members]: each member's subscription, an index in distinct
    cdef int64_t* koff      # [n_kinds + 1]: kind k's topics are ktopics[koff[k]:koff[k+1]]
    cdef int32_t* ktopics   # topic numbers (first-seen order, then by name after _asg_convert)
    cdef int32_t n_kinds
    cdef Py_ssize_t first_size  # the size of kind 0's frozenset
    cdef int32_t koff_cap
    cdef int64_t ktopics_cap
    # topic name objects met (the kinds hold them) -> their first_seen number: an open
    # addressing table by address, as members' subscriptions mostly hold the same str
    # objects; a miss goes through first_seen (equal names, other objects)
    cdef PyObject** cached_names
    cdef int32_t* cached_numbers
    cdef int64_t cache_cap
    cdef int64_t cache_used
    cdef int32_t* renumber  # [n_topics]: a first-seen topic number -> its number by name
    cdef int64_t* toff      # [n_topics + 1]: topic t's partitions are owner[toff[t]:toff[t+1]]
    cdef int32_t* owner     # [total]
    cdef int64_t n_owned    # how many owner entries _asg_read_current set
    cdef int32_t* soff      # [n_topics + 1]: topic t's subscribers are subs[soff[t]:soff[t+1]]
    cdef int32_t* subs      # member indices, in member (or range) order within a topic
    cdef PyObject** singles # [n_singles]: _asg_fill's (p,) tuples, a reference each or NULL
    cdef int64_t n_singles

    def __dealloc__(self):
        cdef Py_ssize_t i
        cdef int64_t p
        for p in range(self.n_singles):
            if self.singles[p] != NULL:
                _asg_decref(self.singles[p])
        for i in range(self.n_blocks):
            PyMem_Free(self.blocks[i])
        PyMem_Free(self.blocks)
        PyMem_Free(self.koff)
        PyMem_Free(self.ktopics)
        PyMem_Free(self.cached_names)
        PyMem_Free(self.cached_numbers)

    cdef int start(self, Py_ssize_t n, dict topics) except -1:
        if n > 0x7FFFFFFF:
            raise MemoryError()
        self.n_members = <int32_t>n
        self.topics = topics
        self.member_ids = []
        self.seen = {}
        self.distinct = []
        self.first_seen = {}
        self.names_seen = []
        self.kind = <int32_t*>self._block(n, sizeof(int32_t), False)
        self.koff = <int64_t*>PyMem_Calloc(16, sizeof(int64_t))
        if self.koff == NULL:
            raise MemoryError()
        self.koff_cap = 16
        return 0

    cdef inline int64_t _slot(self, PyObject* name) noexcept:
        """The cache slot of `name`, or of the empty one where it would go."""
        cdef uint64_t mask = <uint64_t>self.cache_cap - 1
        cdef uint64_t at = ((<uint64_t><uintptr_t>name >> 4) * <uint64_t>0x9E3779B97F4A7C15) >> 32
        while True:
            at &= mask
            if self.cached_names[at] == name or self.cached_names[at] == NULL:
                return <int64_t>at
            at += 1

    cdef inline int32_t _cached(self, PyObject* name) noexcept:
        """The number cached for this name object; -2 if none is."""
        cdef int64_t at
        if self.cache_cap == 0:
            return -2
        at = self._slot(name)
        return self.cached_numbers[at] if self.cached_names[at] != NULL else -2

    cdef int _cache(self, PyObject* name, int32_t number) except -1:
        cdef PyObject** old_names = self.cached_names
        cdef int32_t* old_numbers = self.cached_numbers
        cdef int64_t old_cap = self.cache_cap, i, at
        if 2 * (self.cache_used + 1) > self.cache_cap:
            # grow to twice the size (at least 64 slots) and put back what was cached
            self.cache_cap = 2 * old_cap if old_cap else 64
            self.cached_names = <PyObject**>PyMem_Calloc(<size_t>self.cache_cap, sizeof(PyObject*))
            self.cached_numbers = <int32_t*>PyMem_Malloc(<size_t>self.cache_cap * sizeof(int32_t))
            if self.cached_names == NULL or self.cached_numbers == NULL:
                PyMem_Free(self.cached_names)
                PyMem_Free(self.cached_numbers)
                self.cached_names, self.cached_numbers, self.cache_cap = old_names, old_numbers, old_cap
                raise MemoryError()
            for i in range(old_cap):
                if old_names[i] != NULL:
                    at = self._slot(old_names[i])
                    self.cached_names[at] = old_names[i]
                    self.cached_numbers[at] = old_numbers[i]
            PyMem_Free(old_names)
            PyMem_Free(old_numbers)
        at = self._slot(name)
        self.cached_names[at] = name
        self.cached_numbers[at] = number
        self.cache_used += 1
        return 0

    cdef int _new_kind(self, frozenset names) except -1:
        """Start reading a kind: room for its topics (one per name at most) after the
        previous kind's, in ktopics; the reader writes them and sets koff[n_kinds + 1]."""
        cdef int64_t* grown
        cdef int32_t* more
        cdef int64_t need = self.koff[self.n_kinds] + len(names)
        if self.n_kinds + 2 > self.koff_cap:
            grown = <int64_t*>PyMem_Realloc(self.koff, 2 * self.koff_cap * sizeof(int64_t))
            if grown == NULL:
                raise MemoryError()
            self.koff = grown
            self.koff_cap *= 2
        if need > self.ktopics_cap:
            need = max(need, 2 * self.ktopics_cap + 64)
            more = <int32_t*>PyMem_Realloc(self.ktopics, need * sizeof(int32_t))
            if more == NULL:
                raise MemoryError()
            self.ktopics = more
            self.ktopics_cap = need
        self.koff[self.n_kinds + 1] = self.koff[self.n_kinds]
        self.distinct.append(names)
        return 0

    cdef void* _block(self, int64_t n, size_t size, bint zeroed) except NULL:
        """n items of `size` bytes (one at least; zeroed or not), freed with this object."""
        cdef void** grown
        cdef void* block = NULL
        if self.n_blocks == self.blocks_cap:
            grown = <void**>PyMem_Realloc(self.blocks, (2 * self.blocks_cap + 16) * sizeof(void*))
            if grown == NULL:
                raise MemoryError()
            self.blocks = grown
            self.blocks_cap = 2 * self.blocks_cap + 16
        if n < 1:
            n = 1
        if <uint64_t>n <= (<size_t>-1) // size:
            block = PyMem_Calloc(<size_t>n, size) if zeroed else PyMem_Malloc(<size_t>n * size)
        if block == NULL:
            raise MemoryError()
        self.blocks[self.n_blocks] = block
        self.n_blocks += 1
        return block

    cdef int32_t* _buffer(self, int64_t n, int32_t fill) except NULL:
        """n int32 set to `fill`."""
        cdef int32_t* buffer = <int32_t*>self._block(n, sizeof(int32_t), fill == 0)
        cdef int64_t i
        if fill == -1:
            memset(buffer, 0xFF, <size_t>n * sizeof(int32_t))     # -1: every bit set
        elif fill != 0:
            for i in range(n):
                buffer[i] = fill
        return buffer

    cdef int64_t* _buffer64(self, int64_t n) except NULL:
        """n int64 set to 0."""
        return <int64_t*>self._block(n, sizeof(int64_t), True)


cdef _AsgGroup _asg_prepare(name, members, topics, current):
    """_pure's prepare, reading the members into a group (ids, kinds) as they are checked.
    None where _pure's prepare is needed: anything but the plain case (dict topics and
    current, a list or tuple of 3-tuples of str id, str or None rack, and a frozenset,
    set, tuple or list of str names) and every error. A subscription met before in this
    call (the same object, or an equal frozenset) is not read again."""
    if type(topics) is not dict or type(current) is not dict or type(members) not in (list, tuple) \
            or name not in ASSIGNORS:
        return None
    # the call's own copy, checked: no later change to the caller's dict reaches it
    topics = (<dict>topics).copy()
    for topic, count in (<dict>topics).items():
        if type(topic) is not str or type(count) is not int or count < 0 or count > _ASG_MAX_PARTITIONS:
            return None
    cdef _AsgGroup g = _AsgGroup()
    g.start(len(members), topics)
    cdef dict seen = g.seen
    cdef Py_ssize_t n_seen
    cdef int32_t i = 0, k = -1
    cdef bint uniform = name == "uniform"
    last = None  # the previous member's subscription object
    for entry in members:
        if i == g.n_members or type(entry) is not tuple or len(<tuple>entry) != 3:
            return None
        member_id, rack, subscribed = <tuple>entry
        if type(member_id) is not str or (rack is not None and type(rack) is not str):
            return None
        # one hash lookup: a duplicate id leaves the dict's size as it was
        n_seen = len(seen)
        seen[member_id] = {} if uniform else None
        if len(seen) == n_seen:
            return None
        g.member_ids.append(member_id)
        if subscribed is not last:  # members mostly share one subscription object
            k = _asg_kind(g, subscribed, True)
            if k < 0:
                return None
            last = subscribed
        g.kind[i] = k
        i += 1
    return g if i == g.n_members else None


cdef _AsgGroup _asg_prepared(name, members, topics, current):
    """The general case: _pure's prepare (and its errors), then the group."""
    member_ids, instance_ids, subscriptions, topics = _asg_pure.prepare(name, members, topics, current)
    cdef _AsgGroup g = _AsgGroup()
    g.start(len(member_ids), topics)
    g.member_ids = member_ids
    g.instance_ids = instance_ids
    g.seen = {member_id: {} for member_id in member_ids} if name == "uniform" else dict.fromkeys(member_ids)
    cdef int32_t i
    for i in range(g.n_members):
        g.kind[i] = _asg_kind(g, subscriptions[i], False)
    return g


cdef int32_t _asg_kind(_AsgGroup g, subscribed, bint plain) except -2:
    """The kind of a member's subscription: 0, the first member's, when equal to it (one
    kind for all members is a homogeneous group), else a new kind, its names read.
    With `plain` (_asg_prepare), -1 for one outside the plain case; else it is a checked
    frozenset."""
    if type(subscribed) is frozenset:
        names = subscribed
    elif plain and type(subscribed) in (set, tuple, list):
        for topic in subscribed:
            if type(topic) is not str:
                return -1
        names = frozenset(subscribed)
    elif plain:
        return -1
    else:
        names = frozenset(subscribed)
    # sizes first: a frozenset of another size is another kind, no call needed
    if g.n_kinds > 0 and len(<frozenset>names) == g.first_size and names == g.distinct[0]:
        return 0
    return _asg_read_kind(g, names, plain)


cdef int32_t _asg_read_kind(_AsgGroup g, frozenset names, bint plain) except -2:
    """A new kind: its existing topics' numbers (in first-seen order); -1 for a name
    that is not a str with `plain`."""
    cdef dict first_seen = g.first_seen
    cdef dict topics = g.topics
    cdef int32_t number
    g._new_kind(names)
    if g.n_kinds == 0:
        g.first_size = len(names)
    cdef int32_t* out = g.ktopics
    cdef int64_t at = g.koff[g.n_kinds]
    for name in names:
        if plain and type(name) is not str:
            return -1
        number = g._cached(<PyObject*>name)
        if number == -2:
            found = first_seen.get(name)
            if found is not None:
                number = found
            else:
                number = <int32_t>len(g.names_seen) if name in topics else -1
                first_seen[name] = number
                if number >= 0:
                    g.names_seen.append(name)
            g._cache(<PyObject*>name, number)
        if number >= 0:
            out[at] = number
            at += 1
    g.koff[g.n_kinds + 1] = at
    g.n_kinds += 1
    return g.n_kinds - 1


cdef int _asg_convert(_AsgGroup g, const int32_t* rank, bint listed) except -1:
    """Number the existing subscribed topics by name; with `listed`, list each topic's
    subscribers (in member order, or in the order rank -> member given): C loops over
    the kinds' topic numbers. Without, soff and subs are left unset (the homogeneous
    builder and _asg_fill do not read them)."""
    cdef int32_t i, r, t, k, n_kinds = g.n_kinds
    cdef int64_t j, n_subs = 0
    cdef int64_t* koff = g.koff
    cdef int32_t* ktopics = g.ktopics
    cdef dict topics = g.topics
    cdef dict first_seen = g.first_seen
    cdef list names_seen = g.names_seen
    g.topic_names = sorted(names_seen)
    g.n_topics = len(names_seen)
    cdef int32_t* renumber = <int32_t*>g._block(g.n_topics, sizeof(int32_t), False)
    g.renumber = renumber
    g.toff = g._buffer64(g.n_topics + 1)
    for t in range(g.n_topics):
        name = g.topic_names[t]
        renumber[<int32_t>first_seen[name]] = t
        g.toff[t + 1] = g.toff[t] + <int64_t>topics[name]
    g.total = g.toff[g.n_topics]
    cdef int32_t* kind = g.kind
    with nogil:
        for j in range(koff[n_kinds]):
            ktopics[j] = renumber[ktopics[j]]
    if not listed:
        return 0
    # subscribers per topic: count (members per kind, then per topic), then place
    g.soff = g._buffer(g.n_topics + 1, 0)
    cdef int32_t* members = g._buffer(n_kinds, 0)
    with nogil:
        for i in range(g.n_members):
            members[kind[i]] += 1
        for k in range(n_kinds):
            for j in range(koff[k], koff[k + 1]):
                g.soff[ktopics[j] + 1] += members[k]
            n_subs += <int64_t>members[k] * (koff[k + 1] - koff[k])
        for t in range(g.n_topics):
            g.soff[t + 1] += g.soff[t]
    g.subs = <int32_t*>g._block(n_subs, sizeof(int32_t), False)
    cdef int32_t* fill = <int32_t*>g._block(g.n_topics, sizeof(int32_t), False)
    with nogil:
        for t in range(g.n_topics):
            fill[t] = g.soff[t]
        for r in range(g.n_members):
            i = rank[r] if rank != NULL else r
            k = kind[i]
            for j in range(koff[k], koff[k + 1]):
                t = ktopics[j]
                g.subs[fill[t]] = i
                fill[t] += 1
    return 0


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


cdef int _asg_read_current(_AsgGroup g, current) except -1:
    """`current` into the owner array (the rules of _pure's _current_owners)."""
    cdef int32_t i
    cdef dict plain = current if type(current) is dict else None  # read without method calls
    for i in range(g.n_members):
        member_id = g.member_ids[i]
        assigned = plain.get(member_id) if plain is not None else current.get(member_id)
        if assigned is None:
            continue
        subscribed = g.distinct[g.kind[i]]
        if type(assigned) is dict:
            for topic, partitions in (<dict>assigned).items():
                _asg_read_topic(g, i, subscribed, topic, partitions)
        elif isinstance(assigned, _AsgMapping):
            for topic, partitions in assigned.items():
                _asg_read_topic(g, i, subscribed, topic, partitions)
        else:
            raise TypeError(f"current[{member_id!r}] must be a mapping of topic -> partitions")
    return 0


cdef int _asg_read_topic(_AsgGroup g, int32_t i, frozenset subscribed, topic, partitions) except -1:
    """Member i's current partitions of `topic` into the owner array."""
    cdef int32_t t = -1, number
    cdef int64_t p, count = 0, base = 0, guess = 0
    cdef Py_ssize_t k = 0, size, n_shared
    cdef PyObject* item
    cdef PyObject* shared
    cdef int overflow = 0
    cdef long long x
    if type(topic) is not str:
        _asg_pure._check_topic_name(topic, f"current[{g.member_ids[i]!r}]'s keys")
    if type(partitions) is not list and isinstance(partitions, (str, bytes)):
        raise TypeError(f"current[{g.member_ids[i]!r}][{topic!r}] must be an iterable of partition ids")
    # the topic's number: through the name cache when the key is a name object some
    # subscription holds (the usual case), else by name
    number = g._cached(<PyObject*>topic)
    if number >= 0:
        t = g.renumber[number]
    elif number == -2:
        if g.tindex is None:
            g.tindex = dict(zip(g.topic_names, range(g.n_topics)))
        found = g.tindex.get(topic)
        if found is not None:
            t = found
    if t >= 0 and _asg_subscribes(g, i, t, subscribed, topic):
        base = g.toff[t]
        count = g.toff[t + 1] - base
    if type(partitions) is tuple or type(partitions) is list:
        # Read as their iterators read them. A partition id that is one of _ASG_INTS
        # (the results' ints: a previous result's tuples hold them) is known by identity,
        # tried first at the previous id's successor. The size is read again after user
        # code may have run (a partition id's __index__ may shrink a list).
        shared = <PyObject*>_ASG_INTS
        n_shared = len(_ASG_INTS)
        size = _asg_seq_size(partitions)
        while k < size:
            item = _asg_seq_at(partitions, k)
            k += 1
            if guess < n_shared and item == _asg_tuple_item(shared, guess):
                p = guess
            elif _asg_exact_int(item):
                x = _asg_int_value(item, &overflow)
                p = -1 if overflow != 0 or x < 0 else x
            else:
                value = <object>item  # a reference of its own while user code may run
                p = _asg_partition(value)
                size = _asg_seq_size(partitions)
            if 0 <= p < count and g.owner[base + p] == -1:
                g.owner[base + p] = i
                g.n_owned += 1
            guess = p + 1
    else:
        for value in partitions:
            p = _asg_partition(value)
            if 0 <= p < count and g.owner[base + p] == -1:
                g.owner[base + p] = i
                g.n_owned += 1
    return 0


cdef bint _asg_subscribes(_AsgGroup g, int32_t i, int32_t t, frozenset subscribed, topic) except -1:
    """Whether member i subscribes to existing topic t (named `topic`): its kind's topic
    numbers hold t (a short scan), or for a long subscription, its set holds the name."""
    cdef int32_t k = g.kind[i]
    cdef int64_t j
    if g.koff[k + 1] - g.koff[k] > 16:
        return topic in subscribed
    for j in range(g.koff[k], g.koff[k + 1]):
        if g.ktopics[j] == t:
            return True
    return False


# partition ids 0.. as int objects, shared by the results (ints are immutable); made
# once, never replaced (no global written while threads may read it)
cdef tuple _ASG_INTS = tuple(range(1 << 14))


cdef tuple _asg_ints(int64_t count):
    """A tuple of at least `count` ints 0, 1, ..."""
    return _ASG_INTS if count <= len(_ASG_INTS) else tuple(range(count))


cdef dict _asg_result(_AsgGroup g, bint ranges):
    """{member: {topic: sorted partition tuple}}: g.seen, which becomes the result (its keys
    table is the result's: nothing rehashed). With `ranges`, the members' dicts from
    _asg_range_fill, each in place of its member's None; else g.seen's values are the
    members' dicts, which _asg_fill fills from the owner array."""
    cdef list dicts
    cdef int32_t i
    cdef dict result = g.seen
    # The dicts and tuples are acyclic and made in one go: the cyclic collector is paused
    # meanwhile rather than run every few hundred containers made; its counts go on, and
    # the collection they made due runs once, here (not at the caller's next allocation).
    cdef int collecting = _asg_gc_disable()
    try:
        if ranges:
            dicts = _asg_range_fill(g)
            for i in range(g.n_members):
                result[g.member_ids[i]] = dicts[i]
        else:
            _asg_fill(g, list(result.values()))
    finally:
        if collecting:
            _asg_gc_enable()
    if collecting:
        _AsgCollectDue()
    return result


cdef class _AsgCollectDue:
    """Made (and dropped) once the paused collector is back on: an allocation through
    the collector's allocator (no free list), where the collector runs the collection
    that is due, of the generation it picks, as at any container's allocation."""
    cdef object unused  # an object field: a type the collector tracks


cdef int _asg_fill(_AsgGroup g, list dicts) except -1:
    """Per topic, count each owner's partitions (listing the owners as met), arrange
    the partition ids by owner in a C array (each owner's in partition order), then
    give each owner a tuple of its partitions, put in its dict: (p,) shared by every
    owner of one partition p, a slice of the shared ints for consecutive ones (a quota
    handed out in order), a tuple display for two to four, else a list's copy. The C
    API makes every tuple: none is filled in place here
    (tests/package/test_no_cpython_internals.py)."""
    cdef int32_t t, o, j, n_owners
    cdef int64_t p, base, count, first, k, at, max_count = 0
    for t in range(g.n_topics):
        max_count = max(max_count, g.toff[t + 1] - g.toff[t])
    cdef tuple ints = _asg_ints(max_count)
    cdef PyObject* items = <PyObject*>ints
    cdef PyObject* item
    cdef PyObject* made
    cdef tuple held
    cdef int32_t* counts = g._buffer(g.n_members, 0)  # zero outside a topic's turn
    cdef int32_t* owners = <int32_t*>g._block(g.n_members, sizeof(int32_t), False)
    # where each owner's partitions start in `arranged`, then (as placed) end
    cdef int64_t* ends = <int64_t*>g._block(g.n_members, sizeof(int64_t), False)
    cdef int64_t* arranged = <int64_t*>g._block(max_count, sizeof(int64_t), False)
    # (p,) made once per call, shared (tuples are values): g holds a reference each
    g.singles = <PyObject**>g._block(max_count, sizeof(PyObject*), True)
    g.n_singles = max_count
    for t in range(g.n_topics):
        base = g.toff[t]
        count = g.toff[t + 1] - base
        n_owners = 0
        for p in range(count):
            o = g.owner[base + p]
            if o >= 0:
                if counts[o] == 0:
                    owners[n_owners] = o
                    n_owners += 1
                counts[o] += 1
        if n_owners == 0:
            continue
        at = 0
        for j in range(n_owners):
            o = owners[j]
            ends[o] = at
            at += counts[o]
        for p in range(count):
            o = g.owner[base + p]
            if o >= 0:
                arranged[ends[o]] = p
                ends[o] += 1
        topic = g.topic_names[t]
        for j in range(n_owners):
            o = owners[j]
            k = counts[o]
            at = ends[o] - k
            first = arranged[at]
            if k == 1:
                if g.singles[first] == NULL:
                    held = PyTuple_GetSlice(ints, first, first + 1)
                    _asg_untrack(<PyObject*>held)
                    _asg_incref(<PyObject*>held)
                    g.singles[first] = <PyObject*>held
                else:
                    held = <tuple>g.singles[first]
            elif arranged[at + k - 1] - first + 1 == k:
                held = PyTuple_GetSlice(ints, first, first + k)
            elif k == 2:
                held = (<object>_asg_tuple_item(items, first),
                        <object>_asg_tuple_item(items, arranged[at + 1]))
            elif k == 3:
                held = (<object>_asg_tuple_item(items, first),
                        <object>_asg_tuple_item(items, arranged[at + 1]),
                        <object>_asg_tuple_item(items, arranged[at + 2]))
            elif k == 4:
                held = (<object>_asg_tuple_item(items, first),
                        <object>_asg_tuple_item(items, arranged[at + 1]),
                        <object>_asg_tuple_item(items, arranged[at + 2]),
                        <object>_asg_tuple_item(items, arranged[at + 3]))
            else:
                # a list made at its size, each slot set once, then copied
                made = _asg_list_new(k)
                try:
                    for p in range(k):
                        item = _asg_tuple_item(items, arranged[at + p])
                        _asg_incref(item)
                        _asg_list_set(made, p, item)
                    held = PyList_AsTuple(<object>made)
                finally:
                    _asg_decref(made)
            _asg_untrack(<PyObject*>held)
            (<dict>dicts[o])[topic] = held
            counts[o] = 0
    return 0


def compute_assignment(name, members, topics, current):
    """See fastcoord.core.assignors.compute_assignment."""
    cdef _AsgGroup g = _asg_prepare(name, members, topics, current)
    if g is None:
        g = _asg_prepared(name, members, topics, current)
    if name == "range":
        return _asg_range(g) if g.n_members else {}
    # a single kind is a homogeneous group: no subscriber lists needed
    _asg_convert(g, NULL, g.n_kinds > 1)
    g.owner = g._buffer(g.total, -1)     # no owner yet (the range assignor has none)
    if current:
        _asg_read_current(g, current)
    if g.n_members == 0:
        return {}
    if g.n_kinds == 1:
        _asg_homogeneous(g)
    else:
        _asg_heterogeneous(g)
    return _asg_result(g, False)


# -- uniform, homogeneous subscriptions ---------------------------------------------

cdef int _asg_homogeneous(_AsgGroup g) except -1:
    """_pure's _uniform_homogeneous on the arrays. The flat partition order is topic
    (name) order then partition order: the order of Kafka's lists here."""
    if g.n_topics == 0:
        return 0
    cdef int32_t n = g.n_members, i, o
    cdef int64_t p, k, n_unowned = 0, taken = 0
    cdef int64_t min_quota = g.total // n, extra = g.total % n
    if g.n_owned == 0:
        # nothing kept: the hand-out list is every partition in order, taken by
        # quotas in member order
        with nogil:
            for i in range(n):
                for k in range(min_quota + (1 if i < extra else 0)):
                    g.owner[taken] = i
                    taken += 1
        return 0
    cdef int64_t* quota = <int64_t*>g._block(n, sizeof(int64_t), False)
    cdef int64_t* kept = g._buffer64(n)
    # where each member's given-back partitions go in the hand-out list: after the
    # unowned ones, in member order (counted in a first pass, placed in a second)
    cdef int64_t* back = <int64_t*>g._block(n + 1, sizeof(int64_t), False)
    cdef int64_t* handout = <int64_t*>g._block(g.total, sizeof(int64_t), False)
    with nogil:
        for p in range(g.total):
            o = g.owner[p]
            if o < 0:
                n_unowned += 1
            else:
                kept[o] += 1  # held, for now
        back[0] = n_unowned
        for i in range(n):
            quota[i] = min_quota + (1 if i < extra else 0)
            back[i + 1] = back[i] + (kept[i] - quota[i] if kept[i] > quota[i] else 0)
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


cdef inline int64_t _asg_spread(asg_balancer* b, const int32_t* members, int32_t n,
                               int64_t* lowest) noexcept nogil:
    """The loads' spread (highest - lowest) over `members`; the lowest into *lowest."""
    cdef int32_t j
    cdef int64_t lo = b.sizes[members[0]], hi = lo, v
    for j in range(1, n):
        v = b.sizes[members[j]]
        lo = v if v < lo else lo
        hi = v if v > hi else hi
    lowest[0] = lo
    return hi - lo


cdef int64_t _asg_init(asg_balancer* b, const int32_t* members, int32_t n, int64_t lo,
                       int64_t spread) noexcept nogil:
    """Order `members` (ascending indices) by load, then index; reset the ranges. The
    loads are lo .. lo + spread (_asg_spread's). Loads usually span a few values: a
    counting sort by load then keeps the index order (it is stable); a wide span goes
    through qsort on (load, index)."""
    cdef int32_t j
    cdef int64_t v, span = spread + 1, at
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
                                int32_t* start, int32_t* end) noexcept nogil:
    """_pure's _balance_topic on the arrays; start/end are per member, zero outside calls."""
    cdef const int32_t* members = g.subs + g.soff[t]
    cdef int32_t n = g.soff[t + 1] - g.soff[t], j, o, giver, taker
    cdef int64_t base = g.toff[t], count = g.toff[t + 1] - g.toff[t], p, pos, moved = 0
    cdef int64_t lo, spread = _asg_spread(b, members, n, &lo)
    if spread <= 1:
        return 0  # balanced: no order needed
    _asg_init(b, members, n, lo, spread)
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
    cdef int64_t p, moved, lo, spread
    cdef asg_balancer b
    # written before read: order and tally by _asg_init, visit by _asg_topic_order,
    # grouped by _asg_balance_topic; sizes, start and end are counted from zero
    b.sizes = g._buffer64(g.n_members)
    b.order = <int32_t*>g._block(g.n_members, sizeof(int32_t), False)
    b.keys = <asg_member_key*>g._block(g.n_members, sizeof(asg_member_key), False)
    b.tally_cap = min(4 * <int64_t>g.n_members + 64, _asg_tally_limit)
    b.tally = <int32_t*>g._block(b.tally_cap, sizeof(int32_t), False)
    cdef asg_topic_key* tkeys = <asg_topic_key*>g._block(g.n_topics, sizeof(asg_topic_key), False)
    cdef int32_t* visit = <int32_t*>g._block(g.n_topics, sizeof(int32_t), False)
    for t in range(g.n_topics):
        max_count = max(max_count, <int32_t>(g.toff[t + 1] - g.toff[t]))
    cdef int32_t* grouped = <int32_t*>g._block(max_count, sizeof(int32_t), False)
    cdef int32_t* start = g._buffer(g.n_members, 0)
    cdef int32_t* end = g._buffer(g.n_members, 0)
    with nogil:
        if g.n_owned:
            for p in range(g.total):
                if g.owner[p] >= 0:
                    b.sizes[g.owner[p]] += 1
        # hand out the unowned partitions, topic by topic, to the least loaded subscribers
        n_topics = _asg_topic_order(g, tkeys, visit, 0)
        for j in range(n_topics):
            t = visit[j]
            spread = _asg_spread(&b, g.subs + g.soff[t], g.soff[t + 1] - g.soff[t], &lo)
            _asg_init(&b, g.subs + g.soff[t], g.soff[t + 1] - g.soff[t], lo, spread)
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

cdef int32_t* _asg_range_order(_AsgGroup g) except NULL:
    """_pure's range_order, as an array rank -> member. Without static members and with
    ASCII member ids (UTF-16 code unit order is then byte order): the ids' bytes,
    checked in order in one pass (as members often are) or else sorted."""
    cdef int32_t* rank = <int32_t*>g._block(g.n_members, sizeof(int32_t), False)
    cdef asg_id_key* keys
    cdef int32_t i, r
    cdef bint ordered = True
    if g.instance_ids is None:
        keys = <asg_id_key*>g._block(g.n_members, sizeof(asg_id_key), False)
        for i in range(g.n_members):
            member_id = g.member_ids[i]
            if _asg_str_max(member_id) > 0x7F:
                break
            keys[i].text = <const char*>_asg_str_data(member_id)
            keys[i].size = _asg_str_length(member_id)
            keys[i].member = i
        else:
            with nogil:
                for i in range(1, g.n_members):
                    if _asg_cmp_id(&keys[i - 1], &keys[i]) > 0:
                        ordered = False
                        break
                if not ordered:
                    qsort(keys, g.n_members, sizeof(asg_id_key), _asg_cmp_id)
                for r in range(g.n_members):
                    rank[r] = keys[r].member
            return rank
    order = _asg_pure.range_order(g.member_ids, g.instance_ids)
    for r in range(g.n_members):
        rank[r] = <int32_t>order[r]
    return rank


cdef dict _asg_range(_AsgGroup g):
    """_pure's _range: per topic, its subscribers in range order take consecutive
    ranges. Only ranges are computed: no per-partition work but the output lists."""
    _asg_convert(g, _asg_range_order(g), True)
    return _asg_result(g, True)


cdef list _asg_range_fill(_AsgGroup g):
    """Each member's dict of its ranges, in member order. A member that gets a range of
    every topic (the usual case) starts as a copy of a dict of all topics (its keys
    table copied whole) whose values are then replaced: no dict grows key by key."""
    cdef int32_t t, n, rank, o
    cdef int64_t count, min_quota, extra, begin, stop, max_count = 0
    for t in range(g.n_topics):
        max_count = max(max_count, g.toff[t + 1] - g.toff[t])
    cdef tuple ints = _asg_ints(max_count)
    cdef tuple held
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
                held = ints[begin:stop]
                _asg_untrack(<PyObject*>held)
                (<dict>dicts[g.subs[g.soff[t] + rank]])[topic] = held
            begin = stop
    return dicts
