"""``olr+file://OUTPUT``: OpenLogReplicator's ``output`` patterns (its WriterFile: %i,
%2i .. %10i, %t, %s, none) and the order their files are read in."""

from __future__ import annotations

import pytest

from olr_buffer.sources import SourceUsageError, kind_of
from olr_buffer.sources.olr_file import parse_output


def test_numbered_files_are_read_in_number_order_not_name_order(tmp_path):
    for name in ("out-9.json", "out-10.json", "out-1.json", "out-x.json", "other-2.json", "out-.json"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "out-3.json").mkdir()  # a directory is not one of the files
    out = parse_output(f"olr+file://{tmp_path}/out-%i.json")
    assert out.mode == "number"
    assert out.files() == ["out-1.json", "out-9.json", "out-10.json"]


def test_zero_filled_timestamp_sequence_and_single_file(tmp_path):
    for name in (
        "a-0002.json",
        "a-0010.json",
        "t-2024-05-01_10:00:00.json",
        "t-2024-04-30_23:59:59.json",
        "s-1764.json",
        "s-1763.json",
        "one.json",
    ):
        (tmp_path / name).write_bytes(b"")
    assert parse_output(f"olr+file://{tmp_path}/a-%4i.json").files() == ["a-0002.json", "a-0010.json"]
    assert parse_output(f"olr+file://{tmp_path}/t-%t.json").files() == [
        "t-2024-04-30_23:59:59.json",
        "t-2024-05-01_10:00:00.json",
    ]
    assert parse_output(f"olr+file://{tmp_path}/s-%s.json").files() == ["s-1763.json", "s-1764.json"]
    single = parse_output(f"olr+file://{tmp_path}/one.json")
    assert single.mode == "single" and single.files() == ["one.json"]


def test_a_relative_output_and_a_missing_directory(tmp_path):
    out = parse_output("olr+file://output-%t.json")  # OpenLogReplicator's own example: the working directory
    assert (out.directory, out.prefix, out.suffix, out.mode) == (".", "output-", ".json", "time")
    assert parse_output(f"olr+file://{tmp_path}/nowhere/x-%i.json").files() == []


@pytest.mark.parametrize("bad", ["olr+file://", "olr+file:///var/olr/", "olr+file:///var/olr/out-%d.json"])
def test_what_openlogreplicator_would_refuse_is_a_usage_error(bad):
    with pytest.raises(SourceUsageError):
        kind_of(bad).check_location(bad)


def test_the_scheme_names_the_source():
    assert kind_of("olr+file:///var/olr/out-%i.json").name == "olr_file"
    assert kind_of("OLR+FILE:///var/olr/out-%i.json").name == "olr_file"
