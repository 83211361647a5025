"""The propose job's filter: apply follow's diff to the index only if it is a new release line, nothing else.

follow runs upstream's code, so its job holds no write token and hands its change on as a diff; the job that can
write (and opens the pull request) applies it with this script, which uses the standard library and git only
(nothing of the diff, nothing installed), on an index of its own: a refused diff leaves the checkout untouched.
What follow may change, and so all that is accepted:

- new regular files under ``patches/<pkg>/<new>/`` and ``overlay/<pkg>/<new>/`` for a release line that did not
  exist, whose pin table ``overlay/<pkg>/pins.toml`` adds;
- the deletion of a retired line: every file of ``patches/<pkg>/<old>/`` and ``overlay/<pkg>/<old>/``, with its pin
  table removed;
- in ``overlay/<pkg>/pins.toml``: whole ``[release."<version>"]`` tables added or removed (for those lines), and
  the ``[retired]`` build number of each line removed, at least the number it recorded; every other value as it
  was (an existing line's build record included: a number set back under new bytes would name two wheels alike);
- versions compared as PEP 440 does (``packaging``): a new line is a release newer than every line there was,
  named as PEP 440 writes its version, pinning that release's wheel; no key of the file is another spelling of
  another's version (a line ``5.24`` beside or after ``5.24.0`` would give one version two sets of build numbers,
  ``"v5.23.0" = 1`` beside ``"5.23.0" = 6`` was read as 5.23.0's retired number);
- in ``overlay/sets.toml``: the ``latest`` set's entry for this package, moved to the new line; nothing else;
- ``overlay/NOTICE`` and the matrix, ``patches/MATRIX.json`` and ``patches/MATRIX.md``.

No renames, copies, links, mode changes, binary hunks, or path component starting with ``.``. The checks run on
what git itself staged (``git apply --cached`` into a temporary index), so what is checked is what is committed.
The script needs the standard library, git and ``packaging`` (the job installs it from a hashed lock), nothing of
the diff.
Usage, in the checkout's root: ``python .github/scripts/follow_diff.py <package> <diff>``; exit 1 with the reasons
on stderr and nothing changed, 0 with the diff applied to the checkout's index and files.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import tomllib

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

_SHARED = ("overlay/NOTICE", "patches/MATRIX.json", "patches/MATRIX.md")


#: The index the diff is staged into first: a file of its own, so a refused diff leaves the checkout untouched.
INDEX: dict[str, str] = {}


def git(*args: str, check: bool = True) -> str:
    # The user's git configuration does not change what is checked.
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, **INDEX}
    done = subprocess.run(["git", *args], capture_output=True, text=True, env=env)
    if check and done.returncode != 0:
        raise SystemExit(f"refused: git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def toml_at(ref: str, path: str) -> dict:
    text = git("show", f"{ref}:{path}", check=False)
    try:
        return tomllib.loads(text) if text else {}
    except tomllib.TOMLDecodeError as exc:
        raise SystemExit(f"refused: {path} is not TOML after the diff ({exc})") from exc


def diff_problems(package: str, diff: str) -> list[str]:
    """What in the diff file itself is not follow's: renames, copies, modes, binary hunks, hidden paths."""
    out = []
    for line in git("apply", "--summary", diff).splitlines():
        if re.match(r" (rename|copy) ", line):
            out.append(f"a rename or copy: {line.strip()}")
        elif "mode" in line and not re.match(r" (create|delete) mode 100644 ", line):
            out.append(f"a mode that is not a regular file's: {line.strip()}")
    for entry in git("apply", "--numstat", "-z", diff).split("\0"):
        if not entry:
            continue
        added, removed, path = entry.split("\t", 2)
        if added == "-" or removed == "-":
            out.append(f"a binary change: {path}")
        if any(part.startswith(".") for part in path.split("/")):
            out.append(f"a path with a hidden component: {path}")
    return out


