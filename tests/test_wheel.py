"""The runtime's wheel a package carries (pipeline/stages/ship/wheel.py): the binary distribution format, and
one source giving one wheel byte for byte."""

from __future__ import annotations

import base64
import hashlib
import zipfile

from pipeline.stages.ship.wheel import package_files, write_runtime_wheel


def test_the_wheel_records_every_file_with_its_hash_and_is_reproducible(tmp_path):
    first, second = write_runtime_wheel(tmp_path / "a"), write_runtime_wheel(tmp_path / "b")
    assert first.name == second.name and first.read_bytes() == second.read_bytes()
    assert first.name.startswith("gemm_tune-") and first.name.endswith("-py3-none-any.whl")
    with zipfile.ZipFile(first) as wheel:
        names = wheel.namelist()
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/RECORD"))
        record = wheel.read(f"{info}/RECORD").decode().splitlines()
        for line in record:
            name, digest, size = line.rsplit(",", 2)
            if name == f"{info}/RECORD":
                assert digest == size == ""
                continue
            data = wheel.read(name)
            assert int(size) == len(data)
            assert digest == "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert sorted(line.rsplit(",", 2)[0] for line in record) == sorted(names)
        assert "Root-Is-Purelib: true" in wheel.read(f"{info}/WHEEL").decode()
        assert "Name: gemm-tune" in wheel.read(f"{info}/METADATA").decode()
    files = package_files()
    assert "pipeline/runtime/__main__.py" in files and "pipeline/runtime/autoload/sitecustomize.py" in files
    assert not [n for n in files if "__pycache__" in n or n.endswith(".pyc")]
