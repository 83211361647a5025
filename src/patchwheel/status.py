"""Which fixes does an installed environment carry? Standard library only.

This file runs inside the environment being asked about (``patchwheel status --python PATH`` feeds it to that
interpreter), so it must not import anything outside the standard library, nor the packages themselves (importing
transformers takes seconds and pulls in torch).
"""

from __future__ import annotations

import hashlib
import json
import sys
from importlib import metadata

PACKAGES = ("transformers", "accelerate")
MANIFEST_NAME = "overlay-fixes.json"


def inspect(name: str) -> dict:
    try:
        dist = metadata.distribution(name)
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
    raw = dist.read_text(MANIFEST_NAME)
    if raw is None:
        if "+" in dist.version:
            problems.append(f"version {dist.version} has a local label but no {MANIFEST_NAME}: not a patchwheel build")
        return info
    manifest = json.loads(raw)
    info.update(fixed=True, upstream=manifest["upstream"], patches=manifest["patches"])
    if manifest.get("version") != dist.version:
        problems.append(f"manifest says {manifest.get('version')}, installed metadata {dist.version}")
    for rel, sha in manifest.get("patched_files", {}).items():
        try:
            with open(str(dist.locate_file(rel)), "rb") as fh:
                got = hashlib.sha256(fh.read()).hexdigest()
        except OSError:
            problems.append(f"patched file {rel} is missing")
            continue
        if got != sha:
            problems.append(f"patched file {rel} was modified after install")
    return info


def report(names=PACKAGES) -> dict:
    return {"python": sys.executable, "packages": [inspect(n) for n in names]}


def render(rep: dict) -> str:
    out = [f"environment: {rep['python']}"]
    for p in rep["packages"]:
        if not p["installed"]:
            out.append(f"  {p['package']:<13} not installed")
            continue
        if p["fixed"]:
            up = p["upstream"]
            state = "INTACT" if not p["problems"] else "DAMAGED"
            out.append(
                f"  {p['package']:<13} {p['version']:<16} +fixed build of {up['version']} "
                f"(upstream wheel sha256 {up['sha256'][:12]}…), {len(p['patches'])} fix(es), {state}"
            )
            for patch in p["patches"]:
                out.append(f"      {patch['name']}")
                out.append(f"          {patch['subject']}")
                out.append(f"          upstream: {patch['upstream_status']}  ({patch['upstream_issue']})")
        else:
            out.append(f"  {p['package']:<13} {p['version']:<16} pristine upstream (no fixes)")
        out += [f"      problem: {msg}" for msg in p["problems"]]
    return "\n".join(out)


if __name__ == "__main__":  # executed by `patchwheel status --python ...` inside the target environment
    as_json = "--json" in sys.argv
    rep = report([a for a in sys.argv[1:] if not a.startswith("--")] or PACKAGES)
    print(json.dumps(rep, indent=2) if as_json else render(rep))
    sys.exit(1 if any(p.get("problems") for p in rep["packages"]) else 0)
