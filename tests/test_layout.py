"""The package layout is the architecture: imports only run downward.

problem, atomic, stats,  the data model, helpers, the error hierarchy, the process helpers and the shared
errors, procs, spawner,  defaults: import nothing of the package but each other
defaults
formats/                 one module per file format: the helpers alone
kernels/                 what a tuned row runs (cuBLASLt call, torch's call, Triton kernels): formats, helpers
backends/                tuners, timing harness, GPU slots: kernels, formats and helpers
runtime/                 applies tuned rows inside torch at run time: kernels, formats, helpers (not the tuner)
stages/                  the pure core of each DAG stage: runtime, backends, formats, helpers, other stages
dag/                     the wiring's parts besides the task classes: anything below it, and luigi_face
tasks, cli, luigi_face   wiring: anything
workloads/               standalone programs: each other, nothing else of the package
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "pipeline"
FOUNDATION = {"problem", "atomic", "stats", "errors", "procs", "spawner", "defaults"}
ALLOWED = {  # layer -> the layers its modules may import
    "foundation": {"foundation"},
    "formats": {"foundation", "formats"},  # a format may read another's vocabulary (solution_names: tunableop)
    "kernels": {"foundation", "formats", "kernels"},
    "backends": {"foundation", "formats", "kernels", "backends"},
    "runtime": {"foundation", "formats", "kernels", "runtime"},
    "stages": {"foundation", "formats", "kernels", "backends", "runtime", "stages"},
    "workloads": {"workloads"},
    "dag": {"foundation", "formats", "kernels", "backends", "runtime", "stages", "dag", "luigi_face"},
}


def layer(module: str) -> str:
    """'formats', 'backends', ... for ``pipeline.<layer>.x``; 'foundation' for the top-level helpers."""
    head = module.removeprefix("pipeline.").split(".")[0]
    return "foundation" if head in FOUNDATION else head


def imported(path: Path) -> set[str]:
    """Every ``pipeline.*`` module ``path`` imports, relative imports resolved."""
    parts = ["pipeline", *path.relative_to(PACKAGE).with_suffix("").parts]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = parts[: len(parts) - node.level]
                target = ".".join(base + ([node.module] if node.module else []))
                names = [f"{target}.{a.name}" for a in node.names] if not node.module else [target]
            else:
                names = [node.module or ""]
            found |= {n for n in names if n.startswith("pipeline.")}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("pipeline.")}
    return found


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if p.parent != PACKAGE or p.stem in FOUNDATION)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_only_run_downward(path):
    own = layer("pipeline." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts))
    allowed = ALLOWED[own]
    wrong = sorted(m for m in imported(path) if layer(m) not in allowed)
    assert not wrong, f"{own} may import only {sorted(allowed) or 'nothing of the package'}, not {wrong}"


def test_every_module_belongs_to_a_layer():
    top = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert top == [
        "__init__",
        "__main__",
        "api",  # what scripts outside the package may import (test_the_benchmarks_import_only_the_public_names)
        "atomic",
        "cli",
        "defaults",
        "errors",
        "luigi_face",
        "problem",
        "procs",
        "spawner",
        "stats",
        "tasks",
    ]
    assert sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__") == [
        "backends",
        "dag",
        "formats",
        "kernels",
        "runtime",
        "stages",
        "workloads",
    ]


@pytest.mark.parametrize(
    "module", ["pipeline.stages.bench.worker", "pipeline.stages.validate.validate", "pipeline.runtime"]
)
def test_worker_processes_do_not_import_luigi(module):
    """A GPU worker (or a user's program under the runtime) starts without Luigi and the task modules;
    the ``luigi`` command still finds every task of ``--module pipeline`` by name."""
    import subprocess
    import sys

    code = f"import sys, {module}; print(sorted(m for m in sys.modules if m == 'luigi' or m == 'pipeline.tasks'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    code = "import luigi, luigi.task_register as r, pipeline; print(r.Register.get_task_cls('TuneWorkload').__module__)"
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        == "pipeline.tasks"
    )


STEPS = ("gather", "configs", "bench", "merge", "validate", "ship", "run")  # docs/design.md's stage table, in order


def stage_module(path: Path) -> str:
    return "pipeline." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts)


def test_the_stages_import_each_other_without_a_circle():
    """A stage module may use another, never one that (through others) uses it back."""
    stages = {stage_module(p): p for p in (PACKAGE / "stages").rglob("*.py") if p.stem not in ("__init__", "__main__")}
    assert len(stages) > 20 and all(name.split(".")[2] in STEPS for name in stages)
    graph = {name: {m for m in imported(path) if m in stages} - {name} for name, path in stages.items()}
    done: set[str] = set()

    def visit(name: str, trail: tuple[str, ...]) -> None:
        assert name not in trail, f"import circle: {' -> '.join((*trail[trail.index(name) :], name))}"
        if name in done:
            return
        for other in sorted(graph[name]):
            visit(other, (*trail, name))
        done.add(name)

    for name in sorted(graph):
        visit(name, ())


def test_the_stage_folders_tell_the_readmes_story():
    """``pipeline/stages/`` holds one folder per step the user sees (plus ``run/``, what every stage shares),
    and the module table of docs/design.md names each folder and every module in it."""
    folders = sorted(p.name for p in (PACKAGE / "stages").iterdir() if p.is_dir() and p.name != "__pycache__")
    assert folders == sorted(STEPS)
    assert sorted(p.name for p in (PACKAGE / "stages").glob("*.py")) == ["__init__.py", "__main__.py"]
    design = (PACKAGE.parent / "docs" / "design.md").read_text()
    row = next(line for line in design.splitlines() if line.startswith("| `pipeline/stages/`"))
    for step in STEPS:
        assert f"`{step}/`" in row, f"docs/design.md's row for pipeline/stages/ does not name {step}/"
        for module in sorted((PACKAGE / "stages" / step).glob("*.py")):
            if module.stem != "__init__":
                assert f"`{module.name}`" in row, f"docs/design.md does not name stages/{step}/{module.name}"


def test_test_modules_share_through_helpers_not_each_other():
    tests = Path(__file__).parent
    for path in sorted(tests.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level and node.module:
                assert not node.module.startswith(("test_", "conftest")), (
                    f"{path.name} imports from {node.module}: share it through tests/helpers.py"
                )


def test_the_backend_registry_names_every_backend_through_imports_the_layout_sees():
    """Adding a backend is one module and one entry: every tuner class (on ``BackendBase``) and config tool is
    reached from ``stages/bench/registry.py`` by an import this test sees, and every entry's factory builds one."""
    from pipeline.stages.bench import registry

    seen = imported(PACKAGE / "stages" / "bench" / "registry.py")
    tuners = {
        f"pipeline.backends.{path.stem}"
        for path in (PACKAGE / "backends").glob("*.py")
        if any(
            isinstance(node, ast.ClassDef) and any(getattr(b, "id", "") == "BackendBase" for b in node.bases)
            for node in ast.walk(ast.parse(path.read_text()))
        )
    }
    assert tuners and tuners <= seen, f"backends the registry does not reach: {sorted(tuners - seen)}"
    assert {"pipeline.stages.bench.find_exact", "pipeline.stages.bench.tensile"} <= seen
    assert {e.kind for e in registry.ENTRIES} == {"tuner", "config tool"}
    for entry in registry.ENTRIES:
        assert registry.load_factory(entry.factory_path) is entry.factory, entry.name


def test_the_code_cites_the_projects_own_docs():
    """A maintainer has the repository alone: what the code relies on is in docs/, and every doc cited exists."""
    import re

    root = PACKAGE.parent
    texts = {
        p: p.read_text(errors="replace")
        for d in ("pipeline", "bench", "tests", "docs", "templates")
        for p in (root / d).rglob("*")
        if p.is_file() and p.suffix in (".py", ".md", ".j2", "")
    }
    texts[root / "README.md"] = (root / "README.md").read_text()
    spec = "shared/" + "spec"  # spelled apart so this test does not cite it
    assert not [str(p) for p, t in texts.items() if spec in t]
    cited = {m for t in texts.values() for m in re.findall(r"docs/([A-Za-z0-9_-]+\.md)", t)}
    assert cited and all((root / "docs" / name).exists() for name in cited), cited


def test_the_runtime_an_image_ships_imports_nothing_of_the_tuner():
    """Every module of ``pipeline/runtime/`` that imports here (those needing torch, nvmath-python or Triton are
    left out where these are missing), imported in a fresh interpreter, loads no ``backends/`` or ``stages/``
    module: the tuner stays out of the serving image's process."""
    import subprocess
    import sys

    modules = sorted(
        "pipeline.runtime" + ("" if p.stem == "__init__" else f".{p.stem}")
        for p in (PACKAGE / "runtime").glob("*.py")
        if p.stem != "__main__"
    )
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ImportError as err:\n"
        "        if err.name and err.name.split('.')[0] in ('torch', 'nvmath', 'triton'):\n"
        "            continue\n"
        "        raise\n"
        "print(sorted(m for m in sys.modules if m.startswith(('pipeline.backends', 'pipeline.stages'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PACKAGE.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout


def test_no_module_imports_itself_through_others():
    """No import circle in the package, lazy imports inside functions included: a circle is a pair of modules a
    maintainer cannot read or change one at a time (``graphlib`` finds one in the import graph)."""
    import graphlib

    modules = {
        "pipeline." + ".".join(p.relative_to(PACKAGE).with_suffix("").parts).removesuffix(".__init__"): p
        for p in PACKAGE.rglob("*.py")
    }
    graph = {}
    for name, path in modules.items():
        found = set()
        for target in imported(path):  # ``from .x import y``: the module x.y where it is one, else x
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):  # a package's own __init__
                found.add(target)
        graph[name] = found
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as err:
        pytest.fail(f"an import circle: {' -> '.join(err.args[1])}")


