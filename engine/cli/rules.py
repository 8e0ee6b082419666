"""recover rules check|test|eval|diff: validate, test, evaluate and compare rulebooks."""

from __future__ import annotations
import json
from typing import List, Optional
import typer
from engine.cli.common import (
    rules_app,
    RulesOpt,
    NoDefaultsOpt,
    DbOpt,
    JsonOpt,
    load_rulebook,
    _settings,
    _err,
    _rule_args,
    _load_or_exit,
    _since,
    _write_or_exit,
)


# -- rules ---------------------------------------------------------------------------------
@rules_app.command("check")
def rules_check(
    paths: List[str] = typer.Argument(None, help="Site rulebook files or folders."),
    no_defaults: bool = NoDefaultsOpt,
    json_out: bool = JsonOpt,
    strict: bool = typer.Option(False, "--strict", help="Warnings fail the check too (exit 1): for CI."),
) -> None:
    """Validate the layered rulebook; print every problem as file:line:col: CODE message."""
    paths, defaults, overlays = _rule_args(paths, no_defaults)
    result = load_rulebook(paths, defaults=defaults, overlays=overlays, tests=True)
    failed = not result.ok or (strict and len(result.diagnostics) > len(result.errors))
    if json_out:
        for d in result.diagnostics:
            typer.echo(
                json.dumps(
                    {
                        "file": d.mark.file,
                        "line": d.mark.line,
                        "col": d.mark.col,
                        "code": d.code,
                        "severity": d.severity,
                        "message": d.message,
                        "hint": d.hint,
                    }
                )
            )
    else:
        for d in result.diagnostics:
            typer.echo(str(d))
        warnings = len(result.diagnostics) - len(result.errors)
        if not failed:
            c = result.compiled
            typer.echo(
                f"ok: {len(result.files)} file(s), {len(c.fault_classes)} fault classes, {len(c.matchers)} matchers, "
                f"{len(c.rules)} rules, {len(c.actions)} actions, {len(c.book.tests)} tests; {warnings} warning(s)"
            )
        else:
            typer.echo(
                f"{len(result.errors)} error(s), {warnings} warning(s)"
                + (" (--strict: warnings fail)" if strict and warnings else "")
            )
    raise typer.Exit(1 if failed else 0)


@rules_app.command("test")
def rules_test(
    paths: List[str] = typer.Argument(None, help="Site rulebook files or folders."),
    no_defaults: bool = NoDefaultsOpt,
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Print every test, not only failures."),
    name: Optional[List[str]] = typer.Option(
        None,
        "--name",
        "-k",
        help="Run only the tests whose name contains this text or matches this "
        "regex (case-insensitive; repeatable: any of them).",
    ),
    site_only: bool = typer.Option(
        False, "--site-only", help="Run only the tests written in the given files, not the shipped ones."
    ),
    junit: Optional[str] = typer.Option(
        None, "--junit", help="Also write the results as JUnit XML to this file (for CI)."
    ),
    json_out: bool = JsonOpt,
) -> None:
    """Run the embedded tests of the default and given rulebooks. Exit 1 when a test fails or none is selected."""
    from engine.rulebook import default_rule_files
    from engine.rulebook import _display as display_name
    from engine.ops.ruletest import junit_xml, outcome_json, run_tests, select_tests, unexercised_matchers

    compiled = _load_or_exit(paths or [], no_defaults, tests=True)
    book = compiled.book
    only = None
    if site_only:
        shipped = {display_name(p) for p in default_rule_files()}
        only = {f for f in book.files if f not in shipped}
    tests = select_tests(compiled, name or (), only)
    disabled = dict(book.disabled_tests)
    if not tests:
        what = f" matching {', '.join(repr(n) for n in name)}" if name else ""
        where = " in the site's files" if site_only else ""
        _err(f"no test selected{what}{where} (of {len(book.tests)}): nothing was run")
        raise typer.Exit(1)
    seen: set[str] = set()
    outcomes = run_tests(compiled, tests=tests, seen=seen)
    failed = sum(1 for o in outcomes if not o.passed)
    # which matchers no test line hit: said of a whole run only (all tests, or all the site's tests
    # and then only of the site's matchers); a -k selection says nothing about the others
    idle = None if name else unexercised_matchers(compiled, seen, only)
    for o in outcomes:
        if json_out:
            typer.echo(json.dumps(outcome_json(o)))
            continue
        if o.passed:
            if verbose:
                typer.echo(f"PASS {o.test.name}  ({o.test.mark})")
            continue
        typer.echo(f"FAIL {o.test.name}  ({o.test.mark})")
        for p in o.problems:
            typer.echo(f"     {p}")
    if verbose and not json_out:
        for n, m in disabled.items():
            typer.echo(f"DISABLED {n}  (at {m})")
    if not json_out:
        # a line that gives a fact without a time of its own is dated by the line before it: say
        # so for the site's tests (the shipped ones do it on purpose: tracebacks, NCCL lines)
        shipped_files = {display_name(p) for p in default_rule_files()}
        for o in outcomes:
            if o.undated and (verbose or o.test.mark.file not in shipped_files):
                typer.echo(
                    f"warning: {o.test.name} ({o.test.mark}): no time of their own, dated by the line "
                    f"before them: {', '.join(o.undated)}"
                )
    summary = f"{len(outcomes) - failed} passed, {failed} failed" + (f", {len(disabled)} disabled" if disabled else "")
    if json_out:
        typer.echo(
            json.dumps(
                {
                    "passed": len(outcomes) - failed,
                    "failed": failed,
                    "disabled": sorted(disabled),
                    "selected": len(outcomes),
                    "total": len(book.tests),
                }
                | ({} if idle is None else {"matchers_unexercised": idle})
            )
        )
    else:
        typer.echo(summary)
        if idle:
            typer.echo(f"warning: matchers no test exercises: {', '.join(idle)}")
    if junit:
        _write_or_exit(junit, junit_xml(outcomes, disabled), "cannot write ")
    raise typer.Exit(1 if failed else 0)


