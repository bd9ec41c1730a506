"""The configuration file: a command's options in TOML."""

from __future__ import annotations

import tomllib
from typing import Any

from ..errors import OlrBufferError


class ConfigError(OlrBufferError):
    """The configuration file cannot be used."""


def load_config(path: str) -> dict[str, Any]:
    """A TOML file whose keys are `run`'s option names (``flush_interval``, ``threads`` ...)."""
    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"{path}: configuration file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    return {k.replace("-", "_"): v for k, v in doc.items()}
