"""What every task of the DAG is (``PipelineTask``) and what a stack-bound one adds (``StackBound``): the run
directory's lock, the record of what each stage was made from and the redo it triggers (said once, in one line),
the failure records a nightly and Luigi's last line read, the stage timings, and the fingerprint every stage from
Bench on is complete under. The task classes themselves are ``pipeline/tasks.py``'s."""

from __future__ import annotations

import contextlib
import datetime
import functools
import logging
import os
import shutil
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

import luigi
import luigi.interface

from .. import luigi_face
from ..backends.base import ToolMissing
from ..backends.hipblaslt import find_bench
from ..backends.slots import amd_gpu_count, gpu_count
from ..defaults import TUNE_MARGIN
from ..errors import BadInput, PipelineError, one_line
from ..stages.bench import registry
from ..stages.run import timings
from ..stages.run.fingerprint import STACKS, Stack, claim, current_stack, put_back, set_aside_name, stamped
from ..stages.run.layout import RunLayout
from ..stages.run.made_from import MadeFrom, changes, read_record, record_path, write_record
from ..stages.ship import nightly
from .arguments import RunName, counted, margin_value
from .backend_params import backend_parameters


def _default_logging() -> None:
    """Show what the stages say (the ``pipeline`` logger, INFO) where nothing else was set up to (Luigi sets up
    only its own logger; a ``--logging-conf-file`` that names ``pipeline`` wins)."""
    logger = logging.getLogger("pipeline")
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


LAST_LINE = luigi_face.install()  # luigi's exit codes, one-line errors, the failure repeated last
_default_logging()
log = logging.getLogger("pipeline")
RUN_LOCKS = nightly.RunLocks()  # the run directories this process holds, until it exits
STARTED = time.time()  # when this process began (a record written since is this run's own)


def stage_run(run: Callable[[luigi.Task], None]) -> Callable[[luigi.Task], None]:
    """A task's ``run``: holding its workdir's lock shared (so never beside a ``gemm-tune nightly``) and its run
    directory's, unless Luigi runs with ``--no-lock`` (a fleet's workers, and the nightly's own Luigi process,
    which holds the workdir); a stage made from other inputs before is moved aside first
    (``<stage>.before-redo``); the record of what it was made from is written last."""

    @functools.wraps(run)
    def held(self: PipelineTask) -> None:
        lock = (
            contextlib.nullcontext()
            if luigi.interface.core().no_lock
            else nightly.workdir_lock(Path(self.workdir), shared=True)
        )
        with lock:
            self.hold_run()
            made_from = self.made_from()
            old = read_record(self.stage_dir(""), self.record_name())
            if old is not None and old.identity != made_from.identity:
                self.set_aside(self.redo_stages())
            run(self)
            write_record(self.stage_dir(""), self.record_name(), made_from)
            self.keep_record(made_from)

    return held


