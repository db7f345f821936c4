"""The Jinja environment every stage renders its files from (``templates/``): the loader for one directory and
Jinja's own cache of compiled templates, so that a run does not compile them again (all of ours: 120 ms of
CPU compiled, 4 ms cached; a run renders its configs, its report and its package).

The cache is Jinja's ``FileSystemBytecodeCache`` in its default place: a directory of this user's own under
the system's temporary directory, created private; an entry is keyed by the template's name and holds its
source's checksum and the bytecode version, so an edited template or another Python compiles again. Where no
such directory can be made, or an entry cannot be written or read back (a full disk, a damaged file),
templates compile as without a cache: the cache never stops a run.
"""

from __future__ import annotations

import contextlib
import pickle
from pathlib import Path
from typing import Any

import jinja2
import jinja2.bccache


class _Cache(jinja2.FileSystemBytecodeCache):
    """Jinja's cache, except that an entry it cannot write or read (a full disk, a damaged file) is compiled
    again rather than an error."""

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        with contextlib.suppress(OSError):
            super().dump_bytecode(bucket)

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except (OSError, EOFError, ValueError, pickle.UnpicklingError):  # jinja2 reads the checksum unguarded
            bucket.reset()


def environment(directory: Path | str, **options: Any) -> jinja2.Environment:
    """``jinja2.Environment(loader=FileSystemLoader(directory), **options)`` with the compiled-template cache."""
    try:
        cache = _Cache()
    except (RuntimeError, OSError):  # no private directory could be made, or jinja2 found it unsafe
        cache = None
    return jinja2.Environment(loader=jinja2.FileSystemLoader(directory), bytecode_cache=cache, **options)
