"""The carry engine: a release line carried onto another upstream release by text, in a work repository under
``.rebase/<pkg>-<version>/`` (:mod:`.workfolder`): every door (``rebase``, ``derive``, ``follow``) goes through it.

1. The caller judges first, by the one policy (:mod:`.policy`): ``dropped`` names the patches it drops, with why;
   the engine has no drop rule of its own.
2. Carry the rest by text, in order, in the work repository (pristine base commit, the series as commits, a branch
   with the new release's files): clean and offset patches are refreshed, 3-way merges taken. On a conflict the
   cherry-pick is left in the work tree and it stops, saying which file and how to go on (``--continue``) or drop
   the folder (``--abort``). A patch whose text is already upstream and that the policy kept stops it too.
3. Write ``patches/<pkg>/<version>/`` (renumbered, byte-stable exports) and pin the release in
   ``overlay/<pkg>/pins.toml``, its first build record and its vendored modules. The source line is left as it was.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, parse_sdist_filename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ... import atomic, config, gitops
from ...config import Artifact, BuildRecord, Project, ReleaseLine
from ...configfiles import add_release
from ...errors import ConfigError
from ...names import SHA256, file_name_problem
from ...reporter import CONSOLE
from ...series import PATCH_NAME, SLUG, Patch, checked_series, parse_patch, patch_name, slug_of
from ...wheels import buildno, fetch, vendored
from ..upstream.textcheck import carry
from ..workrepo import WorkRepo, release_files, touched
from . import workfolder


def version_of(text: str) -> str:
    """The release number as typed, checked and normalized (``1.0-post1`` -> ``1.0.post1``), so that the line's
    folder, its pin and the wheel's file name spell it alike."""
    try:
        return str(Version(text))
    except InvalidVersion as exc:
        raise ConfigError(
            f"{text!r} is not a version", "give the upstream release as the package index lists it, e.g. 5.24.0"
        ) from exc


def carry_line(
    project: Project,
    source: ReleaseLine,
    version: str,
    *,
    dropped: dict[str, str],
    adopted: Sequence[tuple[ReleaseLine, Patch]] = (),
    log=CONSOLE,
    by: str = "rebase",
    review: bool = False,
) -> Project | None:
    """Carry the line ``source`` onto the upstream release ``version``, newer or older than it (every door starts
    here): the patches of ``dropped`` (patch file name -> why, the one policy's decisions, :mod:`.policy`) are left
    out, every other one is carried by text. ``adopted``: patches of other lines of the package (a fix the source
    does not carry, whose bug the caller found in the release), carried after the source's, each by text from its
    own line (a 3-way merge takes that line's files under it as its base). The project with the new line written
    (as a load would read it now), or None at a conflict, which is left in the work repository
    ``.rebase/<pkg>-<version>/`` with the commands to go on (``by`` names the command). ``review``: stop there too
    once every patch is carried, before the line is written, so that a maintainer can check each carried commit (a
    3-way merge is a text result) and amend it; the next :func:`resume` goes on."""
    package = source.package
    check_free(project, package, version, by)
    work = workfolder.path(project.root, package, version)
    wheel, sdist = fetch.release_artifacts(package, version)
    series = checked_series(source)
    unknown = set(dropped) - {p.name for p in series}
    if unknown:
        raise ConfigError(f"no patch {', '.join(sorted(unknown))} in the line {source.key}", "drop only its patches")
    clash = {p.name for _, p in adopted} & {p.name for p in series}
    if clash or len({p.name for _, p in adopted}) != len(adopted):
        raise ConfigError(
            f"{', '.join(sorted(clash)) or 'a patch'} adopted twice or named as a source patch",
            "adopt each fix once, from one line, and only fixes the source line does not carry",
        )
    keep = [p for p in series if p.name not in dropped]
    extra = touched(p for _, p in adopted)
    new_files = release_files(source, sorted(set(touched(series)) | set(extra)), wheel)
    work.mkdir(parents=True)
    # The source line's patch files (and the adopted ones), copied: the work folder holds everything a --continue
    # needs, wherever the project (or a scratch copy of it) is then.
    (work / "source").mkdir()
    for p in [*series, *(p for _, p in adopted)]:
        (work / "source" / p.name).write_bytes(p.path.read_bytes())
    # The whole series: a kept patch may build on a dropped one (its diff is against that state).
    repo = WorkRepo.of_line(source, series, extra=extra, at=work / "repo")
    gitops.git(repo.path, "branch", "-q", "series")
    commits = {**repo.commits, **_adopted_commits(repo.path, adopted)}
    onto = repo.branch("rebased", repo.base, new_files, f"pristine {package} {version}")
    state = {
        "package": package,
        "from": source.version,
        "to": version,
        "by": by,
        "onto": onto,
        "wheel": [wheel.filename, wheel.sha256],
        "sdist": [sdist.filename, sdist.sha256] if sdist else None,
        "todo": [[p.name, commits[p.name], f"source/{p.name}"] for p in [*keep, *(p for _, p in adopted)]],
        "done": {},
        "dropped": dict(dropped),
        "adopted": {p.name: line.version for line, p in adopted},
        "review": review,
    }
    return _proceed(project, work, state, log, fresh=True)


