"""Build the report of a run from what its stages saved: ``report.md``, ``report.html``, SVG charts and
``summary.json`` under ``RUN_DIR/report``. ``gemm-tune report RUN_DIR`` rebuilds them."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import jinja2

from ...atomic import atomic_write_json, atomic_write_text
from ...backends.base import DEFAULT, ProblemResult
from ...formats.tunableop import parse_key, read_file
from ...problem import distinct_labels
from ...stats import geomean
from ..bench import bucket_score, own_kernels
from ..configs.render import TEMPLATES
from ..gather import compiled
from ..gather.shapes import grid_notes
from ..run import templates, timings
from ..run.fingerprint import stamped
from ..run.layout import RunLayout
from . import agreement, held_out, history, plots
from .drift import compare, previous_run
from .drift import lines as drift_lines
from .e2e_report import summary_line as e2e_summary
from .gate import GateSettings, gate, weights
from .measured import MeasuredRow

SUMMARY = "summary.json"
TOP = 10  # GEMMs listed by time share

NIGHTS = 14  # nights the report's trend shows


def _load(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


def _trend(nights: list[dict]) -> str:
    """``trend.svg``: the weighted and end-to-end speedup of each night, library upgrades marked."""
    labels = [f"{str(n['date'])[:10]} {n['run']}" for n in nights]
    weighted = [float(n["weighted_speedup"]) for n in nights]
    e2e = [None if n["e2e_speedup"] is None else float(n["e2e_speedup"]) for n in nights]
    values = [v for v in [*weighted, *e2e] if v is not None]
    upgrades = [(i, "upgrade") for i, n in enumerate(nights) if n["upgrade"]]
    return plots.dots(
        labels,
        {"weighted GEMM speedup": weighted, "end to end": e2e},
        "Speedup night by night (dashed: a library upgrade)",
        "speedup over the untuned default",
        (min(0.95, min(values) - 0.02), max(1.05, max(values) + 0.02)),
        reference=1.0,
        markers=upgrades,
    )


def _plots(rows: list[dict], out: Path) -> None:
    """``speedup.svg``, ``roofline.svg`` and ``time_share.svg`` of the report's rows under ``out``."""
    ordered = sorted(rows, key=lambda r: r["speedup"])
    speedups = [r["speedup"] for r in ordered]
    chart = plots.bars(
        [r["label"] for r in ordered],
        speedups,
        [plots.GREEN if r["kept"] else plots.GRAY for r in ordered],
        "Tuned against baseline, per GEMM (sorted)",
        "speedup over the baseline (green: kept in the bundle)",
        (min(0.95, min(speedups) - 0.02), max(1.05, max(speedups) + 0.02)),
        reference=1.0,
    )
    atomic_write_text(out / "speedup.svg", chart)
    by_flops = sorted(rows, key=lambda r: r["flops"])
    chart = plots.dots(
        [r["label"] for r in by_flops],
        {"baseline": [r["eff_before"] for r in by_flops], "bundle": [r["eff_after"] for r in by_flops]},
        "Roofline efficiency before and after (sorted by flops)",
        "roofline efficiency",
        (0.0, 1.05),
    )
    atomic_write_text(out / "roofline.svg", chart)
    shares: dict[str, float] = defaultdict(float)
    for r in rows:
        shares[r["layer"]] += r["weight"]
    items = sorted(shares.items(), key=lambda kv: kv[1])
    chart = plots.bars(
        [k for k, _ in items],
        [100 * v for _, v in items],
        [plots.BLUE] * len(items),
        "Share of GEMM time by op and layer (weight shape)",
        f"% of the workload's baseline GEMM time ({rows[0]['basis']})",
        (0.0, max(100 * v for _, v in items) * 1.05 or 1.0),
    )
    atomic_write_text(out / "time_share.svg", chart)


