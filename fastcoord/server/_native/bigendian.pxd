# cython: language_level=3
# Kafka's wire integers are big-endian: read and written a byte at a time, so that
# neither alignment nor the host's byte order matters. Inline only (no module of its
# own): the wire codec and the load generator's engine cimport these.
from libc.stdint cimport int16_t, int32_t, uint8_t, uint32_t


cdef inline int32_t read_i32(const uint8_t* p) noexcept nogil:
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16)
                     | (<uint32_t>p[2] << 8) | <uint32_t>p[3])


cdef inline int16_t read_i16(const uint8_t* p) noexcept nogil:
    return <int16_t>((p[0] << 8) | p[1])


cdef inline void write_i32(char* p, uint32_t u) noexcept nogil:
    p[0] = <char>(u >> 24)
    p[1] = <char>(u >> 16)
    p[2] = <char>(u >> 8)
    p[3] = <char>u