def staged_problems(package: str) -> list[str]:
    """What the staged change does that follow does not do."""
    out: list[str] = []
    changes = git("diff", "--cached", "--name-status", "--no-renames", "-z").split("\0")
    staged = list(zip(changes[0::2], changes[1::2], strict=False))
    before = toml_at("HEAD", f"overlay/{package}/pins.toml")
    after = toml_at("", f"overlay/{package}/pins.toml")
    old_lines = set(before.get("release", {}))
    new_lines = set(after.get("release", {}))
    added, removed = new_lines - old_lines, old_lines - new_lines
    line_folder = re.compile(rf"(patches|overlay)/{re.escape(package)}/([^/]+)/.+\Z")
    for status, path in staged:
        if any(part.startswith(".") for part in path.split("/")):
            out.append(f"{path}: a hidden path")
        elif m := line_folder.match(path):
            version = m[2]
            if status == "A" and version not in added:
                out.append(f"{path}: a new file in {package} {version}, which is not a line this change adds")
            elif status == "D" and version not in removed:
                out.append(f"{path}: deleted from {package} {version}, a line this change keeps")
            elif status not in ("A", "D"):
                out.append(f"{path}: changes the existing line {package} {version} ({status})")
        elif path == f"overlay/{package}/pins.toml" and status == "M":
            continue
        elif path == "overlay/sets.toml" and status == "M":
            continue
        elif path in _SHARED and status in ("A", "M"):
            continue
        else:
            out.append(f"{path}: outside what follow writes for {package} ({status})")
    for version in sorted(removed):
        if _parsed(version) is None:
            out.append(f"overlay/{package}/pins.toml: {version!r} is not a version")
    out += _version_problems(package, before, after, added, removed)
    for version in sorted(removed):
        left = git("ls-files", "-z", "--", f"patches/{package}/{version}", f"overlay/{package}/{version}")
        if left.strip("\0"):
            out.append(f"{package} {version}: its pin is removed but files of the line remain: {left.split(chr(0))[0]}")
    for version in sorted(added):
        if not git("ls-files", "--", f"patches/{package}/{version}/series").strip():
            out.append(f"{package} {version}: a pin without a series (patches/{package}/{version}/series)")
    out += _pins_problems(package, before, after)
    out += _sets_problems(package, added)
    return out


def _pins_problems(package: str, before: dict, after: dict) -> list[str]:
    where = f"overlay/{package}/pins.toml"
    out = []
    for key in sorted(set(before) | set(after)):
        if key in ("release", "retired"):
            continue
        if before.get(key) != after.get(key):
            out.append(f"{where}: {key} changed")
    for version in sorted(set(before.get("release", {})) & set(after.get("release", {}))):
        if before["release"][version] != after["release"][version]:
            out.append(f"{where}: the table of the existing line {version} changed (its pin or build record)")
    old, new = before.get("retired", {}), after.get("retired", {})
    for version in sorted(set(old) | set(new)):
        if version not in new or not isinstance(new[version], int) or new[version] < old.get(version, 0):
            out.append(f"{where}: [retired] {version} went from {old.get(version)!r} to {new.get(version)!r}")
    return out


def _parsed(key: str) -> Version | None:
    try:
        return Version(key)
    except InvalidVersion:
        return None


def _spelling_problem(key: str) -> str | None:
    """Why ``key`` is not a version as a key of pins.toml (the tool's config.py refuses the same): PEP 440's
    spelling of it, no local label."""
    version = _parsed(key)
    if version is None:
        return f"{key!r} is not a version"
    if version.local is not None:
        return f"{key!r} has a local label: an upstream release has none"
    if str(version) != key:
        return f"{key!r} is not a version as PEP 440 writes it ({str(version)!r})"
    return None


