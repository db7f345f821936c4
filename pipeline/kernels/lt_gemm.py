"""The cuBLASLt call through ``nvmath.bindings.cublasLt`` (the ``cuda`` extra): one problem's descriptors, layouts
and workspace preference (``LtGemm``), its launchers for an algorithm record, and an algorithm rebuilt from a
saved config (``record_from_config``). The tuner searches with it (``backends/cublaslt.py``) and the runtime runs
tuned rows with it (``runtime/cublaslt.py``); docs/cublaslt.md has the API facts.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from ..problem import ROWWISE, GemmProblem
from .cublaslt_algo import CONFIG_FIELDS, AlgoSpace, lt, new_record, set_config, value_buffer
from .support import Unsupported
from .torch_gemm import OperandSet, Shape

CUDA_R = {"float16": 2, "bfloat16": 14, "float32": 0, "float64": 1, "float8_e4m3fn": 28, "float8_e5m2": 29}
COMPUTE_32F, COMPUTE_32F_FAST_TF32, COMPUTE_64F = 68, 77, 70


class ScaleModeUnsupported(Unsupported):
    """This cuBLASLt offers no algorithm for the problem's scale mode (rowwise FP8 on some versions and GPUs)."""

    def __init__(self, why: str) -> None:
        super().__init__(f"rowwise FP8 scales (OUTER_VEC_32F): cuBLASLt {lt.get_version()} on this GPU {why}")


