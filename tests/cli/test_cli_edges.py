"""The command line's edges: simulate into a directory that holds logs, its clock, replay of
an empty or wrong directory, distinct exit codes, help texts, the progress line when
stderr is not a terminal, and several bad lines reported at once."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import click
import pytest

from olr_buffer import errors
from olr_buffer.cli import main

from .conftest import log_path, ok, olr_buffer, read_log, write_log

pytestmark = pytest.mark.e2e  # a process or a server: in `make test`, not in `make test-fast`

ROOT = Path(__file__).resolve().parents[2]


def one_line(result, code: int) -> str:
    assert result.returncode == code, result.describe()
    lines = result.stderr_lines
    assert len(lines) == 1 and lines[0].startswith("olr-buffer: error: "), result.describe()
    assert "Traceback" not in result.stderr
    return lines[0]


def simulate(out: Path, *extra: str):
    return olr_buffer("simulate", out, "--threads", "2", "--transactions", "40", "--records-per-file", "150", *extra)


def test_simulate_into_a_directory_with_logs_needs_overwrite(tmp_path):
    ok(simulate(tmp_path / "in"))
    line = one_line(simulate(tmp_path / "in", "--seed", "1"), errors.EXIT_ERROR)
    assert str(tmp_path / "in") in line and "already holds redo log files" in line and "--overwrite" in line
    assert "overwrite=True" not in line.split("(hint:")[0]
    ok(simulate(tmp_path / "in", "--seed", "1", "--overwrite", "--start-time", "0"))
    ok(simulate(tmp_path / "fresh", "--seed", "1", "--start-time", "0"))
    fresh = {p.name: p.read_bytes() for p in (tmp_path / "fresh").iterdir()}
    assert {p.name: p.read_bytes() for p in (tmp_path / "in").iterdir()} == fresh  # the old files are gone


def first_tm(input_dir: Path) -> int:
    records = [json.loads(line) for path in input_dir.iterdir() for line in read_log(path).splitlines()]
    return min(r["tm"] for r in records if "tm" in r)


def test_simulate_clock_starts_now_and_is_otherwise_seeded(tmp_path):
    before = time.time_ns()
    result = ok(simulate(tmp_path / "now"))
    assert before <= first_tm(tmp_path / "now") <= time.time_ns() + 10**9
    assert "clock started at " in result.stdout

    ok(simulate(tmp_path / "a", "--start-time", "2024-06-01T00:00:00Z"))
    ok(simulate(tmp_path / "b", "--start-time", "1717200000000000000"))
    ok(simulate(tmp_path / "c", "--start-time", "2024-06-01T00:00:05"))
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    for other in ("b", "c"):
        assert sorted(p.name for p in (tmp_path / other).iterdir()) == names
    for name in names:
        a, b = read_log(tmp_path / "a" / name), read_log(tmp_path / "b" / name)
        assert a == b, name  # the same seed and start time: the same bytes
        shifted = [json.loads(line) for line in read_log(tmp_path / "c" / name).splitlines()]
        for ra, rc in zip((json.loads(line) for line in a.splitlines()), shifted, strict=True):
            if "tm" in ra:
                assert rc["tm"] - ra["tm"] == 5 * 10**9
            assert {**ra, "tm": None} == {**rc, "tm": None}
    assert 1_717_200_000_000_000_000 <= first_tm(tmp_path / "a") < 1_717_200_000_000_000_000 + 10**9
    one_line_usage = olr_buffer("simulate", tmp_path / "d", "--start-time", "yesterday")
    assert one_line_usage.returncode == errors.EXIT_USAGE and "--start-time" in one_line_usage.stderr


@pytest.mark.parametrize("content", ["empty", "other-files", "missing"])
def test_replay_of_a_directory_without_logs_is_an_error(tmp_path, content):
    inp = tmp_path / "in"
    if content != "missing":
        inp.mkdir()
    if content == "other-files":
        (inp / "notes.txt").write_text("x")
        (inp / "redo_1.jsonl").write_text("{}\n")  # not a log file name
    result = olr_buffer("replay", inp, "--queue", tmp_path / "q", "--changefeed", tmp_path / "cf")
    line = one_line(result, errors.EXIT_BAD_INPUT)
    assert str(inp) in line
    if content == "missing":
        assert "does not exist" in line
    else:
        assert "no redo log files" in line and "redo_<thread>_<sequence>.jsonl" in line
        assert ("notes.txt, redo_1.jsonl" in line) == (content == "other-files")
    assert not (tmp_path / "q").exists() and not (tmp_path / "cf").exists()
    assert "tx_seq 0..-1" not in result.stdout


def test_exit_codes_are_distinct_and_documented(tmp_path):
    codes = {
        "EXIT_OK": 0,
        "EXIT_ERROR": 1,
        "EXIT_USAGE": 2,
        "EXIT_BAD_INPUT": 3,
        "EXIT_INTERRUPTED": 130,
        "EXIT_TERMINATED": 143,
    }
    assert {name: getattr(errors, name) for name in codes} == codes
    usage = olr_buffer("replay", tmp_path, "--queue", tmp_path / "q", "--changefeed", tmp_path / "cf", "--no-such")
    assert usage.returncode == errors.EXIT_USAGE and "No such option" in usage.stderr
    ok(simulate(tmp_path / "in", "--no-compress"))
    path = log_path(tmp_path / "in", 1, 1)
    write_log(path, read_log(path).replace(b'"op":"', b'"op":"bogus', 1))
    bad = olr_buffer("replay", tmp_path / "in", "--queue", tmp_path / "q", "--changefeed", tmp_path / "cf")
    assert f"{path}:1: " in one_line(bad, errors.EXIT_BAD_INPUT)
    for doc in ("docs/operations.md", "README.md"):
        text = (ROOT / doc).read_text(encoding="utf-8")
        for code in codes.values():
            assert re.search(rf"^\| `{code}` \|", text, re.MULTILINE), f"{doc}: exit code {code} not in its table"


@pytest.mark.parametrize("command", ["simulate", "replay", "compact", "status", "serve", "mirror"])
def test_every_option_has_help(command):
    cmd = main.commands[command]
    missing = [p.opts[0] for p in cmd.params if isinstance(p, click.Option) and not p.help]
    assert missing == []


def test_progress_to_a_pipe_is_plain_lines_with_rate_and_eta(tmp_path):
    ok(simulate(tmp_path / "in", "--transactions", "600"))
    result = ok(
        olr_buffer(
            "replay",
            tmp_path / "in",
            "--queue",
            tmp_path / "q",
            "--changefeed",
            tmp_path / "cf",
            "--progress",
            "--progress-interval",
            "0",
        )
    )
    assert "\r" not in result.stderr and "\x1b" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) >= 2, result.describe()
    pattern = re.compile(
        r"^progress: +[0-9.]+%  [0-9,]+ records \([0-9,]+/s\)  [0-9,]+ transactions published  "
        r"[0-9,]+ open  (ETA (-|[0-9]+:[0-9]{2}:[0-9]{2})|done in [0-9.]+s)$"
    )
    assert all(pattern.match(line) for line in lines), result.describe()
    assert lines[-1].startswith("progress: 100.0%") and "done in" in lines[-1]
    quiet = ok(olr_buffer("replay", tmp_path / "in", "--queue", tmp_path / "q", "--changefeed", tmp_path / "cf"))
    assert quiet.stderr == ""  # not a terminal, not asked: no progress


def _break_lines(path: Path, numbers: list[int]) -> None:
    lines = read_log(path).splitlines(keepends=True)
    for n in numbers:
        lines[n - 1] = b'{"op":"insert","scn":"not a number"}\n'
    write_log(path, b"".join(lines))


def test_several_bad_lines_reported_at_once(tmp_path):
    ok(simulate(tmp_path / "in", "--no-compress"))
    path = log_path(tmp_path / "in", 2, 1)
    _break_lines(path, [20, 47, 90, 91])
    other = log_path(tmp_path / "in", 1, 1)
    _break_lines(other, [30])

    failed = olr_buffer("replay", tmp_path / "in", "--queue", tmp_path / "q", "--changefeed", tmp_path / "cf")
    line = one_line(failed, errors.EXIT_BAD_INPUT)
    if line.startswith(f"olr-buffer: error: {path}:20: "):
        assert "found 3 more bad line(s): 47, 90, 91" in line, line
    else:  # thread 1's reader got there first
        assert line.startswith(f"olr-buffer: error: {other}:30: ") and "found no other bad line" in line, line

    dl = tmp_path / "dead.jsonl"
    result = ok(
        olr_buffer(
            "replay", tmp_path / "in", "--queue", tmp_path / "q2", "--changefeed", tmp_path / "cf2", "--dead-letter", dl
        )
    )
    named = re.findall(r"^  (\S+):([0-9]+): field 'scn' must be an integer", result.stdout, re.MULTILINE)
    assert sorted(named) == sorted([(str(path), n) for n in ("20", "47", "90", "91")] + [(str(other), "30")])
    assert "quarantined 5 bad record(s)" in result.stdout
    as_json = ok(
        olr_buffer(
            "replay",
            tmp_path / "in",
            "--queue",
            tmp_path / "q3",
            "--changefeed",
            tmp_path / "cf3",
            "--dead-letter",
            dl,
            "--json",
        )
    ).json()
    assert sorted((b["file"], b["line"]) for b in as_json["quarantined_lines"]) == sorted(
        [(str(path), n) for n in (20, 47, 90, 91)] + [(str(other), 30)]
    )


def test_run_with_a_uri_of_another_scheme_is_a_usage_error(tmp_path):
    """Not read as a directory that does not exist (exit 3): a usage error naming what is read."""
    result = olr_buffer(
        "run", "mysql://root@localhost/shop", "--queue", tmp_path / "q", "--changefeed", tmp_path / "cf"
    )
    assert result.returncode == errors.EXIT_USAGE, result.describe()
    assert "mysql:// is not a source olr-buffer reads" in result.stderr and "postgresql://" in result.stderr
    assert not (tmp_path / "q").exists()


@pytest.mark.parametrize(
    "uri, words",
    [
        ("postgresql://u:pw@/db?host=/tmp&port=notaport", "port 'notaport' is not a number"),
        ("postgresql://u:pw@/db?nosuchoption=1", "invalid dsn"),
    ],
    ids=["port", "option"],
)
def test_run_with_a_postgres_uri_that_cannot_be_parsed_is_a_usage_error(tmp_path, uri, words):
    result = olr_buffer("run", uri, "--queue", tmp_path / "q", "--changefeed", tmp_path / "cf")
    assert result.returncode == errors.EXIT_USAGE, result.describe()
    assert words in result.stderr and ":pw@" not in result.stderr, result.stderr
    assert not (tmp_path / "q").exists() and not (tmp_path / "cf").exists()


@pytest.mark.parametrize(
    "uri, where, what",
    [
        ("olr://127.0.0.1:1/ORCL", "olr://127.0.0.1:1/ORCL", "an OpenLogReplicator sender"),
        ("postgresql://u:pw@127.0.0.1:1/db", "postgresql://u:***@127.0.0.1:1/db", "a PostgreSQL source"),
    ],
    ids=["olr", "postgresql"],
)
def test_replay_of_a_stream_is_a_usage_error_that_points_to_run(tmp_path, uri, where, what):
    """A stream has no end to replay to: one line naming it (its password hidden), nothing made."""
    line = one_line(
        olr_buffer("replay", uri, "--queue", tmp_path / "q", "--changefeed", tmp_path / "cf"), errors.EXIT_USAGE
    )
    assert line == (
        f"olr-buffer: error: {where}: replay reads a directory of redo log files to its end; {what} is followed "
        "(hint: use olr-buffer run with this URI)"
    )
    assert not (tmp_path / "q").exists() and not (tmp_path / "cf").exists()


def test_replay_logs_as_json_with_log_format_json(tmp_path):
    """``replay --log-format json``, as ``run``'s: every line on stderr is one JSON object,
    the error that stops it included."""
    ok(simulate(tmp_path / "in", "--no-compress"))
    path = log_path(tmp_path / "in", 1, 1)
    _break_lines(path, [30])

    def json_lines(result) -> list[dict]:
        assert result.stderr_lines and "Traceback" not in result.stderr, result.describe()
        return [json.loads(line) for line in result.stderr_lines]

    failed = olr_buffer(
        "replay", tmp_path / "in", "--queue", tmp_path / "q", "--changefeed", tmp_path / "cf", "--log-format", "json"
    )
    assert failed.returncode == errors.EXIT_BAD_INPUT, failed.describe()
    [error] = json_lines(failed)
    assert error["level"] == "critical" and error["exit_code"] == errors.EXIT_BAD_INPUT, error
    assert error["msg"].startswith(f"error: {path}:30: ") and error["line"] == 30, error

    result = ok(
        olr_buffer(
            "--log-level",
            "debug",
            "replay",
            tmp_path / "in",
            "--queue",
            tmp_path / "q2",
            "--changefeed",
            tmp_path / "cf2",
            "--dead-letter",
            tmp_path / "dead.jsonl",
            "--log-format",
            "json",
        )
    )
    files = [d for d in json_lines(result) if d["msg"].startswith("published part-")]
    assert files and all(d["level"] == "debug" and d["first_tx_seq"] == 0 for d in files), result.describe()


def test_the_demo_s_simulate_and_replay_counts_agree_visibly(tmp_path, capfd):
    """simulate counts every line it wrote, lwn heartbeats (and close records) included;
    replay counts the records of transactions: each says what it counts, and the demo's
    output shows the two agree (records, and transactions and rows published)."""
    from olr_buffer.demo import simulate_and_replay

    simulate_and_replay(str(tmp_path), transactions=200)
    out = capfd.readouterr().out
    written = re.search(
        r"wrote \S+: \S+ file\(s\), ([0-9,]+) records: ([0-9,]+) begins, rows and ends \(the records "
        r"replay counts\) and ([0-9,]+) lwn heartbeat\(s\)",
        out,
    )
    must = re.search(r"the changefeed must hold ([0-9,]+) of them \(([0-9,]+) rows\)", out)
    replayed = re.findall(r"^replayed ([0-9,]+) records \(lwn heartbeats and close records aside\)", out, re.MULTILINE)
    published = re.findall(r"^published ([0-9,]+) transactions \(([0-9,]+) rows\)", out, re.MULTILINE)
    assert written and must and len(replayed) == 2 and len(published) == 2, out
    records, changes, lwn = (int(g.replace(",", "")) for g in written.groups())
    assert lwn > 0 and changes == records - lwn, out
    assert replayed[0].replace(",", "") == str(changes), out
    assert published[0] == must.groups() and published[1] == ("0", "0"), out
