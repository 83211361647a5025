"""The bisection that judges every cell of the matrix: driven here by made-up verdict sequences, with runs finishing
in any order while two are in flight, as the matrix check's workers finish them."""

from __future__ import annotations

import math
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from patchwheel.maint.upstream.bisection import Plan
from patchwheel.matrix.table import Cell, LineMatrix, Release, Row, changes, probes

VERDICTS = ("fails", "passes", "error")


def inferred(plan: Plan, versions: list[str], rows: list[str]) -> dict[str, dict[str, dict]]:
    """The cells of the plan's runs as the matrix check writes them (the matrix's reinfer fills the rest): patch
    -> release -> cell. One text result for all releases: the only probes are the plan's own."""
    line = LineMatrix("demo/1.0.0", [], [Release(v, "", "") for v in versions], [])
    for row in rows:
        cells = {v: Cell("clean") for v in versions}
        for v, verdicts in plan.verdicts.items():
            cells[v].behaviour = verdicts[row]
        line.patches.append(Row(row, "", "proof-passes-upstream", None, None, cells))
    line.reinfer()
    return {p.name: {v: c.to_json() for v, c in p.cells.items()} for p in line.patches}


def drive(plan: Plan, truth: dict[str, dict[str, str]], workers: int, seed: int) -> list[str]:
    """Run the plan as the matrix check does: keep ``workers`` runs in flight, finish one at random, ask again.
    ``truth``: release -> patch -> verdict. The releases run, in the order they were started."""
    rng, running, started = random.Random(seed), list[str](), list[str]()
    while True:
        for v in plan.next(running):
            if len(running) >= workers:
                break
            assert v not in running and v not in plan.verdicts, f"{v} asked for twice"
            running.append(v)
            started.append(v)
        if not running:
            return started
        v = running.pop(rng.randrange(len(running)))
        plan.record(v, truth[v])


@st.composite
def matrices(draw, monotone: bool = False):
    n = draw(st.integers(1, 60))
    versions = [f"1.{i}.0" for i in range(n)]
    rows = [f"p{k}" for k in range(draw(st.integers(1, 4)))]
    truth: dict[str, dict[str, str]] = {v: {} for v in versions}
    for row in rows:
        if monotone:  # still needed, then fixed from some release on (or never, or from the first)
            cut = draw(st.integers(0, n))
            for i, v in enumerate(versions):
                truth[v][row] = "fails" if i < cut else "passes"
        else:
            current = draw(st.sampled_from(VERDICTS))
            for v in versions:
                if draw(st.integers(0, 9)) == 0:
                    current = draw(st.sampled_from(VERDICTS))
                truth[v][row] = current
    forced = draw(st.lists(st.sampled_from(versions), max_size=4))
    return versions, rows, truth, forced


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])  # no wall-clock limits
@given(matrices(), st.integers(1, 3), st.integers(0, 2**16))
def test_every_cell_is_run_or_inferred_and_every_change_is_run_on_both_sides(m, workers, seed):
    versions, rows, truth, forced = m
    plan = Plan(versions, rows, forced)
    started = drive(plan, truth, workers, seed)
    assert len(started) == len(set(started))
    assert {versions[0], versions[-1], *forced} <= set(plan.verdicts)
    run = [v for v in versions if v in plan.verdicts]
    for a, b in zip(run, run[1:], strict=False):
        if any(truth[a][r] != truth[b][r] for r in rows):  # a change of verdict between two runs: confirmed
            assert versions.index(b) == versions.index(a) + 1, f"{a} and {b} disagree with releases between"
    cells = inferred(plan, versions, rows)
    for row in rows:
        for v in versions:
            cell = cells[row][v]
            if v in plan.verdicts:
                assert "inferred_from" not in cell and cell["behaviour"] == truth[v][row]
            else:
                left, right = cell["inferred_from"]  # every cell not run is inferred, from both sides, which agree
                assert truth[left][row] == truth[right][row] == cell["behaviour"]
                assert versions.index(left) < versions.index(v) < versions.index(right)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])  # no wall-clock limits
@given(matrices(monotone=True), st.integers(1, 3), st.integers(0, 2**16))
def test_a_fix_that_stays_is_found_exactly_within_a_log_bound(m, workers, seed):
    """The usual shape (the bug is there until upstream fixes it): every inferred cell is right, and the runs are
    the probes plus at most one bisection (log2 of the span) per patch."""
    versions, rows, truth, forced = m
    plan = Plan(versions, rows, forced)
    started = drive(plan, truth, workers, seed)
    for row, cells in inferred(plan, versions, rows).items():
        for v, cell in cells.items():
            assert cell["behaviour"] == truth[v][row]
    bound = len(plan.probes) + len(rows) * math.ceil(math.log2(max(2, len(versions))))
    assert len(started) <= bound


def test_nothing_to_run_for_a_line_of_features_only():
    assert Plan(["1.0", "1.1"], [], []).next() == []


def test_probes_are_the_release_after_each_change():
    versions = ["1.0", "1.1", "1.2", "1.3"]
    text = {"1.0": "O", "1.1": "O", "1.2": "X", "1.3": "X"}
    assert changes(versions, text.__getitem__) == [("1.1", "1.2")]
    assert probes(versions, changes(versions, text.__getitem__)) == {"1.2"}


def test_an_interval_waits_for_a_release_in_flight_inside_it():
    versions = [f"1.{i}" for i in range(9)]
    plan = Plan(versions, ["p"], [])
    plan.record("1.0", {"p": "fails"})
    plan.record("1.8", {"p": "passes"})
    assert plan.next() == ["1.4"]
    assert plan.next(busy=["1.4"]) == []  # the only open interval holds the running release
    plan.record("1.4", {"p": "fails"})
    assert plan.next() == ["1.6"]
