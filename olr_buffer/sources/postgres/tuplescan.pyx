# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""The PostgreSQL reader's hot step, compiled: an insert's TupleData to the JSON text of
its ``rid`` and ``obj``, its whole encoded record (``Images.record``), and the records of a
run of inserts into one table (``Images.run``: the reader's loop for them, one call a run).

Built from source at install with the machine's C compiler (setup.py); when it is not
built, or ``OLR_BUFFER_PURE_PYTHON=1`` is set, :class:`~.rows.Table` runs its generated
pure-Python function (``_images_function``, with ``python_insert_record`` and
``python_insert_run``), which stays the reference: the tests hold the two to the same
text and records, or the same refusal (None) and the same place to stop, on any input.

:class:`Images` is made once per table (its columns' JSON names, value mappings and key).
A call reads the TupleData in two passes over C arrays: the first checks it (column count,
text values only, lengths, valid UTF-8) and sizes the output, the second writes the two
objects into bytes made at their size. Anything out of the ordinary (another column
count, a binary or unchanged value, a malformed or non-UTF-8 tuple) is None: the general
path then decodes it, or raises the precise error.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.ref cimport PyObject
from cpython.tuple cimport PyTuple_GET_ITEM
from libc.stdint cimport int64_t, uint8_t
from libc.string cimport memcmp, memcpy
from olr_buffer._cython.utf8 cimport valid_utf8

# how a column's text form becomes JSON (rows._RAW, _NUMBER, _BOOL, _STRING; the tests hold them equal)
cdef enum:
    RAW = 0
    NUMBER = 1
    BOOL = 2
    STRING = 3

cdef const char* HEX = b"0123456789abcdef"


cdef inline bint is_ascii(const uint8_t* p, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        if p[i] >= 0x80:
            return False
    return True


cdef inline Py_ssize_t escaped_size(const uint8_t* p, Py_ssize_t n) noexcept nogil:
    """The size of ``p`` as a JSON string's content, escaped as orjson escapes."""
    cdef Py_ssize_t i, size = n
    cdef uint8_t c
    for i in range(n):
        c = p[i]
        if c < 0x20:
            size += 1 if c == 8 or c == 9 or c == 10 or c == 12 or c == 13 else 5
        elif c == 34 or c == 92:
            size += 1
    return size


cdef inline Py_ssize_t write_escaped(char* out, const uint8_t* p, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i, o = 0
    cdef uint8_t c
    for i in range(n):
        c = p[i]
        if c >= 0x20 and c != 34 and c != 92:
            out[o] = <char>c
            o += 1
        elif c == 34 or c == 92:
            out[o] = 92
            out[o + 1] = <char>c
            o += 2
        elif c == 8:
            out[o] = 92
            out[o + 1] = 98  # b
            o += 2
        elif c == 9:
            out[o] = 92
            out[o + 1] = 116  # t
            o += 2
        elif c == 10:
            out[o] = 92
            out[o + 1] = 110  # n
            o += 2
        elif c == 12:
            out[o] = 92
            out[o + 1] = 102  # f
            o += 2
        elif c == 13:
            out[o] = 92
            out[o + 1] = 114  # r
            o += 2
        else:
            memcpy(out + o, b"\\u00", 4)
            out[o + 4] = HEX[c >> 4]
            out[o + 5] = HEX[c & 15]
            o += 6
    return o


cdef inline unsigned long long u32(const uint8_t* p) noexcept nogil:
    return (<unsigned long long>p[0] << 24) | (p[1] << 16) | (p[2] << 8) | p[3]


cdef inline unsigned long long u64(const uint8_t* p) noexcept nogil:
    return (u32(p) << 32) | u32(p + 4)


# MessagePack, as msgspec writes it: an unsigned integer in its shortest form, a string's header

cdef inline Py_ssize_t uint_size(unsigned long long v) noexcept nogil:
    if v < 128:
        return 1
    if v < 256:
        return 2
    if v < 65536:
        return 3
    if v < 4294967296ULL:
        return 5
    return 9


cdef inline Py_ssize_t write_uint(char* out, unsigned long long v) noexcept nogil:
    cdef int n, i
    if v < 128:
        out[0] = <char>v
        return 1
    if v < 256:
        out[0], n = <char>0xCC, 1
    elif v < 65536:
        out[0], n = <char>0xCD, 2
    elif v < 4294967296ULL:
        out[0], n = <char>0xCE, 4
    else:
        out[0], n = <char>0xCF, 8
    for i in range(n):
        out[n - i] = <char>((v >> (8 * i)) & 0xFF)
    return n + 1


cdef inline Py_ssize_t str_size(Py_ssize_t n) noexcept nogil:
    return 1 if n < 32 else (2 if n < 256 else (3 if n < 65536 else 5))


cdef inline Py_ssize_t write_str_header(char* out, Py_ssize_t n) noexcept nogil:
    if n < 32:
        out[0] = <char>(0xA0 | n)
        return 1
    if n < 256:
        out[0] = <char>0xD9
        out[1] = <char>n
        return 2
    if n < 65536:
        out[0] = <char>0xDA
        out[1] = <char>(n >> 8)
        out[2] = <char>(n & 0xFF)
        return 3
    out[0] = <char>0xDB
    out[1] = <char>(n >> 24)
    out[2] = <char>((n >> 16) & 0xFF)
    out[3] = <char>((n >> 8) & 0xFF)
    out[4] = <char>(n & 0xFF)
    return 5


cdef class Images:
    """``(rid, obj)`` of an insert's TupleData, as :meth:`Table.image_bytes` gives them.
    ``names``: each column's JSON name and colon; ``categories``: each one's value mapping;
    ``key``: the key's column positions in key order, or None."""

    cdef tuple names
    cdef int ncols
    cdef int* cats
    cdef int* key
    cdef int nkey
    cdef bint has_key
    cdef bint* is_key
    cdef Py_ssize_t* at  # per column, per call: the value's start (-1: null)
    cdef Py_ssize_t* size  # its JSON text's size
    cdef Py_ssize_t rid_n  # per call: the rid's JSON text's size (-1: none)

    def __cinit__(self, names, categories, key):
        self.names = tuple(names)
        self.ncols = len(self.names)
        if len(categories) != self.ncols:
            raise ValueError("a category for each column")
        n = max(self.ncols, 1)
        self.cats = <int*>PyMem_Malloc(n * sizeof(int))
        self.is_key = <bint*>PyMem_Malloc(n * sizeof(bint))
        self.at = <Py_ssize_t*>PyMem_Malloc(n * sizeof(Py_ssize_t))
        self.size = <Py_ssize_t*>PyMem_Malloc(n * sizeof(Py_ssize_t))
        self.has_key = key is not None
        self.nkey = len(key) if key is not None else 0
        self.key = <int*>PyMem_Malloc(max(self.nkey, 1) * sizeof(int))
        if not (self.cats and self.is_key and self.at and self.size and self.key):
            raise MemoryError()
        cdef int i
        for i in range(self.ncols):
            self.cats[i] = categories[i]
            self.is_key[i] = False
            if not isinstance(self.names[i], bytes):
                raise TypeError("column names as bytes")
        for i in range(self.nkey):
            if not 0 <= key[i] < self.ncols:
                raise ValueError("a key column out of range")
            self.key[i] = key[i]
            self.is_key[key[i]] = True

    def __dealloc__(self):
        PyMem_Free(self.cats)
        PyMem_Free(self.is_key)
        PyMem_Free(self.at)
        PyMem_Free(self.size)
        PyMem_Free(self.key)

    cdef Py_ssize_t _scan(self, const uint8_t* p, Py_ssize_t n, Py_ssize_t pos) noexcept:
        """The first pass over the TupleData at ``pos`` (which ends the ``n`` bytes at
        ``p``): checks it, notes each value's place and size. The ``obj`` text's size, and
        the rid's in ``self.rid_n`` (-1: no rid); -1 if refused."""
        cdef int i, j, cat
        cdef int64_t length
        cdef Py_ssize_t start, obj_size = 2, rid_size = 2, name_n
        cdef bint null_key = False
        cdef uint8_t k
        if pos < 0 or pos + 2 > n or ((p[pos] << 8) | p[pos + 1]) != self.ncols:
            return -1
        pos += 2
        for i in range(self.ncols):
            if pos >= n:
                return -1
            k = p[pos]
            if k == 116:  # t
                if pos + 5 > n:
                    return -1
                length = (<int64_t>p[pos + 1] << 24) | (p[pos + 2] << 16) | (p[pos + 3] << 8) | p[pos + 4]
                if length >= 0x80000000 or pos + 5 + length > n:
                    return -1
                start = pos + 5
                pos = start + length
                self.at[i] = start
                cat = self.cats[i]
                if cat == STRING:
                    if not is_ascii(p + start, length) and not valid_utf8(p + start, length):
                        return -1
                    self.size[i] = 2 + escaped_size(p + start, length)
                elif cat == BOOL:
                    self.size[i] = 4 if (length == 1 and p[start] == 116) or (
                        length == 4 and memcmp(p + start, b"true", 4) == 0) else 5
                else:
                    if cat == NUMBER and ((length == 3 and memcmp(p + start, b"NaN", 3) == 0) or (
                            length == 8 and memcmp(p + start, b"Infinity", 8) == 0) or (
                            length == 9 and memcmp(p + start, b"-Infinity", 9) == 0)):
                        self.size[i] = length + 2
                    else:
                        if not is_ascii(p + start, length) and not valid_utf8(p + start, length):
                            return -1
                        self.size[i] = length
            elif k == 110:  # n
                self.at[i] = -1
                self.size[i] = 4
                if self.is_key[i]:
                    null_key = True
                pos += 1
            else:
                return -1
            name_n = PyBytes_GET_SIZE(<bytes>PyTuple_GET_ITEM(self.names, i))
            obj_size += name_n + self.size[i] + (1 if i else 0)
        if pos != n:
            return -1
        if not self.has_key or null_key:
            self.rid_n = -1
        else:
            for j in range(self.nkey):
                i = self.key[j]
                rid_size += PyBytes_GET_SIZE(<bytes>PyTuple_GET_ITEM(self.names, i)) + self.size[i] + (1 if j else 0)
            self.rid_n = rid_size
        return obj_size

    def __call__(self, bytes data not None, Py_ssize_t pos):
        cdef const uint8_t* p = <const uint8_t*>PyBytes_AS_STRING(data)
        cdef Py_ssize_t obj_size = self._scan(p, PyBytes_GET_SIZE(data), pos)
        if obj_size < 0:
            return None
        obj = PyBytes_FromStringAndSize(NULL, obj_size)
        self._write(PyBytes_AS_STRING(obj), p, NULL, self.ncols)
        if self.rid_n < 0:
            return None, obj
        rid = PyBytes_FromStringAndSize(NULL, self.rid_n)
        self._write(PyBytes_AS_STRING(rid), p, self.key, self.nkey)
        return rid, obj

    def record(self, bytes data not None, Py_ssize_t pos, bytes head not None, unsigned long long lsn,
               bytes middle not None, bytes tail not None):
        """The insert's encoded record: ``head``, ``lsn`` (MessagePack), ``middle``, the
        rid (or nil), nil, the ``after`` image, ``tail``; None where :meth:`__call__` is
        None. What :func:`~.rows.python_insert_record` puts together, in one piece."""
        return self._record(<const uint8_t*>PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data), pos, head, lsn,
                            middle, tail)

    cdef object _record(self, const uint8_t* p, Py_ssize_t n, Py_ssize_t pos, bytes head, unsigned long long lsn,
                        bytes middle, bytes tail):
        """:meth:`record`, the images written in place (no bytes of their own)."""
        cdef Py_ssize_t obj_n = self._scan(p, n, pos)
        if obj_n < 0:
            return None
        cdef Py_ssize_t rid_n = self.rid_n
        cdef Py_ssize_t head_n = PyBytes_GET_SIZE(head), mid_n = PyBytes_GET_SIZE(middle)
        cdef Py_ssize_t tail_n = PyBytes_GET_SIZE(tail)
        cdef Py_ssize_t size = head_n + uint_size(lsn) + mid_n + (1 if rid_n < 0 else str_size(rid_n) + rid_n)
        size += 1 + str_size(obj_n) + obj_n + tail_n
        out_obj = PyBytes_FromStringAndSize(NULL, size)
        cdef char* out = PyBytes_AS_STRING(out_obj)
        cdef Py_ssize_t o = 0
        memcpy(out, PyBytes_AS_STRING(head), head_n)
        o = head_n
        o += write_uint(out + o, lsn)
        memcpy(out + o, PyBytes_AS_STRING(middle), mid_n)
        o += mid_n
        if rid_n < 0:
            out[o] = <char>0xC0
            o += 1
        else:
            o += write_str_header(out + o, rid_n)
            self._write(out + o, p, self.key, self.nkey)
            o += rid_n
        out[o] = <char>0xC0  # before: nil
        o += 1
        o += write_str_header(out + o, obj_n)
        self._write(out + o, p, NULL, self.ncols)
        o += obj_n
        memcpy(out + o, PyBytes_AS_STRING(tail), tail_n)
        return out_obj

    def run(self, list batch not None, Py_ssize_t i, bint in_stream, unsigned long long relation,
            unsigned long long sub, bytes head not None, bytes middle not None, bytes tail not None,
            list out not None, Py_ssize_t room, Py_ssize_t room_bytes):
        """The records of the run of inserts that starts at ``batch[i]``, appended to
        ``out``: XLogData frames of pgoutput Insert messages (in a stream block when
        ``in_stream``, of subtransaction ``sub``) of ``relation``, each one's record as
        :meth:`record` makes it (its LSN the frame's data start). Stops before anything
        else (another message, relation or subtransaction, a tuple :meth:`record`
        refuses), and after the row that fills ``room`` records or ``room_bytes`` bytes.
        ``(where it stopped, bytes appended, highest data start, highest WAL end)``: what
        :func:`~.rows.python_insert_run`, the reference, gives."""
        cdef Py_ssize_t k = i, end = len(batch), n, nbytes = 0, pos
        cdef unsigned long long start, wal_end, top_start = 0, top_end = 0
        cdef const uint8_t* p
        cdef object item
        while k < end:
            item = batch[k]
            if type(item) is not bytes:
                break
            p = <const uint8_t*>PyBytes_AS_STRING(item)
            n = PyBytes_GET_SIZE(item)
            if n <= 35 or p[0] != 0x77 or p[25] != 0x49:  # w, I
                break
            if in_stream:
                if u32(p + 26) != sub or u32(p + 30) != relation or p[34] != 0x4E:  # N
                    break
                pos = 35
            else:
                if u32(p + 26) != relation or p[30] != 0x4E:
                    break
                pos = 31
            start = u64(p + 1)
            wal_end = u64(p + 9)
            rec = self._record(p, n, pos, head, start, middle, tail)
            if rec is None:
                break
            out.append(rec)
            nbytes += PyBytes_GET_SIZE(rec)
            if start > top_start:
                top_start = start
            if wal_end > top_end:
                top_end = wal_end
            k += 1
            if k - i >= room or nbytes >= room_bytes:
                break
        return k, nbytes, top_start, top_end

    cdef void _write(self, char* out, const uint8_t* p, int* columns, int count):
        """``{name:value,...}`` of ``count`` columns (the first ones, or those of ``columns``)."""
        cdef int j, i, cat
        cdef Py_ssize_t o = 1, name_n, start, length
        cdef bytes name
        out[0] = 123  # {
        for j in range(count):
            i = columns[j] if columns != NULL else j
            if j:
                out[o] = 44  # ,
                o += 1
            name = <bytes>PyTuple_GET_ITEM(self.names, i)
            name_n = PyBytes_GET_SIZE(name)
            memcpy(out + o, PyBytes_AS_STRING(name), name_n)
            o += name_n
            start = self.at[i]
            if start < 0:
                memcpy(out + o, b"null", 4)
                o += 4
                continue
            cat = self.cats[i]
            if cat == STRING:
                length = self.size[i]  # escaped, with its quotes
                out[o] = 34
                write_escaped(out + o + 1, p + start, (p[start - 4] << 24 | p[start - 3] << 16 | p[start - 2] << 8 | p[start - 1]))
                out[o + length - 1] = 34
                o += length
            elif cat == BOOL:
                if self.size[i] == 4:
                    memcpy(out + o, b"true", 4)
                else:
                    memcpy(out + o, b"false", 5)
                o += self.size[i]
            else:
                length = (p[start - 4] << 24) | (p[start - 3] << 16) | (p[start - 2] << 8) | p[start - 1]
                if self.size[i] != length:  # a number that is not one: quoted
                    out[o] = 34
                    memcpy(out + o + 1, p + start, length)
                    out[o + length + 1] = 34
                else:
                    memcpy(out + o, p + start, length)
                o += self.size[i]
        out[o] = 125  # }


def split_copydata(bytes buf not None, Py_ssize_t pos, list out not None):
    """The bodies of the whole CopyData messages (``d``, a length of at least 5: a body of
    a byte or more) of ``buf`` from ``pos``, appended to ``out``; where it stopped: the
    end, or a message of another kind, length, or not whole yet (the stream's own loop
    takes it from there). :func:`~.connection.python_split_copydata` is the reference."""
    cdef const uint8_t* p = <const uint8_t*>PyBytes_AS_STRING(buf)
    cdef Py_ssize_t end = PyBytes_GET_SIZE(buf), stop
    cdef long long n
    if pos < 0:
        return pos
    while end - pos >= 5 and p[pos] == 0x64:  # d
        n = <long long>((<unsigned int>p[pos + 1] << 24) | (p[pos + 2] << 16) | (p[pos + 3] << 8) | p[pos + 4])
        if n < 5 or n > 0x7FFFFFFF:
            break
        stop = pos + 1 + n
        if stop > end:
            break
        out.append(PyBytes_FromStringAndSize(<const char*>p + pos + 5, n - 4))
        pos = stop
    return pos
