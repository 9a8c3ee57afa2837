# cython: language_level=3
# The augmenting declaration of clock.py, which setup.py compiles in place; the .py alone
# (a build without extensions, FASTCOORD_NO_EXTENSIONS) never reads this file.
#
# ManualClock becomes an extension type that owns its time: the native timer, member
# table, trace run and replay driver (which cimport it) read and set `_now` as a field
# of their own type's struct, a load or a store, where the attribute is a look-up through
# the type; both twins share the one class. The field stays a Python object (any int the
# .py accepts); `public`: Python code reads and sets it as before.
cdef class ManualClock:
    cdef public object _now