BENCH = PACKAGE.parent / "bench"


def test_the_benchmarks_import_only_the_public_names():
    """``bench/`` reaches the package through ``pipeline.api`` and the shipped ``pipeline.runtime`` alone, imports
    only names ``pipeline.api`` lists, and runs on the installed package (no ``sys.path`` patching)."""
    import pipeline.api

    for path in sorted(BENCH.glob("*.py")):
        text = path.read_text()
        assert "sys.path.insert" not in text and "sys.path.append" not in text, path.name
        for node in ast.walk(ast.parse(text)):
            modules = []
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                modules = [node.module]
                if node.module == "pipeline.api":
                    unknown = {a.name for a in node.names} - set(pipeline.api.__all__)
                    assert not unknown, f"{path.name} imports {sorted(unknown)}, which pipeline.api does not list"
            elif isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            for module in modules:
                if module == "pipeline" or module.startswith("pipeline."):
                    assert module == "pipeline.api" or module.split(".")[:2] == ["pipeline", "runtime"], (
                        f"{path.name} imports {module}: add the name to pipeline/api.py"
                    )
        for code in ast.walk(ast.parse(text)):  # the code a benchmark hands to a child interpreter
            if isinstance(code, ast.Constant) and isinstance(code.value, str) and "from pipeline." in code.value:
                assert "from pipeline.api import" in code.value, path.name


