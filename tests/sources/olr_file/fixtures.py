"""OpenLogReplicator's file-writer output for the tests: real messages, as its users
posted them, and files written the way its ``WriterFile`` writes them (one message a
line, ``"new-line": 1``; the names of its ``output`` pattern)."""

from __future__ import annotations

from pathlib import Path

# From bersler/OpenLogReplicator issue #126 ("Get the redo record's START_SCN and
# COMMIT_SCN", 2024-04-10): the JSON output of one transaction, byte for byte as posted:
# an OpenLogReplicator of that time writes c_scn but no c_idx, scn and tm in the first
# message only, and the table's columns with its first row ("schema": 1 or more).
ISSUE_126 = [
    b'{"scn":358135,"tm":1712602205000000000,"c_scn":358141,"xid":"0x0005.00d.00000191","payload":[{"op":"begin"}]}',
    b'{"c_scn":358141,"xid":"0x0005.00d.00000191","payload":[{"op":"c","schema":{"owner":"TESTUSR1","table":"T2",'
    b'"obj":20060,"columns":[{"name":"ID","type":"number","precision":-1,"scale":0,"nullable":false,"key_type":2,'
    b'"key_name":"SYS_C007005","order_by":"ASC"},{"name":"DATA","type":"varchar2","length":128,"nullable":true,'
    b'"key_type":0,"key_name":"","order_by":"ASC"}]},"after":{"ID":3,"DATA":"##########STR##########STR##########STR'
    b'##########STR##########STR##########STR##########STR#########3"}}]}',
    b'{"c_scn":358141,"xid":"0x0005.00d.00000191","payload":[{"op":"commit"}]}',
]
ISSUE_126_AFTER = (
    '{"ID":3,"DATA":"##########STR##########STR##########STR##########STR##########STR##########STR'
    '##########STR#########3"}'
)

# The checkpoint message's payload from OpenLogReplicator's user manual (1.2.0, "Checkpoint
# records": '"payload":[{"op":"chkpt","seq":1763,"offset":15872}]'), in the header the
# same writer puts before it (scn, tm, c_scn): a message of no transaction, skipped.
MANUAL_CHECKPOINT = (
    b'{"scn":358150,"tm":1712602210000000000,"c_scn":358150,"payload":[{"op":"chkpt","seq":1763,"offset":15872}]}'
)

# The row of OpenLogReplicator's user manual (1.2.0, "Schemaless Mode": '"payload":[{"op":"c",
# "schema":{"table":"OBJ_87705"},"after":{"COL_0":"53544f50","COL_1":"787708010d2339"}}]'): no
# owner, the table named by its object number, values as hex; in a transaction of the
# shape above (its xid and SCNs made up).
SCHEMALESS = [
    b'{"scn":358170,"tm":1712602220000000000,"c_scn":358171,"c_idx":0,"xid":"0x0006.001.00000193",'
    b'"payload":[{"op":"begin"}]}',
    b'{"c_scn":358171,"c_idx":1,"xid":"0x0006.001.00000193","payload":[{"op":"c","schema":{"table":"OBJ_87705"},'
    b'"after":{"COL_0":"53544f50","COL_1":"787708010d2339"}}]}',
    b'{"c_scn":358171,"c_idx":2,"xid":"0x0006.001.00000193","payload":[{"op":"commit"}]}',
]

# The same transaction's shape as issue #126 in a later transaction of that output (its
# xid, scn and values changed; an update and a delete, with before images), for a second
# transaction with more than one row.
LATER = [
    b'{"scn":358160,"tm":1712602215000000000,"c_scn":358166,"xid":"0x0005.00e.00000192","payload":[{"op":"begin"}]}',
    b'{"c_scn":358166,"xid":"0x0005.00e.00000192","payload":[{"op":"u","schema":{"owner":"TESTUSR1","table":"T2",'
    b'"obj":20060},"before":{"ID":3,"DATA":"x"},"after":{"ID":3,"DATA":"y"}}]}',
    b'{"c_scn":358166,"xid":"0x0005.00e.00000192","payload":[{"op":"d","schema":{"owner":"TESTUSR1","table":"T2",'
    b'"obj":20060},"before":{"ID":4,"DATA":"z"}}]}',
    b'{"c_scn":358166,"xid":"0x0005.00e.00000192","payload":[{"op":"commit"}]}',
]


def write_output(
    directory: Path, messages: list[bytes], *, files: int = 1, name: str = "ORCL-%i.json", first: int = 0
) -> list[Path]:
    """``messages`` in ``files`` files of ``directory`` named as OpenLogReplicator's
    ``output`` pattern ``name`` with ``%i`` (or ``%Ni``) numbers them, one message a line."""
    import re

    directory.mkdir(parents=True, exist_ok=True)
    m = re.search(r"%(\d*)i", name)
    width = int(m.group(1) or 0)
    paths = []
    for k in range(files):
        part = messages[k * len(messages) // files : (k + 1) * len(messages) // files]
        path = directory / (name[: m.start()] + str(first + k).rjust(width, "0") + name[m.end() :])
        path.write_bytes(b"".join(msg + b"\n" for msg in part))
        paths.append(path)
    return paths
