"""The Spark side lives in ``olr_buffer.spark_sink``; users import it as ``olr_buffer.spark``
(docs/spark.md): both names give the same objects, and neither warns."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_olr_buffer_spark_gives_every_public_name_of_spark_sink_without_a_warning():
    code = (
        "import warnings\n"
        "warnings.simplefilter('error')\n"
        "import olr_buffer.spark as face, olr_buffer.spark_sink as home\n"
        "assert sorted(face.__all__) == sorted(home.__all__), face.__all__\n"
        "for name in home.__all__:\n"
        "    assert getattr(face, name) is getattr(home, name), name\n"
        "print(len(home.__all__))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) >= 20


def test_the_spark_helpers_live_in_spark_sink():
    import olr_buffer.spark as face

    homes = {
        "read_changefeed": "reading",
        "changefeed_schema": "reading",
        "stream_changefeed": "streaming",
        "table_changes": "tables",
        "snapshot": "tables",
        "typed": "tables",
        "table_schema": "tables",
        "infer_schema": "tables",
    }
    for name, module in homes.items():
        assert getattr(face, name).__module__ == f"olr_buffer.spark_sink.{module}", name
