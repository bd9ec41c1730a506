"""``python -m olr_buffer.cli``."""

from . import main

if __name__ == "__main__":  # pragma: no cover
    main()