def _adopted_commits(repo: Path, adopted: Sequence[tuple[ReleaseLine, Patch]]) -> dict[str, str]:
    """Each adopted patch as a commit of ``repo``, on its own line's files and the patches before it in that line's
    series (a branch ``line-<version>`` a line): what a 3-way merge of it takes as its base."""
    commits: dict[str, str] = {}
    lines = {line.version: line for line, _ in adopted}
    for version in sorted(lines, key=Version):
        with WorkRepo.of_line(lines[version], checked_series(lines[version])) as theirs:
            gitops.git(repo, "fetch", "-q", "--no-tags", str(theirs.path), f"HEAD:refs/heads/line-{version}")
            commits.update({p.name: theirs.commits[p.name] for line, p in adopted if line.version == version})
    return commits


def check_free(project: Project, package: str, version: str, by: str) -> None:
    """Refused before anything runs: the new line's folder exists, or a carry onto the release waits already."""
    target = project.series_dir(package, version)
    if target.exists():
        raise ConfigError(
            f"{target} already exists", f"remove it to carry a line onto {version} again (git rm -r {target})"
        )
    work = workfolder.path(project.root, package, version)
    if work.exists():
        raise ConfigError(
            f"a rebase onto {package} {version} is in progress in {work}",
            f"finish it with `{_continue(by, package, version)}`, or drop it: `{_abort(by, package, version)}`",
        )


def _continue(by: str, package: str, version: str) -> str:
    """The command that goes on after a conflict is resolved, for the command that stopped there."""
    return f"{workfolder.door(by, package, version)} --continue"


def _abort(by: str, package: str, version: str) -> str:
    """The command that drops the work folder, for the command that stopped there."""
    return f"{workfolder.door(by, package, version)} --abort"


def _again(by: str, package: str, version: str, work: Path) -> str:
    """What starts over after the work folder ``work`` is found damaged: drop it, then the door again."""
    return f"`{_abort(by, package, version)}`, then {by} again (--abort removes {work})"


#: state.json's fields ("by" may be missing in a folder an older patchwheel made: that was rebase's).
STATE_KEYS = ("package", "from", "to", "by", "onto", "wheel", "sdist", "todo", "done", "dropped", "adopted", "review")
#: fields a work folder an older patchwheel made may lack
_OPTIONAL = {"by", "adopted", "review"}
_COMMIT = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")  # a full sha1 or sha256 object name, never an option
_FILE_CHARS = re.compile(r"[A-Za-z0-9._+!-]+")  # what a file name on an index has (it goes into pins.toml)


