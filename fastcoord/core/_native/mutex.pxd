# cython: language_level=3
"""The native core's C mutexes: pthread's, and the one way every one of them is taken
(a timer's, a group's, a purgatory's watcher lists', a stepper's lock)."""

cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    ctypedef struct pthread_mutexattr_t:
        pass
    int pthread_mutex_init(pthread_mutex_t* m, const pthread_mutexattr_t* attr)
    int pthread_mutex_destroy(pthread_mutex_t* m)
    int pthread_mutex_lock(pthread_mutex_t* m)
    int pthread_mutex_trylock(pthread_mutex_t* m)
    int pthread_mutex_unlock(pthread_mutex_t* m)
    int pthread_mutexattr_init(pthread_mutexattr_t*)
    int pthread_mutexattr_settype(pthread_mutexattr_t*, int)
    int pthread_mutexattr_destroy(pthread_mutexattr_t*)
    int PTHREAD_MUTEX_RECURSIVE


# Taken with the GIL held: try it, and only when that fails wait for it without the
# GIL, which its holder may need to finish and let go.
cdef inline void mutex_lock_with_gil(pthread_mutex_t* mu) noexcept:
    if pthread_mutex_trylock(mu) != 0:
        with nogil:
            pthread_mutex_lock(mu)
