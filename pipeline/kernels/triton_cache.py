"""Where this project's Triton kernels compile: a cache directory per key of everything that changes what a
compiled kernel is (docs/triton.md, "The compile cache").

    cache_key(gpu, capability, triton, torch)   the key: the GPU, Triton's and torch's versions, the kernel source
    device_key(device)                          that key for a CUDA device of this process
    cache_dir(root, key)                        the key's directory under root, made whole or rebuilt, never trusted
    user_cache_root()                           $GEMM_TUNE_CACHE, else the user's cache directory
    compiling_into(cache)                       Triton compiles into ``cache`` within the block
    seed(source, dest)                          copy a shipped cache's kernels into another, their paths rewritten

Inside a key's directory the layout is Triton's own (``triton/runtime/cache.py``, ``FileCacheManager``): a
directory per compiled kernel or launcher module, named by Triton's hash, holding its files; a kernel's
``__grp__<name>.json`` lists those files by absolute path, and a lookup keeps only the paths that exist
(``get_group``, lines 73-88 in Triton 3.6.0). A copied directory therefore misses until those paths name
where it now is: ``seed`` rewrites them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path

from ..atomic import atomic_write_json

CACHE_ENV = "GEMM_TUNE_CACHE"  # the directory a workload's process compiles these kernels in (``user_cache_root``)
KEY_FILE = "key.json"
GROUP_PREFIX = "__grp__"  # Triton's name for a kernel's list of files


def source_hash() -> str:
    """A digest of the kernels' source, their configs and how ``triton_runner`` launches them: the cache key's last
    part (and the stack fingerprint's, ``triton_kernels``)."""
    here = Path(__file__).parent
    names = ("triton_gemm.py", "triton_runner.py", "triton_kernels.py")
    text = b"".join((here / name).read_bytes() for name in names)
    return hashlib.sha256(text).hexdigest()[:16]


def cache_key(gpu: str, capability: str, triton_version: str, torch_version: str) -> dict:
    """Everything that changes what a compiled kernel is, or how fast: the GPU, Triton, torch, the source."""
    return {
        "gpu": gpu,
        "capability": capability,
        "triton": triton_version,
        "torch": torch_version,
        "source": source_hash(),
    }


def device_key(device: int) -> dict:
    """``cache_key`` of CUDA device ``device`` in this process (imports torch and triton): what Bench's compile
    cache, a Triton row and the runtime's cache hold for."""
    import torch
    import triton

    props = torch.cuda.get_device_properties(device)
    return cache_key(props.name, f"{props.major}.{props.minor}", triton.__version__, torch.__version__.split("+")[0])


def cache_name(key: dict) -> str:
    """The name of ``key``'s directory: its digest."""
    return "triton-" + hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def key_of(path: Path) -> dict | None:
    """The key a cache directory holds for (None: its key file is missing or unreadable, never trusted)."""
    try:
        key = json.loads((Path(path) / KEY_FILE).read_text())
    except (OSError, ValueError):
        return None
    return key if isinstance(key, dict) else None


def holds(path: Path, key: dict) -> bool:
    """Whether ``path`` is a cache directory of ``key`` (its key file reads back as ``key``)."""
    return key_of(path) == key


def cache_dir(root: Path, key: dict) -> Path:
    """Triton's compile cache for ``key`` under ``root``: a directory of its own, named by the key's digest,
    with the key beside its files. One whose key file is missing, unreadable or another key's (a crash while it
    was made, a copy from elsewhere) is rebuilt, never trusted. Processes that start together (Bench's workers,
    a torchrun's ranks) agree on one: a new directory is made whole under a temporary name and renamed into
    place, and a process that finds another's in place uses it. Raises ``OSError`` where ``root`` cannot be
    written."""
    root = Path(root).absolute()
    path = root / cache_name(key)
    for _ in range(3):
        if holds(path, key):
            return path
        root.mkdir(parents=True, exist_ok=True)
        fresh = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=root))
        fresh.chmod(0o755)  # as a plain mkdir makes it: a package or an image's other users read it
        atomic_write_json(fresh / KEY_FILE, key)
        try:
            fresh.rename(path)  # atomic; refused where another process's (or a stale one) is in place
            return path
        except OSError:
            shutil.rmtree(fresh, ignore_errors=True)
        if not holds(path, key):  # stale: moved aside at once (a rename), then deleted
            aside = Path(tempfile.mkdtemp(prefix=f".{path.name}.stale.", dir=root))
            with suppress(FileNotFoundError):  # another process moved it first
                path.rename(aside / "old")
            shutil.rmtree(aside, ignore_errors=True)
    raise OSError(f"{path}: could not make a compile cache for {key} (other processes kept replacing it)")


def user_cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """Where a process of the workload compiles these kernels (``cache_dir`` under it): ``$GEMM_TUNE_CACHE``,
    else ``$XDG_CACHE_HOME/gemm-tune``, else ``~/.cache/gemm-tune`` (docs/triton.md, "In the runtime")."""
    env = os.environ if environ is None else environ
    if env.get(CACHE_ENV):
        return Path(env[CACHE_ENV]).absolute()
    base = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base.absolute() / "gemm-tune"


@contextmanager
def compiling_into(cache: Path | None) -> Iterator[None]:
    """Triton compiles (and loads what it compiled before) in ``cache`` within the block, wherever its own cache
    is (``~/.triton/cache``, ``TRITON_CACHE_DIR``): Triton's cache knobs are scoped to the block. None: Triton's."""
    if cache is None:
        yield
        return
    from triton import knobs

    with knobs.cache.scope():
        knobs.cache.dir = str(cache)
        yield


def seed(
    source: Path, dest: Path, named_at: Path | None = None, trusted: Callable[[Path, bytes], bool] | None = None
) -> int:
    """Copy the entries of cache directory ``source`` that ``dest`` lacks into ``dest`` (both of one key), each
    whole under a temporary name and renamed into place (a process that seeds the same entry first wins), with
    every ``__grp__`` file's paths rewritten to where the entry is read from: ``named_at`` (the directory
    ``dest`` will be installed as), else ``dest``. With ``trusted`` (a file's path and bytes: whether they are
    what was shipped), an entry holding any other file is left out, to be compiled. Returns how many entries
    were copied."""
    source, dest = Path(source), Path(dest)
    named_at = Path(named_at or dest).absolute()
    copied = 0
    for entry in sorted(p for p in source.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if (dest / entry.name).exists():
            continue
        files = {path.name: path.read_bytes() for path in sorted(entry.iterdir()) if path.is_file()}
        if trusted is not None and not all(trusted(entry / name, data) for name, data in files.items()):
            continue
        fresh = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=dest))
        try:
            for name, data in files.items():
                if name.startswith(GROUP_PREFIX):
                    data = _relocated(data, named_at / entry.name)
                (fresh / name).write_bytes(data)
                (fresh / name).chmod(0o644)
            fresh.chmod(0o755)
            fresh.rename(dest / entry.name)
            copied += 1
        except OSError:
            if not (dest / entry.name).exists():
                raise
        finally:
            shutil.rmtree(fresh, ignore_errors=True)
    return copied


def _relocated(group_file: bytes, place: Path) -> bytes:
    """A ``__grp__`` file naming its kernel's files in ``place`` (Triton's lookup keeps only paths that exist)."""
    group = json.loads(group_file)
    group["child_paths"] = {child: str(place / Path(old).name) for child, old in group["child_paths"].items()}
    return json.dumps(group).encode()
