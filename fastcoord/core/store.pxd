# cython: language_level=3
# The augmenting declaration of store.py, which setup.py compiles in place; the .py alone
# (a build without extensions, FASTCOORD_NO_EXTENSIONS) never reads this file.
#
# InMemoryStore becomes an extension type that owns its fields: the native HeartbeatRun
# (which cimports it) reads `fail_with`, `keeps_offsets` and `offsets` at a replay's
# every commit as fields of its struct, where an attribute is a look-up through the
# type. The values stay Python objects; `public`: Python code reads and sets them as
# before (DeferredStore, a Python subclass, with them).
cdef class InMemoryStore:
    cdef public object groups, offsets, fail_with, keeps_group_records, keeps_offsets