def build(run_dir: Path) -> dict:
    """Write the report of ``run_dir`` and return its summary (the key figures)."""
    layout = RunLayout.of(run_dir)
    run_dir = Path(run_dir)
    measured = _load(layout.measurements)
    gate = _load(layout.gate)
    if measured is None or gate is None:
        raise FileNotFoundError(f"{run_dir}: no validate/measurements.json and gate.json; run Validate first")
    e2e = _load(layout.e2e) or {}
    held = _load(layout.validate / held_out.RECORD)
    bench_summary = _load(layout.bench_summary) or {}
    notes = backend_notes(bench_summary)
    moved = retargeted(layout)
    if moved:
        notes.append(
            "the bundle ships under the target's validators (--validators-from), not those its rows were tuned "
            "under: " + "; ".join(moved) + ". A solution index names a kernel of one build: tune on the "
            "target's build for rows it will read"
        )
    triton_lines = own_kernels.lines(bench_summary.get("triton"), gate["kept"])
    notes += triton_lines
    if measured.get("tunableop_ab"):
        ab = [MeasuredRow.from_json(r) for r in measured["tunableop_ab"]["rows"]]
        tuned = [r for r in ab if r.solution != DEFAULT]
        notes.append(
            f"TunableOp-level A/B with torch on this machine ({len(tuned)} tuned rows through the merged "
            "results file): weighted speedup "
            f"x{gate_of(ab).weighted_speedup:.3f}, before any gate; see validate/measurements.json"
        )
    reasons = {d["key"]: d["reason"] for d in gate["dropped"]}
    measured_rows = [MeasuredRow.from_json(r) for r in measured["rows"]]
    labels = distinct_labels({row.key: parse_key(*row.key.split(",", 1)) for row in measured_rows})
    shares, untuned_share, basis = weights(measured_rows)
    bench_results = _load(layout.bench_results) or []
    agreed = agreement.agreement(
        measured_rows, agreement.predictions(ProblemResult.from_json(r) for r in bench_results)
    )
    predicted = {r["key"]: r["predicted"] for r in agreed["rows"]}
    validated = {r["key"]: r["validated"] for r in agreed["rows"]}  # the first pair and the confirmation pooled
    rows = []
    for row, share in zip(measured_rows, shares, strict=True):
        kept = row.key in gate["kept"]
        tuned_us = row.tuned.median if kept else row.baseline.median
        rows.append(
            {
                **row.to_json(),
                "speedup": row.speedup,
                "predicted": predicted.get(row.key),
                "validated": validated.get(row.key),
                "noise": row.noise,
                "kept": kept,
                "weight": share,
                "basis": basis,
                "ld_notes": parse_key(*row.key.split(",", 1)).ld_notes(),
                "reason": reasons.get(row.key, ""),
                "label": labels[row.key],
                "layer": f"{row.op} {row.layout} {row.m}x{row.k}",
                "eff_before": row.floor_us / row.baseline.median,
                "eff_after": row.floor_us / tuned_us,
            }
        )
    kept_speedups = [r["speedup"] for r in rows if r["kept"]]
    top = sorted(rows, key=lambda r: -r["weight"])[:TOP]
    e2e_line = e2e_summary(e2e)
    not_sent = compiled.section(run_dir, gate["kept"], [r.key for r in measured_rows], e2e)
    out = layout.report
    out.mkdir(parents=True, exist_ok=True)
    drift = compare(run_dir, previous_run(run_dir))
    passed, verdict = gate["passed"], gate["message"]
    if passed and e2e.get("refused"):
        passed, verdict = False, f"bundle refused end to end: {e2e['refused']} (--allow-e2e-regression ships it)"
    past = history.append(run_dir.parent, *history.entries(run_dir, rows, passed, gate["weighted_speedup"], e2e))
    trend = history.nights(past)
    context = {
        "fingerprint": stamped(layout.validate),
        "drift": drift,
        "drift_lines": drift_lines(drift),
        "run": run_dir.name,
        "passed": passed,
        "verdict": verdict,
        "device": measured["meta"]["device"]["name"],
        "rows": rows,
        "kept": len(kept_speedups),
        "weighted": gate["weighted_speedup"],
        "kept_geomean": geomean(kept_speedups),
        "eff_before": geomean([r["eff_before"] for r in rows]) or 0.0,
        "eff_after": geomean([r["eff_after"] for r in rows]) or 0.0,
        "e2e_line": e2e_line,
        "padded": [r for r in rows if r.get("padded")],
        "top": top,
        "basis": basis,
        "untuned_share": untuned_share,
        "normalised": [r for r in rows if r["ld_notes"]],
        "notes": notes,
        "bundle": str(layout.bundle) if passed else "refused (see verdict)",
        "not_sent_lines": compiled.lines(not_sent),
        "agreement_line": agreement.line(agreed),
        "held_out_lines": [x for x in [bucket_score.line(bench_summary.get("buckets")), *held_out.lines(held)] if x],
        "grid_lines": grid_notes(layout.shapes_summary.read_text()) if layout.shapes_summary.exists() else [],
        "nights": trend[-NIGHTS:] if len(trend) > 1 else [],
        "moved": history.moved_most(past, trend),
    }
    context["stage_seconds"] = timings.seconds(run_dir)
    context["stage_line"] = timings.line(context["stage_seconds"]) if context["stage_seconds"] else ""
    env = templates.environment(
        TEMPLATES,
        autoescape=jinja2.select_autoescape(["html", "html.j2"]),  # report.html.j2: a name "html" alone misses
        trim_blocks=True,
        lstrip_blocks=True,
    )
    _plots(rows, out)
    if context["nights"]:
        atomic_write_text(out / "trend.svg", _trend(trend[-NIGHTS:]))
    atomic_write_text(out / "report.md", env.get_template("report.md.j2").render(context))
    atomic_write_text(out / "report.html", env.get_template("report.html.j2").render(context))
    summary = {
        "run": run_dir.name,
        "fingerprint": context["fingerprint"],
        "passed": passed,
        "verdict": verdict,
        "drift": drift,
        "device": context["device"],
        "gemms": len(rows),
        "kept": len(kept_speedups),
        "weighted_gemm_speedup": gate["weighted_speedup"],
        "weight_basis": basis,
        "untuned_time_share": untuned_share,
        "notes": notes,
        "top_gemms": [
            {
                "key": r["key"],
                "label": r["label"],
                "calls": r["calls"],
                "time_share": r["weight"],
                "speedup": r["speedup"],
                "kept": r["kept"],
            }
            for r in top
        ],
        "ld_normalised": {r["key"]: r["ld_notes"] for r in context["normalised"]},
        "kept_geomean_speedup": context["kept_geomean"],
        "eff_geomean_before": context["eff_before"],
        "eff_geomean_after": context["eff_after"],
        "e2e": e2e_line,
        "e2e_wall_speedup": e2e.get("wall_speedup"),
        "e2e_tokens_speedup": e2e.get("tokens_speedup"),
        "e2e_noise": e2e.get("noise"),
        "e2e_via": e2e.get("via"),
        "e2e_runtime_startup_s": e2e.get("runtime_startup_s"),
        "e2e_steady_wall_speedup": e2e.get("steady_wall_speedup"),
        "e2e_runtime_host_us_per_call": (e2e.get("host_cost") or {}).get("over_us"),
        "e2e_runtime_calls_per_run": e2e.get("calls_per_run"),
        "coverage": e2e.get("coverage"),  # the tuned share at keys the collection never saw (docs/serving.md)
        "held_out_worst": (held or {}).get("worst"),
        "held_out_split": (held or {}).get("split", {}),
        "retargeted": moved,
        "not_sent": not_sent,
        "triton": triton_lines,
        "bench_agreement": agreed,
        "bundle": context["bundle"],
        "report": str(out / "report.html"),
        "stage_seconds": context["stage_seconds"],
    }
    atomic_write_json(out / SUMMARY, summary)
    return summary


