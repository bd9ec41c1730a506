"""Where the repository is, for the tests that start ``olr-buffer`` as a process."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "olr_buffer.cli"]
