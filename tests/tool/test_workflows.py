"""The GitHub workflows: they run commands that exist, pin every action by commit, keep no credentials, install
only hashed requirements where a token can write, and keep each job's artifacts apart."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st

from patchwheel import cli
from patchwheel.maint.upstream import watch

ROOT = Path(__file__).resolve().parents[2]


def workflow(name: str) -> dict:
    return yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())


def patchwheel_commands(doc: dict) -> list[list[str]]:
    out = []
    for job in doc["jobs"].values():
        for step in job.get("steps", []):
            script = step.get("run", "").replace("\\\n", " ")
            for line in script.splitlines():
                if "python -m patchwheel" in line:
                    words = shlex.split(line.split("python -m patchwheel", 1)[1].split(")")[0])
                    out.append(words)
    return out


def test_upstream_watch_runs_real_commands_with_the_cells_list_new_emits():
    doc = workflow("upstream-watch.yml")
    commands = patchwheel_commands(doc)
    assert [c[:2] for c in commands] == [
        ["watch", "list"],
        ["follow", "--pending"],
        ["watch", "torch"],
        ["watch", "cell"],
        ["watch", "merge"],
        ["follow", "$PACKAGE"],
        ["tables"],  # the pull request of a new line: the fix tables of the new series
    ]
    for words in commands:
        cli.parser().parse_args(words)  # every option the workflow passes exists (argparse exits otherwise)
    keys = set(watch.CELL_KEYS)  # what `watch list` emits per cell (tested above)
    cell = doc["jobs"]["cell"]
    used = set(re.findall(r"\bmatrix\.(\w+)", json.dumps(cell)))
    assert used <= keys, used - keys
    assert doc["jobs"]["merge"]["needs"] == ["list", "cell"]
    merging = next(step for step in doc["jobs"]["merge"]["steps"] if "watch merge" in step.get("run", ""))
    assert merging["env"]["CELLS"] == "${{ needs.list.outputs.cells }}"  # the list job's cells, as it printed them
    assert commands[4][-2:] == ["--cells", "$RUNNER_TEMP/cells.json"]
    assert 'printf \'%s\\n\' "$CELLS" > "$RUNNER_TEMP/cells.json"' in merging["run"]
    assert set(doc[True]) == {"schedule", "workflow_dispatch"}  # yaml reads the key `on` as True


def test_ci_workflow_runs_ci_run_on_pushes_and_pull_requests():
    doc = workflow("ci.yml")
    steps = doc["jobs"]["ci"]["steps"]
    assert steps[-1]["run"] == "bash .ci/run"
    assert {"push", "pull_request"} <= set(doc[True])


WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
#: `uses: owner/repo[/path]@<40 hex> # vX[.Y.Z]`: a tag can be moved, a commit cannot; the comment says which tag.


PINNED = re.compile(r"^\s*(?:- )?uses: [\w.-]+/[\w.-]+(?:/[\w./-]+)?@[0-9a-f]{40} # v\d+(?:\.\d+)*$")


def steps(doc: dict) -> list[tuple[str, dict]]:
    return [(name, step) for name, job in doc["jobs"].items() for step in job.get("steps", [])]


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_action_is_pinned_by_commit_and_every_checkout_keeps_no_credentials(path):
    lines = [line for line in path.read_text().splitlines() if re.match(r"^\s*(?:- )?uses:", line)]
    used = [step["uses"] for _, step in steps(yaml.safe_load(path.read_text())) if "uses" in step]
    assert len(lines) == len(used) > 0  # every step that uses an action is one `uses:` line
    unpinned = [line.strip() for line in lines if not PINNED.match(line)]
    assert not unpinned, f"not pinned by a commit sha with its tag in a comment: {unpinned}"
    checkouts = [
        step for _, step in steps(yaml.safe_load(path.read_text())) if "actions/checkout@" in step.get("uses", "")
    ]
    assert checkouts and all(step.get("with", {}).get("persist-credentials") is False for step in checkouts)


def test_a_job_that_can_write_installs_only_hashed_requirements():
    """A job whose token can write (the watch's merge: it pushes a branch and opens a pull request) installs only
    what a lock file names, each file checked by its sha256, wheels only (no build code runs)."""
    writers = 0
    for path in WORKFLOWS:
        doc = yaml.safe_load(path.read_text())
        for job in doc["jobs"].values():
            permissions = {**doc.get("permissions", {}), **job.get("permissions", {})}
            if "write" not in permissions.values():
                continue
            writers += 1
            installs = [s["run"] for s in job["steps"] if "pip install" in s.get("run", "")]
            # (the propose job's check, a script of the checkout, needs packaging: the same lock as the merge's)
            runs_the_tool = any(re.search(r"-m patchwheel|follow_diff\.py", s.get("run", "")) for s in job["steps"])
            assert installs or not runs_the_tool, "a job that runs the tool installs its requirements"
            for script in installs:
                words = shlex.split(script)
                assert {"--require-hashes", "--only-binary", "--no-deps"} <= set(words), script
                lock = ROOT / words[words.index("-r") + 1]
                requirements = [r for r in lock.read_text().split("\n") if r and not r[0].isspace() and r[0] != "#"]
                assert requirements and all(re.match(r"^[\w.-]+==[\w.]+ \\$", r) for r in requirements), requirements
                assert lock.read_text().count("--hash=sha256:") >= len(requirements)
            assert all("-e" not in shlex.split(s.get("run", ""), comments=True) for s in job["steps"])  # no build
    assert writers == 2  # the matrix's merge, and the pull request of a new line


def test_each_cell_uploads_its_fragment_under_its_own_artifact_name():
    """No cell job can replace another's fragment: each uploads one file under a name made of its line and release
    (computed before any upstream code runs), and the merge downloads each artifact into its own folder."""
    cell = workflow("upstream-watch.yml")["jobs"]["cell"]["steps"]
    key = next(step for step in cell if step.get("id") == "key")
    assert key["env"] == {"LINE": "${{ matrix.line }}", "RELEASE": "${{ matrix.release }}"}
    assert key["run"] == 'echo "name=${LINE//\\//-}-$RELEASE" >> "$GITHUB_OUTPUT"'
    assert cell.index(key) < min(i for i, step in enumerate(cell) if "python -m" in step.get("run", ""))
    (upload,) = [step for step in cell if "actions/upload-artifact@" in step.get("uses", "")]
    assert upload["with"]["name"] == "fragment-${{ steps.key.outputs.name }}"
    assert upload["with"]["path"] == "fragments/${{ steps.key.outputs.name }}.json"
    merge_job = workflow("upstream-watch.yml")["jobs"]["merge"]["steps"]
    (download,) = [step for step in merge_job if "actions/download-artifact@" in step.get("uses", "")]
    assert download["with"] == {"pattern": "fragment-*", "path": "fragments"}  # merge-multiple: false
    merging = next(step for step in merge_job if "watch merge" in step.get("run", ""))
    assert "shopt -s globstar nullglob" in merging["run"] and "watch merge fragments/**/*.json" in merging["run"]


PINS = f"""package = "demo"
local-label = "fixed"

[release."1.0.0"]
wheel = {{ filename = "demo-1.0.0-py3-none-any.whl", sha256 = "{"a" * 64}" }}
build = {{ number = 2, inputs = "{"b" * 64}" }}
"""
NEW_LINE = f"""
[release."1.1.0"]
wheel = {{ filename = "demo-1.1.0-py3-none-any.whl", sha256 = "{"c" * 64}" }}
"""
SETS = '[set.latest]\ndemo = "1.0.0"\nother = "2.0.0"\n\n[set.old]\ndemo = "1.0.0"\n'


def test_follow_runs_read_only_and_its_pull_request_takes_only_its_new_line(tmp_path):
    """follow runs the new release's code, so its job cannot write; the job that can write applies its diff only
    if it is what follow writes: a new line of that package (its files, its pin table, the latest set), as regular
    text files. The step's own script, run on hostile diffs: a rename from a workflow (once passed: git apply
    --numstat names only a rename's new path), an edit of an existing line with its build record set back (built
    a published name with other bytes), a .gitattributes that shows the patches as binary, a .gitignore."""
    doc = workflow("upstream-watch.yml")
    assert doc["jobs"]["follow"]["permissions"] == {"contents": "read"}
    assert doc["jobs"]["follow"]["needs"] == ["list", "merge"]
    apply = next(s for s in doc["jobs"]["propose"]["steps"] if "follow_diff.py" in s.get("run", ""))
    assert apply["env"] == {"PACKAGE": "${{ matrix.package }}"}
    repo = tmp_path / "repo"
    files = {
        "patches/demo/1.0.0/series": "0001-x.patch\n",
        "patches/demo/1.0.0/0001-x.patch": "the fix\n" * 20,
        "patches/other/2.0.0/series": "\n",
        "overlay/demo/pins.toml": PINS,
        "overlay/demo/1.0.0/demo/core.py": "fixed = True\n" * 20,
        "overlay/sets.toml": SETS,
        "overlay/NOTICE": "notice\n",
        ".github/workflows/w.yml": "on: push\n" * 20,
    }
    git = _checkout(repo, files)

    def propose(change, *flags: str) -> subprocess.CompletedProcess:
        change(repo)
        subprocess.run([*git, "add", "-A"], check=True)
        diff = subprocess.run([*git, "diff", "--cached", "--binary", *flags], capture_output=True).stdout
        subprocess.run([*git, "reset", "-q", "--hard"], check=True)
        subprocess.run([*git, "clean", "-qfd"], check=True)
        (tmp_path / "follow").mkdir(exist_ok=True)
        (tmp_path / "follow" / "follow.diff").write_bytes(diff)
        (tmp_path / "follow" / "report.md").write_text("## the report\n")
        env = {**os.environ, "RUNNER_TEMP": str(tmp_path), "PACKAGE": "demo"}
        return subprocess.run(["bash", "-eo", "pipefail", "-c", apply["run"]], cwd=repo, env=env, capture_output=True)

    def new_line(repo):
        (repo / "patches/demo/1.1.0").mkdir(parents=True)
        (repo / "patches/demo/1.1.0/series").write_text("0001-x.patch\n")
        (repo / "patches/demo/1.1.0/0001-x.patch").write_text("the fix, carried\n")
        (repo / "overlay/demo/1.1.0/demo").mkdir(parents=True)
        (repo / "overlay/demo/1.1.0/demo/core.py").write_text("fixed = True\n")
        (repo / "overlay/demo/pins.toml").write_text(PINS + NEW_LINE)
        (repo / "overlay/sets.toml").write_text(SETS.replace('demo = "1.0.0"\nother', 'demo = "1.1.0"\nother'))
        (repo / "patches/MATRIX.md").write_text("the matrix\n")

    def workflow_edit(repo):
        (repo / ".github" / "workflows" / "w.yml").write_text("on: push\n")

    def link(repo):
        new_line(repo)
        (repo / "patches" / "demo" / "1.1.0" / "link").symlink_to("/etc/passwd")

    def rename_a_workflow_into_the_line(repo):
        new_line(repo)
        (repo / ".github" / "workflows" / "w.yml").rename(repo / "patches" / "demo" / "1.1.0" / "notes.txt")

    def another_package(repo):
        (repo / "patches" / "other" / "2.0.0" / "series").write_text("changed\n")

    def binary(repo):
        new_line(repo)
        (repo / "patches" / "demo" / "1.1.0" / "blob").write_bytes(b"\x00\x01" * 50)

    def existing_line_with_its_build_number_set_back(repo):
        """Code folded into an existing line's patch, and its build record set back to the published number with a
        recomputed digest: lint and vendor --check passed, and the build made the published name with other bytes."""
        new_line(repo)
        (repo / "patches/demo/1.0.0/0001-x.patch").write_text("the fix\n" * 20 + "and something else\n")
        (repo / "overlay/demo/pins.toml").write_text(PINS.replace("b" * 64, "d" * 64) + NEW_LINE)

    def gitattributes(repo):
        new_line(repo)
        (repo / "patches/demo/.gitattributes").write_text("*.patch -diff linguist-generated=true\n")

    def gitignore(repo):
        new_line(repo)
        (repo / "overlay/demo/.gitignore").write_text("*\n!.gitignore\n")  # git stops seeing the line's files

    def another_set(repo):
        new_line(repo)
        sets = (repo / "overlay/sets.toml").read_text()
        (repo / "overlay/sets.toml").write_text(sets.replace('[set.old]\ndemo = "1.0.0"', '[set.old]\ndemo = "1.1.0"'))

    cases = [(workflow_edit, (), "hidden component: .github/workflows/w.yml"),
             (link, (), "a mode that is not a regular file's"),
             (rename_a_workflow_into_the_line, ("-M",), "a rename or copy"), (another_package, (), "outside what"),
             (binary, (), "a binary change"),
             (existing_line_with_its_build_number_set_back, (), "changes the existing line demo 1.0.0 (M)"),
             (gitattributes, (), "a path with a hidden component: patches/demo/.gitattributes"),
             (gitignore, (), "a path with a hidden component: overlay/demo/.gitignore"),
             (another_set, (), "a set other than latest, or [suite], changed")]  # fmt: skip
    for bad, flags, says in cases:
        ran = propose(bad, *flags)
        assert ran.returncode == 1 and b"refused" in ran.stderr and says.encode() in ran.stderr, (bad.__name__, ran)
        status = subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True).stdout
        assert status == "", (bad.__name__, status)
    ran = propose(existing_line_with_its_build_number_set_back, "--no-renames")
    assert b"the table of the existing line 1.0.0 changed (its pin or build record)" in ran.stderr, ran

    def retire_the_old_line(repo):
        new_line(repo)
        shutil.rmtree(repo / "patches/demo/1.0.0")
        shutil.rmtree(repo / "overlay/demo/1.0.0")
        pins = PINS.split('[release."1.0.0"]')[0] + NEW_LINE + '\n[retired]\n"1.0.0" = 2\n'
        (repo / "overlay/demo/pins.toml").write_text(pins)

    def retire_half_of_it(repo):
        retire_the_old_line(repo)
        (repo / "overlay/demo/1.0.0/demo").mkdir(parents=True)
        (repo / "overlay/demo/1.0.0/demo/core.py").write_text("fixed = True\n" * 20)

    ran = propose(retire_half_of_it, "--no-renames")
    assert b"demo 1.0.0: its pin is removed but files of the line remain" in ran.stderr, ran
    ran = propose(retire_the_old_line, "--no-renames")
    assert ran.returncode == 0, ran
    subprocess.run([*git, "reset", "-q", "--hard"], check=True)
    subprocess.run([*git, "clean", "-qfd"], check=True)
    ran = propose(new_line, "--no-renames")
    assert ran.returncode == 0, ran
    assert (repo / "patches" / "demo" / "1.1.0" / "0001-x.patch").read_text() == "the fix, carried\n"
    assert (tmp_path / "body.md").read_text().endswith("## the report\n")


def test_every_set_is_proven_daily_and_on_each_change_by_a_read_only_job():
    """The default suite proves only the sets of [suite] (overlay/sets.toml), on the suite's torch; the sets
    workflow proves every set on each of its torch releases (`nox -t set-<name>` per (set, torch) cell, the plan
    job's list), every day and on each change of what a verdict depends on."""
    doc = workflow("sets.yml")
    on = doc[True]
    assert re.fullmatch(r"\d+ \d+ \* \* \*", on["schedule"][0]["cron"]), "every day"
    for event in ("push", "pull_request"):
        assert {"patches/**", "overlay/**", "tests/proof/**", "tests/guards/**", "src/**"} <= set(on[event]["paths"])
    assert doc["permissions"] == {"contents": "read"}
    assert not any("permissions" in job for job in doc["jobs"].values())
    job = doc["jobs"]["sets"]
    words = shlex.split(job["steps"][-1]["run"])
    assert words[0].endswith("nox") and words[words.index("-t") + 1 :] == ["set-${{ matrix.set }}"]
    assert job["env"]["TORCH_SOURCE"] == "https://download.pytorch.org/whl/cpu"
    assert job["needs"] == "plan" and "torch_cells.py" in doc["jobs"]["plan"]["steps"][-1]["run"]


def _checkout(repo: Path, files: dict[str, str]) -> list[str]:
    """A git checkout of ``files`` with the propose step's script, one commit; the git command to run in it."""
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    shutil.copytree(ROOT / ".github" / "scripts", repo / ".github" / "scripts")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    return git


PATH_PARTS = st.sampled_from(["a", "b.py", "series", ".gitattributes", ".git", ".x", "..", "x y", "notes.txt"])
PREFIXES = st.sampled_from(
    ["patches/demo/1.1.0", "overlay/demo/1.1.0/demo", "overlay/demo", "patches/demo/1.0.0", "patches", ".github", "src"]
)


@settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(prefix=PREFIXES, parts=st.lists(PATH_PARTS, min_size=1, max_size=3))
def test_the_propose_filter_takes_a_path_only_inside_the_new_line(tmp_path_factory, prefix, parts):
    """A new line's diff with one more file, anywhere: staged only when that file is inside the new line's two
    folders and no component of its path is hidden; otherwise refused, with the checkout untouched."""
    tmp = tmp_path_factory.mktemp("propose")
    repo = tmp / "repo"
    files = {
        "patches/demo/1.0.0/series": "0001-x.patch\n",
        "patches/demo/1.0.0/0001-x.patch": "the fix\n",
        "overlay/demo/pins.toml": PINS,
        "overlay/sets.toml": SETS,
    }
    git = _checkout(repo, files)
    new_line = {
        "patches/demo/1.1.0/series": "0001-x.patch\n",
        "overlay/demo/pins.toml": PINS + NEW_LINE,
        "overlay/sets.toml": SETS.replace('demo = "1.0.0"\nother', 'demo = "1.1.0"\nother'),
    }
    extra = "/".join([prefix, *parts])
    assume(extra not in new_line)
    chunks = []
    for rel, text in new_line.items():
        old = (repo / rel).read_text().splitlines() if (repo / rel).is_file() else []
        new = text.splitlines()
        head = f"diff --git a/{rel} b/{rel}\n" + ("--- /dev/null\n" if not old else f"--- a/{rel}\n")
        if not old:
            head = f"diff --git a/{rel} b/{rel}\nnew file mode 100644\n--- /dev/null\n"
        body = f"+++ b/{rel}\n@@ -{1 if old else 0},{len(old)} +1,{len(new)} @@\n"
        body += "".join(f"-{ln}\n" for ln in old) + "".join(f"+{ln}\n" for ln in new)
        chunks.append(head + body)
    chunks.append(
        f"diff --git a/{extra} b/{extra}\nnew file mode 100644\n--- /dev/null\n+++ b/{extra}\n@@ -0,0 +1 @@\n+x\n"
    )
    diff = tmp / "follow.diff"
    diff.write_text("".join(chunks))
    ran = subprocess.run(
        [sys.executable, ".github/scripts/follow_diff.py", "demo", str(diff)], cwd=repo, capture_output=True, text=True
    )
    inside = prefix in ("patches/demo/1.1.0", "overlay/demo/1.1.0/demo") and ".." not in parts
    hidden = any(part.startswith(".") for part in parts)
    note(f"{extra}: rc={ran.returncode} {ran.stderr}")
    if inside and not hidden:
        assert ran.returncode == 0, ran.stderr
    else:
        assert ran.returncode == 1 and "refused" in ran.stderr, (extra, ran)
        assert subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True).stdout == ""