def gate_of(rows: list[MeasuredRow]):
    return gate(rows, GateSettings(margin=0.0, min_speedup=0.0))


def backend_notes(bench_summary: dict) -> list[str]:
    """What the reader must know about how the backend's artefacts were made."""
    notes = []
    for source in bench_summary.get("override_source", []):
        if source.startswith("hipblaslt-bench"):
            notes.append(
                "hipBLASLt override rows (HIPBLASLT_TUNING_OVERRIDE_FILE): written by hipblaslt-bench "
                "itself through HIPBLASLT_TUNING_FILE"
            )
        else:
            notes.append(
                "hipBLASLt override rows (HIPBLASLT_TUNING_OVERRIDE_FILE): this hipblaslt-bench does not "
                "write HIPBLASLT_TUNING_FILE, so they were written here in the legacy layout (Git Version, "
                "then transA..compute_type,solution_index); generate them with the bench of the target "
                "build where it can"
            )
    if bench_summary.get("runtime", {}).get("generation") == "2024":
        notes.append(
            "hipBLASLt before 0.12 (the 2024 tree) has no tuning override file: no hipblaslt_override.txt "
            "ships; torch applies the Gemm_Hipblaslt rows of tunableop_results.csv"
        )
    if bench_summary.get("runtime", {}).get("note"):
        notes.append(bench_summary["runtime"]["note"])
    if bench_summary.get("runtime", {}).get("backend") == "hipblaslt":
        notes.append(
            "the hipblaslt logic files record each winner's solution index and name for the build that was "
            "tuned (indices are not portable across hipBLASLt builds); the rows torch loads are the "
            "Gemm_Hipblaslt_<index> rows of tunableop_results.csv"
        )
    return notes


