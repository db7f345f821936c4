"""JSON files the user hands over (shapes.json, a collection's calls.json and baseline.json): read whole, and
a file that is empty or not JSON is bad input naming the file, line and column."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import BadInput


def load(path: str | Path, what: str = "JSON") -> Any:
    """The parsed content of ``path``; ``BadInput`` for a missing, empty, non-UTF-8 or malformed file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise BadInput(f"{path}: not UTF-8 text ({err.reason} at byte {err.start}); expected {what}") from None
    except IsADirectoryError:
        raise BadInput(f"{path}: is a directory; expected a {what} file") from None
    if not text.strip():
        raise BadInput(f"{path}: the file is empty; expected {what}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise BadInput(
            f"{path}:{err.lineno}:{err.colno}: not {what} ({err.msg}); is the file cut short or of another format?"
        ) from None