def _version_problems(package: str, before: dict, after: dict, added: set[str], removed: set[str]) -> list[str]:
    """The versions the diff adds, compared as PEP 440 does with every key the file had or has: each new line is
    a release newer than the newest line there was, in PEP 440's spelling, pinning its own wheel; each [retired]
    number added or raised is a removed line's, at least the build number that line recorded."""
    where = f"overlay/{package}/pins.toml"
    out = []
    old_retired, new_retired = before.get("retired", {}), after.get("retired", {})
    changed = sorted(v for v in new_retired if new_retired[v] != old_retired.get(v))
    keys = [
        *((f"the line {k}", k) for k in sorted(set(before.get("release", {})) | set(after.get("release", {})))),
        *((f'[retired] "{k}"', k) for k in sorted(set(old_retired) | set(new_retired))),
    ]

    def same_version(key: str, own: str) -> list[str]:
        version = _parsed(key)
        return [
            f"{where}: {own} is the version of {label} (PEP 440: {key} == {other})"
            for label, other in keys
            if other != key and version is not None and _parsed(other) == version
        ]

    newest = max((v for k in before.get("release", {}) if (v := _parsed(k)) is not None), default=None)
    for key in sorted(added):
        if problem := _spelling_problem(key):
            out.append(f"{where}: the new line {problem}")
            continue
        found = same_version(key, f"the new line {key}")
        out += found
        if not found and newest is not None and Version(key) <= newest:
            out.append(
                f"{where}: the new line {key} is not newer than the newest line {newest} (follow adds only newer "
                "releases)"
            )
        table = after["release"][key]
        wheel = table.get("wheel", {}).get("filename") if isinstance(table, dict) else None
        try:
            of = str(parse_wheel_filename(wheel)[1]) if isinstance(wheel, str) else None
        except InvalidWheelFilename:
            of = None
        if of is None:
            out.append(f"{where}: the new line {key} pins no wheel file name ({wheel!r})")
        elif of != key:
            out.append(f"{where}: the new line {key} pins {wheel}, a wheel of {of}, not of {key}")
    for key in changed:
        if problem := _spelling_problem(key):
            out.append(f"{where}: [retired] {problem}")
            continue
        out += same_version(key, f'[retired] "{key}"')
        number = new_retired[key]
        if key not in removed:
            out.append(
                f'{where}: [retired] "{key}" = {number} is added or raised, but this change retires no line {key}'
            )
            continue
        build = before["release"][key].get("build", {}) if isinstance(before["release"][key], dict) else {}
        recorded = build.get("number", 1) if isinstance(build, dict) else 1
        if isinstance(number, int) and isinstance(recorded, int) and number < recorded:
            out.append(
                f'{where}: [retired] "{key}" = {number} is below the build number {recorded} the retired line recorded'
            )
    for key in sorted(removed):
        if key not in new_retired:
            out.append(f"{where}: the line {key} is removed without its build number in [retired]")
    return out


def _sets_problems(package: str, added: set[str]) -> list[str]:
    before, after = toml_at("HEAD", "overlay/sets.toml"), toml_at("", "overlay/sets.toml")
    if before == after:
        return []
    latest_before = before.get("set", {}).get("latest", {})
    latest_after = after.get("set", {}).get("latest", {})
    rest_before = {**before, "set": {k: v for k, v in before.get("set", {}).items() if k != "latest"}}
    rest_after = {**after, "set": {k: v for k, v in after.get("set", {}).items() if k != "latest"}}
    out = []
    if rest_before != rest_after:
        out.append("overlay/sets.toml: a set other than latest, or [suite], changed")
    others = {k: v for k, v in latest_after.items() if k != package}
    if others != {k: v for k, v in latest_before.items() if k != package}:
        out.append(f"overlay/sets.toml: the latest set changed for another package than {package}")
    if latest_after.get(package) != latest_before.get(package) and latest_after.get(package) not in added:
        out.append(
            f"overlay/sets.toml: latest names {package} {latest_after.get(package)}, not a line this change adds"
        )
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", argv[0]):
        print("usage: follow_diff.py <package> <diff>", file=sys.stderr)
        return 2
    package, diff = argv
    problems = diff_problems(package, diff)
    if not problems:
        with tempfile.TemporaryDirectory(prefix="follow-diff-") as tmp:
            INDEX["GIT_INDEX_FILE"] = os.path.join(tmp, "index")
            try:
                git("read-tree", "HEAD")
                git("apply", "--cached", diff)
                problems = staged_problems(package)
            finally:
                INDEX.clear()
    if not problems:
        git("apply", "--index", diff)  # what was checked, now in the checkout's own index and files
    if problems:
        print(f"refused: the diff is not a new line of {package}:", file=sys.stderr)
        for p in problems:
            print(f"  - {p}", file=sys.stderr)
        return 1
    print(f"staged: a new line of {package}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
