"""Which fixes does an installed environment carry? Standard library only.

This file runs inside the environment being asked about (``patchwheel status --python PATH`` feeds it to that
interpreter), so it must not import anything outside the standard library, nor the packages themselves (importing
transformers takes seconds and pulls in torch), and it must run on Python 3.8. It runs there with ``-I -S``: no
``site`` start-up, so none of the environment's code runs (a ``.pth`` line starting with ``import`` is code); it finds
the site folders as ``site`` would (:func:`site_dirs`) and reads their ``.pth`` path lines as text. It reads only
regular files inside the site folder of each package, whatever its manifest names.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from importlib import metadata

if __package__:
    from . import manifest as fixes
else:  # run alone inside the inspected environment (-I: its folder is not on sys.path): carry the format's owner
    import importlib.util

    _spec = importlib.util.spec_from_file_location(
        "patchwheel_manifest", os.path.join(os.path.dirname(os.path.abspath(__file__)), "manifest.py")
    )
    fixes = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
    _spec.loader.exec_module(fixes)  # type: ignore[union-attr]

PACKAGES = ("transformers", "accelerate")


def site_dirs() -> list:
    """The folders ``site`` would put on sys.path (a venv's, with the system's when its pyvenv.cfg includes them;
    plus the existing folders their .pth files name), found without running any .pth file: importing ``site`` under
    -S runs nothing (only its start-up does). Before Python 3.11 a venv's prefix is set by that start-up, so the
    venv is found here as ``site.venv`` finds it: a pyvenv.cfg beside the interpreter or one folder up."""
    import site

    exe_dir = os.path.dirname(os.path.abspath(sys.executable))
    prefix = os.path.dirname(exe_dir)
    prefixes = [sys.prefix, sys.exec_prefix]
    for cfg in (os.path.join(exe_dir, "pyvenv.cfg"), os.path.join(prefix, "pyvenv.cfg")):
        if os.path.isfile(cfg):
            system_site = "true"
            with open(cfg, encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    key, sep, value = line.partition("=")
                    if sep and key.strip().lower() == "include-system-site-packages":
                        system_site = value.strip().lower()
            prefixes = [prefix] + ([sys.base_prefix, sys.base_exec_prefix] if system_site == "true" else [])
            break
    found: list = []
    for sitedir in site.getsitepackages(prefixes):
        if os.path.isdir(sitedir) and sitedir not in found:
            found.append(sitedir)
            found += [d for d in _pth_paths(sitedir) if d not in found]
    return found


def _pth_paths(sitedir: str) -> list:
    """The folders named by the path lines of ``sitedir``'s .pth files, as ``site.addpackage`` reads them, minus
    what it runs: a line starting with ``import`` is skipped, never executed."""
    out = []
    for name in sorted(os.listdir(sitedir)):
        if not name.endswith(".pth") or name.startswith("."):
            continue
        try:
            with open(os.path.join(sitedir, name), encoding="utf-8", errors="replace") as fh:
                lines = fh.read().splitlines()
        except OSError:
            continue
        for line in lines:
            if not line.strip() or line.startswith("#") or line.startswith(("import ", "import\t")):
                continue
            folder = os.path.join(sitedir, line.rstrip())
            if os.path.isdir(folder):
                out.append(os.path.abspath(folder))
    return out


def _find(name: str, path) -> metadata.Distribution:
    """The distribution ``name`` as sys.path (or ``path``) finds it first."""
    if path is None:
        return metadata.distribution(name)
    for dist in metadata.distributions(name=name, path=path):
        return dist
    raise metadata.PackageNotFoundError(name)


def _plain_relative(rel: str) -> bool:
    return (
        bool(rel)
        and not rel.startswith("/")
        and "\\" not in rel
        and "\x00" not in rel
        and not any(part in ("", ".", "..") for part in rel.split("/"))
    )


def _digest(site: str, rel: str) -> tuple:
    """(sha256 of ``site/rel`` or None when it is missing, why it was not read or None). Only a regular file inside
    ``site`` is read: the manifest is the package's own claim, and must not make the probe read anything else."""
    if not _plain_relative(rel):
        return None, "not a plain relative path"
    base = os.path.realpath(site)
    real = os.path.realpath(os.path.join(site, rel))
    if os.path.commonpath([base, real]) != base:
        return None, f"a link out of {site}"
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None, None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None, "not a regular file"
        return hashlib.sha256(fh.read()).hexdigest(), None


