"""Where the repository is, for the tests that start ``olr-buffer`` as a process."""

from pathlib import Path
import sys

ROOT = Path(__file__).resolve().parents[3]
CLI = [sys.executable, "-m", "olr_buffer.cli"]