def read_state(work: Path, package: str, version: str, by: str) -> dict:
    """The rebase state in ``work`` (state.json), every field checked against what the command was given
    (``package``, ``version``, and ``by``, the command) and against what :func:`carry_line` writes: nothing in a work
    folder is the tool's own state until it reads back as such (a "package" of ``../../x`` would have put the new
    line outside the project)."""
    state_file = work / "state.json"
    hint = _again(by, package, version, work)
    state = workfolder.read_json(state_file, hint)

    def bad(key: str, value: object, want: str) -> ConfigError:
        return ConfigError(f'{state_file}: "{key}" is {workfolder.shown(value)}, not {want}', hint)

    if not isinstance(state, dict) or not set(STATE_KEYS) - _OPTIONAL <= set(state) <= set(STATE_KEYS):
        have = sorted(state) if isinstance(state, dict) else type(state).__name__
        raise ConfigError(
            f"{state_file} is not a rebase's state: it holds {workfolder.shown(have)}, where a rebase writes a table "
            f"of {', '.join(STATE_KEYS)}",
            hint,
        )
    state.setdefault("by", "rebase")
    if state["by"] not in ("rebase", "derive"):
        raise bad("by", state["by"], f"{by!r}, the command that goes on")
    if state["by"] != by:
        other = f"`{_continue(state['by'], package, version)}`, or drop it: `{_abort(state['by'], package, version)}`"
        raise ConfigError(f"{work} is the work folder of a {state['by']}, not of a {by}", f"go on with {other}")
    for key, want in (("package", package), ("to", version)):
        if state[key] != want:
            raise bad(key, state[key], f"{want!r}, the {'package' if key == 'package' else 'release'} given")
    if not _is_version(state["from"]):
        raise bad("from", state["from"], "a release line's version")
    if not isinstance(state["onto"], str) or not _COMMIT.fullmatch(state["onto"]):
        raise bad("onto", state["onto"], "a commit of the work repository")
    _artifact(state, "wheel", package, version, bad)
    if state["sdist"] is not None:
        _artifact(state, "sdist", package, version, bad)
    todo = state["todo"]
    if not isinstance(todo, list) or not all(
        isinstance(t, list)
        and len(t) == 3
        and all(isinstance(x, str) for x in t)
        and PATCH_NAME.match(t[0])
        and _COMMIT.fullmatch(t[1])
        and t[2] == f"source/{t[0]}"
        for t in todo
    ):
        raise bad("todo", todo, "a list of [patch file name, commit, source/<patch file name>]")
    for key in ("done", "dropped"):
        value = state[key]
        if not isinstance(value, dict) or not all(
            PATCH_NAME.match(name) and isinstance(why, str) and why.isprintable() for name, why in value.items()
        ):
            raise bad(key, value, "a table of patch file names and one-line reasons")
    if not isinstance(state.setdefault("review", False), bool):
        raise bad("review", state["review"], "true or false")
    adopted = state.setdefault("adopted", {})
    if not isinstance(adopted, dict) or not all(PATCH_NAME.match(n) and _is_version(v) for n, v in adopted.items()):
        raise bad("adopted", adopted, "a table of patch file names and the versions of the lines they come from")
    names = [t[0] for t in todo] + list(state["done"]) + list(state["dropped"])
    if len(set(names)) != len(names):
        raise bad("todo", todo, 'a list of patches that are neither in "done" nor in "dropped", each once')
    if not set(adopted) <= set(names) - set(state["dropped"]):
        raise bad("adopted", adopted, 'patches to carry or carried (in "todo" or "done")')
    return state


def _is_version(value: object) -> bool:
    """A version as the tool writes it: normalized (so that it names a folder as the line's pin does)."""
    if not isinstance(value, str):
        return False
    try:
        return str(Version(value)) == value
    except InvalidVersion:
        return False


def _artifact(state: dict, key: str, package: str, version: str, bad) -> None:
    """state[key]: [file name, sha256] of the release's wheel or sdist (what the new pin will say)."""
    value = state[key]
    want = f"[file name, sha256] of {package} {version}'s {key}"
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(x, str) for x in value)):
        raise bad(key, value, want)
    filename, sha = value
    if not SHA256.match(sha) or not _FILE_CHARS.fullmatch(filename) or file_name_problem(filename):
        raise bad(key, value, want)
    try:
        if key == "wheel":
            name, got, _, _ = parse_wheel_filename(filename)
        else:
            name, got = parse_sdist_filename(filename)
    except (InvalidWheelFilename, InvalidSdistFilename):
        raise bad(key, value, want) from None
    if name != package or got != Version(version):
        raise bad(key, value, want)


def _write_state(work: Path, state: dict) -> None:
    """state.json replaced whole (a link there is replaced, never written through)."""
    atomic.replace_text(work / "state.json", json.dumps(state, indent=1))