def inspect(name: str, path=None) -> dict:
    """What ``name`` is in this environment (``path``: the folders to look in; default sys.path)."""
    try:
        dist = _find(name, path)
    except metadata.PackageNotFoundError:
        return {"package": name, "installed": False}
    problems: list[str] = []
    info = {
        "package": name,
        "installed": True,
        "version": dist.version,
        "fixed": False,
        "patches": [],
        "problems": problems,
    }
    raw = dist.read_text(fixes.NAME)
    if raw is None:
        if "+" in dist.version:
            problems.append(f"version {dist.version} has a local label but no {fixes.NAME}: not a patchwheel build")
        return info
    try:
        manifest = fixes.loads(raw)
    except ValueError as exc:
        info.update(fixed=True, upstream=None)
        problems.append(f"{fixes.NAME} is damaged: {exc}")
        return info
    info.update(fixed=True, upstream=manifest["upstream"], patches=manifest["patches"], build=_build_tag(dist))
    torch = manifest.get("proven_torch")
    if isinstance(torch, list) and all(isinstance(t, str) for t in torch):
        info["proven_torch"] = torch
    if manifest.get("version") != dist.version:
        problems.append(f"manifest says {manifest.get('version')}, installed metadata {dist.version}")
    site = str(dist.locate_file(""))
    for rel, sha in manifest.get("patched_files", {}).items():
        got, unread = _digest(site, rel)
        if unread is not None:
            problems.append(f"the manifest names {rel!r}, {unread}: not read")
        elif got is None:
            problems.append(f"patched file {rel} is missing")
        elif got != sha:
            problems.append(f"patched file {rel} was modified after install")
    return info


def _build_tag(dist) -> str | None:
    """WHEEL's ``Build:`` line: the wheel's build tag, its number and the start of its inputs digest (a changed
    patch series is the next build of the same version); None for a wheel built before build tags."""
    for line in (dist.read_text("WHEEL") or "").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "Build":
            return value.strip()
    return None


def report(names=PACKAGES, path=None) -> dict:
    try:
        torch = _find("torch", path).version
    except metadata.PackageNotFoundError:
        torch = None
    return {"python": sys.executable, "torch": torch, "packages": [inspect(n, path) for n in names]}


def torch_note(rep: dict):
    """Where the environment's torch is not one the +fixed builds' fixes were proven on: a sentence saying so (it
    is information, not a known bug: the exit status does not change); None otherwise."""
    torch = rep.get("torch")
    proven = sorted({t for p in rep["packages"] for t in p.get("proven_torch") or ()}, key=_release)
    if not torch or not proven or torch.split("+")[0] in proven:
        return None
    return (
        f"torch {torch} here: the fixes of these +fixed builds were proven on torch {', '.join(proven)}, not on "
        "this one (they may well hold; nothing shows that they do)"
    )


def _release(version: str) -> tuple:
    return tuple(int(n) if n.isdigit() else 0 for n in version.split("."))


def _is_str(value) -> bool:
    return isinstance(value, str)


def _is_strings(value) -> bool:
    return isinstance(value, list) and all(isinstance(x, str) for x in value)


#: What render, the known-bugs lookup and ``--json`` readers rely on: field -> (check, what it must be).
_INSTALLED = {
    "version": (_is_str, "a string"),
    "fixed": (lambda v: isinstance(v, bool), "true or false"),
    "problems": (_is_strings, "a list of strings"),
    "patches": (lambda v: isinstance(v, list) and all(isinstance(x, dict) for x in v), "a list of objects"),
}
_UPSTREAM = {"version": (_is_str, "a string"), "sha256": (_is_str, "a string")}


