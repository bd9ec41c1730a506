# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""The redo reader's hot loop, compiled: lines of a chunk to queue records.

Built from source at install with the machine's C compiler (setup.py); when it is not
built, or ``OLR_BUFFER_PURE_PYTHON=1`` is set, the reader runs its pure-Python loop
(``ThreadReader._fast_lines``), which stays the reference: the tests hold the two to the
same blocks, positions and errors on any input.

Two parts:

* ``scan_line``: one pass over a line's bytes that checks the JSON and pulls out the
  contract's fixed fields (op, scn, sub, xid, tm, owner, table, obj, rid, rollback, and
  ``before``/``after`` as spans of the input's own text) into a C struct. It takes only a
  strict subset of JSON that every parser here reads alike (no escapes in keys or in the
  string fields, no ``\\r``, integers within int64 in the integer fields, no lone
  surrogate escape anywhere, a nesting depth of at most 64, valid UTF-8); any other line
  is declined, never misread, and goes to the reader's line path, which decides and words
  the error. This is the piece the columnar reader will fill Arrow buffers from.
* ``take_lines``: today's consumer of it: what ``_fast_lines`` does for a line the typed
  decode takes (order checks, the MessagePack record, the block builder's groups), for a
  run of lines, until a line needs the line path, the block is full, or the lines end.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_GetItem, PyDict_SetItem
from cpython.list cimport PyList_Append
from cpython.ref cimport PyObject
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport INT64_MAX, int64_t, uint64_t, uint8_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcmp, memcpy
from olr_buffer._cython.utf8 cimport valid_utf8

# op codes (olr_buffer.changes.codes; tests/sources/redo/test_compiled.py holds them equal)
cdef enum:
    BEGIN = 1
    INSERT = 2
    UPDATE = 3
    DELETE = 4
    DDL = 5
    COMMIT = 6
    ROLLBACK = 7
    LWN = 8
    CLOSE = 9
    COMPENSATION = 16

cdef enum:
    MAX_DEPTH = 64
    MAX_DIGITS = 19  # any integer of 19 digits fits in 64 bits unsigned (int64's are 19 long)
    # a record is at most this much longer than its line: its fixed parts (array header,
    # six integers of up to 9 bytes, string headers) are fewer bytes than the line's own
    # keys, quotes and separators, but for the sequence and the line number
    RECORD_ROOM = 256

# what take_lines stopped at
DONE = 0  # every line taken
FULL = 1  # the block reached its limits after the line before index i
GENERAL = 2  # line i needs the line path

# a field's state
cdef enum:
    ABSENT = 0
    IS_NULL = 1
    PRESENT = 2  # a string, an integer, an object (images)
    OTHER = 3  # images only: a JSON value that is neither null nor an object

cdef struct Span:
    Py_ssize_t at
    Py_ssize_t n
    int state

cdef struct Fields:
    int code
    int has_scn
    int64_t scn
    int64_t sub
    Span xid
    Span owner
    Span table
    Span rid
    Span before
    Span after
    int tm_state
    int64_t tm
    int obj_state
    int64_t obj
    int rollback  # 1 when true


cdef inline bint is_ws(uint8_t c) noexcept nogil:
    return c == 32 or c == 9


cdef inline Py_ssize_t skip_ws(const uint8_t* p, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    while i < n and is_ws(p[i]):
        i += 1
    return i


cdef inline int hexval(uint8_t c) noexcept nogil:
    if 48 <= c <= 57:
        return c - 48
    if 97 <= c <= 102:
        return c - 87
    if 65 <= c <= 70:
        return c - 55
    return -1


cdef Py_ssize_t skip_string(const uint8_t* p, Py_ssize_t i, Py_ssize_t n, bint escapes) noexcept nogil:
    """``p[i]`` is the opening quote: the index after the closing one, or -1 (declined).
    ``escapes``: whether backslash escapes are taken (then checked: no lone surrogate)."""
    cdef uint8_t c
    cdef int k, h, u
    i += 1
    while i < n:
        c = p[i]
        if c == 34:  # "
            return i + 1
        if c < 32:
            return -1
        if c == 92:  # backslash
            if not escapes or i + 1 >= n:
                return -1
            c = p[i + 1]
            if c == 117:  # u
                if i + 5 >= n:
                    return -1
                u = 0
                for k in range(2, 6):
                    h = hexval(p[i + k])
                    if h < 0:
                        return -1
                    u = u * 16 + h
                if 0xD800 <= u <= 0xDFFF:
                    return -1  # a surrogate: the line path decides
                i += 6
                continue
            if c == 34 or c == 92 or c == 47 or c == 98 or c == 102 or c == 110 or c == 114 or c == 116:
                i += 2
                continue
            return -1
        i += 1
    return -1


cdef Py_ssize_t skip_number(const uint8_t* p, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    """A JSON number at ``p[i]`` (strict grammar): the index after it, or -1."""
    cdef Py_ssize_t s
    if i < n and p[i] == 45:  # -
        i += 1
    if i >= n:
        return -1
    if p[i] == 48:
        i += 1
    elif 49 <= p[i] <= 57:
        while i < n and 48 <= p[i] <= 57:
            i += 1
    else:
        return -1
    if i < n and p[i] == 46:  # .
        i += 1
        s = i
        while i < n and 48 <= p[i] <= 57:
            i += 1
        if i == s:
            return -1
    if i < n and (p[i] == 101 or p[i] == 69):  # e E
        i += 1
        if i < n and (p[i] == 43 or p[i] == 45):
            i += 1
        s = i
        while i < n and 48 <= p[i] <= 57:
            i += 1
        if i == s:
            return -1
    return i


cdef Py_ssize_t skip_value(const uint8_t* p, Py_ssize_t i, Py_ssize_t n, int depth) noexcept nogil:
    """Any JSON value at ``p[i]`` (no leading whitespace): the index after it, or -1."""
    cdef uint8_t c
    if i >= n:
        return -1
    c = p[i]
    if c == 34:
        return skip_string(p, i, n, True)
    if c == 123 or c == 91:  # { [
        if depth >= MAX_DEPTH:
            return -1
        i = skip_ws(p, i + 1, n)
        if i < n and p[i] == c + 2:  # } ]
            return i + 1
        while True:
            if c == 123:
                if i >= n or p[i] != 34:
                    return -1
                i = skip_string(p, i, n, True)
                if i < 0:
                    return -1
                i = skip_ws(p, i, n)
                if i >= n or p[i] != 58:  # :
                    return -1
                i = skip_ws(p, i + 1, n)
            i = skip_value(p, i, n, depth + 1)
            if i < 0:
                return -1
            i = skip_ws(p, i, n)
            if i >= n:
                return -1
            if p[i] == 44:  # ,
                i = skip_ws(p, i + 1, n)
                continue
            if p[i] == c + 2:
                return i + 1
            return -1
    if c == 116:
        return i + 4 if i + 4 <= n and memcmp(p + i, b"true", 4) == 0 else -1
    if c == 102:
        return i + 5 if i + 5 <= n and memcmp(p + i, b"false", 5) == 0 else -1
    if c == 110:
        return i + 4 if i + 4 <= n and memcmp(p + i, b"null", 4) == 0 else -1
    return skip_number(p, i, n)


cdef Py_ssize_t int_field(const uint8_t* p, Py_ssize_t i, Py_ssize_t n, bint negative_ok, int* state,
                          int64_t* out) noexcept nogil:
    """An integer field's value (or ``null``) at ``p[i]``: the index after it, or -1."""
    cdef Py_ssize_t s
    cdef bint neg = False
    cdef uint64_t v = 0
    if i + 4 <= n and memcmp(p + i, b"null", 4) == 0:
        state[0] = IS_NULL
        return i + 4
    if i < n and p[i] == 45:
        if not negative_ok:
            return -1
        neg = True
        i += 1
    s = i
    if i < n and p[i] == 48:
        i += 1
        if neg:
            return -1  # -0: the line path
    else:
        while i < n and 48 <= p[i] <= 57:
            v = v * 10 + (p[i] - 48)
            i += 1
            if i - s > MAX_DIGITS:
                return -1
    if i == s:
        return -1
    if i < n and (p[i] == 46 or p[i] == 101 or p[i] == 69):
        return -1  # a fraction or exponent: not an integer to msgspec
    if v > <uint64_t>INT64_MAX:
        return -1  # beyond int64 (-2**63 too): the line path
    state[0] = PRESENT
    out[0] = -<int64_t>v if neg else <int64_t>v
    return i


cdef Py_ssize_t str_field(const uint8_t* p, Py_ssize_t i, Py_ssize_t n, Span* span) noexcept nogil:
    """A string field's value (no escapes) or ``null``: the index after it, or -1."""
    cdef Py_ssize_t j
    if i < n and p[i] == 34:
        j = skip_string(p, i, n, False)
        if j < 0:
            return -1
        span.at = i + 1
        span.n = j - i - 2
        span.state = PRESENT
        return j
    if i + 4 <= n and memcmp(p + i, b"null", 4) == 0:
        span.state = IS_NULL
        return i + 4
    return -1


cdef Py_ssize_t image_field(const uint8_t* p, Py_ssize_t i, Py_ssize_t n, Span* span) noexcept nogil:
    cdef Py_ssize_t j = skip_value(p, i, n, 1)
    if j < 0:
        return -1
    span.at = i
    span.n = j - i
    if p[i] == 123:
        span.state = PRESENT
    elif j - i == 4 and p[i] == 110:
        span.state = IS_NULL
    else:
        span.state = OTHER
    return j


cdef int op_code(const uint8_t* p, Py_ssize_t n) noexcept nogil:
    if n == 6:
        if memcmp(p, b"insert", 6) == 0:
            return INSERT
        if memcmp(p, b"update", 6) == 0:
            return UPDATE
        if memcmp(p, b"delete", 6) == 0:
            return DELETE
        if memcmp(p, b"commit", 6) == 0:
            return COMMIT
    elif n == 5:
        if memcmp(p, b"begin", 5) == 0:
            return BEGIN
        if memcmp(p, b"close", 5) == 0:
            return CLOSE
    elif n == 3:
        if memcmp(p, b"lwn", 3) == 0:
            return LWN
        if memcmp(p, b"ddl", 3) == 0:
            return DDL
    elif n == 8:
        if memcmp(p, b"rollback", 8) == 0:
            return ROLLBACK
    return -1


cdef bint scan_line(const uint8_t* p, Py_ssize_t n, Fields* f) noexcept nogil:
    """Check one line and fill ``f``; False when the line is declined (the line path
    decides: it may be valid, or not). Every known field must have a type msgspec's
    ``_Line`` takes (whatever the op), as the pure-Python loop's typed decode requires."""
    cdef Py_ssize_t i, j, k
    cdef uint64_t seen = 0
    cdef uint64_t bit
    cdef int state
    cdef Span tmp
    cdef Py_ssize_t klen
    cdef const uint8_t* key
    cdef bint ascii = True
    f.code = -1
    f.has_scn = 0
    f.sub = 0
    f.xid.state = ABSENT
    f.owner.state = ABSENT
    f.table.state = ABSENT
    f.rid.state = ABSENT
    f.before.state = ABSENT
    f.after.state = ABSENT
    f.tm_state = ABSENT
    f.obj_state = ABSENT
    f.rollback = 0
    if n < 2 or p[0] != 123 or p[n - 1] != 125:
        return False
    for k in range(n):
        if p[k] >= 0x80:
            ascii = False
            break
    if not ascii and not valid_utf8(p, n):
        return False
    i = skip_ws(p, 1, n)
    if p[i] == 125:
        return False  # {}: no op (the line path words it)
    while True:
        if i >= n or p[i] != 34:
            return False
        j = skip_string(p, i, n, False)  # a key: no escapes (the line path unescapes)
        if j < 0:
            return False
        key = p + i + 1
        klen = j - i - 2
        i = skip_ws(p, j, n)
        if i >= n or p[i] != 58:
            return False
        i = skip_ws(p, i + 1, n)
        if i >= n:
            return False
        bit = 0
        if klen == 2 and memcmp(key, b"op", 2) == 0:
            bit = 1
            if p[i] != 34:
                return False
            j = skip_string(p, i, n, False)
            if j < 0:
                return False
            f.code = op_code(p + i + 1, j - i - 2)
            if f.code < 0:
                return False
        elif klen == 3 and memcmp(key, b"scn", 3) == 0:
            bit = 2
            state = ABSENT
            j = int_field(p, i, n, False, &state, &f.scn)
            if state != PRESENT:
                return False
            f.has_scn = 1
        elif klen == 3 and memcmp(key, b"sub", 3) == 0:
            bit = 4
            state = ABSENT
            j = int_field(p, i, n, False, &state, &f.sub)
            if state == IS_NULL:
                f.sub = 0
        elif klen == 3 and memcmp(key, b"xid", 3) == 0:
            bit = 8
            j = str_field(p, i, n, &f.xid)
        elif klen == 2 and memcmp(key, b"tm", 2) == 0:
            bit = 16
            j = int_field(p, i, n, True, &f.tm_state, &f.tm)
        elif klen == 5 and memcmp(key, b"owner", 5) == 0:
            bit = 32
            j = str_field(p, i, n, &f.owner)
        elif klen == 5 and memcmp(key, b"table", 5) == 0:
            bit = 64
            j = str_field(p, i, n, &f.table)
        elif klen == 3 and memcmp(key, b"obj", 3) == 0:
            bit = 128
            j = int_field(p, i, n, True, &f.obj_state, &f.obj)
        elif klen == 3 and memcmp(key, b"rid", 3) == 0:
            bit = 256
            j = str_field(p, i, n, &f.rid)
        elif klen == 6 and memcmp(key, b"before", 6) == 0:
            bit = 512
            j = image_field(p, i, n, &f.before)
        elif klen == 5 and memcmp(key, b"after", 5) == 0:
            bit = 1024
            j = image_field(p, i, n, &f.after)
        elif klen == 3 and memcmp(key, b"sql", 3) == 0:
            bit = 2048
            j = str_field(p, i, n, &tmp)
        elif klen == 8 and memcmp(key, b"rollback", 8) == 0:
            bit = 4096
            if i + 4 <= n and memcmp(p + i, b"true", 4) == 0:
                f.rollback = 1
                j = i + 4
            elif i + 5 <= n and memcmp(p + i, b"false", 5) == 0:
                j = i + 5
            elif i + 4 <= n and memcmp(p + i, b"null", 4) == 0:
                j = i + 4
            else:
                return False
        else:  # columns (a ddl's, which the line path reads) and unknown fields: any value
            j = skip_value(p, i, n, 1)
        if j < 0:
            return False
        if bit:
            if seen & bit:
                return False  # a field given twice: the line path
            seen |= bit
        i = skip_ws(p, j, n)
        if i >= n:
            return False
        if p[i] == 44:
            i = skip_ws(p, i + 1, n)
            continue
        if p[i] == 125 and i + 1 == n:
            break
        return False
    return f.code > 0 and f.has_scn


# -- MessagePack, as msgspec encodes the record's list ---------------------------------------

cdef inline Py_ssize_t put_int(uint8_t* o, Py_ssize_t k, int64_t v) noexcept nogil:
    cdef uint64_t u
    cdef int s
    if v >= 0:
        u = <uint64_t>v
        if u < 128:
            o[k] = <uint8_t>u
            return k + 1
        if u < 256:
            o[k] = 0xCC
            s = 1
        elif u < 65536:
            o[k] = 0xCD
            s = 2
        elif u <= 0xFFFFFFFFU:
            o[k] = 0xCE
            s = 4
        else:
            o[k] = 0xCF
            s = 8
    else:
        if v >= -32:
            o[k] = <uint8_t>(0xE0 | (v + 32))
            return k + 1
        u = <uint64_t>v
        if v >= -128:
            o[k] = 0xD0
            s = 1
        elif v >= -32768:
            o[k] = 0xD1
            s = 2
        elif v >= -0x7FFFFFFFLL - 1:
            o[k] = 0xD2
            s = 4
        else:
            o[k] = 0xD3
            s = 8
    k += 1
    while s:
        s -= 1
        o[k] = <uint8_t>(u >> (8 * s))
        k += 1
    return k


cdef inline Py_ssize_t put_str(uint8_t* o, Py_ssize_t k, const uint8_t* p, Py_ssize_t n) noexcept nogil:
    if n < 32:
        o[k] = <uint8_t>(0xA0 | n)
        k += 1
    elif n < 256:
        o[k] = 0xD9
        o[k + 1] = <uint8_t>n
        k += 2
    elif n < 65536:
        o[k] = 0xDA
        o[k + 1] = <uint8_t>(n >> 8)
        o[k + 2] = <uint8_t>n
        k += 3
    else:
        o[k] = 0xDB
        o[k + 1] = <uint8_t>(n >> 24)
        o[k + 2] = <uint8_t>(n >> 16)
        o[k + 3] = <uint8_t>(n >> 8)
        o[k + 4] = <uint8_t>n
        k += 5
    memcpy(o + k, p, n)
    return k + n


cdef inline Py_ssize_t put_opt_int(uint8_t* o, Py_ssize_t k, int state, int64_t v) noexcept nogil:
    if state == PRESENT:
        return put_int(o, k, v)
    o[k] = 0xC0
    return k + 1


cdef inline Py_ssize_t put_image(uint8_t* o, Py_ssize_t k, const uint8_t* p, Span* s) noexcept nogil:
    if s.state == PRESENT:
        return put_str(o, k, p + s.at, s.n)
    o[k] = 0xC0
    return k + 1


# -- the loop --------------------------------------------------------------------------------

def decode(bytes raw, long long seq, long long line):
    """One line as the compiled loop takes it: ``(code, scn, sub, xid, record)`` where
    ``record`` is the MessagePack record, or None when the line goes to the line path (it
    may be valid or not: the line path decides). Markers: ``record`` is None. For tests."""
    cdef Fields f
    cdef const uint8_t* p = <const uint8_t*>PyBytes_AS_STRING(raw)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(raw)
    cdef uint8_t* out
    cdef Py_ssize_t k
    if not scan_line(p, n, &f):
        return None
    if f.code >= LWN:
        return (f.code, f.scn, f.sub, None, None)
    out = <uint8_t*>malloc(n + RECORD_ROOM)
    if out == NULL:
        raise MemoryError()
    try:
        k = encode(&f, p, seq, line, out)
        if k < 0:
            return None
        return (f.code | (COMPENSATION if f.rollback and f.code <= DELETE and f.code >= INSERT else 0), f.scn, f.sub,
                PyUnicode_DecodeUTF8(<const char*>p + f.xid.at, f.xid.n, NULL),
                PyBytes_FromStringAndSize(<const char*>out, k))
    finally:
        free(out)


cdef Py_ssize_t encode(Fields* f, const uint8_t* p, long long seq, long long line, uint8_t* o) noexcept nogil:
    """The record of a line that is not a marker, into ``o`` (room for the line's length
    plus ``RECORD_ROOM``); its length, or -1 when the line goes to the line path."""
    cdef int code = f.code
    cdef Py_ssize_t k
    if f.xid.state != PRESENT or f.xid.n == 0:
        return -1
    if INSERT <= code <= DELETE:
        if f.owner.state != PRESENT or f.table.state != PRESENT or f.rid.state != PRESENT:
            return -1
        if f.before.state == OTHER or f.after.state == OTHER:
            return -1
        if f.rollback:
            o[0] = 0x96
            k = put_int(o, 1, code | COMPENSATION)
            k = put_int(o, k, f.scn)
            k = put_int(o, k, f.sub)
            k = put_int(o, k, seq)
            k = put_int(o, k, line)
            return put_str(o, k, p + f.rid.at, f.rid.n)
        if (f.before.state != PRESENT and code != INSERT) or (f.after.state != PRESENT and code != DELETE):
            return -1
        o[0] = 0x9D
        k = put_int(o, 1, code)
        k = put_int(o, k, f.scn)
        k = put_int(o, k, f.sub)
        k = put_int(o, k, seq)
        k = put_int(o, k, line)
        k = put_opt_int(o, k, f.tm_state, f.tm)
        k = put_str(o, k, p + f.owner.at, f.owner.n)
        k = put_str(o, k, p + f.table.at, f.table.n)
        k = put_opt_int(o, k, f.obj_state, f.obj)
        k = put_str(o, k, p + f.rid.at, f.rid.n)
        k = put_image(o, k, p, &f.before)
        k = put_image(o, k, p, &f.after)
        o[k] = 0xC0
        return k + 1
    if code == DDL:
        return -1
    o[0] = 0x96
    k = put_int(o, 1, code)
    k = put_int(o, k, f.scn)
    k = put_int(o, k, f.sub)
    k = put_int(o, k, seq)
    k = put_int(o, k, line)
    return put_opt_int(o, k, f.tm_state, f.tm)


def take_lines(list lines, Py_ssize_t i, long long seq, long long line0, list state, dict groups, list order,
               group_type, bint floor_set, Py_ssize_t block_records, Py_ssize_t block_bytes,
               Py_ssize_t max_line_bytes):
    """Take ``lines[i:]`` (line ``line0 + i + 1`` on) as ``ThreadReader._fast_lines`` takes
    the lines its typed decode gives it, adding records to the block builder's ``groups``
    and ``order`` (new groups made by ``group_type(xid)``).

    ``state``: ``[count, nbytes, progress, closed, last_scn, last_sub, check_floor]``,
    updated in place. Returns ``(i, why)``: :data:`DONE` (``i == len(lines)``),
    :data:`FULL` (the block reached ``block_records`` or ``block_bytes`` with line ``i - 1``:
    flush it, then call again from ``i``) or :data:`GENERAL` (line ``i`` goes to the line
    path: it may be invalid, out of order, above the floor check, or of a kind this loop
    leaves to it)."""
    cdef Py_ssize_t nlines = len(lines)
    cdef Py_ssize_t count = state[0]
    cdef Py_ssize_t nbytes = state[1]
    cdef int64_t progress = state[2]
    cdef bint closed = state[3]
    cdef int64_t last_scn = state[4]
    cdef uint64_t last_sub = state[5]
    cdef bint check_floor = state[6]
    cdef Fields f
    cdef bytes raw
    cdef const uint8_t* p
    cdef Py_ssize_t n, k
    cdef Py_ssize_t room = 0
    cdef uint8_t* out = NULL
    cdef int code, why = DONE
    cdef PyObject* found
    cdef object g, xid, rec, tm
    try:
        while i < nlines:
            raw = <bytes>lines[i]
            p = <const uint8_t*>PyBytes_AS_STRING(raw)
            n = PyBytes_GET_SIZE(raw)
            if n >= max_line_bytes or not scan_line(p, n, &f):
                why = GENERAL
                break
            code = f.code
            if code >= LWN:
                if f.scn < last_scn:
                    why = GENERAL
                    break
                if f.scn > progress:
                    progress = f.scn
                if code == LWN:
                    closed = False
                else:
                    closed = True
                    check_floor = floor_set
                last_scn = f.scn
                last_sub = (<uint64_t>1) << 63  # AFTER_MARKER: the next record lies above scn
                i += 1
                continue
            if check_floor or f.scn < last_scn or (f.scn == last_scn and <uint64_t>f.sub < last_sub):
                why = GENERAL
                break
            if n + RECORD_ROOM > room:
                free(out)
                room = 2 * n + RECORD_ROOM
                out = <uint8_t*>malloc(room)
                if out == NULL:
                    raise MemoryError()
            k = encode(&f, p, seq, line0 + i + 1, out)
            if k < 0:
                why = GENERAL
                break
            rec = PyBytes_FromStringAndSize(<const char*>out, k)
            xid = PyUnicode_DecodeUTF8(<const char*>p + f.xid.at, f.xid.n, NULL)
            if INSERT <= code <= DELETE and f.rollback:
                code |= COMPENSATION
            found = PyDict_GetItem(groups, xid)
            if found == NULL or (code == BEGIN and (<object>found).ends):
                g = group_type(xid)
                PyDict_SetItem(groups, xid, g)
                PyList_Append(order, g)
            else:
                g = <object>found
            recs = g.records
            if not recs:
                g.first_scn = f.scn
            PyList_Append(recs, rec)
            if code <= DELETE:
                if code != BEGIN:
                    g.rows += 1
                elif g.begin_scn < 0:
                    g.begin_scn = f.scn
                    g.begin_tm = f.tm if f.tm_state == PRESENT else None
            elif code & COMPENSATION:
                g.comps += 1
            else:  # commit, rollback
                tm = f.tm if f.tm_state == PRESENT else None
                PyList_Append(g.ends, [code, f.scn, seq, line0 + i + 1, tm])
            count += 1
            nbytes += k
            closed = False
            if f.scn - 1 > progress:
                progress = f.scn - 1
            last_scn = f.scn
            last_sub = <uint64_t>f.sub
            i += 1
            if count >= block_records or nbytes >= block_bytes:
                why = FULL
                break
    finally:
        free(out)
        state[0] = count
        state[1] = nbytes
        state[2] = progress
        state[3] = closed
        state[4] = last_scn
        state[5] = last_sub
        state[6] = check_floor
    return i, why
