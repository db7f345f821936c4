"""The compile cache of this project's Triton kernels (pipeline/kernels/triton_cache.py): keyed, made whole
under races, scoped to our compiles, and seeded from a package's copy with Triton's paths rewritten."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pipeline.kernels import triton_cache as tc

from .helpers import needs_torch


def _key(**kw) -> dict:
    return {**tc.cache_key("NVIDIA H100 80GB HBM3", "9.0", "3.6.0", "2.11.0"), **kw}


def test_the_compile_cache_is_keyed_and_a_bad_one_rebuilt(tmp_path):
    first = tc.cache_dir(tmp_path, _key())
    (first / "kernel.cubin").write_bytes(b"compiled")
    assert tc.cache_dir(tmp_path, _key()) == first and (first / "kernel.cubin").exists(), "reused as it is"
    for other in (_key(triton="3.7.0"), _key(torch="2.12.0"), _key(source="0" * 16), _key(gpu="NVIDIA H200")):
        assert tc.cache_dir(tmp_path, other) != first, other
    assert len(tc.source_hash()) == 16 and tc.cache_key("g", "9.0", "t", "p")["source"] == tc.source_hash()
    (first / "key.json").write_text("{torn")
    assert tc.cache_dir(tmp_path, _key()) == first and not (first / "kernel.cubin").exists(), "corrupt: rebuilt"
    (first / "kernel.cubin").write_bytes(b"compiled")
    (first / "key.json").write_text(json.dumps(_key(triton="3.5.0")))  # copied in from another version
    assert not (tc.cache_dir(tmp_path, _key()) / "kernel.cubin").exists()
    assert json.loads((first / "key.json").read_text()) == _key()


def _claim(root: str, key: dict, queue) -> None:
    queue.put(str(tc.cache_dir(Path(root), key)))


def test_processes_that_start_together_agree_on_one_cache(tmp_path):
    """A torchrun's ranks or Bench's workers make the cache at once: each gets the same whole directory, none
    deletes one another is compiling into, and no temporary is left behind."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")  # no re-import per process: the race is in cache_dir alone
    paths: set[str] = set()
    for stale in (False, True):
        if stale:  # a directory of another version in place: replaced once, by whichever process came first
            (Path(paths.pop()) / "key.json").write_text(json.dumps(_key(triton="3.5.0")))
        queue = ctx.Queue()
        procs = [ctx.Process(target=_claim, args=(str(tmp_path), _key(), queue)) for _ in range(6)]
        for proc in procs:
            proc.start()
        paths = {queue.get(timeout=60) for _ in procs}
        for proc in procs:
            proc.join(timeout=60)
        assert len(paths) == 1 and json.loads((Path(next(iter(paths))) / "key.json").read_text()) == _key()
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [], "temporaries left"


def test_the_cache_root_is_the_users_unless_gemm_tune_cache_names_one(tmp_path):
    assert tc.user_cache_root({"GEMM_TUNE_CACHE": str(tmp_path / "c")}) == tmp_path / "c"
    assert tc.user_cache_root({"XDG_CACHE_HOME": str(tmp_path / "x")}) == tmp_path / "x" / "gemm-tune"
    assert tc.user_cache_root({}) == Path.home().absolute() / ".cache" / "gemm-tune"
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    with pytest.raises(OSError):
        tc.cache_dir(blocked / "cache", _key())


@needs_torch("the runtime imports torch")
def test_a_runtime_with_no_writable_cache_says_which_variable_to_set(tmp_path):
    from pipeline.runtime.triton_plan import NoKernelCache, kernel_cache

    blocked = tmp_path / "a-file"
    blocked.write_text("")
    with pytest.raises(NoKernelCache, match=rf"{blocked}/cache: .*set GEMM_TUNE_CACHE to a directory this user"):
        kernel_cache(_key(), {"GEMM_TUNE_CACHE": str(blocked / "cache")})
    made = kernel_cache(_key(), {"GEMM_TUNE_CACHE": str(tmp_path / "ok")})
    assert made.parent == tmp_path / "ok" and json.loads((made / "key.json").read_text()) == _key()


def test_kernels_compile_into_the_given_cache_and_tritons_own_is_left_as_it_was(tmp_path, monkeypatch):
    triton = pytest.importorskip("triton", reason="Triton comes with the cuda extra's torch")
    from triton import knobs

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "tritons"))
    with tc.compiling_into(tmp_path / "ours"):
        assert knobs.cache.dir == str(tmp_path / "ours")
        assert triton.runtime.cache.get_cache_manager("ab" * 16).cache_dir.startswith(str(tmp_path / "ours"))
    assert knobs.cache.dir == str(tmp_path / "tritons") and os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "tritons")
    with tc.compiling_into(None):
        assert knobs.cache.dir == str(tmp_path / "tritons")


def _entry(cache: Path, name: str, files: dict[str, bytes]) -> Path:
    """A kernel's entry as Triton writes it: its files, and a ``__grp__`` file naming them by absolute path."""
    entry = cache / name
    entry.mkdir(parents=True)
    for file, data in files.items():
        (entry / file).write_bytes(data)
    group = {"child_paths": {file: str(entry / file) for file in files}}
    (entry / "__grp__gemm.json").write_text(json.dumps(group))
    return entry


