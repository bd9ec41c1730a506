"""Every program of ``bench/`` runs: docs/performance.md and bench/log/ tell users to run
them, so each is run here as a real process, on the smallest input and options it has
(a few thousand lines of ``bench/shapes.py`` or ``olr-buffer simulate``, a few hundred
records, a second or two of load), doing its real work, and must exit 0 and print what it
promises (its JSON parses and holds the key figures, or its text lines). The figures
themselves are not checked: they are measurements, taken by hand (docs/performance.md).

The programs wait for a quiet machine before they measure; here they do not
(``OLR_BENCH_NO_WAIT=1``, see ``bench/benchlib.py``), and those that measure a run again
when the machine was busy get ``--tries 1``. The S3 programs start moto's server
themselves (tests/s3_server.py), the PostgreSQL ones their own throwaway cluster
(tests/sources/postgres/cluster.py: the PostgreSQL server binaries must be there).

Covered elsewhere:

* ``naive_buffer.py`` and ``floor.py``: tests/test_bench_contenders.py (run, and the
  naive buffer's output checked against replay's);
* ``latency_writer.py``: the writer ``latency.py`` starts (run with it below);
* ``shapes.py``: run below, to make the input the others read.

Not run:

* ``benchlib.py``: a library of the others;
* ``spark_replay.py``: it starts a Spark session of its own in a child process; the test
  run already has its one Spark session (tests/conftest.py), which a subprocess cannot
  share, and a second JVM on the test machine costs more than this whole module;
* ``profile_replay.py``'s fourth view (py-spy, from the ``bench`` extra, which the test
  extra does not install; it needs ptrace, which CI containers often refuse): the
  program runs with ``--no-py-spy``; its three other views run;
* ``bench/columnar/``: the scripts of the columnar spike of 2026-11-26
  (bench/log/2026-11-26-columnar-spike.md), the record of that experiment, not programs
  the docs send users to.

:func:`test_every_bench_program_is_run_or_said_why_not` keeps this list whole: a new
program in ``bench/`` fails it until it is run here or named above.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"

#: programs covered by another test module, or not run (see the module's doc)
ELSEWHERE = {"naive_buffer.py", "floor.py", "latency_writer.py"}
LEFT_OUT = {"benchlib.py", "spark_replay.py"}


def last_json(out: str) -> dict:
    """The last line of ``out`` that is a JSON object, parsed as strict JSON: ``NaN``
    and ``Infinity``, which Python's json writes and reads but no JSON parser has to
    (jq, a dashboard), are refused."""
    for line in reversed(out.strip().splitlines()):
        if line.startswith("{"):
            return _strict(line)
    raise AssertionError(f"no JSON line in:\n{out[-3000:]}")


def _strict(text: str) -> dict:
    return json.loads(text, parse_constant=_not_json)


def _not_json(constant: str) -> None:
    raise AssertionError(f"{constant} in the JSON output: not JSON")


def whole_json(out: str) -> dict:
    """The JSON document that ends ``out``, on one line or indented over several (strict
    JSON, as :func:`last_json`)."""
    lines = out.strip().splitlines()
    for i in reversed(range(len(lines))):
        if lines[i].startswith("{"):
            try:
                return _strict("\n".join(lines[i:]))
            except json.JSONDecodeError:
                continue
    raise AssertionError(f"no JSON document at the end of:\n{out[-3000:]}")


def has(doc: dict, *keys: str) -> dict:
    missing = [k for k in keys if k not in doc]
    assert not missing, f"missing {missing} in {doc}"
    return doc


def check_dispatch_stage(out: str, tmp: Path) -> None:
    doc = has(last_json(out), "records", "published", "rows", "wall_s", "cpu_us_per_record")
    assert doc["records"] > 0 and doc["published"] > 0 and doc["rows"] > 0, doc


def check_reader_path(out: str, tmp: Path) -> None:
    assert re.search(r"^[\d,]+ records: CPU [\d.]+ s \([\d.]+ us a record", out, re.M), out
    assert re.search(r"us a record: lines to records [\d.]+, blocks [\d.]+, the rest [\d.]+", out), out


def check_rss_breakdown(out: str, tmp: Path) -> None:
    doc = has(last_json(out), "samples", "peak_VmRSS", "peak_RssAnon", "peak_RssFile")
    assert doc["samples"] > 0 and doc["peak_VmRSS"] > 0, doc


def check_replay_throughput(out: str, tmp: Path) -> None:
    doc = has(last_json(out), "records_per_s", "peak_rss", "summary")
    assert doc["summary"]["transactions_published"] > 0, doc


def check_simulate_speed(out: str, tmp: Path) -> None:
    assert re.search(r"^run 1: [\d,]+ records in [\d.]+ s wall, [\d.]+ s CPU: [\d,]+ records/s$", out, re.M), out


def check_memory_large_tx(out: str, tmp: Path) -> None:
    doc = has(last_json(out), "ratio", "naive_ratio", "naive_base", "naive_large")
    assert doc["ratio"] > 0 and doc["naive_large"]["rows_published"] > doc["naive_base"]["rows_published"], doc


def check_profile_replay(out: str, tmp: Path) -> None:
    doc = last_json(out)
    assert len(doc) >= 3, list(doc)  # the three views run without py-spy
    assert '"published": ' in out and '"share": ' in out, out[-2000:]


def check_queue_vs_alternatives(out: str, tmp: Path) -> None:
    doc = has(last_json(out), "ratios")
    assert set(doc["ratios"]) == {"diskcache.Deque durable", "persistqueue.SQLiteQueue"}, doc["ratios"]


def check_page_checksums(out: str, tmp: Path) -> None:
    for state in ("off", "on "):
        assert re.search(rf"^checksums {state}: write [\d.]+ s, file [\d.]+ MiB, open: footers", out, re.M), out


def check_restart_cost(out: str, tmp: Path) -> None:
    assert re.search(r"^uninterrupted replay: [\d.]+s$", out, re.M), out
    assert re.search(r"^killed at [\d.]+s: ", out, re.M), out
    assert re.search(r"^restart: .* the restarted run finished in [\d.]+s$", out, re.M), out


def check_run_all(out: str, tmp: Path) -> None:
    results = _strict((tmp / "results.json").read_text())
    has(results, "machine", "input")
    assert "LmdbQueue vs diskcache.Deque durable" in out, out[-3000:]


def check_matrix(out: str, tmp: Path) -> None:
    assert re.search(r"^narrow-tiny-2t .* yes\s*$", out, re.M), out  # the same output as the naive buffer
    assert re.search(r"^replay vs floor: worst [\d.]+x", out, re.M), out


def check_changefeed_s3(out: str, tmp: Path) -> None:
    cases = has(whole_json(out), "cases")["cases"]
    got = {(c["changefeed"], c["table_format"]) for c in cases}
    assert got == {(where, fmt) for where in ("local", "s3 (moto)") for fmt in ("parquet", "delta", "iceberg")}, got
    assert all(c["records_per_s"] > 0 and c["files"] > 0 for c in cases), cases


def check_fenced_publish(out: str, tmp: Path) -> None:
    ms = has(last_json(out), "ms")["ms"]
    assert set(ms) == {"unfenced", "fenced"} and all("median" in v and "p90" in v for v in ms.values()), ms


def check_store_put(out: str, tmp: Path) -> None:
    cases = has(whole_json(out), "cases")["cases"]
    assert any(c["case"].startswith("s3") for c in cases) and all(c["mib_per_s"] > 0 for c in cases), cases


def check_publish_cost(out: str, tmp: Path) -> None:
    got = re.findall(r"^(\d+) files of (\d+) rows: CPU [\d.]+ s, [\d.]+ ms a file$", out, re.M)
    assert got == [("4", "500"), ("1", "2000")], out


def check_table_commit(out: str, tmp: Path) -> None:
    cases = has(last_json(out), "cases")["cases"]
    got = {(c["changefeed"], c["table_format"]) for c in cases}
    assert got == {(where, fmt) for where in ("local", "s3 (moto)") for fmt in ("delta", "iceberg")}, got


def check_mirror(out: str, tmp: Path) -> None:
    assert re.search(r"^backlog: [\d,]+ changes over 2 tables in [\d.]+s: [\d,]+ changes/s", out, re.M), out
    assert re.search(r"^one commit .*: median [\d.]+ ms", out, re.M), out


def check_latency(out: str, tmp: Path) -> None:
    doc = has(last_json(out), "p50", "p99", "rate", "records", "transactions", "backlog_tx", "no_figure")
    assert doc["records"] > 0 and doc["transactions"] > 0, doc


def check_olr_source(out: str, tmp: Path) -> None:
    doc = has(last_json(out), "runs", "ratio")
    assert [r["large_rows"] for r in doc["runs"]] == [100, 1000], doc
    assert all(r["peak_rss_mib"] > 0 for r in doc["runs"]), doc


def check_serve_throughput(out: str, tmp: Path) -> None:
    doc = _strict((tmp / "serve.json").read_text())
    assert doc, doc
    assert re.search(r"^serve to a receiver\s+[\d.]+\s+[\d.]+\s+[\d,]+ mess", out, re.M), out


def check_standby_takeover(out: str, tmp: Path) -> None:
    median = has(whole_json(out), "median")["median"]
    assert set(median) == {"kill", "stop"}, median
    assert all(set(m) == {"detect_s", "open_s", "first_publication_s"} for m in median.values()), median


def check_postgres_split(out: str, tmp: Path) -> None:
    doc = has(last_json(out), "rows", "cpu_us_per_row", "total")
    assert set(doc["cpu_us_per_row"]) == {"receive", "decode", "blocks", "append", "read", "sink"}, doc


def check_postgres_stages(out: str, tmp: Path) -> None:
    doc = has(last_json(out), "read_rows_per_s", "publish_rows_per_s", "rows_published")
    assert doc["rows_published"] == 2000, doc


def check_postgres_source(out: str, tmp: Path) -> None:
    doc = has(last_json(out), "throughput", "latency", "memory")
    has(doc["throughput"], "server_rows_per_s", "olr_buffer_rows_per_s", "ratio")
    for mode in ("streaming", "no_streaming"):
        lat = has(doc["latency"][mode], "commit_to_visible_s", "commit_to_in_queue_s", "spill_bytes")
        assert lat["commit_to_in_queue_s"] is None or abs(lat["commit_to_in_queue_s"]) < 3600, lat  # (a time span)
    has(doc["memory"], "base_peak_rss_mib", "large_peak_rss_mib", "ratio")


#: program -> (its arguments, given the work folder and the shared input; its check)
Case = tuple[Callable[[Path, Path], list[str]], Callable[[str, Path], None]]
CASES: dict[str, Case] = {
    "dispatch_stage.py": (lambda w, i: [str(i), str(w / "queue"), "--runs", "1"], check_dispatch_stage),
    "reader_path.py": (lambda w, i: [str(i), "--split"], check_reader_path),
    "rss_breakdown.py": (lambda w, i: [str(i), "--json"], check_rss_breakdown),
    "replay_throughput.py": (lambda w, i: ["--input", str(i), "--work", str(w), "--json"], check_replay_throughput),
    "simulate_speed.py": (lambda w, i: ["--transactions", "200", "--repeat", "1"], check_simulate_speed),
    "memory_large_tx.py": (
        lambda w, i: ["--transactions", "200", "--large-rows", "2000", "--work", str(w), "--naive", "--json"],
        check_memory_large_tx,
    ),
    "profile_replay.py": (
        lambda w, i: ["--transactions", "200", "--work", str(w), "--no-py-spy", "--json"],
        check_profile_replay,
    ),
    "queue_vs_alternatives.py": (
        lambda w, i: ["--records", "2000", "--alt-records", "200", "--budget", "5", "--work", str(w), "--json"],
        check_queue_vs_alternatives,
    ),
    "page_checksums.py": (lambda w, i: ["--rows", "2000", "--repeat", "1"], check_page_checksums),
    "restart_cost.py": (
        lambda w, i: "--transactions 600 --concurrency 50 --large-tx-rows 5000 --checkpoint-interval 0.2".split(),
        check_restart_cost,
    ),
    "run_all.py": (
        lambda w, i: (
            ["--work", str(w), "--results", str(w / "results.json")]
            + "--transactions 200 --large-rows 2000 --tries 1 --queue-records 2000 --alt-records 200".split()
            + "--queue-budget 5".split()
        ),
        check_run_all,
    ),
    "matrix.py": (
        lambda w, i: ["--work", str(w), "--lines", "3000", "--cells", "narrow-tiny-2t", "--tries", "1"],
        check_matrix,
    ),
    "changefeed_s3.py": (
        lambda w, i: ["--transactions", "100", "--file-rows", "500", "--repeat", "1", "--work", str(w)],
        check_changefeed_s3,
    ),
    "fenced_publish.py": (lambda w, i: ["--files", "3", "--kib", "4"], check_fenced_publish),
    "store_put.py": (
        lambda w, i: ["--sizes", "1", "--mib-per-size", "2", "--repeat", "1", "--work", str(w)],
        check_store_put,
    ),
    "table_commit.py": (lambda w, i: ["--transactions", "200", "--rows", "200"], check_table_commit),
    "publish_cost.py": (lambda w, i: ["--rows", "2000", "--files", "4,1"], check_publish_cost),
    "mirror.py": (
        lambda w, i: ["--changes", "2000", "--tables", "2", "--batch-rows", "1000", "--commits", "2", "--dir", str(w)],
        check_mirror,
    ),
    "latency.py": (
        lambda w, i: ["--rate", "2000", "--seconds", "2", "--warmup", "0.5", "--stage-cache", str(w), "--json"],
        check_latency,
    ),
    "olr_source.py": (lambda w, i: ["--rows", "100,1000", "--base-transactions", "20", "--json"], check_olr_source),
    "serve_throughput.py": (
        lambda w, i: (
            ["--work", str(w), "--json", str(w / "serve.json")] + "--lines 3000 --runs 1 --confirm-every 100".split()
        ),
        check_serve_throughput,
    ),
    "standby_takeover.py": (
        # a writer slower than the trials (it is stopped after them): every trial has new
        # transactions to publish
        lambda w, i: (
            "--trials 1 --transactions 600 --rate 100 --lease-seconds 3 --lease-renew-interval 1".split()
            + "--lease-clock-skew 0.5 --standby-poll-interval 0.2 --flush-interval 0.2".split()
        ),
        check_standby_takeover,
    ),
    "postgres_split.py": (lambda w, i: ["--rows", "2000", "--repeat", "1", "--json"], check_postgres_split),
    "postgres_stages.py": (lambda w, i: ["--rows", "2000", "--tx-rows", "100"], check_postgres_stages),
    "postgres_source.py": (
        lambda w, i: ["all", "--rows", "2000", "--base-rows", "2000", "--tx-rows", "100", "--json"],
        check_postgres_source,
    ),
}


def bench_env() -> dict[str, str]:
    """This checkout's olr_buffer (and tests/, bench/ as packages) first; no wait for a quiet machine."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, "OLR_BENCH_NO_WAIT": "1", "PYTHONUNBUFFERED": "1"}


