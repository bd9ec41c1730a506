"""Real OpenLogReplicator messages, as its documentation and its users' reports show them,
and the changefeed rows contract section 7 makes of them (written here by hand from the
contract, not from the source's code).

Each message is the text as published, byte for byte, except where a comment says what
was added around it: a documentation example gives one message (or its payload alone),
so the ``begin`` and ``commit`` messages of its transaction, and a header for a payload,
are written in the same form, with the positions the example implies.
"""

from __future__ import annotations

# -- OpenLogReplicator issue 220 (bersler/OpenLogReplicator#220, its author's reply of
# 2025-03-11, version 1.8.3): a transaction as the network writer sent it, c_idx from 1.
# The issue shows its begin and the first rows; the report is cut at c_idx 6, a row: the
# commit below is added at c_idx 6 in its place.
ISSUE_220 = [
    b'{"scn":2631790,"tm":1741732767000000000,"c_scn":2631935,"c_idx":1,"xid":"0x0004.012.00000259","payload":'
    b'[{"op":"begin"}]}',
    b'{"c_scn":2631935,"c_idx":2,"xid":"0x0004.012.00000259","payload":[{"op":"c","schema":{"owner":"USR1",'
    b'"table":"ADAMX"},"after":{"A":3}}]}',
    b'{"c_scn":2631935,"c_idx":3,"xid":"0x0004.012.00000259","payload":[{"op":"c","schema":{"owner":"USR1",'
    b'"table":"ADAMX"},"after":{"A":3}}]}',
    b'{"c_scn":2631935,"c_idx":4,"xid":"0x0004.012.00000259","payload":[{"op":"c","schema":{"owner":"USR1",'
    b'"table":"ADAMX"},"after":{"A":3}}]}',
    b'{"c_scn":2631935,"c_idx":5,"xid":"0x0004.012.00000259","payload":[{"op":"c","schema":{"owner":"USR1",'
    b'"table":"ADAMX"},"after":{"A":3}}]}',
    # added: the commit
    b'{"c_scn":2631935,"c_idx":6,"xid":"0x0004.012.00000259","payload":[{"op":"commit"}]}',
]

# -- SynchDB's documentation of its OpenLogReplicator event processor ("DDL payload",
# /work/shared/seeds/004_*.txt: docs of Hornetlabs/synchdb), pretty-printed there and
# written here as OpenLogReplicator sends it (no spaces); its begin and commit added.
SYNCHDB_DDL = [
    # added: the begin
    b'{"scn":2930816,"tm":1753384727000000000,"c_scn":2930820,"c_idx":2,"xid":"0x0008.011.000004c7","db":"FREE",'
    b'"payload":[{"op":"begin"}]}',
    b'{"scn":2930816,"tm":1753384727000000000,"c_scn":2930820,"c_idx":3,"xid":"0x0008.011.000004c7","db":"FREE",'
    b'"payload":[{"op":"ddl","schema":{"owner":"DBZUSER","table":"TEST_TABLE","obj":74234},"sql":"CREATE TABLE '
    b"test_table (\\n    id NUMBER PRIMARY KEY,\\n    binary_double_col BINARY_DOUBLE,\\n    binary_float_col "
    b"BINARY_FLOAT,\\n    float_col FLOAT(10),\\n    number_col NUMBER(10,2),\\n    long_col LONG,\\n    date_col "
    b"DATE,\\n    interval_ds_col INTERVAL DAY TO SECOND,\\n    interval_ym_col INTERVAL YEAR TO MONTH,\\n    "
    b"timestamp_col TIMESTAMP,\\n    timestamp_tz_col TIMESTAMP WITH TIME ZONE,\\n    timestamp_ltz_col TIMESTAMP "
    b"WITH LOCAL TIME ZONE,\\n    char_col CHAR(10),\\n    nchar_col NCHAR(10),\\n    nvarchar2_col NVARCHAR2(50),"
    b"\\n    varchar_col VARCHAR(50),\\n    varchar2_col VARCHAR2(50),\\n    raw_col RAW(100),\\n    bfile_col BFILE,"
    b"\\n    blob_col BLOB,\\n    clob_col CLOB,\\n    nclob_col NCLOB,\\n    rowid_col ROWID,\\n    urowid_col "
    b'UROWID\\n)"}]}',
    # added: the commit
    b'{"scn":2930820,"tm":1753384727000000000,"c_scn":2930820,"c_idx":4,"xid":"0x0008.011.000004c7","db":"FREE",'
    b'"payload":[{"op":"commit"}]}',
]
SYNCHDB_DDL_SQL = (
    "CREATE TABLE test_table (\n    id NUMBER PRIMARY KEY,\n    binary_double_col BINARY_DOUBLE,\n    binary_float_col "
    "BINARY_FLOAT,\n    float_col FLOAT(10),\n    number_col NUMBER(10,2),\n    long_col LONG,\n    date_col DATE,\n"
    "    interval_ds_col INTERVAL DAY TO SECOND,\n    interval_ym_col INTERVAL YEAR TO MONTH,\n    timestamp_col "
    "TIMESTAMP,\n    timestamp_tz_col TIMESTAMP WITH TIME ZONE,\n    timestamp_ltz_col TIMESTAMP WITH LOCAL TIME "
    "ZONE,\n    char_col CHAR(10),\n    nchar_col NCHAR(10),\n    nvarchar2_col NVARCHAR2(50),\n    varchar_col "
    "VARCHAR(50),\n    varchar2_col VARCHAR2(50),\n    raw_col RAW(100),\n    bfile_col BFILE,\n    blob_col BLOB,\n"
    "    clob_col CLOB,\n    nclob_col NCLOB,\n    rowid_col ROWID,\n    urowid_col UROWID\n)"
)