#: The base of the version cases: the line 1.0.0 (build 2), a retired 0.9.0 (it reached build 6), the latest set.
RETIRED = '\n[retired]\n"0.9.0" = 6\n'


def _a_line(version: str, wheel_version: str | None = None) -> str:
    wheel = f"demo-{wheel_version or version}-py3-none-any.whl"
    return f'\n[release."{version}"]\nwheel = {{ filename = "{wheel}", sha256 = "{"c" * 64}" }}\n'


def _propose(tmp_path: Path, pins: str, *, latest: str, gone: str | None = None) -> subprocess.CompletedProcess:
    """follow_diff.py on a diff that sets overlay/demo/pins.toml to ``pins``, adds the series of each line it names
    that the base lacks, moves latest to ``latest`` and removes the line ``gone``'s files; the base's git status
    after a refusal is checked to be clean."""
    repo = tmp_path / "repo"
    base = {
        "patches/demo/1.0.0/series": "0001-x.patch\n",
        "patches/demo/1.0.0/0001-x.patch": "the fix\n",
        "overlay/demo/1.0.0/demo/core.py": "fixed = True\n",
        "overlay/demo/pins.toml": PINS + RETIRED,
        "overlay/sets.toml": SETS,
    }
    git = _checkout(repo, base)
    for version in re.findall(r'\[release\."([^"]+)"\]', pins):
        series = repo / "patches" / "demo" / version / "series"
        if not series.exists():
            series.parent.mkdir(parents=True)
            series.write_text("0001-x.patch\n")
            (series.parent / "0001-x.patch").write_text("the fix, carried\n")
    if gone:
        shutil.rmtree(repo / "patches" / "demo" / gone)
        shutil.rmtree(repo / "overlay" / "demo" / gone)
    (repo / "overlay/demo/pins.toml").write_text(pins)
    (repo / "overlay/sets.toml").write_text(SETS.replace('demo = "1.0.0"\nother', f'demo = "{latest}"\nother'))
    subprocess.run([*git, "add", "-A"], check=True)
    diff = subprocess.run([*git, "diff", "--cached", "--no-renames"], capture_output=True, check=True).stdout
    subprocess.run([*git, "reset", "-q", "--hard"], check=True)
    subprocess.run([*git, "clean", "-qfd"], check=True)
    (tmp_path / "follow.diff").write_bytes(diff)
    ran = subprocess.run(
        [sys.executable, ".github/scripts/follow_diff.py", "demo", str(tmp_path / "follow.diff")],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    if ran.returncode != 0:
        assert subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True).stdout == ""
    return ran