class LtGemm:
    """cuBLASLt descriptors, workspace and launchers for one problem; ``space`` is its config space
    (``cublaslt_algo.AlgoSpace``: axes, random draws, neighbours of known-valid configs)."""

    def __init__(self, problem: GemmProblem, handle: int, workspace: torch.Tensor) -> None:
        self.problem, self.handle, self.workspace = problem, handle, workspace
        s = Shape.of(problem)
        a_type, b_type, c_type = (CUDA_R[t] for t in (problem.a_type, problem.b_type, problem.c_type))
        if problem.a_type == "float64":
            self.compute, self.scale = COMPUTE_64F, CUDA_R["float64"]
        else:
            self.compute = COMPUTE_32F_FAST_TF32 if problem.compute_type == "tf32" else COMPUTE_32F
            self.scale = CUDA_R["float32"]
        self.types = (a_type, b_type, c_type, c_type)
        scalar = np.float64 if self.scale == CUDA_R["float64"] else np.float32
        self.alpha, self.beta = np.ones(1, scalar), np.zeros(1, scalar)
        self.desc = lt.matmul_desc_create(self.compute, self.scale)
        self._desc_set(lt.MatmulDescAttribute.TRANSA, int(problem.transa == "T"))
        self._desc_set(lt.MatmulDescAttribute.TRANSB, int(problem.transb == "T"))
        if problem.has_bias:
            self._desc_set(lt.MatmulDescAttribute.EPILOGUE, int(lt.Epilogue.BIAS))
            self._desc_set(lt.MatmulDescAttribute.BIAS_DATA_TYPE, CUDA_R[problem.bias_type or problem.c_type])
        if problem.op == "scaled_gemm":
            self._desc_set(lt.MatmulDescAttribute.FAST_ACCUM, int(bool(problem.fast_accum)))
            if problem.scale_a_recipe == ROWWISE:
                try:
                    for attr in (lt.MatmulDescAttribute.A_SCALE_MODE, lt.MatmulDescAttribute.B_SCALE_MODE):
                        self._desc_set(attr, int(lt.MatmulMatrixScale.OUTER_VEC_32F))
                except lt.cuBLASLtError as err:
                    lt.matmul_desc_destroy(self.desc)
                    raise ScaleModeUnsupported(f"has no such scale mode ({err})") from err
        self.layouts = [
            self._layout(dtype, rows, cols, ld, s.batch)
            for dtype, rows, cols, ld in (
                (a_type, s.rows_a, s.cols_a, s.lda),
                (b_type, s.rows_b, s.cols_b, s.ldb),
                (c_type, s.m, s.n, s.ldc),
            )
        ]
        self._bias, self._scale_a, self._scale_b = (
            self._pointer_attr(attr)
            for attr in (
                lt.MatmulDescAttribute.BIAS_POINTER,
                lt.MatmulDescAttribute.A_SCALE_POINTER,
                lt.MatmulDescAttribute.B_SCALE_POINTER,
            )
        )
        self.pref = lt.matmul_preference_create()
        attr = lt.MatmulPreferenceAttribute.MAX_WORKSPACE_BYTES
        buf = value_buffer(lt.get_matmul_preference_attribute_dtype(attr), workspace.numel())
        lt.matmul_preference_set_attribute(self.pref, attr, buf.ctypes.data, buf.nbytes)
        self.space = AlgoSpace(handle, self.compute, self.scale, self.types, self.check)

    @staticmethod
    def _pointer_attr(attr) -> tuple:
        buf = value_buffer(lt.get_matmul_desc_attribute_dtype(attr))
        return attr, buf, buf.ctypes.data, buf.nbytes

    def _set_pointer(self, slot: tuple, pointer: int) -> None:
        attr, buf, address, size = slot
        buf[0] = pointer
        lt.matmul_desc_set_attribute(self.desc, attr, address, size)

    def set_bias(self, pointer: int) -> None:
        """Point the bias epilogue at a device vector (read when the next matmul is launched or captured)."""
        self._set_pointer(self._bias, pointer)

    def set_scales(self, scale_a: int, scale_b: int) -> None:
        """Point A's and B's FP8 scales at device memory (read, like the bias, at launch or capture)."""
        self._set_pointer(self._scale_a, scale_a)
        self._set_pointer(self._scale_b, scale_b)

    def _desc_set(self, attr, value: int) -> None:
        buf = value_buffer(lt.get_matmul_desc_attribute_dtype(attr), value)
        lt.matmul_desc_set_attribute(self.desc, attr, buf.ctypes.data, buf.nbytes)

    @staticmethod
    def _layout(dtype: int, rows: int, cols: int, ld: int, batch: int) -> int:
        layout = lt.matrix_layout_create(dtype, rows, cols, ld)
        if batch > 1:
            for attr, value in (
                (lt.MatrixLayoutAttribute.BATCH_COUNT, batch),
                (lt.MatrixLayoutAttribute.STRIDED_BATCH_OFFSET, ld * cols),
            ):
                buf = value_buffer(lt.get_matrix_layout_attribute_dtype(attr), value)
                lt.matrix_layout_set_attribute(layout, attr, buf.ctypes.data, buf.nbytes)
        return layout

    @property
    def _descs(self) -> tuple[int, int, int, int]:
        a, b, c = self.layouts
        return a, b, c, c

    def heuristic(self, count: int) -> list[np.ndarray]:
        results = np.zeros(count, dtype=lt.matmul_heuristic_result_dtype)
        returned = value_buffer(np.int32)
        a, b, c, d = self._descs
        try:
            lt.matmul_algo_get_heuristic(
                self.handle, self.desc, a, b, c, d, self.pref, count, results.ctypes.data, returned.ctypes.data
            )
        except lt.cuBLASLtError as err:
            if self.problem.scale_a_recipe == ROWWISE:
                raise ScaleModeUnsupported(f"has no algorithm for them ({err})") from err
            raise
        found = [results[i : i + 1].copy() for i in range(int(returned[0])) if results["state"][i] == 0]
        if not found and self.problem.scale_a_recipe == ROWWISE:
            raise ScaleModeUnsupported("returns no algorithm for them")
        return found

    def check(self, record: np.ndarray) -> bool:
        """``cublasLtMatmulAlgoCheck``; fills the record's workspace size; False if unusable here."""
        a, b, c, d = self._descs
        checked = new_record()
        try:
            lt.matmul_algo_check(self.handle, self.desc, a, b, c, d, record.ctypes.data, checked.ctypes.data)
        except lt.cuBLASLtError:
            return False
        if int(checked["state"][0]) != 0 or int(checked["workspace_size"][0]) > self.workspace.numel():
            return False
        record["workspace_size"] = checked["workspace_size"]
        return True

    def launcher(self, record: np.ndarray) -> Callable[[OperandSet], None]:
        a, b, c, d = self._descs
        workspace, size = self.workspace.data_ptr(), self.workspace.numel()

        def launch(ops: OperandSet) -> None:
            if ops.bias is not None:
                self.set_bias(ops.bias.data_ptr())
            if ops.scale_a is not None:
                self.set_scales(ops.scale_a.data_ptr(), ops.scale_b.data_ptr())
            lt.matmul(
                self.handle,
                self.desc,
                self.alpha.ctypes.data,
                ops.a.data_ptr(),
                a,
                ops.b.data_ptr(),
                b,
                self.beta.ctypes.data,
                ops.c.data_ptr(),
                c,
                ops.c.data_ptr(),
                d,
                record.ctypes.data,
                workspace,
                size,
                torch.cuda.current_stream().cuda_stream,
            )

        return launch

    def close(self) -> None:
        for layout in self.layouts:
            lt.matrix_layout_destroy(layout)
        lt.matmul_desc_destroy(self.desc)
        lt.matmul_preference_destroy(self.pref)


def record_from_config(gemm: LtGemm, config: dict) -> np.ndarray:
    """Rebuild an algorithm from its saved bytes, or from its attributes when the bytes do not check."""
    if config.get("AlgoBytes"):
        record = new_record()
        record["algo"]["data_"][0] = np.frombuffer(bytes.fromhex(config["AlgoBytes"]), dtype=np.uint64)
        if gemm.check(record):
            return record
    record = gemm.space.init(config["AlgoId"])
    set_config(record, {key: config[key] for key in CONFIG_FIELDS if key != "AlgoId"})
    if not gemm.check(record):
        raise ValueError(f"{config['SolutionNameMin']} does not pass cublasLtMatmulAlgoCheck with this cuBLASLt")
    return record