# -- the same page's "DML payload": a row with the table's columns (format option schema
# 1), num (message 2), rid, db; its begin and commit added.
SYNCHDB_DML = [
    # added: the begin
    b'{"scn":3531590,"tm":1752686342000000000,"c_scn":3531691,"c_idx":1,"xid":"0x0007.01a.000004a1","db":"FREE",'
    b'"payload":[{"op":"begin"}]}',
    b'{"scn":3531590,"tm":1752686342000000000,"c_scn":3531691,"c_idx":2,"xid":"0x0007.01a.000004a1","db":"FREE",'
    b'"payload":[{"op":"c","schema":{"owner":"DBZUSER","table":"ORDERS","obj":73406,"columns":[{"name":'
    b'"ORDER_NUMBER","type":"number","precision":-1,"scale":-1,"nullable":false},{"name":"ORDER_DATE","type":'
    b'"date","nullable":true},{"name":"PURCHASER","type":"number","precision":-1,"scale":-1,"nullable":true},'
    b'{"name":"QUANTITY","type":"number","precision":-1,"scale":-1,"nullable":true},{"name":"PRODUCT_ID","type":'
    b'"number","precision":-1,"scale":-1,"nullable":true}]},"num":0,"rid":"AAAR6+AAFAAAACGAAA","after":'
    b'{"ORDER_NUMBER":10013,"ORDER_DATE":1704067200000000000,"PURCHASER":1003,"QUANTITY":2,"PRODUCT_ID":107}}]}',
    # added: the commit
    b'{"scn":3531691,"tm":1752686342000000000,"c_scn":3531691,"c_idx":3,"xid":"0x0007.01a.000004a1","db":"FREE",'
    b'"payload":[{"op":"commit"}]}',
]

