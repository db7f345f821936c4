"""The runtime a package carries: this project's ``pipeline`` package as a pure-Python wheel, so an image
installs ``pipeline.runtime`` from the package itself (``pip install --no-deps``), offline, from no index.

A wheel is a zip of the package's files and a ``<name>-<version>.dist-info`` directory holding ``METADATA``,
``WHEEL`` and ``RECORD`` (every file with its sha256, urlsafe base64 without padding, and its size; RECORD's
own line empty): the binary distribution format, PyPA's "Binary distribution format" specification (PEP 427).
Its name is ``{distribution}-{version}-py3-none-any.whl`` with ``-`` in the distribution written ``_``. No
dependency is declared: the runtime needs torch (the image's own) and nvmath-python (its executor loads
cuBLASLt through it, for Triton rows alone too; numpy comes with it), which the Dockerfile fragment installs at
the version tuned with. Entries are sorted and dated 1980-01-01,
so one source gives one wheel, byte for byte.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import zipfile
from pathlib import Path

import pipeline

from ...atomic import atomic_open

DISTRIBUTION = "gemm-tune"
EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest date a zip holds: no build time in the bytes


def version() -> str:
    """This installation's version (pyproject's ``version``), or 0 where it is not installed as a distribution."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "0"


def wheel_name(ver: str) -> str:
    return f"{DISTRIBUTION.replace('-', '_')}-{ver}-py3-none-any.whl"


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def package_files(root: Path | None = None) -> dict[str, bytes]:
    """Every file of the ``pipeline`` package under ``root`` (default: this one), by its path in the wheel;
    compiled caches left out."""
    root = Path(pipeline.__file__).parent if root is None else Path(root)
    return {
        f"pipeline/{path.relative_to(root).as_posix()}": path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".pyc", ".pyo")
    }


def write_runtime_wheel(out_dir: Path, root: Path | None = None) -> Path:
    """Write the wheel of the ``pipeline`` package under ``root`` into ``out_dir``; returns its path."""
    ver = version()
    info = f"{DISTRIBUTION.replace('-', '_')}-{ver}.dist-info"
    files = package_files(root)
    files[f"{info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {DISTRIBUTION}\nVersion: {ver}\nRequires-Python: >=3.10\n"
        "Summary: gemm-tune's pipeline package, carried by a ship package for pipeline.runtime\n"
    ).encode()
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: gemm-tune\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = "".join(f"{name},{_digest(data)},{len(data)}\n" for name, data in files.items())
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    path = Path(out_dir) / wheel_name(ver)
    with atomic_open(path, "wb") as handle, zipfile.ZipFile(handle, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in files.items():
            entry = zipfile.ZipInfo(name, EPOCH)
            entry.external_attr = 0o644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(entry, data)
    return path