def run_bench(script: str, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """``bench/SCRIPT ARGS``, which must exit 0 within ``timeout`` seconds."""
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=bench_env(),
        stdin=subprocess.DEVNULL,
        timeout=timeout,
    )
    assert done.returncode == 0, f"{script} exit {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return done


def run_program(script: str, *args: str) -> str:
    return run_bench(script, *args).stdout


def test_every_bench_program_is_run_or_said_why_not():
    programs = {p.name for p in BENCH.glob("*.py")}
    named = set(CASES) | ELSEWHERE | LEFT_OUT | {"shapes.py"}
    assert programs - named == set(), "bench/ programs not run by tests/test_bench_scripts.py nor named in its doc"
    assert named - programs == set(), "named in tests/test_bench_scripts.py, not in bench/"


@pytest.fixture(scope="module")
def shaped_input(tmp_path_factory) -> Path:
    """3,000 lines on two threads from ``bench/shapes.py``, run as a program."""
    out = tmp_path_factory.mktemp("bench-input") / "input"
    doc = last_json(run_program("shapes.py", str(out), "--lines", "3000", "--threads", "2", "--seed", "3"))
    assert doc["lines"] >= 3000 and doc["stats"]["transactions"] > 0, doc
    return out


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.parametrize("script", sorted(CASES))
def test_bench_program_runs_on_a_tiny_input(script, shaped_input, tmp_path):
    args, check = CASES[script]
    work = tmp_path / "work"
    work.mkdir()
    check(run_program(script, *args(work, shaped_input)), work)