# -- OpenLogReplicator issue 231 (bersler/OpenLogReplicator#231, 2025-06-16, format
# options message 2, schema 7, timestamp 10, db 3): a delete in the middle of a large
# transaction, ISO time text (tms), a JSON string with escaped slashes; its begin (at the
# c_idx before it) and commit added.
ISSUE_231 = [
    # added: the begin (a transaction's first message has its scn; this one is made up)
    b'{"scn":4903130,"tms":"2025-06-16T13:08:37.000Z","c_scn":4903137,"c_idx":1000,"xid":"0x000a.005.0000083d",'
    b'"db":"XEPDB1","payload":[{"op":"begin"}]}',
    b'{"tms":"2025-06-16T13:08:37.000Z","c_scn":4903137,"c_idx":1001,"xid":"0x000a.005.0000083d","db":"XEPDB1",'
    b'"payload":[{"op":"d","schema":{"owner":"GLUESYNCUSER","table":"ARTICLES","obj":75771,"columns":[{"name":"ID",'
    b'"type":"number","precision":-1,"scale":-1,"nullable":false},{"name":"ARTICLE_NAME","type":"varchar2",'
    b'"length":1000,"nullable":true},{"name":"DESCRIPTION","type":"varchar2","length":1000,"nullable":true},'
    b'{"name":"PRICE","type":"number","precision":126,"scale":-1,"nullable":true},{"name":"CURRENCY","type":'
    b'"varchar2","length":1000,"nullable":true},{"name":"AVAILABILITY","type":"number","precision":-1,"scale":-1,'
    b'"nullable":true},{"name":"IMAGE_URL","type":"varchar2","length":1000,"nullable":true}]},"num":999,"rid":'
    b'"AAASf7AANAAAAHsAAe","before":{"ID":1000,"ARTICLE_NAME":"Barramundi","DESCRIPTION":"Multi-channelled '
    b'clear-thinking knowledge user","PRICE":68.06,"CURRENCY":"CNY","AVAILABILITY":8951,"IMAGE_URL":'
    b'"http:\\/\\/dummyimage.com\\/128x128.png\\/ff4444\\/ffffff"}}]}',
    # added: the commit
    b'{"tms":"2025-06-16T13:08:37.000Z","c_scn":4903137,"c_idx":1002,"xid":"0x000a.005.0000083d","db":"XEPDB1",'
    b'"payload":[{"op":"commit"}]}',
]
ISSUE_231_TM = 1750079317000000000  # 2025-06-16T13:08:37Z

# -- OpenLogReplicator's user manual (1.2.0, "Schemaless Mode"; /work/shared/seeds/003_*.txt):
# the payload of a row of schemaless mode (flags 2): no owner, the table OBJ_<obj>, columns
# COL_<n> in hex. Header, begin and commit added.
SCHEMALESS = [
    b'{"scn":4903140,"tm":1750079320000000000,"c_scn":4903141,"c_idx":0,"xid":"0x0003.00b.00000d21","payload":'
    b'[{"op":"begin"}]}',
    b'{"c_scn":4903141,"c_idx":1,"xid":"0x0003.00b.00000d21",'
    b'"payload":[{"op":"c","schema":{"table":"OBJ_87705"},"after":{"COL_0":"53544f50","COL_1":"787708010d2339"}}]}',
    b'{"c_scn":4903141,"c_idx":2,"xid":"0x0003.00b.00000d21","payload":[{"op":"commit"}]}',
]

# -- the same manual ("Checkpoint messages"): a checkpoint's payload; header added.
CHECKPOINT = [
    b'{"scn":4903150,"tm":1750079330000000000,"c_scn":4903150,"c_idx":0,'
    b'"payload":[{"op":"chkpt","seq":1763,"offset":15872}]}',
]

# -- a ddl with its sql alone, the form of OpenLogReplicator's BuilderJson::processDdl
# before DDL messages carried the table (bersler/OpenLogReplicator, src/builder/
# BuilderJson.cpp of 2023: ``{"op":"ddl","sql":"..."}``; owners came to DDL messages
# later: its issue 135); header, begin and commit added.
DDL_SQL_ALONE = [
    b'{"scn":4903160,"tm":1750079340000000000,"c_scn":4903161,"c_idx":0,"xid":"0x0005.00d.00000191","payload":'
    b'[{"op":"begin"}]}',
    b'{"c_scn":4903161,"c_idx":1,"xid":"0x0005.00d.00000191","payload":[{"op":"ddl","sql":"create table '
    b'USR1.ADAMX(a numeric)"}]}',
    b'{"c_scn":4903161,"c_idx":2,"xid":"0x0005.00d.00000191","payload":[{"op":"commit"}]}',
]

