"""
The event output every interop client script shares: one JSON object per
line on standard output, flushed at once, read by
``tests.interop.harness.run_script``.

Not a test module: imported by the scripts, from this directory.
"""

from __future__ import annotations

import json
import sys
from typing import Any

__all__ = ["emit"]


def emit(event: str, **fields: Any) -> None:
    """Print one JSON event line, flushed at once."""
    fields["event"] = event
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()