@rules_app.command("eval")
def rules_eval(
    corpus: List[str] = typer.Argument(..., help="Corpus files (JSON lines) or folders of them."),
    paths: Optional[List[str]] = RulesOpt,
    no_defaults: bool = NoDefaultsOpt,
    json_out: bool = JsonOpt,
    minimum: Optional[float] = typer.Option(
        None, "--min", help="Exit 1 when the accuracy over every case (0-1 or a percentage) is below this."
    ),
    min_holdout: Optional[float] = typer.Option(
        None, "--min-holdout", help="Exit 1 when the frozen holdout's accuracy is below this."
    ),
    manifest_path: Optional[str] = typer.Option(
        None, "--manifest", help="The split's manifest (default: holdout.manifest.json beside the corpus)."
    ),
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help="Print every case, not only misses, and right/total per source."
    ),
) -> None:
    """Replay each case of a real-log corpus alone: per-class precision and recall, confusion, every miss,
    the figures of the train side and the frozen holdout, and the errors that cost a site a node."""
    from engine.ops.corpus_eval import HEALTHY, evaluate, load_cases, node_scoped_classes
    from engine.ops.corpus_split import check_split, find_manifest, load_manifest, side_report, split_cases

    compiled = _load_or_exit(paths or [], no_defaults)
    cases, problems = load_cases(corpus, known_labels=compiled.policy.decisions.keys())
    mpath = manifest_path or find_manifest(corpus)
    manifest = None
    if mpath is not None:
        manifest, why = load_manifest(mpath)
        if why:
            _err(why)
            raise typer.Exit(2)
    if min_holdout is not None and manifest is None:
        _err("--min-holdout needs the split's manifest (--manifest FILE)")
        raise typer.Exit(2)
    if manifest is not None:
        problems += check_split(cases, manifest)
    for p in problems:
        _err(p)
    if not cases:
        _err("no case to evaluate")
        raise typer.Exit(2)
    report = evaluate(compiled, cases)
    split = split_cases(cases, manifest) if manifest is not None else None
    sides = side_report(report.results, split, node_scoped_classes(compiled))
    split_json = {"manifest": mpath, "frozen": manifest.frozen if manifest else None, "sides": sides}

    def floor(x: float | None) -> float | None:
        return None if x is None else (x / 100.0 if x > 1 else x)

    side_of = split.side if split else {}
    if json_out:
        out = report.to_json() | {"split": split_json, "problems": problems}
        for m in out["misses"]:
            m["side"] = side_of.get(m["id"], "all")
        typer.echo(json.dumps(out))
    else:
        if verbose:
            for r in report.results:
                typer.echo(f"{'ok  ' if r.right else 'MISS'} {r.case.id}: {r.case.label} -> {r.got}")
        typer.echo(f"{'class':<26} {'cases':>5} {'recall':>7} {'answered':>8} {'precision':>9}")
        for label, st in report.per_class().items():
            rec = "-" if st["recall"] is None else f"{st['recall']:.1%}"
            pre = "-" if st["precision"] is None else f"{st['precision']:.1%}"
            typer.echo(f"{label:<26} {st['cases']:>5} {rec:>7} {st['answered']:>8} {pre:>9}")
        typer.echo("confusion (label: answers):")
        for label, answers in sorted(report.confusion().items()):
            typer.echo(f"  {label}: " + ", ".join(f"{k}={v}" for k, v in answers.most_common()))
        if report.misses:
            typer.echo("misses:")
            for r in report.misses:
                why = f" ({r.error})" if r.error else (f" via {', '.join(r.rules)}" if r.rules else "")
                side = f" {{{side_of[r.case.id]}}}" if split else ""
                typer.echo(f"  {r.case.id}: {r.case.label} -> {r.got}{why}  [{r.case.where}]{side}")
        _echo_sides(sides, manifest, mpath, verbose)
        typer.echo(
            f"accuracy: {report.accuracy:.1%} ({report.right}/{report.total}); healthy cases with an incident: "
            f"{len(report.healthy_with_incident)} of {sum(r.case.label == HEALTHY for r in report.results)}"
        )
        share = report.weak_right / report.right if report.right else 0.0
        typer.echo(
            f"weak evidence (a class's keyword, nothing specific): {report.weak_right} of {report.right} "
            f"right answers ({share:.1%}); "
            + ", ".join(f"{_SIDE_NAMES[s]} {st['weak_right']}/{st['right']}" for s, st in sides.items())
        )
    code = 0
    least, least_holdout = floor(minimum), floor(min_holdout)
    if least is not None and report.accuracy < least:
        _err(f"accuracy {report.accuracy:.1%} is below --min {least:.1%}")
        code = 1
    frozen = sides.get("holdout")
    if least_holdout is not None and frozen is not None and (frozen["accuracy"] or 0.0) < least_holdout:
        _err(f"frozen holdout accuracy {(frozen['accuracy'] or 0.0):.1%} is below --min-holdout {least_holdout:.1%}")
        code = 1
    raise typer.Exit(code)