# -- OpenLogReplicator issue 126 (bersler/OpenLogReplicator#126, 2024-04-10): a transaction
# as an OpenLogReplicator of then wrote it: no c_idx (so no position per message), the
# table's columns with key_type, key_name, order_by. Not in STREAM: refused, said why.
ISSUE_126 = [
    b'{"scn":358135,"tm":1712602205000000000,"c_scn":358141,"xid":"0x0005.00d.00000191","payload":[{"op":"begin"}]}',
    b'{"c_scn":358141,"xid":"0x0005.00d.00000191","payload":[{"op":"c","schema":{"owner":"TESTUSR1","table":"T2",'
    b'"obj":20060,"columns":[{"name":"ID","type":"number","precision":-1,"scale":0,"nullable":false,"key_type":2,'
    b'"key_name":"SYS_C007005","order_by":"ASC"},{"name":"DATA","type":"varchar2","length":128,"nullable":true,'
    b'"key_type":0,"key_name":"","order_by":"ASC"}]},"after":{"ID":3,"DATA":"##########STR##########STR#########'
    b'#STR##########STR##########STR##########STR##########STR#########3"}}]}',
    b'{"c_scn":358141,"xid":"0x0005.00d.00000191","payload":[{"op":"commit"}]}',
]

#: Every fixture in commit order: one stream.
STREAM = ISSUE_220 + SYNCHDB_DDL + SYNCHDB_DML + ISSUE_231 + SCHEMALESS + CHECKPOINT + DDL_SQL_ALONE


def _row(
    tx_seq, op_seq, c_scn, c_tm, xid, op, scn, tm, owner, table, obj=None, rid=None, before=None, after=None, sql=None
) -> dict:
    return {
        "tx_seq": tx_seq,
        "op_seq": op_seq,
        "c_scn": c_scn,
        "c_tm": c_tm,
        "xid": xid,
        "op": op,
        "scn": scn,
        "sub": 0,
        "tm": tm,
        "thread": 1,
        "owner": owner,
        "table": table,
        "obj": obj,
        "rid": rid,
        "before": before,
        "after": after,
        "sql": sql,
    }


#: The changefeed ``STREAM`` gives (contract section 7): c_scn the message's, c_tm the
#: commit message's tm (else the first message's), scn the last one sent, tm the row
#: message's own, thread 1 (no rth), owner "" where the message names none.
EXPECTED = [
    *[
        _row(
            0,
            i,
            2631935,
            1741732767000000000,
            "0x0004.012.00000259",
            "c",
            2631790,
            None,
            "USR1",
            "ADAMX",
            after={"A": 3},
        )
        for i in range(4)
    ],
    _row(
        1,
        0,
        2930820,
        1753384727000000000,
        "0x0008.011.000004c7",
        "ddl",
        2930816,
        1753384727000000000,
        "DBZUSER",
        "TEST_TABLE",
        obj=74234,
        sql=SYNCHDB_DDL_SQL,
    ),
    _row(
        2,
        0,
        3531691,
        1752686342000000000,
        "0x0007.01a.000004a1",
        "c",
        3531590,
        1752686342000000000,
        "DBZUSER",
        "ORDERS",
        obj=73406,
        rid="AAAR6+AAFAAAACGAAA",
        after={
            "ORDER_NUMBER": 10013,
            "ORDER_DATE": 1704067200000000000,
            "PURCHASER": 1003,
            "QUANTITY": 2,
            "PRODUCT_ID": 107,
        },
    ),
    _row(
        3,
        0,
        4903137,
        ISSUE_231_TM,
        "0x000a.005.0000083d",
        "d",
        4903130,
        ISSUE_231_TM,
        "GLUESYNCUSER",
        "ARTICLES",
        obj=75771,
        rid="AAASf7AANAAAAHsAAe",
        before={
            "ID": 1000,
            "ARTICLE_NAME": "Barramundi",
            "DESCRIPTION": "Multi-channelled clear-thinking knowledge user",
            "PRICE": 68.06,
            "CURRENCY": "CNY",
            "AVAILABILITY": 8951,
            "IMAGE_URL": "http://dummyimage.com/128x128.png/ff4444/ffffff",
        },
    ),
    _row(
        4,
        0,
        4903141,
        1750079320000000000,
        "0x0003.00b.00000d21",
        "c",
        4903140,
        None,
        "",
        "OBJ_87705",
        after={"COL_0": "53544f50", "COL_1": "787708010d2339"},
    ),
    _row(
        5,
        0,
        4903161,
        1750079340000000000,
        "0x0005.00d.00000191",
        "ddl",
        4903160,
        None,
        "",
        "",
        sql="create table USR1.ADAMX(a numeric)",
    ),
]