def _source_patch(work: Path, name: str) -> Path:
    """The source line's patch ``name`` as the work folder holds it (a plain file name, never a path)."""
    path = work / "source" / name
    if "/" in name or name in (".", "..") or not path.is_file() or path.is_symlink():
        raise ConfigError(
            f"{work} holds no patch file source/{name}",
            "the work folder was made by an older patchwheel or changed by hand: start over (`--abort` it)",
        )
    return path


def resume(
    project: Project, package: str, version: str, *, log=CONSOLE, by: str = "rebase", new: Sequence[str] = ()
) -> Project | None:
    """Go on after a conflict was resolved in the work repository; ``by``: the command that goes on (derive calls
    it in its scratch copy). The work folder's state must be that command's, for ``package`` ``version``. ``new``:
    the slugs of fixes a maintainer committed in the work repository on top of every carried patch (a bug next to
    ours that the release has and no line fixes), one a commit, in order: each becomes a patch of the new line. The
    project with the new line, or None at another conflict (:func:`carry_line`)."""
    version = version_of(version)
    package = project.line(package).package  # a known package, as the tool names its folders
    work = workfolder.folder(project.root, package, version)
    state_file = work / "state.json"
    if not os.path.lexists(state_file):
        raise ConfigError(
            f"no rebase onto {package} {version} is in progress",
            f"start one with `nox -s rebase -- {package} {version}`",
        )
    state = read_state(work, package, version, by)
    state["review"] = False  # the maintainer has had the carried patches: going on is their word
    repo = work / "repo"
    again = _again(by, package, version, work)
    _check_new(new, state)
    for name in ("repo", "source"):
        if (work / name).is_symlink() or not (work / name).is_dir():
            raise ConfigError(f"{work / name} is not a folder the carry engine made", f"start over: {again}")
    for _ in workfolder.entries(work, f"remove it, or start over: {again}"):
        pass  # a link or a special file (a named pipe) is refused before git or the tool opens anything
    workfolder.git_settings(repo, again)  # before git runs anything there: its own config could name a program
    if state["todo"]:  # stopped at a conflict (else every patch is carried and a later step stopped)
        unmerged = gitops.git(repo, "diff", "--name-only", "--diff-filter=U").decode().split()
        if unmerged:
            raise ConfigError(
                f"still unresolved in {repo}: {', '.join(unmerged)}",
                f"edit them, `git -C {repo} add <file>`, then run --continue again",
            )
        if (repo / ".git" / "CHERRY_PICK_HEAD").exists():
            gitops.git(repo, "-c", "core.editor=true", "cherry-pick", "--continue")
        _check_resolution(repo, state, again)
        name = state["todo"].pop(0)[0]
        state["done"][name] = "resolved by hand"
        log(f"{name}: resolved by hand")
    _take_new(repo, state, new, again, state.get("by", "rebase"))
    return _proceed(project, work, state, log)


def _author(repo: Path, rev: str) -> str:
    return gitops.git(repo, "log", "-1", "--format=%an <%ae> %ad", "--date=raw", rev).decode().strip()


def _check_resolution(repo: Path, state: dict, again: str) -> None:
    """The commit right after the carried patches is the resolution of the patch the carry stopped at: git keeps a
    cherry-pick's author and date through a conflict, and a maintainer's own commit has theirs. A fix committed
    before the resolution would be taken for the patch (its file would hold the other's change)."""
    revs = gitops.git(repo, "rev-list", "--reverse", f"{state['onto']}..HEAD").decode().split()
    at = len(state["done"])
    name, commit, _ = state["todo"][0]
    if len(revs) > at and _author(repo, revs[at]) == _author(repo, commit):
        return
    said = f"commit {revs[at][:12]} is by {_author(repo, revs[at])}" if len(revs) > at else "there is none"
    raise ConfigError(
        f"the commit after the {at} carried patches in {repo} is not the resolution of {name}: git keeps the "
        f"patch's author and date ({_author(repo, commit)}) through a conflict, and {said}",
        f"resolve {name} on top of the carried patches and commit your own fixes after it; or start over: {again}",
    )