def _expanded(name: str) -> list[str]:
    """A cited file name with one ``{a,b}`` in it, as the shell expands it."""
    head, brace, rest = name.partition("{")
    if not brace:
        return [name]
    choices, _, tail = rest.partition("}")
    return [head + choice + tail for choice in choices.split(",")]


def test_every_benchmark_record_is_one_the_docs_cite_and_every_cited_record_is_there():
    """``bench/results/`` keeps the records the README, bench/README.md and docs/ cite for a current figure, and
    no other (a finished record leaves the tree; a doc cites it as ``<commit>:bench/results/...``); each record
    they cite without a commit is there."""
    import re

    docs = [PACKAGE.parent / "README.md", BENCH / "README.md", *sorted((PACKAGE.parent / "docs").glob("*.md"))]
    text = "\n".join(path.read_text() for path in docs)
    cited = set()
    for match in re.finditer(r"`([\w.{},\-]+\.json(?:\.gz)?)`|(?<![0-9a-f]:)bench/results/([\w.{},\-]+)", text):
        name = (match.group(1) or match.group(2)).rstrip(".")
        cited.update(_expanded(name))
    records = {path.name for path in (BENCH / "results").iterdir()}
    assert records <= cited, f"records no doc cites: {sorted(records - cited)}"
    named_in_full = {
        n for m in re.finditer(r"(?<![0-9a-f]:)bench/results/([\w.{},<>\-]+)", text) for n in _expanded(m.group(1))
    }
    missing = {n.rstrip(".") for n in named_in_full if "<" not in n} - records
    assert not missing, f"cited records that are not in bench/results/: {sorted(missing)}"


def test_every_public_name_is_defined_where_the_api_says():
    """Each entry of ``pipeline.api`` names a module and a top-level name it defines (read from the source, so
    the test needs neither torch nor nvmath); nothing private is public, and the module loads neither."""
    import subprocess
    import sys

    import pipeline.api

    for name, where in pipeline.api._WHERE.items():
        module, _, attribute = where.partition(":")
        assert not name.startswith("_") and not attribute.startswith("_"), name
        source = PACKAGE.parent.joinpath(*module.split(".")).with_suffix(".py")
        defined = set()
        for node in ast.parse(source.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    defined |= {t.id for t in ast.walk(target) if isinstance(t, ast.Name)}
            elif isinstance(node, (ast.Import, ast.ImportFrom)):  # a name the module takes on: nvmath's ``lt``
                defined |= {(a.asname or a.name).split(".")[0] for a in node.names}
        assert attribute in defined, f"pipeline.api.{name}: {module} defines no {attribute}"
    with pytest.raises(AttributeError, match=r"docs/design\.md"):
        _ = pipeline.api.helper_nobody_exported
    code = "import sys, pipeline.api; print(sorted(m for m in ('torch', 'nvmath', 'luigi') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PACKAGE.parent)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_no_module_of_the_package_is_over_500_lines():
    """A module a maintainer reads in one sitting (issue 64): past 500 lines it holds more than one concern."""
    sizes = {str(p.relative_to(PACKAGE)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    long = {name: lines for name, lines in sizes.items() if lines > 500}
    assert not long, f"split these by concern: {long}"