def test_seeding_copies_missing_entries_with_their_paths_where_they_will_be_read(tmp_path):
    shipped, user = tc.cache_dir(tmp_path / "package", _key()), tc.cache_dir(tmp_path / "user", _key())
    _entry(shipped, "A", {"gemm.cubin": b"a", "gemm.json": b"{}"})
    _entry(shipped, "B", {"gemm.cubin": b"b"})
    _entry(user, "B", {"gemm.cubin": b"compiled here"})
    assert tc.seed(shipped, user) == 1 and tc.seed(shipped, user) == 0
    assert (user / "A" / "gemm.cubin").read_bytes() == b"a" and (
        user / "B" / "gemm.cubin"
    ).read_bytes() == b"compiled here"
    paths = json.loads((user / "A" / "__grp__gemm.json").read_text())["child_paths"]
    assert paths == {"gemm.cubin": str(user / "A" / "gemm.cubin"), "gemm.json": str(user / "A" / "gemm.json")}
    assert [p.name for p in user.iterdir() if p.name.startswith(".")] == []
    image = tmp_path / "dist" / "kernels" / shipped.name
    image.mkdir(parents=True)
    assert tc.seed(shipped, image, named_at=Path("/opt/gemm-tune/fp/kernels") / shipped.name) == 2
    paths = json.loads((image / "A" / "__grp__gemm.json").read_text())["child_paths"]
    assert paths["gemm.cubin"] == f"/opt/gemm-tune/fp/kernels/{shipped.name}/A/gemm.cubin"


@needs_torch("the runtime imports torch")
def test_the_runtime_seeds_its_cache_from_the_package_and_reads_the_package_where_it_can_write_none(tmp_path):
    import hashlib

    from pipeline.runtime.triton_plan import NoKernelCache, kernel_cache

    package = tmp_path / "package"
    shipped = package / "kernels"
    packaged = tc.cache_dir(shipped, _key())
    _entry(packaged, "A", {"gemm.cubin": b"a"})
    _entry(packaged, "B", {"gemm.cubin": b"b"})
    digests = {  # the package manifest's ``files``
        p.relative_to(package).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in package.rglob("*")
        if p.is_file()
    }
    (packaged / "B" / "gemm.cubin").write_bytes(b"corrupted after packaging")
    user = {"GEMM_TUNE_CACHE": str(tmp_path / "user")}
    cache = kernel_cache(_key(), user, shipped, digests)
    assert cache.parent == tmp_path / "user" and (cache / "A" / "gemm.cubin").read_bytes() == b"a"
    assert not (cache / "B").exists(), "a kernel whose files are not what the package listed is compiled instead"
    assert not (kernel_cache(_key(), {"GEMM_TUNE_CACHE": str(tmp_path / "u3")}, shipped, None) / "A").exists()
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    no_home = {"GEMM_TUNE_CACHE": str(blocked / "cache")}
    with pytest.raises(NoKernelCache):  # B differs from the manifest: the package's copy is not read in place
        kernel_cache(_key(), no_home, shipped, digests)
    (packaged / "B" / "gemm.cubin").write_bytes(b"b")
    assert kernel_cache(_key(), no_home, shipped, digests) == packaged  # read where it is installed
    elsewhere = kernel_cache(_key(), {"GEMM_TUNE_CACHE": str(tmp_path / "u2")}, tmp_path / "none", digests)
    assert elsewhere.parent == tmp_path / "u2"
    with pytest.raises(NoKernelCache):
        kernel_cache(_key(triton="3.7.0"), no_home, shipped, digests)  # the package's kernels are another key's


def test_a_seeded_copy_of_a_tritons_cache_loads_what_the_original_compiled(tmp_path):
    """Triton itself: a kernel compiled into one cache, seeded into another and the first deleted, loads from
    the second without compiling (no file of the entry written again)."""
    triton = pytest.importorskip("triton", reason="Triton comes with the cuda extra's torch")
    import shutil

    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from pipeline.kernels import triton_kernels as tk

    def compile_into(cache: Path) -> None:
        names = ("part", "out", "bias", "R", "C", "sob", "sor", "soc", "HAS_BIAS", "SPLIT", "BLOCK")
        types = ("*fp32", "*bf16", "*bf16", "i32", "i32", "i32", "i32", "i32", "constexpr", "constexpr", "constexpr")
        signature = dict(zip(names, types, strict=True))
        constants = {(8,): False, (9,): 2, (10,): 1024}
        with tc.compiling_into(cache):
            triton.compile(ASTSource(tk.reduce, signature, constants), target=GPUTarget("cuda", 90, 32))

    first, second = tc.cache_dir(tmp_path / "a", _key()), tc.cache_dir(tmp_path / "b", _key())
    compile_into(first)
    assert tc.seed(first, second) >= 1
    shutil.rmtree(first)
    before = {p: p.stat().st_mtime_ns for p in second.rglob("*") if p.is_file()}
    compile_into(second)
    assert {p: p.stat().st_mtime_ns for p in second.rglob("*") if p.is_file()} == before