def _shape(obj: dict, fields: dict, owner: str = "") -> str | None:
    """Why ``obj`` lacks one of ``fields`` or has one of another type; None when it has them all."""
    for key, (check, what) in fields.items():
        if key not in obj:
            return f"{owner} has no {key!r}" if owner else f"no {key!r}"
        if not check(obj[key]):
            return f"{key!r} of {owner} is not {what}" if owner else f"{key!r} is not {what}"
    return None


def report_problem(rep, names) -> str | None:
    """Why ``rep`` (the probe's output, parsed) is not a report of the packages ``names``; None when it is one. The
    interpreter that printed it is the user's: anything may come back, and a KeyError would exit 1 ("a known bug
    applies")."""
    if not isinstance(rep, dict):
        return "not a JSON object"
    why = _shape(rep, {"python": (_is_str, "a string")})
    if why is not None:
        return why
    if not (rep.get("torch") is None or _is_str(rep["torch"])):
        return "'torch' is not a string"
    packages = rep.get("packages")
    if not isinstance(packages, list):
        return "'packages' is not a list"
    got = [p.get("package") if isinstance(p, dict) else None for p in packages]
    if got != list(names):
        return f"packages {got}, asked for {list(names)}"
    for p in packages:
        why = _package_problem(p)
        if why is not None:
            return f"{p['package']}: {why}"
    return None


def _package_problem(p: dict) -> str | None:
    if not isinstance(p.get("installed"), bool):
        return "'installed' is not true or false"
    if not p["installed"]:
        return None
    why = _shape(p, _INSTALLED)
    if why is not None:
        return why
    if "proven_torch" in p and not _is_strings(p["proven_torch"]):
        return "'proven_torch' is not a list of strings"
    for i, patch in enumerate(p["patches"], 1):
        why = fixes.patch_problem(patch, i)
        if why is not None:
            return why
    if not p["fixed"]:
        return None
    if p.get("upstream") is None and "upstream" in p and p["problems"]:
        return None  # a damaged manifest, said in the problems
    if not isinstance(p.get("upstream"), dict):
        return "no 'upstream'" if "upstream" not in p else "'upstream' is not an object"
    return _shape(p["upstream"], _UPSTREAM, "'upstream'")


def render(rep: dict) -> str:
    out = [f"environment: {rep['python']}"]
    out.append(f"  {'torch':<13} {rep.get('torch') or 'not installed'}")
    for p in rep["packages"]:
        if not p["installed"]:
            out.append(f"  {p['package']:<13} not installed")
            continue
        if p["fixed"]:
            up = p["upstream"]
            state = "INTACT" if not p["problems"] else "DAMAGED"
            if up is None:
                built = f"+fixed build (its {fixes.NAME} cannot be read)"
                out.append(f"  {p['package']:<13} {p['version']:<16} {built}, {state}")
            else:
                build = f"build {p['build']}; " if p.get("build") else ""
                out.append(
                    f"  {p['package']:<13} {p['version']:<16} +fixed build of {up['version']} "
                    f"({build}upstream wheel sha256 {up['sha256'][:12]}…), {len(p['patches'])} fix(es), {state}"
                )
            if p.get("proven_torch"):
                out.append(f"      fixes proven on torch {', '.join(p['proven_torch'])}")
            for patch in p["patches"]:
                out.append(f"      {patch['name']}")
                out.append(f"          {patch.get('subject') or ''}")
                out.append(f"          upstream: {patch.get('upstream_status')}  ({patch.get('upstream_issue')})")
        else:
            out.append(f"  {p['package']:<13} {p['version']:<16} pristine upstream (no fixes)")
        out += [f"      problem: {msg}" for msg in p["problems"]]
    if note := torch_note(rep):
        out.append(f"note: {note}")
    return "\n".join(out)


if __name__ == "__main__":  # executed by `patchwheel status --python ...` inside the target environment (-I -S)
    as_json = "--json" in sys.argv
    names = [a for a in sys.argv[1:] if not a.startswith("--")] or PACKAGES
    rep = report(names, site_dirs() if sys.flags.no_site else None)
    print(json.dumps(rep, indent=2) if as_json else render(rep))
    sys.exit(1 if any(p.get("problems") for p in rep["packages"]) else 0)
