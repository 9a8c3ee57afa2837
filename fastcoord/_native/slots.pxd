# cython: language_level=3
# An object's __slots__ entry read and set at its offset, without an attribute look-up.
# Inline only (no module of its own). A class with __slots__ keeps each entry as an
# object pointer at a fixed offset in every instance of exactly that class: the replay
# reads and sets a ManualClock's time (`_now`) a few times per event (the timer's clock,
# a run's every heartbeat, each step) and an InMemoryStore's `fail_with` and `offsets` at
# every commit. Through the attribute a read cost about 70 instructions and a write about
# 100 (callgrind, a replay's shard), here a load or a store.
from libc.stdint cimport int64_t
from cpython.object cimport PyObject
from cpython.long cimport PyLong_CheckExact, PyLong_AsLongLong
from cpython.ref cimport Py_INCREF, Py_XDECREF


cdef extern from "structmember.h":
    ctypedef struct PyMemberDef:
        int type
        Py_ssize_t offset
    int T_OBJECT_EX

cdef extern from "Python.h":
    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member


cdef inline Py_ssize_t object_slot(type cls, str name):
    """Where instances of `cls` keep their __slots__ entry `name`: the offset of its
    object pointer, or -1 when `cls` does not lay it out so (then the attribute is used).
    Valid for objects whose type is exactly `cls`."""
    descr = cls.__dict__.get(name)
    if type(descr).__name__ != "member_descriptor":
        return -1
    cdef PyMemberDef* member = (<PyMemberDescrObject*><PyObject*>descr).d_member
    if member is NULL or member.type != T_OBJECT_EX:
        return -1
    return member.offset


cdef inline object slot_object(object obj, Py_ssize_t slot, str name):
    """obj.<name>, from its slot when `slot` >= 0 (object_slot) and the slot is set."""
    cdef PyObject* value
    if slot >= 0:
        value = (<PyObject**>((<char*><PyObject*>obj) + slot))[0]
        if value is not NULL:
            return <object>value
    return getattr(obj, name)


cdef inline int64_t slot_int64(object obj, Py_ssize_t slot, str name) except? -1:
    """obj.<name> as an int64 (OverflowError beyond), from its slot when it holds an int."""
    cdef PyObject* value
    if slot >= 0:
        value = (<PyObject**>((<char*><PyObject*>obj) + slot))[0]
        if value is not NULL and PyLong_CheckExact(<object>value):
            return PyLong_AsLongLong(<object>value)
    return getattr(obj, name)


cdef inline int set_slot_int64(object obj, Py_ssize_t slot, str name, int64_t value) except -1:
    """obj.<name> = value, in its slot when `slot` >= 0."""
    cdef PyObject** at
    cdef PyObject* old
    cdef object new = value
    if slot < 0:
        setattr(obj, name, new)
        return 0
    at = <PyObject**>((<char*><PyObject*>obj) + slot)
    old = at[0]
    Py_INCREF(new)
    at[0] = <PyObject*>new
    Py_XDECREF(old)
    return 0