def not_sent_line(facts: dict) -> list[str]:
    """One line when the workload kept GEMMs from the library (Inductor's kernels) or never ran kept rows."""
    inductor, unused = len(facts.get("inductor_kernels", [])), len(facts.get("never_run", []))
    if not inductor and not unused:
        return []
    return [
        f"not through the library: {plural(inductor, 'GEMM')} compiled to Inductor's own kernels, "
        f"{plural(unused, 'kept row')} never run by the tuned workload (see the report)"
    ]


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def add_stage_times(run_dir: Path) -> dict:
    """The run's summary with every stage's wall time so far (``timings``), saved back; returns it."""
    path = RunLayout.of(run_dir).report_summary
    summary = json.loads(path.read_text())
    summary["stage_seconds"] = timings.seconds(run_dir)
    atomic_write_json(path, summary)
    return summary


def retargeted(layout: RunLayout) -> list[str]:
    """How the validators the bundle ships under (the merged file's: ``--validators-from``'s where given) differ
    from those Bench tuned its rows under, one line per key (none: the same, or no Bench stage)."""
    tuned, merged = layout.bench / "tunableop_results.csv", layout.merged_csv
    if not tuned.exists() or not merged.exists():
        return []
    bench, shipped = read_file(tuned).validators, read_file(merged).validators
    return [  # a key Bench did not record is not a difference it knows of
        f"{key} tuned under {bench[key]!r}, shipped under {shipped[key]!r}"
        for key in sorted(set(bench) & set(shipped))
        if bench[key] != shipped[key]
    ]


def key_lines(summary: dict) -> list[str]:
    """The last lines TuneWorkload prints."""
    kept_geo = summary["kept_geomean_speedup"]
    return [
        f"{summary['verdict']}",
        f"GEMMs: {summary['gemms']} validated on {summary['device']}, {summary['kept']} kept"
        + (f" (geomean x{kept_geo:.3f})" if kept_geo else ""),
        f"weighted GEMM speedup (by {summary.get('weight_basis', 'calls x baseline time')}): "
        f"x{summary['weighted_gemm_speedup']:.3f}; roofline efficiency "
        f"{summary['eff_geomean_before']:.3f} -> {summary['eff_geomean_after']:.3f}",
        *[
            f"top GEMM: {t['label']}, {100 * t['time_share']:.1f}% of GEMM time, {plural(t['calls'], 'call')}, "
            f"x{t['speedup']:.3f} {'kept' if t['kept'] else 'not kept'}"
            for t in summary.get("top_gemms", [])[:3]
        ],
        *([agreement.line(summary["bench_agreement"])] if (summary.get("bench_agreement") or {}).get("rows") else []),
        *(summary.get("triton") or [])[:1],  # the count; the report has the rest
        f"end to end: {summary['e2e']}",
        *(
            [f"validators: {'; '.join(summary['retargeted'])} (the report says what follows)"]
            if summary.get("retargeted")
            else []
        ),
        *not_sent_line(summary.get("not_sent") or {}),
        *([f"stage times: {timings.line(summary['stage_seconds'])}"] if summary.get("stage_seconds") else []),
        *[f"drift: {line}" for line in drift_lines(summary.get("drift") or {})],
        f"bundle: {summary['bundle']}",
        f"report: {summary['report']}",
    ]
