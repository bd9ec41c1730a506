# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The batch path's two loops over a batch's records, compiled: where each transaction's
records are (:func:`batch_spans`) and their bytes joined (:func:`read_runs`).

Built from source at install with the machine's C compiler (setup.py); when it is not
built, or ``OLR_BUFFER_PURE_PYTHON=1`` is set, :mod:`.batch` runs its pure-Python
reference (``python_batch_spans``, ``python_read_runs``), and the tests hold the two to
the same results, and the same errors, on any input.

They matter where transactions are many and their records scattered: with 5,000
transactions open at once, each record of a tiny transaction is a group of its own.
Compiled, they take 10.5 % off the dispatch stage's instructions on
narrow-tiny-3t-open5000 and 4.3 % on narrow-tiny-3t (bench/log/2026-11-29-batch-step.md).
"""

from cpython cimport array
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.string cimport memcpy


cdef inline void _add(list runs, long long* run, long long index, long long start, long long count):
    """One group of ``count`` records at ``start`` of block ``index`` into the runs:
    ``run`` (index, start, stop) is the run being built, which the group extends when it
    follows it in the same block, or which is closed for the group's own."""
    if index == run[0] and start == run[2]:
        run[2] += count
        return
    if run[0] >= 0:
        runs.append((run[0], run[1], run[2]))
    run[0] = index
    run[1] = start
    run[2] = start + count


cdef long long _add_thread(list runs, long long* run, object locs) except? -1:
    """A thread's groups (``(block, start, count)`` flat, a list or an ``array("q")``) into
    the runs; how many records they hold."""
    cdef long long n = 0, count
    cdef Py_ssize_t k, m
    cdef list lst
    cdef array.array arr
    cdef long long* q
    if len(locs) % 3:
        raise IndexError(f"a transaction's locations are {len(locs)} numbers, not groups of three")
    if type(locs) is list:
        lst = <list>locs
        m = len(lst)
        for k in range(0, m, 3):
            count = lst[k + 2]
            _add(runs, run, lst[k], lst[k + 1], count)
            n += count
    else:
        arr = locs  # (an array("q"): anything else is a TypeError)
        if arr.typecode != "q":
            raise TypeError(f"a transaction's locations are an array of {arr.typecode!r}, not 'q'")
        q = arr.data.as_longlongs
        m = len(arr)
        for k in range(0, m, 3):
            _add(runs, run, q[k], q[k + 1], q[k + 2])
            n += q[k + 2]
    return n


def batch_spans(batch):
    """:func:`.batch.python_batch_spans`, compiled: the same runs, spans and count."""
    cdef list runs = []
    cdef list spans = []
    cdef list per_thread
    cdef long long a = 0, n
    cdef long long run[3]
    cdef dict locations
    run[0] = -1
    run[1] = 0
    run[2] = 0
    for txn, _key in batch:
        locations = txn.locations
        if len(locations) == 1:
            for thread, locs in locations.items():
                n = _add_thread(runs, run, locs)
                spans.append((thread, a, a + n))
                a += n
            continue
        per_thread = []
        for thread, locs in sorted(locations.items()):
            n = _add_thread(runs, run, locs)
            per_thread.append((thread, a, a + n))
            a += n
        spans.append(per_thread[0] if len(per_thread) == 1 else (None, per_thread, None))
    if run[0] >= 0:
        runs.append((run[0], run[1], run[2]))
    return runs, spans, a


def read_runs(list runs, get):
    """:func:`.batch.python_read_runs`, compiled: the records of ``runs`` joined, each
    block got once (``get``) and its bytes copied run by run into one ``bytes``; a run
    outside its block is an IndexError."""
    cdef dict buffers = {}
    cdef list parts = [None] * len(runs)
    cdef Py_ssize_t i, total = 0, at = 0, start, stop, base, count
    cdef array.array offsets
    cdef unsigned int* o
    cdef tuple run, got
    cdef bytes raw
    for i in range(len(runs)):
        run = <tuple>runs[i]
        index = run[0]
        got = buffers.get(index)
        if got is None:
            got = buffers[index] = get(index).buffers()
        parts[i] = got
        offsets = got[1]
        start = run[1]
        stop = run[2]
        if not 0 <= start <= stop < len(offsets):
            raise IndexError(f"records {start}..{stop - 1} of block {index}, which holds {len(offsets) - 1}")
        o = offsets.data.as_uints
        total += o[stop] - o[start]
    if len(runs) == 1:
        raw, offsets, base = parts[0]
        o = offsets.data.as_uints
        start = run[1]
        stop = run[2]
        return raw[base + o[start] : base + o[stop]]
    out = PyBytes_FromStringAndSize(NULL, total)
    cdef char* dst = PyBytes_AS_STRING(out)
    for i in range(len(runs)):
        run = <tuple>runs[i]
        got = <tuple>parts[i]
        raw = got[0]
        offsets = got[1]
        base = got[2]
        o = offsets.data.as_uints
        start = base + o[<Py_ssize_t>run[1]]
        count = o[<Py_ssize_t>run[2]] - o[<Py_ssize_t>run[1]]
        memcpy(dst + at, PyBytes_AS_STRING(raw) + start, count)
        at += count
    return out