WITHOUT_1_0_0 = PINS.split('[release."1.0.0"]')[0]
VERSION_CASES = {
    # A "new line" 1.0 for 1.0.0's own wheel, latest moved to it: a second line (and build numbers) for one version.
    "a new line of an existing line's version": (
        PINS + _a_line("1.0", "1.0.0") + RETIRED,
        {"latest": "1.0"},
        "the new line 1.0 is the version of the line 1.0.0 (PEP 440: 1.0 == 1.0.0)",
    ),
    # The same after 1.0.0 is retired: the new line's build numbers would start again below the published ones.
    "a new line of a retired line's version": (
        WITHOUT_1_0_0 + _a_line("1.0", "1.0.0") + RETIRED + '"1.0.0" = 2\n',
        {"latest": "1.0", "gone": "1.0.0"},
        'the new line 1.0 is the version of [retired] "1.0.0" (PEP 440: 1.0 == 1.0.0)',
    ),
    "a new line with another release's wheel": (
        PINS + _a_line("1.1", "1.1.0") + RETIRED,
        {"latest": "1.1"},
        "the new line 1.1 pins demo-1.1.0-py3-none-any.whl, a wheel of 1.1.0, not of 1.1",
    ),
    # "v0.9.0" = 1 beside "0.9.0" = 6: the tool read 0.9.0's retired number as 1.
    "a retired number under another spelling": (
        PINS + _a_line("1.1.0") + RETIRED + '"v0.9.0" = 1\n',
        {"latest": "1.1.0"},
        "[retired] 'v0.9.0' is not a version as PEP 440 writes it ('0.9.0')",
    ),
    "a retired number of one version twice": (
        PINS + _a_line("1.1.0") + RETIRED + '"0.9" = 1\n',
        {"latest": "1.1.0"},
        '[retired] "0.9" is the version of [retired] "0.9.0" (PEP 440: 0.9 == 0.9.0)',
    ),
    "a new line spelt otherwise than PEP 440 writes it": (
        PINS + _a_line("1.1.0.post0", "1.1.0.post0").replace('"1.1.0.post0"]', '"1.1.0-post0"]') + RETIRED,
        {"latest": "1.1.0-post0"},
        "'1.1.0-post0' is not a version as PEP 440 writes it ('1.1.0.post0')",
    ),
    "a new line older than the newest line": (
        PINS + _a_line("0.9.5") + RETIRED,
        {"latest": "0.9.5"},
        "the new line 0.9.5 is not newer than the newest line 1.0.0 (follow adds only newer releases)",
    ),
    "a retired number for a line the change keeps": (
        PINS + _a_line("1.1.0") + RETIRED + '"0.8.0" = 3\n',
        {"latest": "1.1.0"},
        '[retired] "0.8.0" = 3 is added or raised, but this change retires no line 0.8.0',
    ),
    "a retired line's number set below its build": (
        WITHOUT_1_0_0 + _a_line("1.1.0") + RETIRED + '"1.0.0" = 1\n',
        {"latest": "1.1.0", "gone": "1.0.0"},
        '[retired] "1.0.0" = 1 is below the build number 2 the retired line recorded',
    ),
}


