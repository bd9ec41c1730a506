"""Shared test set-up: hypothesis profiles (HYPOTHESIS_PROFILE=ci for more examples)."""

from __future__ import annotations

import os
import sys

from hypothesis import HealthCheck, settings

settings.register_profile(
    "dev", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.register_profile(
    "ci", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.register_profile(
    "big", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def spark():
    """One local Spark session for the whole test run (tests that use it are marked ``spark``)."""
    from pyspark.sql import SparkSession

    # Python workers (a Delta changefeed's stream is a Python data source) run this
    # interpreter, which has olr-buffer and its dependencies
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("olr-buffer-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        # the status store (kept with the UI off too) holds each SQL execution's plan text and
        # every job's and stage's figures; the run's thousands of queries filled the 1 GB heap
        # with them (java.lang.OutOfMemoryError in a small test, the session dead after it)
        .config("spark.sql.ui.retainedExecutions", "20")
        .config("spark.ui.retainedJobs", "50")
        .config("spark.ui.retainedStages", "50")
        .config("spark.ui.retainedTasks", "2000")
        # the JIT's first tier and one GC thread: the tests' queries are small and short, and
        # the JVM took half the CPU it otherwise does (65 s against 131 s for the Spark tests)
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the group into the node id
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (``-n``), every Spark test runs on one worker: one Spark session a
    run. They are the longest chain of the run, so they go first: that worker starts on
    them at once while the others share the rest."""
    spark = set()
    for item in items:
        if item.get_closest_marker("spark") is not None or "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("spark"))
            spark.add(item.nodeid)
    items.sort(key=lambda item: item.nodeid not in spark)  # stable: the order within each part stays


_UNGROUPED: set[str] = set()


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    """Spark tests that --dist loadgroup did not group fail, rather than run slowly: xdist
    marks a group in the node id (``test@spark``), and with a pytest it does not work with
    the id stays as it was and every worker would start a Spark session of its own."""
    if session.config.getoption("loadgroup", default=False):
        _UNGROUPED.update(
            item.nodeid for item in session.items if item.get_closest_marker("xdist_group") and "@" not in item.nodeid
        )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if item.nodeid in _UNGROUPED:
        pytest.fail(
            "--dist loadgroup did not put this Spark test in its group: this pytest-xdist does not work "
            "with this pytest (see the pin in setup.cfg)",
            pytrace=False,
        )


# -- S3: moto's server mode (tests/s3_server.py) ---------------------------------------------


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """moto's S3 server on 127.0.0.1 for the whole run (one per pytest-xdist worker)."""
    from tests.s3_server import start_moto

    server = start_moto(tmp_path_factory.mktemp("moto"))
    yield server
    server.stop()


@pytest.fixture
def s3_env(s3_server, monkeypatch):
    """The process environment points boto3, delta-rs and pyarrow at ``s3_server``."""
    for name in ("AWS_PROFILE", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN", "AWS_MAX_ATTEMPTS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    return s3_server


@pytest.fixture
def s3_uri(s3_env):
    """``s3://BUCKET/changefeed`` in a new bucket of ``s3_server``."""
    return f"s3://{s3_env.new_bucket()}/changefeed"


@pytest.fixture(scope="session")
def s3_auth_server(tmp_path_factory):
    """A second moto server that checks credentials (it knows none: every key is refused)."""
    from tests.s3_server import start_moto

    server = start_moto(tmp_path_factory.mktemp("moto-auth"), extra_env={"INITIAL_NO_AUTH_ACTION_COUNT": "0"})
    yield server
    server.stop()


@pytest.fixture(params=["local", "s3"])
def store_uri(request, tmp_path):
    """The URI of an empty changefeed location of each kind: a local directory, and a
    prefix of a new bucket on ``s3_server``."""
    if request.param == "local":
        return str(tmp_path / "changefeed")
    return request.getfixturevalue("s3_uri")


@pytest.fixture
def store(store_uri):
    from olr_buffer.store import open_store

    return open_store(store_uri)


@pytest.fixture(scope="session")
def workload(tmp_path_factory):
    """A simulated RAC run plus a hand-written sequence, replayed into small files: the
    changefeed the Spark helpers' and compaction's tests read (tests/sinks/parquet/workload.py)."""
    from tests.sinks.parquet.workload import build_workload

    return build_workload(tmp_path_factory.mktemp("workload"))