@pytest.mark.slow
@pytest.mark.e2e
def test_latency_on_a_run_too_short_for_its_figures_prints_them_as_null_with_the_reason(tmp_path):
    """Every transaction committed within the warm-up: no latency to measure. The JSON
    line is still JSON (it held ``NaN``): the figures are null, each with its reason."""
    work = tmp_path / "work"
    work.mkdir()
    args = "--rate 2000 --seconds 1 --warmup 30 --flush-interval 0.2 --json".split()
    out = run_program("latency.py", *args, "--stage-cache", str(work))
    doc = has(last_json(out), "p50", "p99", "max", "p50_first_third", "records", "transactions", "no_figure")
    assert doc["records"] > 0 and doc["transactions"] == 0, doc
    assert doc["p50"] is None and doc["p99"] is None and doc["p50_first_third"] is None, doc
    assert set(doc["no_figure"]) >= {"p50", "p90", "p99", "max", "p50_first_third", "p50_last_third"}, doc
    assert "--warmup" in doc["no_figure"]["p50"], doc["no_figure"]
    assert re.search(r"^no p50: no transaction committed after the first 30s", out, re.M), out


@pytest.mark.slow
@pytest.mark.e2e
def test_standby_takeover_ends_when_the_input_is_published_before_its_trials(tmp_path):
    """``bench/standby_takeover.py`` with a writer that is done (and its input published)
    before the trials: it does not wait for a publication that cannot come (it waited
    300 s, then failed); it measures what it can (the take-overs' ``detect_s`` and
    ``open_s``), says once on stderr that the first publication is not measured, and
    exits 0."""
    args = (
        "--trials 1 --transactions 20 --rate 1000000 --lease-seconds 3 --lease-renew-interval 1".split()
        + "--lease-clock-skew 0.5 --standby-poll-interval 0.2 --flush-interval 0.2".split()
    )
    done = run_bench("standby_takeover.py", *args, timeout=600)
    rows = [
        _strict(line) for line in done.stdout.splitlines() if line.startswith('{"kill"') or line.startswith('{"stop"')
    ]
    assert [next(iter(r)) for r in rows] == ["kill", "stop"], done.stdout
    for row in (next(iter(r.values())) for r in rows):
        assert row["detect_s"] >= 0 and row["open_s"] >= 0, row
    assert rows[1]["stop"]["first_publication_s"] is None, rows  # (all of it published at the latest by the kill's)
    said = [line for line in done.stderr.splitlines() if "measured without a first publication" in line]
    assert len(said) == 1, done.stderr[-3000:]
    median = whole_json(done.stdout)["median"]
    assert median["stop"]["first_publication_s"] is None and median["stop"]["detect_s"] >= 0, median
