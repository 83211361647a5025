"""Export one patch as an upstream PR: ``patchwheel export <slug>`` -> ``export/<slug>/``.

- ``0001-<slug>.patch``: the patch carried alone onto the newest upstream release (3-way if needed), exported with
  the pinned format-patch flags, and verified: ``git am`` takes it on a fresh repository of that release's files.
- ``reproducer/``: the proof test as a standalone pytest module (with the rank harness it uses and a conftest
  that only registers the markers).
- Before anything is written, the reproducer runs on that newest release both ways, in an environment of its
  own: it must fail with the bug's signature on the pristine release, and pass with the exported patch applied
  to the release's files. Otherwise the export stops and says which way went wrong. (A feature patch has no bug
  to show; its test is not run here.)
- ``PR.md``: title, problem, reproducer, root cause and fix (the commit message), both runs, and the releases
  affected according to patches/STATUS.json.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from packaging.version import Version

from .. import fetch, gitops
from ..config import Artifact, Overlay, ReleaseLine
from ..errors import PatchwheelError
from ..patches import Patch, load_series
from . import proofenv
from .textcheck import carry
from .upstream import companions
from .workrepo import WorkRepo, release_files

#: ``verify(overlay, line, patch, newest, patched) -> (pristine, patched)``: the reproducer's outcome on the newest
#: release as published and with the patch's files (wheel paths -> bytes, None: deleted) installed.
Verify = Callable[[Overlay, ReleaseLine, Patch, Artifact, dict], tuple[proofenv.ProofOutcome, proofenv.ProofOutcome]]


def run_both_ways(
    overlay: Overlay, line: ReleaseLine, patch: Patch, newest: Artifact, patched: dict
) -> tuple[proofenv.ProofOutcome, proofenv.ProofOutcome]:
    """The proof module on the newest release, pristine and then with ``patched`` installed over it, in a cached
    environment used only by exports (so no other check ever sees the patched files)."""
    from .mutants import mutated, reset

    wheels = [(line.package, newest)] + companions(overlay, line)
    name = "export-" + "+".join(f"{pkg}-{proofenv.wheel_version(a.filename)}" for pkg, a in wheels)
    env = proofenv.env_on_base(
        fetch.cache_dir(),
        name,
        {"wheels": [a.sha256 for _, a in wheels]},
        lambda: [str(fetch.fetch(p, a)) for p, a in wheels],
    )
    # An export killed while the patched files were installed left them there: put the release's own bytes back.
    reset(proofenv._site(env), fetch.fetch(line.package, newest), sorted(patched))
    before = proofenv.run_proof(env, overlay.root, patch.test_module)
    with mutated(proofenv._site(env), patched):
        after = proofenv.run_proof(env, overlay.root, patch.test_module)
    return before, after


def find(overlay: Overlay, slug: str):
    """The newest line carrying a patch with this slug (or file name), and the patch."""
    want = re.sub(r"^\d{4}-|\.patch$", "", slug.split("/")[-1])
    for line in reversed([ln for pkg in overlay.packages() for ln in overlay.lines[pkg]]):
        series = load_series(line)
        for i, p in enumerate(series):
            if p.slug == want:
                return line, series[: i + 1]
    known = sorted({p.slug for ln in overlay.all_lines() for p in load_series(ln)})
    raise PatchwheelError(f"no patch {slug!r}", f"known patches: {', '.join(known)}")


def export(
    overlay: Overlay, slug: str, out_root: Path | None = None, log=print, verify: Verify = run_both_ways
) -> Path:
    line, upto = find(overlay, slug)
    patch = upto[-1]
    version, newest, _ = fetch.releases(line.package)[-1]
    new = release_files(line, patch.touched, newest)
    # Base: the line's pristine files with the patches before this one, so the patch applies as in the series.
    with WorkRepo.of_line(line, upto) as work:
        pre = work.commits[upto[-2].name] if len(upto) > 1 else work.base
        work.branch("upstream", pre, new, f"pristine {line.package} {version}")
        result = carry(work.path, patch, work.commits[patch.name])
        if result.status in ("conflict", "already-upstream"):
            raise PatchwheelError(
                f"{patch.name} does not carry onto {line.package} {version} (the newest release): {result.status}"
                f" ({result.detail})",
                f"rebase the line first (`nox -s rebase -- {line.package} {version}`), then export from it",
            )
        mbox = gitops.format_patch(work.path)
    with WorkRepo.create(new, f"{line.package} {version}") as check:
        with tempfile.TemporaryDirectory(prefix="patchwheel-export-") as tmp:
            mbox_file = Path(tmp) / f"0001-{patch.slug}.patch"
            mbox_file.write_bytes(mbox)
            gitops.am(check.path, mbox_file)  # the proof that `git am` takes it on the release's tree
        applied = check.read(patch.touched)
    patched = {w: data for p, data in applied.items() if (w := line.wheel_path(p)) is not None}
    runs = None
    if not patch.is_feature:
        log(f"{patch.name}: running its reproducer on {line.package} {version}, pristine and patched ...")
        before, after = verify(overlay, line, patch, newest, patched)
        where = f"{line.package} {version}"
        if before.verdict != "fails":
            raise PatchwheelError(
                f"the reproducer does not fail on pristine {where} ({before.verdict}: {before.detail})",
                "if the bug is fixed there, drop the patch (see patches/STATUS.md); if the test cannot judge that "
                "release, port the test first",
            )
        if after.verdict != "passes":
            raise PatchwheelError(
                f"the reproducer does not pass on {where} with the exported patch applied "
                f"({after.verdict}: {after.detail})",
                f"the fix does not work there as it is: rebase the line (`nox -s rebase -- {line.package} {version}`) "
                "and fix the patch on the new line",
            )
        runs = (before, after)
    out = (out_root or overlay.root / "export") / patch.slug
    shutil.rmtree(out, ignore_errors=True)
    (out / "reproducer").mkdir(parents=True)
    patch_file = out / f"0001-{patch.slug}.patch"
    patch_file.write_bytes(mbox)
    proof = overlay.root / patch.test_module
    for helper in [proof] + _helpers(proof):
        shutil.copy(helper, out / "reproducer" / helper.name)
    (out / "reproducer" / "conftest.py").write_text(
        '"""Standalone reproducer: only registers the markers the test module uses."""\n\n\n'
        "def pytest_configure(config):\n"
        '    config.addinivalue_line("markers", "proof(package, signatures): the bug this test proves")\n'
        '    config.addinivalue_line("markers", "feature(package): the capability this test checks")\n'
        '    config.addinivalue_line("markers", "may_skip(reason): may skip for this reason")\n'
        '    config.addinivalue_line("markers", "regression: must pass with and without the fix")\n'
    )
    (out / "PR.md").write_text(_description(overlay, line, patch, version, result.status, proof.name, runs))
    ran = "reproducer failed on pristine, passed patched" if runs else "a feature: its test not run here"
    log(
        f"wrote {out}/: {patch_file.name} ({result.status} onto {line.package} {version}, verified with git am; "
        f"{ran}), reproducer/, PR.md"
    )
    return out


def _helpers(module: Path, seen: set[Path] | None = None) -> list[Path]:
    """The sibling modules a test module imports (``from harness import ...``, ``import tiny_llama``), recursively."""
    seen = seen if seen is not None else {module}
    for name in re.findall(r"^(?:from (\w+) import|import (\w+)$)", module.read_text(), re.M):
        sibling = module.parent / f"{name[0] or name[1]}.py"
        if sibling.is_file() and sibling not in seen and sibling.name != "conftest.py":
            seen.add(sibling)
            _helpers(sibling, seen)
    return sorted(seen - {module})


def _description(overlay, line, patch, version, text_status, proof_name, runs=None) -> str:
    body = patch.body
    affected: list[str] = []
    fixed: list[str] = []
    status = overlay.root / "patches" / "STATUS.json"
    if status.is_file():
        for entry in json.loads(status.read_text())["lines"]:
            if entry["line"].split("/")[0] != line.package:
                continue
            for p in entry["patches"]:
                if p["name"].split("-", 1)[1] == patch.name.split("-", 1)[1]:
                    for v, cell in p["cells"].items():
                        (
                            affected
                            if cell.get("behaviour") == "fails"
                            else fixed
                            if cell.get("behaviour") == "passes"
                            else []
                        ).append(v)
    if not patch.is_feature:
        # The pristine pin of every line carrying the fix: its proof fails there in the suite (`nox -s proof`).
        affected += [
            ln.version for ln in overlay.lines[line.package] if any(q.slug == patch.slug for q in load_series(ln))
        ]
    if runs:
        affected.append(version)  # the run just made
    affected, fixed = sorted(set(affected), key=Version), sorted(set(fixed), key=Version)  # 1.9 < 1.10, .post1
    return "\n".join(
        [
            f"# {patch.subject}",
            "",
            f"Fixes {patch.trailers.get('Upstream-Issue', '')}",
            "",
            "## Problem, root cause and fix",
            "",
            body,
            "",
            "## Reproducer",
            "",
            f"`reproducer/{proof_name}` is a standalone pytest module (tiny random models built in the test, CPU only,"
            " real gloo process groups on 127.0.0.1 where it is distributed):",
            "",
            "```sh",
            f"pip install {line.package}=={version} torch pytest",
            f"pytest reproducer/{proof_name}   # fails without this patch, passes with it",
            "```",
            "",
            *(
                [
                    f"Run on {line.package} {version} by the export, in an environment of its own:",
                    "",
                    f"- pristine {version}: fails ({runs[0].detail})",
                    f"- {version} with this patch: passes ({runs[1].detail})",
                    "",
                ]
                if runs
                else []
            ),
            "## Versions affected",
            "",
            f"- this patch applies to {line.package} {version} ({text_status}); it was first written for "
            f"{line.package} {line.version}",
            f"- the reproducer fails on: {', '.join(affected) or 'not measured'}",
            f"- the reproducer passes on: {', '.join(fixed) or 'none measured'}",
            "",
        ]
    )