def _check_new(new: Sequence[str], state: dict) -> None:
    """``--new``: slugs, each once and of no patch of the carry (carried, to carry or dropped)."""
    if not new:
        return
    bad = [s for s in new if not SLUG.match(s)]
    if bad:
        raise ConfigError(f"--new {bad[0]!r} is not a slug", "lowercase letters, digits, '.' and '-', e.g. tp-only")
    taken = {slug_of(n) for n in [*state["done"], *state["dropped"], *(t[0] for t in state["todo"])]}
    clash = sorted(set(new) & taken) or sorted({s for s in new if new.count(s) > 1})
    if clash:
        raise ConfigError(f"--new {clash[0]} names a patch of the line twice", "give each new fix its own slug")


#: what ``done`` says of a fix a maintainer committed on top of the carried patches (``--new``)
NEW = "new on this line, a maintainer's fix"


def _take_new(repo: Path, state: dict, new: Sequence[str], again: str, by: str) -> None:
    """The commits on top of the carried (and resolved) patches: one for each ``--new`` slug, in order, taken into
    ``done`` where they stand, so that the patches still to carry go on top of them."""
    count = len(gitops.git(repo, "rev-list", f"{state['onto']}..HEAD").decode().split())
    extra = count - len(state["done"])
    if extra != len(new):
        if extra > 0 and not new:
            hint = (
                "name each new fix, in order: --continue --new <slug> --new <slug> ... (or remove the commits)"
                if by == "derive"
                else f"a rebase carries the line's patches only: remove them (git -C {repo} reset --hard HEAD~"
                f"{extra}), or make the line with derive, whose --continue --new takes them"
            )
            raise ConfigError(f"{extra} commit(s) in {repo} on top of the {len(state['done'])} carried patches", hint)
        raise ConfigError(
            f"{count} commits in {repo} for {len(state['done'])} carried patches and {len(new)} named with --new",
            f"one --new for each commit on top of the carried patches, or start over: {again}",
        )
    for slug in new:
        state["done"][patch_name(len(state["done"]) + 1, slug)] = NEW


def _proceed(project: Project, work: Path, state: dict, log, fresh: bool = False) -> Project | None:
    """Carry the patches left to do; ``fresh``: the folder was made by this run (no conflict resolved in it yet)."""
    repo = work / "repo"
    while state["todo"]:
        name, commit, _ = state["todo"][0]
        result = carry(repo, parse_patch(_source_patch(work, name)), commit)
        if result.status == "conflict":
            # Leave the conflict in the work tree for a human.
            gitops.try_git(repo, "cherry-pick", commit)
            _write_state(work, state)
            log(f"{name}: CONFLICT in {', '.join(result.conflicts)}")
            log(f"  resolve it in {repo}/{result.conflicts[0]} (conflict markers), keeping the patch's intent;")
            log(f"  then: git -C {repo} add {' '.join(result.conflicts)}")
            log(f"        (to describe the fix anew for {state['to']}: git -C {repo} commit, and edit the message)")
            log(f"        {_continue(state.get('by', 'rebase'), state['package'], state['to'])}")
            log(f"  the original patch: {_source_patch(work, name)}")
            return None
        if result.status == "already-upstream":  # the one policy drops a fix by its proof, never by its text
            _stop_at_text_upstream(work, state, name, result.detail, fresh, log)
            return None
        state["done"][name] = result.status + (f": {result.detail}" if result.detail else "")
        log(f"{name}: {result.status}{(' (' + result.detail + ')') if result.detail else ''}")
        state["todo"].pop(0)
    if state.get("review"):
        _write_state(work, state)
        log(f"every patch carried: waiting in {repo} for a review of each carried commit")
        return None
    project = _write_line(project, work, state, log)
    shutil.rmtree(work, ignore_errors=True)
    if not any((project.root / ".rebase").iterdir()):
        (project.root / ".rebase").rmdir()
    return project


