# cython: language_level=3
"""UTF-8 checks shared by the compiled steps (``sources/redo/linescan.pyx``,
``sources/postgres/tuplescan.pyx`` and ``changes/recscan.pyx``), which take them with
``from olr_buffer._cython.utf8 cimport valid_utf8``: inline, so each extension compiles
its own copy and none imports another at run time. Sources never import each other; this
folder holds only Cython declarations (no Python module), built into whichever extension
takes them.
"""

from libc.stdint cimport uint8_t, uint64_t
from libc.string cimport memcpy


cdef inline bint valid_utf8(const uint8_t* p, Py_ssize_t n) noexcept nogil:
    """Strict UTF-8, as Python's decoder takes it (no overlong forms, no surrogates, at
    most U+10FFFF). Runs of ASCII are stepped over eight bytes at a time."""
    cdef Py_ssize_t i = 0
    cdef uint8_t c, c1
    cdef uint64_t w
    while i < n:
        if i + 8 <= n:
            memcpy(&w, p + i, 8)
            if (w & <uint64_t>0x8080808080808080ULL) == 0:
                i += 8
                continue
        c = p[i]
        if c < 0x80:
            i += 1
        elif 0xC2 <= c <= 0xDF:
            if i + 1 >= n or (p[i + 1] & 0xC0) != 0x80:
                return False
            i += 2
        elif 0xE0 <= c <= 0xEF:
            if i + 2 >= n:
                return False
            c1 = p[i + 1]
            if (c1 & 0xC0) != 0x80 or (p[i + 2] & 0xC0) != 0x80:
                return False
            if (c == 0xE0 and c1 < 0xA0) or (c == 0xED and c1 >= 0xA0):
                return False
            i += 3
        elif 0xF0 <= c <= 0xF4:
            if i + 3 >= n:
                return False
            c1 = p[i + 1]
            if (c1 & 0xC0) != 0x80 or (p[i + 2] & 0xC0) != 0x80 or (p[i + 3] & 0xC0) != 0x80:
                return False
            if (c == 0xF0 and c1 < 0x90) or (c == 0xF4 and c1 >= 0x90):
                return False
            i += 4
        else:
            return False
    return True
