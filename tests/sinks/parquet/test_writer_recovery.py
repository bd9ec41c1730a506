"""The changefeed writer's recovery keeps its audit log (``published.jsonl``) free of
repeats: a file published before a crash, but missing from the manifest, is adopted and
logged only if the log does not have it yet."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from olr_buffer.changes import Commit, CommitKey
from olr_buffer.sinks.parquet.writer import MANIFEST, META_DIR, PUBLISHED_LOG, ChangefeedWriter


def _publish(writer: ChangefeedWriter, scn: int) -> None:
    row = [2, scn, 0, 1, scn, None, "O", "T", None, f"R{scn}", None, '{"A":1}', None]
    assert writer.write_transaction(Commit(f"x{scn}", CommitKey(scn, 1, 1, scn), None), [(1, [row])]) == 1
    writer.flush()


def _logged(cf: Path) -> list[str]:
    return [json.loads(line)["file"] for line in (cf / META_DIR / PUBLISHED_LOG).read_text().splitlines()]


def test_a_file_logged_but_missing_from_the_manifest_is_not_logged_again(tmp_path: Path) -> None:
    cf = tmp_path / "cf"
    writer = ChangefeedWriter(cf, durable=False)
    _publish(writer, 10)
    _publish(writer, 20)
    manifest_after_two = (cf / META_DIR / MANIFEST).read_bytes()
    _publish(writer, 30)
    writer.close()
    files = sorted(p.name for p in cf.glob("part-*.parquet"))
    assert _logged(cf) == files and len(files) == 3
    # the crash between the audit log and the manifest: the manifest is one file behind
    (cf / META_DIR / MANIFEST).write_bytes(manifest_after_two)
    reopened = ChangefeedWriter(cf, durable=False)
    assert reopened.next_tx_seq == 3
    assert json.loads((cf / META_DIR / MANIFEST).read_text())["next_tx_seq"] == 3
    assert _logged(cf) == files


def test_without_a_manifest_every_file_is_adopted_and_logged_once(tmp_path: Path) -> None:
    cf = tmp_path / "cf"
    writer = ChangefeedWriter(cf, durable=False)
    for scn in (10, 20, 30):
        _publish(writer, scn)
    writer.close()
    files = sorted(p.name for p in cf.glob("part-*.parquet"))
    log = cf / META_DIR / PUBLISHED_LOG
    # lose the manifest and the log's last line (a crash before it was written)
    (cf / META_DIR / MANIFEST).unlink()
    log.write_text("".join(log.read_text().splitlines(keepends=True)[:2]))
    ChangefeedWriter(cf, durable=False).close()
    assert _logged(cf) == files
    # and with no log at all, each file once
    shutil.rmtree(cf / META_DIR)
    ChangefeedWriter(cf, durable=False).close()
    assert _logged(cf) == files


def _run_from(cf: Path) -> dict | None:
    return json.loads((cf / META_DIR / MANIFEST).read_text()).get("run_from")


def test_run_from_is_recorded_only_with_the_publication_of_what_it_covers(tmp_path: Path) -> None:
    """A run_from noted for commits up to a key goes into the manifest with the first
    publication that holds that key, not before; threads it leaves out keep what was
    recorded; it is read back on open."""
    cf = tmp_path / "cf"
    writer = ChangefeedWriter(cf, durable=False)
    writer.note_run_from({1: 3, 2: 5}, CommitKey(20, 1, 1, 20))
    _publish(writer, 10)  # below the key: not yet
    assert _run_from(cf) is None
    _publish(writer, 20)
    assert _run_from(cf) == {"1": 3, "2": 5}
    writer.note_run_from({1: 4}, None)  # (None: nothing handed over, valid at once)
    _publish(writer, 30)
    assert _run_from(cf) == {"1": 4, "2": 5}
    writer.close()
    reopened = ChangefeedWriter(cf, durable=False)
    assert reopened.run_from == {1: 4, 2: 5}
    reopened.close()
