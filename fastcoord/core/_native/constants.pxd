# cython: language_level=3
# The C constants of the native core's hot paths: the state numbers of
# fastcoord/core/states.py and the error codes of fastcoord/core/errors.py they answer
# with. members.pyx checks at import that every one equals its Python value.

cdef enum:
    EMPTY = 0
    PR = 1
    CR = 2
    STABLE = 3
    DEAD = 4
    SHARD_NOT_OWNED = 0
    SHARD_LOADING = 1
    SHARD_ACTIVE = 2

cdef enum:
    C_NONE = 0
    C_NOT_AVAILABLE = 15
    C_NOT_COORDINATOR = 16
    C_ILLEGAL_GENERATION = 22
    C_INVALID_GROUP = 24
    C_UNKNOWN = 25
    C_REBALANCING = 27
