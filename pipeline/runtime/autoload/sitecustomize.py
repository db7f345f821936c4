"""Installs the gemm-tune runtime in a Python process right after it imports torch, when
``GEMM_TUNE_RUNTIME_BUNDLE`` is set (``python -m pipeline.runtime -- CMD`` sets it for CMD's processes), or its
``_scaled_mm`` recorder when ``GEMM_TUNE_RECORD_SCALED`` is (shape collection sets it); then runs the
``sitecustomize`` this one shadows, if any."""

import os
import sys

if os.environ.get("GEMM_TUNE_RUNTIME_BUNDLE") or os.environ.get("GEMM_TUNE_RECORD_SCALED"):
    try:
        from pipeline.runtime.autoload_hook import arm
    except ImportError as err:  # the runtime's package is not importable in this interpreter
        print(f"gemm-tune runtime: not installed in {sys.executable}: {err}", file=sys.stderr)
    else:
        arm()


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    saved_path, saved = list(sys.path), sys.modules.pop("sitecustomize", None)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        import sitecustomize  # noqa: F401  (the next one on the path)
    except ImportError:
        if saved is not None:
            sys.modules["sitecustomize"] = saved
    finally:
        sys.path[:] = saved_path


_chain()
