"""The ExactLogic sidecars of GridBased logic: upstream TensileLite may keep a GridBased file's table beside the YAML
(``ExactLogic: null`` in the mapping layout, ``- null`` as list item 7) in ``<name>.yaml<suffix>``
(docs/upstream.md, "ExactLogic sidecars"). Two generations are read and written:

``.exactlogic.bin.xz`` (columnar, ``TLXL`` version 2), an xz stream (preset 9 extreme) of::

    b"TLXL" 0x02, uvarint rows N, uvarint byte length L of the next two columns,
    4 columns of N zigzag uvarints (k0..k3, each the delta from the row before; the first from 0),
    N uvarints (solution index), N bytes (speed type: 0 float, 1 int, 2 str, 3 null),
    the float speeds (little-endian binary64, in row order), the int speeds (zigzag uvarints),
    the str speeds (uvarint byte length, then UTF-8)

``.exactlogic.csv.xz``, an xz stream (the same preset) of ASCII ``M,N,batch,K,solutionIdx`` then one
``k0,k1,k2,k3,idx`` line per row (no speed: it reads back 0.0).

Rows are stably sorted by their key in both; a decoded row is ``[[k0, k1, k2, k3], [index, speed]]``. A sidecar
that does not decode is refused naming the file (``SidecarError``, bad input), as is one beside a YAML whose table
is inline too, or beside a file that is not GridBased.
"""

from __future__ import annotations

import lzma
import struct
from pathlib import Path
from typing import Any

from ..errors import BadInput

COLUMNAR, CSV = ".exactlogic.bin.xz", ".exactlogic.csv.xz"
SUFFIXES = (COLUMNAR, CSV)
MAGIC, VERSION = b"TLXL", 2
CSV_HEADER = "M,N,batch,K,solutionIdx"
PRESET = 9 | lzma.PRESET_EXTREME
FLOAT, INT, STR, NULL = range(4)


class SidecarError(BadInput):
    """A sidecar that does not decode, or that conflicts with its YAML; the message starts with the path."""


def sidecar_of(yaml_path: str | Path) -> Path | None:
    """The sidecar beside ``yaml_path`` (None: the table is inline); both generations at once is refused."""
    found = [Path(f"{yaml_path}{suffix}") for suffix in SUFFIXES if Path(f"{yaml_path}{suffix}").is_file()]
    if len(found) > 1:
        raise SidecarError(f"{found[0]}: and {found[1].name} beside one file: which holds its table is ambiguous")
    return found[0] if found else None


def suffix_of(yaml_path: str | Path) -> str | None:
    """The generation (``COLUMNAR`` or ``CSV``) of the sidecar beside ``yaml_path`` (None: the table is inline)."""
    sidecar = sidecar_of(yaml_path)
    return sidecar.name.removeprefix(Path(yaml_path).name) if sidecar else None


def sorted_rows(rows: list) -> list:
    return sorted(rows, key=lambda row: tuple(row[0]))


def encode(rows: list, suffix: str = COLUMNAR) -> bytes:
    """The sidecar bytes of ExactLogic ``rows`` (4-value keys) in the generation of ``suffix``."""
    rows = sorted_rows(rows)
    if any(len(key) != 4 for key, _ in rows):
        raise ValueError("a sidecar holds 4-value keys only")
    if suffix == CSV:
        text = (
            CSV_HEADER + "\n" + "".join(",".join(str(int(v)) for v in (*key, value[0])) + "\n" for key, value in rows)
        )
        return lzma.compress(text.encode("ascii"), format=lzma.FORMAT_XZ, preset=PRESET)
    columns = bytearray()
    for column in range(4):
        previous = 0
        for key, _ in rows:
            _uvarint(columns, _zigzag(key[column] - previous))
            previous = key[column]
    for _, value in rows:
        _uvarint(columns, value[0])
    speeds = [value[1] for _, value in rows]
    tags = bytes(_tag(speed) for speed in speeds)
    of = {tag: [s for s, t in zip(speeds, tags, strict=True) if t == tag] for tag in (FLOAT, INT, STR)}
    tail = bytearray(struct.pack(f"<{len(of[FLOAT])}d", *of[FLOAT]))
    for speed in of[INT]:
        _uvarint(tail, _zigzag(speed))
    for speed in of[STR]:
        data = speed.encode("utf-8")
        _uvarint(tail, len(data))
        tail += data
    out = bytearray(MAGIC) + bytes([VERSION])
    _uvarint(out, len(rows))
    _uvarint(out, len(columns))
    return lzma.compress(bytes(out + columns + tags + tail), format=lzma.FORMAT_XZ, preset=PRESET)


def decode(data: bytes, path: str | Path) -> list:
    """The rows of sidecar bytes read from ``path`` (its suffix names the generation)."""
    try:
        payload = lzma.decompress(data, format=lzma.FORMAT_XZ)
    except (lzma.LZMAError, EOFError) as err:
        raise SidecarError(f"{path}: not an xz stream ({err})") from None
    if str(path).endswith(CSV):
        return _decode_csv(payload, path)
    return _decode_columnar(payload, path)


