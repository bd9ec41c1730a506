"""Fixtures of the Spark and compaction tests (helpers in ``workload.py``)."""

from __future__ import annotations

import pytest

from .workload import Workload, build_workload


@pytest.fixture(scope="session")
def workload(tmp_path_factory) -> Workload:
    """A simulated RAC run plus a hand-written sequence, replayed into small files."""
    return build_workload(tmp_path_factory.mktemp("workload"))