class PipelineTask(luigi.Task):
    """Common parameters: where runs live and which run this is."""

    workdir = luigi.Parameter(default="workdir", description="root of all run directories")
    run_name = RunName(
        default=datetime.date.today().isoformat(),
        description="run directory under --workdir (default: today's date); a rerun with the same "
        "name resumes, and redoes each stage whose parameters or input files changed",
    )
    no_redo = luigi.BoolParameter(
        default=False,
        significant=False,
        description="refuse (exit 12), rather than redo, a stage of this run name whose "
        "parameters or input files changed since it was made",
    )

    made_from_params: tuple[str, ...] = ()  # the parameters this stage's output depends on (its record)

    def timing_name(self) -> str:
        """The name of this task's record in ``<run>/timings/`` and ``<run>/made_from/``."""
        return self.task_family

    def record_name(self) -> str:
        return self.timing_name()

    def dependencies(self) -> list[PipelineTask]:
        """What ``requires`` names, without the checks some tasks run there."""
        return luigi.task.flatten(self.requires())

    def user_files(self) -> list[Path]:
        """The files of the user's this stage reads (their content is part of its record)."""
        return []

    def redo_stages(self) -> tuple[str, ...]:
        """The stage directories moved aside when this stage is redone (what a resume would otherwise reuse)."""
        return ()

    def keep_record(self, made_from: MadeFrom) -> None:
        """Keep a copy of the record just written where a later run can find it (a stack-bound stage's)."""

    def set_aside(self, stages: Sequence[str]) -> None:
        """Move each of ``stages`` to ``<stage>.before-redo`` (replacing the one an earlier redo left)."""
        for stage in stages:
            path = self.stage_dir(stage)
            if path.exists():
                aside = path.with_name(path.name + ".before-redo")
                shutil.rmtree(aside, ignore_errors=True)
                path.rename(aside)

    def made_from(self) -> MadeFrom:
        """This stage's parameters, user files and inputs' identities, as of now (computed once)."""
        if getattr(self, "_made_from", None) is None:
            self._made_from = MadeFrom.of(
                {name: self.param_kwargs[name] for name in self.made_from_params},
                self.user_files(),
                {dep.record_name(): dep.made_from().identity for dep in self.dependencies()},
            )
        return self._made_from

    def what_changed(self) -> list[str]:
        """Why this stage's record is not what its inputs give now, in the user's words (empty: it is, or
        there is no record)."""
        old = read_record(self.stage_dir(""), self.record_name())
        if old is None:
            return []
        now = self.made_from()
        if old.identity == now.identity:
            return []
        said = [f"{self.record_name()}: {what}" for what in changes(old, now)]
        for dep in self.dependencies():
            if old.inputs.get(dep.record_name()) != dep.made_from().identity:
                redone_now = dep.record_time() >= STARTED  # by this process: the change was said where it was
                said += dep.what_changed() or (
                    [] if redone_now else [f"{self.record_name()}: {dep.record_name()} was redone since"]
                )
        return list(dict.fromkeys(said)) or [f"the inputs of {self.record_name()} were redone in this run"]

    def record_time(self) -> float:
        """When this stage's record was written (0: never)."""
        try:
            return record_path(self.stage_dir(""), self.record_name()).stat().st_mtime
        except OSError:
            return 0.0

    def say_redo(self, line: str, changed: list[str]) -> None:
        """Say once why the run is redone: Luigi asks the stage furthest down first, whose changes hold those
        of every stage it reads, so it says them all in one line, naming the first stage redone, and the stages
        it reads say nothing more."""
        stages = {entry.split(": ", 1)[0] for entry in changed} | {self.record_name()}
        first = min(stages, key=timings.dag_rank)
        log.warning("gemm-tune: %s: redoing %s and what depends on it", line, first)
        todo = list(self.dependencies())
        while todo:
            dep = todo.pop()
            if not getattr(dep, "_said_redo", False):
                dep._said_redo = True
                todo += dep.dependencies()

    def hold_run(self) -> None:
        """Hold this run directory's lock until the process exits, in a plain ``luigi`` command (not with
        ``--no-lock``, nor under ``luigi.build``, whose caller holds what it needs)."""
        if "luigi.cmdline" in sys.modules and not luigi.interface.core().no_lock:
            RUN_LOCKS.hold(self.stage_dir(""), sys.argv)

    def done(self) -> bool:
        """Whether the outputs are there (and, for a stack-bound stage, made under this stack)."""
        return super().complete()

    def complete(self) -> bool:
        """Done, and made from what the parameters and input files give now. Where they changed, it says so
        once and is redone (``--no-redo``: refused). An error the pipeline expects (bad input, a busy run
        directory) is recorded for the nightly and Luigi's last line."""
        try:
            self.hold_run()
            changed = self.what_changed()
            if changed:
                line = f"this run ({self.stage_dir('')}) was made from other inputs: {'; '.join(changed)}"
                if self.no_redo:
                    raise BadInput(f"{line}; --no-redo refuses to redo it (drop --no-redo, or give another --run-name)")
                if not getattr(self, "_said_redo", False):
                    self._said_redo = True
                    self.say_redo(line, changed)
                return False
            return self.done()  # outputs without a record (made before records existed) are taken as they are
        except (PipelineError, OSError) as err:
            error = (
                err
                if isinstance(err, PipelineError)
                else BadInput(f"{self.stage_dir('')}: {err.strerror or err} (--workdir names where runs go)")
            )
            _record(f"{self.task_family} (checked before any work)", error, "scheduling_error")
            if error is err:
                raise
            raise error from None

    def on_failure(self, exception: BaseException) -> str:
        """What the scheduler shows: the error's class, exit code and message; a traceback only for a bug."""
        if isinstance(exception, PipelineError):
            return f"{one_line(exception)}\n{exception}"
        return f"{one_line(exception)}\n{traceback.format_exc()}"

    def gpu_indices(self, who: str) -> list[int]:
        """``--gpus`` GPUs, else every visible one (through torch for cuBLASLt, the AMD tools' own count)."""
        if getattr(self, "gpus", 0):
            return list(range(self.gpus))
        amd = registry.amd(getattr(self, "backend", "cublaslt"))
        return list(range(amd_gpu_count() if amd else gpu_count(who)))

    def layout(self) -> RunLayout:
        """This run's directory and the files its stages hand each other (``stages/run/layout.py``); absolute:
        these paths reach subprocesses, environment variables and files other programs read."""
        return RunLayout.of(Path(os.path.abspath(self.workdir)) / self.run_name)

    def stage_dir(self, stage: str) -> Path:
        return self.layout().stage(stage)