def attach(data: list | dict, yaml_path: str | Path) -> str | None:
    """Fill the table of logic data loaded from ``yaml_path`` from the sidecar beside it, where there is one;
    that sidecar's generation (``suffix_of``), None where the table is inline."""
    sidecar = sidecar_of(yaml_path)
    if sidecar is None:
        return None
    table, library_type = _slot(data)
    if table is not _NULL_SLOT and table is not None:
        raise SidecarError(f"{yaml_path}: its ExactLogic is inline and in {sidecar.name} too; remove one")
    if library_type != "GridBased":
        raise SidecarError(f"{yaml_path}: {sidecar.name} beside it, but its LibraryType is {library_type!r}")
    rows = decode(sidecar.read_bytes(), sidecar)
    if isinstance(data, list):
        data[7] = rows
    else:
        data["ExactLogic"] = rows
    return sidecar.name.removeprefix(Path(yaml_path).name)


_NULL_SLOT = object()


def _slot(data: list | dict) -> tuple[Any, Any]:
    if isinstance(data, dict):
        return data.get("ExactLogic"), data.get("LibraryType")
    return (data[7] if len(data) > 7 else _NULL_SLOT), (data[11] if len(data) > 11 else None)


def _uvarint(out: bytearray, value: int) -> None:
    if value < 0:
        raise ValueError(f"{value}: a uvarint is not negative")
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)


def _zigzag(value: int) -> int:
    return value << 1 if value >= 0 else (-value << 1) - 1


def _unzigzag(value: int) -> int:
    return value >> 1 if not value & 1 else -((value + 1) >> 1)


def _tag(speed: Any) -> int:
    if isinstance(speed, bool):
        raise ValueError(f"speed {speed!r} is a bool")
    for kind, tag in ((float, FLOAT), (int, INT), (str, STR)):
        if isinstance(speed, kind):
            return tag
    if speed is None:
        return NULL
    raise ValueError(f"speed {speed!r} is not a float, int, str or null")


class _Reader:
    def __init__(self, payload: bytes, path: str | Path) -> None:
        self.payload, self.path, self.at = payload, path, 0

    def fail(self, what: str) -> SidecarError:
        return SidecarError(f"{self.path}: {what}")

    def uvarint(self, what: str) -> int:
        value = shift = 0
        while True:
            if self.at >= len(self.payload):
                raise self.fail(f"truncated {what}")
            byte = self.payload[self.at]
            self.at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    def take(self, size: int, what: str) -> bytes:
        if self.at + size > len(self.payload):
            raise self.fail(f"truncated {what}")
        self.at += size
        return self.payload[self.at - size : self.at]


def _decode_columnar(payload: bytes, path: str | Path) -> list:
    if payload[:4] != MAGIC:
        raise SidecarError(f"{path}: bad magic {payload[:4]!r} (a TLXL sidecar starts b'TLXL')")
    if len(payload) < 7 or payload[4] != VERSION:
        raise SidecarError(f"{path}: TLXL version {payload[4] if len(payload) > 4 else None}, not {VERSION}")
    reader = _Reader(payload, path)
    reader.at = 5
    count = reader.uvarint("row count")
    size = reader.uvarint("column length")
    end = reader.at + size
    if end > len(payload):
        raise reader.fail("truncated columns")
    columns = []
    for _ in range(4):
        values, previous = [], 0
        for _ in range(count):
            previous += _unzigzag(reader.uvarint("key column"))
            values.append(previous)
        columns.append(values)
    indices = [reader.uvarint("solution index column") for _ in range(count)]
    if reader.at != end:
        raise reader.fail(f"the columns take {reader.at - end + size} bytes, not the {size} it says")
    tags = reader.take(count, "speed type column")
    if any(tag > NULL for tag in tags):
        raise reader.fail("a speed type that is not 0-3")
    floats = iter(struct.unpack(f"<{tags.count(FLOAT)}d", reader.take(8 * tags.count(FLOAT), "float speeds")))
    ints = iter([_unzigzag(reader.uvarint("int speeds")) for _ in range(tags.count(INT))])
    texts = []
    for _ in range(tags.count(STR)):
        try:
            texts.append(reader.take(reader.uvarint("str speeds"), "str speeds").decode("utf-8"))
        except UnicodeDecodeError as err:
            raise reader.fail(f"a str speed that is not UTF-8 ({err})") from None
    if reader.at != len(payload):
        raise reader.fail("bytes after the speeds")
    sources = {FLOAT: floats, INT: ints, STR: iter(texts)}
    speeds = [None if tag == NULL else next(sources[tag]) for tag in tags]
    return [[[a, b, c, d], [i, s]] for a, b, c, d, i, s in zip(*columns, indices, speeds, strict=True)]


def _decode_csv(payload: bytes, path: str | Path) -> list:
    try:
        lines = payload.decode("ascii").split("\n")
    except UnicodeDecodeError as err:
        raise SidecarError(f"{path}: not ASCII ({err})") from None
    if lines[0] != CSV_HEADER or lines[-1] != "":
        raise SidecarError(f"{path}: not a {CSV_HEADER!r} table ending in a newline")
    rows = []
    for number, line in enumerate(lines[1:-1], start=2):
        try:
            a, b, c, d, index = map(int, line.split(","))
        except ValueError:
            raise SidecarError(f"{path}: line {number} is not five integers: {line!r}") from None
        rows.append([[a, b, c, d], [index, 0.0]])
    return rows