def _stop_at_text_upstream(work: Path, state: dict, name: str, detail: str, fresh: bool, log) -> None:
    """A stop, as the policy's: nothing of the line written. A folder this run made goes (there is nothing to go on
    with); one holding conflicts a maintainer resolved stays, for ``--abort``: ``--continue`` cannot pass the patch."""
    package, version, by = state["package"], state["to"], state.get("by", "rebase")
    log(
        f"STOPPED, nothing written: {name}: its text is already in {package} {version} ({detail}), but the policy "
        "kept it (its proof was not run, or still fails)"
    )
    log("  a maintainer takes it from here:")
    log(f"    run its proof on pristine {package} {version}, then drop it from the source line or fix the proof")
    if fresh and by == "rebase":
        workfolder.remove(work, workfolder.MARKS[by])  # and .rebase/, when nothing else waits there
    else:
        _write_state(work, state)
        log(f"    {_abort(by, package, version)}   # drops the work folder and the conflicts resolved in it")


def _write_line(project: Project, work: Path, state: dict, log) -> Project:
    repo = work / "repo"
    package, version = state["package"], state["to"]
    revs = gitops.git(repo, "rev-list", "--reverse", f"{state['onto']}..HEAD").decode().split()
    target = project.series_dir(package, version)
    tmp = target.with_name(f".{version}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    names = list(state["done"])
    if len(revs) != len(names):
        raise ConfigError(
            f"{len(revs)} commits in {repo} but {len(names)} carried patches",
            "the work repository was changed by hand beyond the conflict; start over",
        )
    by = state.get("by", "rebase")
    how = "derived" if by == "derive" else "rebased"
    lines = [f"# Patch series for {package} {version}, {how} from {state['from']} by `patchwheel {by}`."]
    for name, why in state["dropped"].items():
        lines.append(f"# dropped {name}: {why}")
    for i, (name, why) in enumerate(state["done"].items(), 1):
        if why == NEW:
            lines.append(f"# {patch_name(i, slug_of(name))}: {NEW} for {package} {version}")
    adopted = state.get("adopted", {})
    for i, name in enumerate(state["done"], 1):
        if name in adopted:
            lines.append(
                f"# {patch_name(i, slug_of(name))}: from the line {adopted[name]} (its {name}): its bug is in "
                f"{version}, and {state['from']} has no fix"
            )
    for i, (rev, name) in enumerate(zip(revs, names, strict=True), 1):  # lengths checked above
        new_name = patch_name(i, slug_of(name))
        (tmp / new_name).write_bytes(gitops.format_patch(repo, rev))
        lines.append(new_name)
    (tmp / "series").write_text("\n".join(lines) + "\n")
    tmp.replace(target)
    pins = project.pins_file(package)
    table = f'[release."{version}"]\n'
    table += f'wheel = {{ filename = "{state["wheel"][0]}", sha256 = "{state["wheel"][1]}" }}\n'
    if state["sdist"]:
        table += f'sdist = {{ filename = "{state["sdist"][0]}", sha256 = "{state["sdist"][1]}" }}\n'
    add_release(pins, version, table)
    wrote, pinned = target.relative_to(project.root), pins.relative_to(project.root)
    log(f"wrote {wrote}/ ({len(names)} patch(es), {len(state['dropped'])} dropped) and pinned {version} in {pinned}")
    project, line = _with_line(project, state, target)  # with the new pin, as a load would read it
    record = buildno.bump_unless_draft(project, line, log=log)  # its first build
    if record is not None:
        project, line = _with_line(project, state, target, record)
    vendored.write(project, [line], log=lambda m: None)
    log(f"wrote the fixed modules of the new line into overlay/{package}/{version}/")
    return project


def _with_line(
    project: Project, state: dict, target: Path, build: BuildRecord | None = None
) -> tuple[Project, ReleaseLine]:
    """``project`` with the line just written (its pin as ``state`` says, its build record ``build``), and that line:
    what a load would read now, passed along instead of loading everything again."""
    package, version = state["package"], state["to"]
    like = project.lines[package][0]  # the package's settings (one pins.toml)
    line = ReleaseLine(
        package=package,
        version=version,
        wheel=Artifact(*state["wheel"]),
        sdist=Artifact(*state["sdist"]) if state["sdist"] else None,
        patch_dir=target,
        local_label=like.local_label,
        import_name=like.import_name,
        source_root=like.source_root,
        build=build,
        retired_build=config.retired_build(project.pins_file(package), version),
    )
    others = [ln for ln in project.lines[package] if ln.version != version]
    project = config.changed(project, lines={package: [*others, line]})
    return project, project.line(package, version)
