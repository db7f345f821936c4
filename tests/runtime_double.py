"""A CPU stand-in for the runtime's cuBLASLt executor: plans compute the product without any aten GEMM (so
they never re-enter the overridden kernels), count their calls, and a solution with algorithm id 999 is
refused the way ``cublasLtMatmulAlgoCheck`` refuses one this library does not have."""

from __future__ import annotations

import torch

from pipeline.problem import GemmProblem


class DoublePlan:
    def __init__(self, problem: GemmProblem, solution: str, device: int) -> None:
        self.problem, self.name, self.device, self.calls = problem, solution, device, 0
        self.accumulates = not solution.startswith("triton_")  # as runtime/triton_plan.TritonPlan

    def run(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        bias: torch.Tensor | None,
        out: torch.Tensor | None = None,
        accumulate: bool = False,
        scales: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        wide_x, wide_y = x.double(), y.double()
        if scales is not None:  # (scale of y, scale of x), as BLAS A and B take them
            wide_x, wide_y = wide_x * scales[1].double(), wide_y * scales[0].double()
        wide = (wide_x.unsqueeze(-1) * wide_y.unsqueeze(-3)).sum(-2)  # elementwise: no mm/bmm
        if bias is not None:
            wide = wide + bias.double()
        if accumulate:
            wide = wide + out.double()
        self.calls += 1
        if out is not None:
            return out.copy_(wide)
        return wide.to(getattr(torch, self.problem.c_type) if scales is not None else x.dtype)

    def close(self) -> None:
        pass


class DoubleExecutor:
    errors = (ValueError,)

    def __init__(self, name: str = "CPU double") -> None:
        self.name, self.closed = name, False

    def plan(self, problem: GemmProblem, solution: str, device: int) -> DoublePlan:
        if solution.startswith("Gemm_Cublaslt_id_999_"):
            raise ValueError(f"{solution} does not pass cublasLtMatmulAlgoCheck with this cuBLASLt")
        return DoublePlan(problem, solution, device)

    @staticmethod
    def current_device() -> int:
        return -1  # what Tensor.get_device() says for CPU tensors

    def device_name(self, device: int) -> str:
        return self.name

    def close(self) -> None:
        self.closed = True
