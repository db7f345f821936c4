"""cuBLASLt algorithms: the records, their config attributes and TunableOp names, and the config space one
problem's types open (``docs/cublaslt.md`` sections 1.6 and 7; ``space`` walks the axes).

Needs nvmath-python (the ``cuda`` extra): ``cublaslt`` builds the descriptors and launches what this finds.
"""

from __future__ import annotations

import itertools
import random
import re
import time
from collections.abc import Callable

import numpy as np

try:
    from nvmath.bindings import cublasLt as lt
except ImportError as err:  # the cuda extra is what brings it; the tuner and the runtime both import it here
    raise ImportError(
        f"cuBLASLt needs nvmath-python ({err}): pip install nvmath-python (the project's 'cuda' extra)",
        name=err.name,  # what is missing stays readable to callers that skip on it
    ) from err

from . import space

CONFIG_FIELDS = {  # config key -> cuBLASLt algo config attribute
    "AlgoId": lt.MatmulAlgoConfigAttribute.ID,
    "Tile": lt.MatmulAlgoConfigAttribute.TILE_ID,
    "Stages": lt.MatmulAlgoConfigAttribute.STAGES_ID,
    "SplitK": lt.MatmulAlgoConfigAttribute.SPLITK_NUM,
    "ReductionScheme": lt.MatmulAlgoConfigAttribute.REDUCTION_SCHEME,
    "Swizzle": lt.MatmulAlgoConfigAttribute.CTA_SWIZZLING,
    "CustomOption": lt.MatmulAlgoConfigAttribute.CUSTOM_OPTION,
    "InnerShape": lt.MatmulAlgoConfigAttribute.INNER_SHAPE_ID,
    "ClusterShape": lt.MatmulAlgoConfigAttribute.CLUSTER_SHAPE_ID,
}
SPLITS = (2, 3, 4, 5, 6, 8, 12, 16, 32)  # split-K values drawn where an algorithm's caps allow split-K
NEIGHBOUR_TRIES = 40  # configs checked around each heuristic result, at most


def solution_name(config: dict) -> str:
    """torch >= 2.14's TunableOp name for a cuBLASLt algorithm (``docs/tunableop.md`` 2.3)."""
    name = (
        f"Gemm_Cublaslt_id_{config['AlgoId']}_tile_{config['Tile']}_stages_{config['Stages']}"
        f"_splitk_{config['SplitK']}_red_{config['ReductionScheme']}_swizzle_{config['Swizzle']}"
        f"_custom_{config['CustomOption']}"
    )
    if config.get("InnerShape") or config.get("ClusterShape"):
        name += f"_inner_{config['InnerShape']}_cluster_{config['ClusterShape']}"
    return name


_INT = r"-?\d+"  # cuBLASLt's attributes are signed: algorithm 12 on the H100 reads SPLITK_NUM -1
_NAME_RE = re.compile(
    rf"Gemm_Cublaslt_id_(?P<AlgoId>{_INT})_tile_(?P<Tile>{_INT})_stages_(?P<Stages>{_INT})"
    rf"_splitk_(?P<SplitK>{_INT})_red_(?P<ReductionScheme>{_INT})_swizzle_(?P<Swizzle>{_INT})"
    rf"_custom_(?P<CustomOption>{_INT})(?:_inner_(?P<InnerShape>{_INT})_cluster_(?P<ClusterShape>{_INT}))?"
)


def config_from_name(name: str) -> dict:
    """The algorithm attributes a ``Gemm_Cublaslt_id_..`` solution name spells out (no saved bytes)."""
    match = _NAME_RE.fullmatch(name)
    if not match:
        raise ValueError(f"{name!r} is not a Gemm_Cublaslt_id_... solution name")
    config = {k: int(v or 0) for k, v in match.groupdict().items()}
    return {**config, "SolutionNameMin": name, "AlgoBytes": None}


def value_buffer(dtype, value=0) -> np.ndarray:
    return np.array([value], dtype=dtype)