#: how each side is named in the text output
_SIDE_NAMES = {"all": "all cases", "train": "train", "holdout": "frozen holdout", "added": "added after the freeze"}


def _echo_sides(sides: dict, manifest, mpath: str | None, verbose: bool) -> None:
    """The split's figures and the cost errors, per side (one side, `all`, without a manifest)."""
    if manifest is not None:
        typer.echo(f"split by source (holdout frozen {manifest.frozen or '?'}, {mpath}):")
    else:
        typer.echo("split by source: no holdout manifest (holdout.manifest.json beside the corpus, or --manifest)")
    for side, st in sides.items():
        # from the counts, not the JSON's 4-digit accuracy: rounding twice would print 89.5% for 373/417
        fig = "-" if not st["cases"] else f"{st['right'] / st['cases']:.1%}"
        typer.echo(
            f"  {_SIDE_NAMES[side] + ':':<24} {fig:>6} ({st['right']}/{st['cases']}) from {st['sources']} "
            f"source(s); healthy cases that opened any incident: {len(st['healthy_opened'])} of {st['healthy']}"
        )
        if verbose:
            for key, ps in st["per_source"].items():
                typer.echo(f"      {key}: {ps['right']}/{ps['total']}")
    typer.echo("cost errors:")
    for name, what in (
        ("wrongful_isolations", "wrongful isolations (a node taken out for a cause not the node's)"),
        ("node_faults_not_isolated", "node faults not isolated"),
    ):
        typer.echo(f"  {what}: " + ", ".join(f"{_SIDE_NAMES[s]} {len(st[name])}" for s, st in sides.items()))
        if name == "node_faults_not_isolated":
            typer.echo(
                "    of them, the right class with no node to isolate: "
                + ", ".join(f"{_SIDE_NAMES[s]} {len(st['not_isolated_right_class'])}" for s, st in sides.items())
            )
        for side, st in sides.items():
            if st[name]:
                typer.echo(f"    {_SIDE_NAMES[side]}: {', '.join(st[name])}")


@rules_app.command("diff")
def rules_diff(
    candidate: Optional[List[str]] = typer.Option(
        None,
        "--rules",
        "-r",
        help="The candidate: site rulebook files or folders, layered over the defaults (repeatable).",
    ),
    base: Optional[List[str]] = typer.Option(
        None, "--base", help="The rulebook in force (default: recover.toml's rules)."
    ),
    no_defaults: bool = NoDefaultsOpt,
    db: Optional[str] = DbOpt,
    since: Optional[str] = typer.Option(
        None,
        "--since",
        help="Only incidents opened since: a date (2026-11-29, "
        "2026-11-29T17:00), seconds since the epoch, or a duration ago (24h, 90m).",
    ),
    json_out: bool = JsonOpt,
) -> None:
    """Re-evaluate the stored evidence of past incidents with a candidate rulebook and list every incident
    whose fault class, nodes or decision would change. Exit 0 when nothing changes, 1 otherwise."""
    from engine.cli.common import _open_store
    from engine.ops.rulediff import diff_store

    if not candidate:
        _err("give the candidate rulebook with --rules FILE_OR_FOLDER")
        raise typer.Exit(2)
    t = _since(since)
    store = _open_store(db, readonly=True)
    old = _load_or_exit(base or list(_settings().rules), no_defaults)
    new = _load_or_exit(candidate, no_defaults)
    changes = diff_store(store, old, new, since=t)
    total = len(store.incidents(status="closed", since=t))
    for c in changes:
        typer.echo(json.dumps(c.to_dict()) if json_out else c.line())
    if json_out:
        typer.echo(json.dumps({"incidents": total, "changed": len(changes)}))
    else:
        typer.echo(f"{len(changes)} of {total} incident(s) would change")
    raise typer.Exit(1 if changes else 0)
