# cython: language_level=3
"""The purgatory's floor (benchmarks/floors/purgatory_floors.py c): Kafka's heartbeat
design as in test_bench_purgatory.py, its user code in Cython: the same public calls
(check_and_complete(key), then try_complete_else_watch(op, [key]) with a new op), the
op a Cython subclass whose try_complete is a Cython method, the group's lock a
threading.RLock or an OperationLock (taken by C calls). What is left is the purgatory's
own cost, the op's construction included.

Build (after the package's own build_ext, against its engines.pxd), from the repo root:
    python -c "from setuptools import setup, Extension; from Cython.Build import cythonize; \
setup(ext_modules=cythonize([Extension('purgatory_cfloor', \
['benchmarks/floors/purgatory_cfloor.pyx'], extra_compile_args=['-O3'])], \
include_path=['.']), script_args=['build_ext', '--build-lib', 'benchmarks/floors'])"
"""
import threading

from fastcoord.core._native.engines cimport DelayedOperation, OperationLock, Purgatory
from fastcoord.core._native.mutex cimport (mutex_lock_with_gil, pthread_mutex_init,
                                          pthread_mutex_t, pthread_mutex_unlock)


cdef class CLock(OperationLock):
    cdef pthread_mutex_t mu

    def __cinit__(self):
        pthread_mutex_init(&self.mu, NULL)

    cdef void c_acquire(self) noexcept:
        mutex_lock_with_gil(&self.mu)

    cdef void c_release(self) noexcept:
        pthread_mutex_unlock(&self.mu)

    def acquire(self, blocking=True, timeout=-1):
        self.c_acquire()
        return True

    def release(self):
        self.c_release()


cdef class Member:
    cdef public object key, lock
    cdef public bint satisfied


cdef class CHeartbeat(DelayedOperation):
    cdef Member member

    def try_complete(self):
        return self.force_complete() if self.member.satisfied else False


def make_members(members, op_lock):
    locks = [CLock() if op_lock else threading.RLock() for _ in range(members // 10 + 1)]
    out = []
    for i in range(members):
        m = Member()
        m.key = ("group-%d" % (i // 10), "member-%d" % i)
        m.lock = locks[i // 10]
        out.append(m)
    return out


def run(Purgatory purg, list order):
    cdef Member m
    cdef CHeartbeat op
    for m in order:
        m.satisfied = True
        purg.check_and_complete(m.key)
        m.satisfied = False
        op = CHeartbeat(30_000, m.lock)
        op.member = m
        purg.try_complete_else_watch(op, [m.key])
