"""The worker processes of the stages, each started by its stage on a GPU slot it claims:

    python -m pipeline.stages bench-worker SHARD.json OUT_DIR --gpus 0,1
    python -m pipeline.stages validate RUN_DIR --gpus 0,1 --rounds 7 --margin 0.02
    python -m pipeline.stages call-weights COLLECT_DIR --gpus 0,1 --rounds 3
    python -m pipeline.stages stack-probe [--bench PATH]
    python -m pipeline.stages verdict-child --gpu 0        (a cuBLASLt Bench worker's own child: its pipe)

One entry point that the Luigi tasks never import, so a worker's module is imported once, not also run.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence


def _bench_worker(argv: Sequence[str]) -> int:
    from .bench import worker

    return worker.main(argv)


def _validate(argv: Sequence[str]) -> int:
    from .validate import validate

    return validate.main(argv)


def _call_weights(argv: Sequence[str]) -> int:
    from .gather import call_weights

    return call_weights.main(argv)


def _stack_probe(argv: Sequence[str]) -> int:
    from .run import fingerprint

    return fingerprint.main(argv)


def _verdict_child(argv: Sequence[str]) -> int:
    from ..backends import verdict_child
    from ..backends.cublaslt import CublasLtBackend

    return verdict_child.main(lambda gpu: CublasLtBackend(gpu, verdict_process=False), argv)


WORKERS = {  # each imports its own module only: a worker starts without the others' imports
    "bench-worker": _bench_worker,
    "validate": _validate,
    "call-weights": _call_weights,
    "stack-probe": _stack_probe,
    "verdict-child": _verdict_child,
}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(message)s")  # a worker's log file
    if not argv or argv[0] not in WORKERS:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    return WORKERS[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
