# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""Encoded records to the Arrow buffers of their rows' columns, compiled (the reading
back of committed transactions: :func:`olr_buffer.changes.columns.row_columns`).

Built from source at install with the machine's C compiler (setup.py); when it is not
built, or ``OLR_BUFFER_PURE_PYTHON=1`` is set, :mod:`.columns` runs its pure-Python
reference (``python_row_columns``: MessagePack decoded to lists, then ``pa.array`` a
column), and the tests hold the two to the same columns, or the same refusal (None), on
any input.

:func:`scan` reads ``count`` consecutive MessagePack records twice: the first pass checks
them and sizes the columns, the second writes the values into buffers made at their size.
A row record (its code one of ``ROW_CODES``) gives its fields to the columns; any other
record is stepped over (any value of it but maps and extension types, which no record
holds). Anything out of the ordinary (a record
that is not an array of at least five items, a code that is not an integer, a row of
another field count than 13 to 15, a row field of another type than its column's, an
integer out of int64, a column past 2 GiB, a string that is not strict UTF-8, anywhere,
as msgspec checks it, bytes missing or left over) is None: the record path then reads it,
and raises its own error where there is one.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint64_t
from libc.string cimport memcpy, memset

from olr_buffer._cython.utf8 cimport valid_utf8

# the columns, in the order :data:`olr_buffer.changes.columns.ROW_COLUMNS` names them
DEF NCOLS = 13
# record field -> column (-1: not a column: sequence, line); field 0 (code) is column 0
cdef int FIELD_COL[15]
FIELD_COL[:] = [0, 1, 2, -1, -1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
# column kinds: 0 int8 (code), 1 int64, 2 string
cdef int COL_KIND[NCOLS]
COL_KIND[:] = [0, 1, 1, 1, 2, 2, 1, 2, 2, 2, 2, 2, 2]

# row codes (codes.ROW_CODES: INSERT, UPDATE, DELETE, DDL, TRUNCATE, COPY_ROW)
cdef bint is_row_code(int64_t code) noexcept nogil:
    return code == 2 or code == 3 or code == 4 or code == 5 or code == 12 or code == 13


cdef struct Cursor:
    const uint8_t* p
    Py_ssize_t i
    Py_ssize_t n
    bint check_utf8  # (the second pass reads what the first one checked)


# value kinds read by read_value
DEF V_BAD = 0
DEF V_NIL = 1
DEF V_INT = 2
DEF V_STR = 3
DEF V_OTHER = 4  # a value of another type, stepped over (strings in it checked)


cdef inline bint need(Cursor* c, Py_ssize_t k) noexcept nogil:
    return c.n - c.i >= k


cdef inline uint64_t be(const uint8_t* p, int k) noexcept nogil:
    cdef uint64_t v = 0
    cdef int j
    for j in range(k):
        v = (v << 8) | p[j]
    return v


cdef inline bint read_length(Cursor* c, int k, Py_ssize_t* length) noexcept nogil:
    """A ``k``-byte big-endian length at the cursor (of a str or bin value), and that many
    bytes after it: 1, the length in ``length`` and the cursor on those bytes; or 0 (bytes
    missing)."""
    cdef uint64_t u
    if not need(c, k):
        return 0
    u = be(c.p + c.i, k)
    c.i += k
    if not need(c, <Py_ssize_t>u):
        return 0
    length[0] = <Py_ssize_t>u
    return 1


cdef int read_value(Cursor* c, int64_t* ival, Py_ssize_t* soff, Py_ssize_t* slen, int depth) noexcept nogil:
    """Read one MessagePack value at the cursor: its kind; an integer in ``ival``, a
    string's place and length in ``soff``/``slen``. Arrays are stepped over; a map or an
    extension type is V_BAD (never in a record)."""
    cdef uint8_t b
    cdef uint64_t u, k, j
    cdef Py_ssize_t length
    if not need(c, 1) or depth > 64:
        return V_BAD
    b = c.p[c.i]
    c.i += 1
    if b <= 0x7F:
        ival[0] = b
        return V_INT
    if b >= 0xE0:
        ival[0] = <int8_t>b
        return V_INT
    if 0xA0 <= b <= 0xBF:
        k = b & 0x1F
        if not need(c, <Py_ssize_t>k):
            return V_BAD
        if c.check_utf8 and not valid_utf8(c.p + c.i, <Py_ssize_t>k):
            return V_BAD
        soff[0] = c.i
        slen[0] = <Py_ssize_t>k
        c.i += <Py_ssize_t>k
        return V_STR
    if b == 0xC0:
        return V_NIL
    if b == 0xC2 or b == 0xC3:
        return V_OTHER
    if 0xCC <= b <= 0xCF:  # uint 8, 16, 32, 64
        k = 1 << (b - 0xCC)
        if not need(c, <Py_ssize_t>k):
            return V_BAD
        u = be(c.p + c.i, <int>k)
        c.i += <Py_ssize_t>k
        if u > <uint64_t>0x7FFFFFFFFFFFFFFFULL:
            return V_OTHER  # past int64: not a column's value
        ival[0] = <int64_t>u
        return V_INT
    if 0xD0 <= b <= 0xD3:  # int 8, 16, 32, 64
        k = 1 << (b - 0xD0)
        if not need(c, <Py_ssize_t>k):
            return V_BAD
        u = be(c.p + c.i, <int>k)
        c.i += <Py_ssize_t>k
        if k == 1:
            ival[0] = <int8_t>u
        elif k == 2:
            ival[0] = <int16_t>u
        elif k == 4:
            ival[0] = <int32_t>u
        else:
            ival[0] = <int64_t>u
        return V_INT
    if b == 0xD9 or b == 0xDA or b == 0xDB:  # str 8, 16, 32
        if not read_length(c, 1 << (b - 0xD9), &length):
            return V_BAD
        if c.check_utf8 and not valid_utf8(c.p + c.i, length):
            return V_BAD
        soff[0] = c.i
        slen[0] = length
        c.i += length
        return V_STR
    if b == 0xC4 or b == 0xC5 or b == 0xC6:  # bin 8, 16, 32
        if not read_length(c, 1 << (b - 0xC4), &length):
            return V_BAD
        c.i += length
        return V_OTHER
    if b == 0xCA or b == 0xCB:  # float 32, 64
        k = 4 if b == 0xCA else 8
        if not need(c, <Py_ssize_t>k):
            return V_BAD
        c.i += <Py_ssize_t>k
        return V_OTHER
    if 0x90 <= b <= 0x9F or b == 0xDC or b == 0xDD:
        if 0x90 <= b <= 0x9F:
            k = b & 0x0F
        else:
            j = 2 if b == 0xDC else 4
            if not need(c, <Py_ssize_t>j):
                return V_BAD
            k = be(c.p + c.i, <int>j)
            c.i += <Py_ssize_t>j
        j = 0
        while j < k:
            if read_value(c, ival, soff, slen, depth + 1) == V_BAD:
                return V_BAD
            j += 1
        return V_OTHER
    return V_BAD  # maps and extension types (never in a record), and 0xC1 (never used)


cdef int read_array_header(Cursor* c, Py_ssize_t* length) noexcept nogil:
    """An array's header at the cursor: 1 and its length, or 0 (not an array)."""
    cdef uint8_t b
    if not need(c, 1):
        return 0
    b = c.p[c.i]
    if 0x90 <= b <= 0x9F:
        length[0] = b & 0x0F
        c.i += 1
        return 1
    if b == 0xDC:
        if not need(c, 3):
            return 0
        length[0] = <Py_ssize_t>be(c.p + c.i + 1, 2)
        c.i += 3
        return 1
    if b == 0xDD:
        if not need(c, 5):
            return 0
        length[0] = <Py_ssize_t>be(c.p + c.i + 1, 4)
        c.i += 5
        return 1
    return 0


cdef int scan_pass(
    const uint8_t* p,
    Py_ssize_t n,
    Py_ssize_t count,
    bint write,
    Py_ssize_t* rows,
    int64_t* strbytes,
    Py_ssize_t* nulls,
    uint8_t* flags,
    int64_t* starts,
    void** data,
    int32_t** offsets,
    uint8_t** valid,
) noexcept nogil:
    """One pass over the records: 1 when they are all taken (the counts filled; with
    ``write``, the buffers too), 0 when they are not. The strings' UTF-8 is checked by the
    pass without ``write``, which comes first over the same bytes."""
    cdef Cursor c
    cdef Py_ssize_t r, length, f, row = 0, soff = 0, slen = 0
    cdef int64_t ival = 0, code
    cdef int kind, col, ck
    cdef int64_t pos[NCOLS]
    c.p = p
    c.i = 0
    c.n = n
    c.check_utf8 = not write
    for col in range(NCOLS):
        pos[col] = 0
    for r in range(count):
        if write:
            starts[r] = c.i
        if not read_array_header(&c, &length) or length < 5:
            return 0
        kind = read_value(&c, &ival, &soff, &slen, 0)
        if kind != V_INT:
            return 0
        code = ival
        if not is_row_code(code):
            if write:
                flags[r] = 0
            for f in range(1, length):
                if read_value(&c, &ival, &soff, &slen, 0) == V_BAD:
                    return 0
            continue
        if length < 13 or length > 15:
            return 0
        if write:
            flags[r] = 1
            (<int8_t*>data[0])[row] = <int8_t>code
            valid[0][row >> 3] |= <uint8_t>(1 << (row & 7))
        for f in range(1, 15):
            col = FIELD_COL[f]
            if f < length:
                kind = read_value(&c, &ival, &soff, &slen, 0)
            else:
                kind = V_NIL  # a row ending after sql or schema_version
            if kind == V_BAD:
                return 0
            if col < 0:  # sequence, line: not columns
                continue
            ck = COL_KIND[col]
            if kind == V_NIL:
                if not write:
                    nulls[col] += 1
                elif ck == 2:
                    offsets[col][row + 1] = <int32_t>pos[col]
                continue
            if ck == 1:
                if kind != V_INT:
                    return 0
                if write:
                    (<int64_t*>data[col])[row] = ival
            elif ck == 2:
                if kind != V_STR:
                    return 0
                if write:
                    memcpy((<uint8_t*>data[col]) + pos[col], p + soff, slen)
                    pos[col] += slen
                    offsets[col][row + 1] = <int32_t>pos[col]
                else:
                    strbytes[col] += slen
                    if strbytes[col] > 0x7FFFFFFF:
                        return 0
            else:
                return 0
            if write:
                valid[col][row >> 3] |= <uint8_t>(1 << (row & 7))
        row += 1
    if c.i != n:
        return 0
    if write:
        starts[count] = n
    rows[0] = row
    return 1


def scan(data, Py_ssize_t count):
    """``count`` encoded records (``data``: bytes) to their rows' columns: None, or
    ``(rows, flags, starts, columns)`` where ``flags`` has a byte a record (1: a row),
    ``starts`` the place of each record in ``data`` and the end (int64s), and ``columns``
    holds, per column, ``(null_count, validity or None, offsets or None,
    values)`` as bytes (offsets and values of a string column; values of an integer one)."""
    cdef const uint8_t[::1] view = data
    cdef const uint8_t* p = &view[0] if view.shape[0] else <const uint8_t*>b""
    cdef Py_ssize_t n = view.shape[0]
    cdef Py_ssize_t rows = 0
    cdef int64_t strbytes[NCOLS]
    cdef Py_ssize_t nulls[NCOLS]
    cdef void* bufs[NCOLS]
    cdef int32_t* offs[NCOLS]
    cdef uint8_t* valid[NCOLS]
    cdef int col, ok
    for col in range(NCOLS):
        strbytes[col] = 0
        nulls[col] = 0
        bufs[col] = NULL
        offs[col] = NULL
        valid[col] = NULL
    if count < 0:
        return None
    with nogil:
        ok = scan_pass(p, n, count, False, &rows, strbytes, nulls, NULL, NULL, bufs, offs, valid)
    if not ok:
        return None
    flags = PyBytes_FromStringAndSize(NULL, count)
    cdef uint8_t* fl = <uint8_t*>PyBytes_AS_STRING(flags)
    starts = PyBytes_FromStringAndSize(NULL, (count + 1) * 8)
    cdef int64_t* st = <int64_t*>PyBytes_AS_STRING(starts)
    cdef Py_ssize_t vbytes = (rows + 7) >> 3
    out_valid = []
    out_offsets = []
    out_values = []
    for col in range(NCOLS):
        v = PyBytes_FromStringAndSize(NULL, vbytes)
        valid[col] = <uint8_t*>PyBytes_AS_STRING(v)
        memset(valid[col], 0, vbytes)
        out_valid.append(v)
        if COL_KIND[col] == 2:
            o = PyBytes_FromStringAndSize(NULL, (rows + 1) * 4)
            offs[col] = <int32_t*>PyBytes_AS_STRING(o)
            offs[col][0] = 0
            out_offsets.append(o)
            d = PyBytes_FromStringAndSize(NULL, strbytes[col])
        else:
            out_offsets.append(None)
            d = PyBytes_FromStringAndSize(NULL, rows * (1 if COL_KIND[col] == 0 else 8))
            memset(PyBytes_AS_STRING(d), 0, rows * (1 if COL_KIND[col] == 0 else 8))
        bufs[col] = <void*>PyBytes_AS_STRING(d)
        out_values.append(d)
    with nogil:
        ok = scan_pass(p, n, count, True, &rows, strbytes, nulls, fl, st, bufs, offs, valid)
    if not ok:  # the same bytes as the first pass: cannot be
        return None
    columns = []
    for col in range(NCOLS):
        columns.append((nulls[col], out_valid[col] if nulls[col] else None, out_offsets[col], out_values[col]))
    return rows, flags, starts, columns