@pytest.mark.parametrize("case", list(VERSION_CASES))
def test_the_propose_filter_compares_versions_as_pep_440_does(tmp_path, case):
    """follow adds a line for a release newer than the newest, named as PEP 440 writes its version, pinning that
    release's wheel, and retires a line with the build number it reached. A diff that adds a line of a version
    the file already has under another spelling (1.0 beside, or after, 1.0.0: its own build numbers, under a name
    `==1.0.0+fixed` also matches) or a [retired] number under another spelling ("v0.9.0" = 1 beside "0.9.0" = 6:
    the tool read 0.9.0's number as 1) passed the filter; each is refused now, by name."""
    pins, change, says = VERSION_CASES[case]
    ran = _propose(tmp_path, pins, **change)
    assert ran.returncode == 1, f"staged: {ran.stdout}{ran.stderr}"
    assert "refused: the diff is not a new line of demo" in ran.stderr and says in ran.stderr, ran.stderr


def test_the_propose_filter_takes_a_new_line_beside_retired_ones(tmp_path):
    """What follow writes still passes: a new line, and the old one retired at the number it reached."""
    ran = _propose(tmp_path, PINS + _a_line("1.1.0") + RETIRED, latest="1.1.0")
    assert ran.returncode == 0, ran.stderr
    pins = WITHOUT_1_0_0 + _a_line("1.1.0") + RETIRED + '"1.0.0" = 2\n'
    ran = _propose(tmp_path / "retired", pins, latest="1.1.0", gone="1.0.0")
    assert ran.returncode == 0, ran.stderr