def _record(who: str, error: BaseException, luigi_code: str) -> None:
    """A failure, for the nightly's record, the log and the line printed last."""
    LAST_LINE.add(error, nightly.record_failure(who, error), luigi_code)


@PipelineTask.event_handler(luigi.Event.FAILURE)
def _failed(task: PipelineTask, error: BaseException) -> None:
    _record(task.task_family, error, "task_failed")


@PipelineTask.event_handler(luigi.Event.BROKEN_TASK)
def _refused_before_running(task: PipelineTask, error: BaseException) -> None:
    _record(f"{task.task_family} (checked before any work)", error, "scheduling_error")


@PipelineTask.event_handler(luigi.Event.PROCESSING_TIME)
def _timed(task: PipelineTask, seconds: float) -> None:
    timings.record(task.stage_dir(""), task.timing_name(), seconds)


class StackBound(PipelineTask):
    """A task whose outputs hold for one stack: complete only where its stage directories record this
    machine's fingerprint (``stage/stack.json``); run under another one, it moves them aside and redoes them."""

    stack_stages: tuple[str, ...] = ()
    written_whole: tuple[str, ...] = ()  # stages whose writer puts the stamp in itself (only set aside here)
    chained = False  # complete only while what it requires is (its output summarises theirs)

    # The tuning settings a stack's fingerprint includes, declared here for every stack-bound task (Bench's own)
    backend = luigi.ChoiceParameter(
        default="cublaslt",
        choices=list(registry.REGISTRY),
        description="tuner: cublaslt on NVIDIA, hipblaslt (hipblaslt-bench) on AMD",
    )
    triton = luigi.OptionalBoolParameter(
        default=None,
        parsing=luigi.BoolParameter.EXPLICIT_PARSING,
        description="cublaslt: time this project's Triton kernels per GEMM too (on unless --triton false; "
        "docs/triton.md); another backend: --triton has the report say why no Triton row is offered",
    )
    time_budget = counted(float, 0, low_included=False, default=20.0, description="screening seconds per problem")
    tune_margin = counted(
        float,
        0,
        10,
        default=TUNE_MARGIN,
        description="Bench crowns a winner only where it beats torch's default by this fraction (in the stack "
        "fingerprint: a change tunes again)",
    )
    margin = luigi.OptionalFloatParameter(
        default=None,
        description="sets --tune-margin and --gate-margin both (an alias, said in the log where given)",
    )

    def tuning_margin(self) -> float:
        """Bench's margin: ``--margin`` where given, else ``--tune-margin``."""
        return margin_value(self.margin, self.tune_margin)

    def tuning_settings(self) -> dict:
        """The Bench settings that are part of the fingerprint (a change of them is a new stack too)."""
        return registry.entry(self.backend).fingerprint_settings(self.param_kwargs)

    def stack(self) -> Stack:
        if getattr(self, "_stack", None) is None:
            bench_path = None
            if registry.amd(self.backend):
                try:
                    bench_path = find_bench(self.hipblaslt_bench or None)
                except ToolMissing:
                    bench_path = None  # Bench itself names what is missing
            self._stack = current_stack(Path(self.workdir), self.tuning_settings(), bench_path)
        return self._stack

    def done(self) -> bool:
        """Done under this stack's fingerprint. A stack that cannot be probed is not done here; the error
        comes from the preflight (or the run) with its exit code."""
        if not super().done():
            return False
        try:
            fp = self.stack().fingerprint
        except PipelineError:
            return False
        return all(stamped(self.stage_dir(s)) == fp for s in self.stack_stages) and (
            not self.chained or self.upstream().complete()
        )

    def upstream(self) -> luigi.Task:
        """What a chained task summarises (its requirement, without the preflight)."""
        raise NotImplementedError

    def keep_record(self, made_from: MadeFrom) -> None:
        """The record of a stage with directories also under this stack's fingerprint
        (``<run>/stacks/<fingerprint>/made_from/``), for ``put_back_earlier`` when a later run comes back."""
        if self.stack_stages:
            write_record(self.stage_dir("") / STACKS / self.stack().fingerprint, self.record_name(), made_from)

    def complete(self) -> bool:
        chain = self.stack_chain()
        if any([task.put_back_earlier() for task in chain]):
            for task in chain:
                if not task.stack_stages:  # a summary of the stages put back (TuneWorkload): that line says it
                    task._said_redo = True
        return super().complete()

    def stack_chain(self) -> list[StackBound]:
        """This task and every stack-bound task it depends on, however far down."""
        found: list[StackBound] = []
        todo: list = [self]
        while todo:
            task = todo.pop()
            if isinstance(task, StackBound) and task not in found:
                found.append(task)
                todo += task.dependencies()
        return found

    def put_back_earlier(self) -> bool:
        """Coming back to a stack this run was made under before (``--tune-margin`` back to its earlier value):
        where this stage's directories were set aside under this fingerprint (``<stage>.<fingerprint>``) and its
        record there is what its inputs give now, every stage set aside under it is put back with its record,
        and says so, instead of being made again (docs/design.md, "Reruns")."""
        dirs = [self.stage_dir(s) for s in self.stack_stages]
        if not dirs:
            return False
        try:
            self.hold_run()  # nothing moves in a run directory another run holds
            fp = self.stack().fingerprint
        except PipelineError:
            return False  # complete() or the run says why
        if all(stamped(d) == fp for d in dirs) or not all(set_aside_name(d, fp).is_dir() for d in dirs):
            return False
        earlier = read_record(self.stage_dir("") / STACKS / fp, self.record_name())
        if earlier is None or earlier.identity != self.made_from().identity:
            return False
        back = put_back(self.stage_dir(""), fp, self.stack().facts)
        if "report" in back:  # the workdir's history holds the run as its report stood: as it stands again
            from ..stages.validate import report

            report.build(self.stage_dir(""))
        if back:
            log.warning(
                "gemm-tune: %s: put back %s, made under this stack (%s) from these inputs before: not made again",
                self.stage_dir(""),
                ", ".join(back),
                fp,
            )
        return bool(back)

    def set_aside(self, stages: Sequence[str]) -> None:
        """As ``PipelineTask.set_aside`` for the stages made under this stack; those of another stack are
        ``claim``'s to move (``<stage>.<fingerprint>``)."""
        fp = self.stack().fingerprint
        super().set_aside([s for s in stages if stamped(self.stage_dir(s)) in (fp, None)])

    def claim_stages(self) -> None:
        for stage in self.stack_stages:
            claim(
                self.stage_dir(stage),
                self.stack().fingerprint,
                self.stack().facts,
                create=stage not in self.written_whole,
            )


for _name, _param in backend_parameters().items():  # what each backend's registry entry declares
    setattr(StackBound, _name, _param)
    _param.__set_name__(StackBound, _name)  # as a class body would (Luigi's parameters are descriptors)