def new_record() -> np.ndarray:
    """One ``cublasLtMatmulHeuristicResult_t``; its first field is the algorithm, so its address is the algo's."""
    return np.zeros(1, dtype=lt.matmul_heuristic_result_dtype)


def read_config(record: np.ndarray) -> dict:
    config = {}
    written = value_buffer(np.uint64)
    for key, attr in CONFIG_FIELDS.items():
        buf = value_buffer(lt.get_matmul_algo_config_attribute_dtype(attr))
        lt.matmul_algo_config_get_attribute(record.ctypes.data, attr, buf.ctypes.data, buf.nbytes, written.ctypes.data)
        config[key] = int(buf[0])
    config["SolutionNameMin"] = solution_name(config)
    config["AlgoBytes"] = record["algo"]["data_"][0].tobytes().hex()
    config["WorkspaceBytes"] = int(record["workspace_size"][0])
    return config


def _cap_int(record: np.ndarray, attr) -> int:
    values = _cap(record, attr)
    return int(values[0]) if len(values) else 0


def _cap(record: np.ndarray, attr) -> np.ndarray:
    dtype = lt.get_matmul_algo_cap_attribute_dtype(attr)
    written = value_buffer(np.uint64)
    lt.matmul_algo_cap_get_attribute(record.ctypes.data, attr, 0, 0, written.ctypes.data)
    count = max(1, int(written[0]) // np.dtype(dtype).itemsize)
    buf = np.zeros(count, dtype=dtype)
    lt.matmul_algo_cap_get_attribute(record.ctypes.data, attr, buf.ctypes.data, buf.nbytes, written.ctypes.data)
    return buf[: int(written[0]) // np.dtype(dtype).itemsize]


def set_config(record: np.ndarray, values: dict) -> None:
    """Write config attributes (``CONFIG_FIELDS`` keys) into an algorithm record."""
    for key, value in values.items():
        attr = CONFIG_FIELDS[key]
        buf = value_buffer(lt.get_matmul_algo_config_attribute_dtype(attr), value)
        lt.matmul_algo_config_set_attribute(record.ctypes.data, attr, buf.ctypes.data, buf.nbytes)


class AlgoSpace:
    """The config space of one problem's types: per algorithm id the axes its caps allow (read once each),
    random draws over them, and the neighbours of known-valid configs; ``check`` is
    ``cublasLtMatmulAlgoCheck`` under the problem's descriptors and workspace."""

    def __init__(
        self,
        handle: int,
        compute: int,
        scale: int,
        types: tuple[int, int, int, int],
        check: Callable[[np.ndarray], bool],
    ) -> None:
        self.handle, self.compute, self.scale, self.types, self.check = handle, compute, scale, types, check
        self._axes: dict[int, tuple[np.ndarray, list[list]] | None] = {}

    def init(self, algo_id: int) -> np.ndarray:
        """``cublasLtMatmulAlgoInit`` for these types (raises ``cuBLASLtError`` if they refuse the id)."""
        record = new_record()
        lt.matmul_algo_init(self.handle, self.compute, self.scale, *self.types, algo_id, record.ctypes.data)
        return record

    def axes(self, algo_id: int) -> tuple[np.ndarray, list[list]] | None:
        """The initialised algorithm and its axes, in ``space``'s combo order: tiles, stages, (split-K,
        reduction) pairs, swizzles, custom options, cluster shapes; None if this problem's types refuse the id."""
        if algo_id not in self._axes:
            self._axes[algo_id] = self._read_axes(algo_id)
        return self._axes[algo_id]

    def _read_axes(self, algo_id: int) -> tuple[np.ndarray, list[list]] | None:
        try:
            base = self.init(algo_id)
        except lt.cuBLASLtError:
            return None
        caps = lt.MatmulAlgoCapAttribute
        tiles = [int(t) for t in _cap(base, caps.TILE_IDS)] or [0]
        stages = [int(s) for s in _cap(base, caps.STAGES_IDS)] or [0]
        cluster_cap = getattr(caps, "CLUSTER_SHAPE_IDS", None)
        try:
            clusters = ([int(c) for c in _cap(base, cluster_cap)] if cluster_cap is not None else []) or [0]
        except lt.cuBLASLtError:
            clusters = [0]
        customs = list(range(_cap_int(base, caps.CUSTOM_OPTION_MAX) + 1))
        swizzles = [0, 1] if _cap_int(base, caps.CTA_SWIZZLING_SUPPORT) else [0]
        red_mask = _cap_int(base, caps.REDUCTION_SCHEME_MASK)
        reductions = [bit for bit in (1, 2, 4) if red_mask & bit] or [0]
        splits = [(1, 0)] + (
            [(s, r) for s in SPLITS for r in reductions] if _cap_int(base, caps.SPLITK_SUPPORT) else []
        )
        return base, [tiles, stages, splits, swizzles, customs, clusters]

    @staticmethod
    def with_combo(base: np.ndarray, combo: tuple) -> np.ndarray:
        """A copy of ``base`` set to one combo of its axes (cluster shape 0 left as initialised)."""
        tile, stage, (split, reduction), swizzle, custom, cluster = combo
        values = {
            "Tile": tile,
            "Stages": stage,
            "SplitK": split,
            "ReductionScheme": reduction,
            "Swizzle": swizzle,
            "CustomOption": custom,
        }
        record = base.copy()
        set_config(record, {**values, "ClusterShape": cluster} if cluster else values)
        return record

    def sample(self, budget: int, seed: int = 0, seconds: float | None = None) -> tuple[list[np.ndarray], dict]:
        """Up to ``budget`` valid configs drawn at random without replacement from each algorithm's whole
        space, round-robin over the ids (at most 40 draws per wanted config, or until ``seconds``); and the
        space's size, the draws checked and the ids."""
        ids = lt.matmul_algo_get_ids(self.handle, self.compute, self.scale, *self.types, 128)
        rng, streams, total = random.Random(seed), [], 0
        for algo_id in ids:
            axes = self.axes(algo_id)
            if axes is None:
                continue
            base, lists = axes
            count = space.size(lists)
            total += count
            order = rng.sample(range(count), min(count, budget * 4))  # more than enough draws for one id
            streams.append((base, lists, iter(order)))
        found, checked = [], 0
        deadline = time.monotonic() + seconds if seconds is not None else None
        while streams and len(found) < budget and checked < 40 * max(budget, 1):
            if deadline is not None and time.monotonic() > deadline:
                break
            for stream in list(streams):
                base, lists, order = stream
                index = next(order, None)
                if index is None:
                    streams.remove(stream)
                    continue
                record = self.with_combo(base, space.decode(index, lists))
                checked += 1
                if self.check(record):
                    found.append(record)
                    if len(found) >= budget:
                        break
        return found, {"space": total, "checked": checked, "ids": [int(i) for i in ids]}

    def enumerate(self, budget: int, seed: int = 0) -> list[np.ndarray]:
        """Up to ``budget`` valid configs drawn from the whole space (``sample``); none without a budget."""
        return self.sample(budget, seed)[0] if budget > 0 else []

    def neighbours(self, records: list[np.ndarray], keep: int, tries: int = NEIGHBOUR_TRIES) -> list[np.ndarray]:
        """Up to ``keep`` valid configs one axis away from each of ``records`` (nearest first across the axes,
        at most ``tries`` checked around each): the local search around the heuristic's results that reaches
        what random draws miss (on the H100, nvjet: algorithm 66; ``bench/README.md``, the ceiling)."""
        found = []
        for record in records if keep > 0 else []:
            config = read_config(record)
            axes = self.axes(config["AlgoId"])
            if axes is None:
                continue
            base, lists = axes
            combo = (
                config["Tile"],
                config["Stages"],
                (config["SplitK"], config["ReductionScheme"]),
                config["Swizzle"],
                config["CustomOption"],
                config["ClusterShape"],
            )
            kept = 0
            for near in itertools.islice(space.neighbours(combo, lists), tries):
                candidate = self.with_combo(base, near)
                if kept < keep and self.check(candidate):
                    found.append(candidate)
                    kept += 1
                if kept >= keep:
                    break
        return found
