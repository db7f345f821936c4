"""The ``m_ranges`` of a bundle's manifest (docs/serving.md): per grid row, its TunableOp key, its solution and the
token counts it serves, ``lo <= M <= hi`` (``hi`` the grid point's own M; the libraries, which match exact sizes,
read copies of the row at ``lo <= M < hi``). ``mgrid.spread`` writes them; the package, the override file's
writer and the runtime's lookup read them through ``read_ranges``. Beside them, ``default_ranges``: the token
counts whose tuned choice is torch's default (a grid row the gate did not keep, or the counts below a range
where its winner lost), ``hi`` at most the grid point; no library needs a row for them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..errors import BadInput
from ..problem import GemmProblem
from .tunableop import DEFAULT, TunableOpFormatError, parse_key

DEFAULT_RANGES = "default_ranges"


@dataclass(frozen=True)
class MRange:
    """One grid row's range: ``grid`` (its problem at ``hi``), ``key`` as TunableOp spells it, its ``solution``;
    ``bucket_lo`` where a winner that serves its own count alone was narrowed to it: its bucket's lowest count
    (``bucket_lo..lo - 1`` have no row of this one)."""

    grid: GemmProblem
    key: str
    solution: str
    lo: int
    hi: int
    note: str = ""
    bucket_lo: int | None = None

    def copies(self) -> range:
        """The token counts below the grid point that a library reading exact sizes needs a copy of the row at."""
        return range(self.lo, self.hi)

    def to_json(self) -> dict:
        return (
            {"key": self.key, "solution": self.solution, "lo": self.lo, "hi": self.hi}
            | ({"note": self.note} if self.note else {})
            | ({"bucket_lo": self.bucket_lo} if self.bucket_lo is not None else {})
        )


def m_range(key: str, solution: str, lo: int, hi: int, note: str = "", bucket_lo: int | None = None) -> MRange:
    """The range record of the grid row ``key`` (``op_signature,params_signature``)."""
    return MRange(parse_key(*key.split(",", 1)), key, solution, lo, hi, note, bucket_lo)


def read_ranges(
    records: Iterable[Mapping] | None, where: str = "manifest.json", field: str = "m_ranges"
) -> list[MRange]:
    """A manifest's ``m_ranges`` (None or empty under ``--m-grid exact``), or its ``default_ranges``
    (``field``: counts whose tuned choice is torch's default, ``mgrid.default_ranges``; their solution reads
    ``Default``, their note the reason); ``BadInput`` naming ``where`` and the record for one that is not a
    range."""
    found = []
    for i, record in enumerate(records or ()):
        try:
            lo, hi = int(record["lo"]), int(record["hi"])
            if not 0 < lo <= hi:
                raise ValueError(f"lo {lo}, hi {hi}: not 0 < lo <= hi")
            if field == DEFAULT_RANGES:
                solution, note = DEFAULT, str(record.get("why") or "")
            else:
                solution, note = str(record["solution"]), str(record.get("note") or "")
            bucket_lo = None if record.get("bucket_lo") is None else int(record["bucket_lo"])
            if bucket_lo is not None and not 0 < bucket_lo <= lo:
                raise ValueError(f"bucket_lo {bucket_lo}, lo {lo}: not 0 < bucket_lo <= lo")
            found.append(m_range(str(record["key"]), solution, lo, hi, note, bucket_lo))
        except (KeyError, TypeError, ValueError, TunableOpFormatError) as err:
            raise BadInput(f"{where}: {field}[{i}] is not a range record ({type(err).__name__}: {err})") from err
    return found


def by_family(ranges: Iterable[MRange]) -> dict[GemmProblem, list[MRange]]:
    """The ranges per token family (``GemmProblem.token_family``: the weight, every size but M), by ``hi``."""
    found: dict[GemmProblem, list[MRange]] = {}
    for r in ranges:
        family = r.grid.token_family()
        if family is not None:
            found.setdefault(family, []).append(r)
    return {family: sorted(rows, key=lambda r: (r.hi, r.lo)) for family, rows in found.items()}
