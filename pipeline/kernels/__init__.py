"""The kernels a tuned row runs, below both the tuner (``backends/``) and the runtime an image ships
(``runtime/``): the cuBLASLt call (``lt_gemm.py``, its algorithm records in ``cublaslt_algo.py`` over the
config space of ``space.py``), torch's own call and its operands (``torch_gemm.py``), this project's Triton
kernels (``triton_gemm.py``: their families, what they serve, their configs per shape; ``triton_runner.py``,
how one launches; ``triton_kernels.py``,
the kernels; ``triton_cache.py``, their compile cache), and which problems torch's path and cuBLASLt take
(``support.py``). Nothing here times, searches or decides: that is the tuner's.
"""
