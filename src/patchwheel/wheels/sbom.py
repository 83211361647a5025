"""The CycloneDX 1.6 SBOM each +fixed wheel carries (PEP 770: ``<name>-<version>.dist-info/sboms/``), made from the
wheel's manifest (:mod:`patchwheel.probes.manifest`, the one source of what the wheel records about itself) and the
series' bytes.

It describes the wheel's package as CycloneDX describes a rebuilt upstream component: ``pedigree.ancestors`` is the
pinned upstream wheel (its purl, sha256 and PyPI file URL), ``pedigree.patches`` each patch of the series in order,
with its whole text as the ``diff``, its class (``unofficial``, ``backport`` or ``cherry-pick``, from its
``Upstream-Status``) and the upstream issues and pull requests it ``resolves``. Properties name the wheel's build
(number and inputs digest: ``verify`` finds the commit that recorded that build and rebuilds from it) and each
patch's file name and sha256.

The bytes follow from the build's inputs alone: no serial number drawn at random (a UUID named by the inputs), no
time, no path, no version of this tool (its rewrite format is in the inputs digest). So two builds of one line give
one SBOM, and the wheel keeps the name-to-bytes rule of :mod:`buildno`. Standard library only, as the build is.
"""

from __future__ import annotations

import json
import re
import uuid
from email.parser import BytesHeaderParser
from urllib.parse import quote

#: The SBOM's file name inside ``.dist-info/sboms/`` (PEP 770 leaves the name to the tool that writes it).
NAME = "patchwheel.cdx.json"
#: The folder PEP 770 reserves for SBOM files inside ``.dist-info``.
FOLDER = "sboms"
#: The suffix of the detached copy beside the wheel in dist/: ``<wheel file name>.cdx.json``.
DETACHED = ".cdx.json"
#: Property names (CycloneDX's convention: a namespace, then the name).
INPUTS = "patchwheel:build:inputs-sha256"
BUILD = "patchwheel:build:number"
REWRITE = "patchwheel:build:rewrite-format"
PATCH = "patchwheel:patch"
TORCH = "patchwheel:proven-torch"
#: The namespace of the serial number's UUID (a UUID5 of the wheel's name and inputs digest).
_NAMESPACE = uuid.UUID("6f1a9b52-3c1e-5b8e-9d7a-2f4b8c0e1d35")

_GITHUB = re.compile(r"https://github\.com/([\w.-]+)/([\w.-]+)/(issues|pull)/(\d+)\Z")
_SHORT = re.compile(r"([\w.-]+)/([\w.-]+)#(\d+)\Z")


def member(distinfo: str) -> str:
    """The SBOM's path inside the wheel."""
    return f"{distinfo}/{FOLDER}/{NAME}"


def purl(package: str, version: str, **qualifiers: str) -> str:
    """A PyPI package URL (purl-spec's pypi type: the name lower-cased with '-' for '_', the version percent-encoded,
    so a local label's '+' is '%2B')."""
    name = package.lower().replace("_", "-")
    tail = "&".join(f"{k}={quote(v, safe='')}" for k, v in sorted(qualifiers.items()))
    return f"pkg:pypi/{name}@{quote(version, safe='')}" + (f"?{tail}" if tail else "")


def pypi_file_url(filename: str) -> str:
    """The wheel's URL on PyPI's file host, in the form that host serves for any file it holds
    (``/packages/<python tag>/<first letter>/<project>/<file>``): it follows from the file name alone."""
    project, _version, rest = filename.split("-", 2)
    python_tag = rest.split("-")[-3]
    return f"https://files.pythonhosted.org/packages/{python_tag}/{project[0]}/{project}/{filename}"


def patch_type(upstream_status: str | None) -> str:
    """CycloneDX's class of a patch, from its Upstream-Status: code upstream released later (``Backport <pr>``,
    ``Fixed-In <version>``) is a backport; a pull request upstream has not merged (``Fix-Proposed-In <pr>``) is a
    cherry-pick; a fix upstream has not made (``Pending``, ``Submitted``, ``Partial-Fix-In``) is unofficial."""
    word = (upstream_status or "").split(" ", 1)[0]
    return {"Backport": "backport", "Fixed-In": "backport", "Fix-Proposed-In": "cherry-pick"}.get(word, "unofficial")


def _issue_url(ref: str) -> tuple[str, str, str] | None:
    """(``owner/repo#N``, the tracker's URL, the reference's URL) of a GitHub issue or pull request, else None."""
    if m := _GITHUB.match(ref):
        owner, repo, _kind, number = m.groups()
        return f"{owner}/{repo}#{number}", f"https://github.com/{owner}/{repo}", ref
    if m := _SHORT.match(ref):  # GitHub sends the issue URL of a pull request on to it
        owner, repo, number = m.groups()
        return (
            f"{owner}/{repo}#{number}",
            f"https://github.com/{owner}/{repo}",
            f"https://github.com/{ref.replace('#', '/issues/')}",
        )
    return None


def resolves(entry: dict) -> list[dict]:
    """What a manifest patch entry resolves: each upstream issue of its Upstream-Issue trailer, with the pull
    request its Upstream-Status names (a backport's, a proposal's, a submission's) among the references."""
    kind = "enhancement" if entry.get("feature_test") else "defect"
    status = (entry.get("upstream_status") or "").split()
    pulls = [found[2] for word in status[1:] if (found := _issue_url(word))]  # as URLs, whichever form
    out = []
    for ref in (r.strip() for r in (entry.get("upstream_issue") or "").split(",")):
        if not ref:
            continue
        found = _issue_url(ref)
        if found is None:
            out.append({"type": kind, "id": ref, "description": entry.get("subject") or ""})
            continue
        ident, tracker, url = found
        out.append(_issue(kind, ident, entry, tracker, [url] + [p for p in pulls if p != url]))
    if not out and pulls and (found := _issue_url(pulls[0])):  # no issue named: the pull request is what it resolves
        out.append(_issue(kind, found[0], entry, found[1], pulls))
    return out


def _issue(kind: str, ident: str, entry: dict, tracker: str, references: list[str]) -> dict:
    """One GitHub issue or pull request a patch resolves, as CycloneDX writes it."""
    source = {"name": "GitHub", "url": tracker}
    return {
        "type": kind,
        "id": ident,
        "description": entry.get("subject") or "",
        "source": source,
        "references": references,
    }


def licenses(metadata: bytes) -> list[dict]:
    """The license as the upstream wheel's METADATA states it: its SPDX ``License-Expression`` (core metadata 2.4),
    else the first line of its ``License`` field by name; none when it states neither."""
    headers = BytesHeaderParser().parsebytes(metadata)
    if expression := (headers.get("License-Expression") or "").strip():
        return [{"expression": expression}]
    if name := (headers.get("License") or "").strip().splitlines()[:1]:
        return [{"license": {"name": name[0].strip()}}]
    return []


def make(
    manifest: dict,
    patch_texts: dict[str, bytes],
    metadata: bytes,
    filename: str,
    *,
    number: str,
    inputs: str,
    rewrite: int,
) -> dict:
    """The SBOM of the +fixed wheel ``filename``. ``manifest``: its manifest; ``patch_texts``: each patch's bytes by
    its name (the series as the build read it); ``metadata``: the upstream wheel's METADATA; ``number``: the wheel's
    build number ("" for a line without one); ``inputs``: its inputs digest; ``rewrite``: the rewrite's format."""
    package, version, upstream = manifest["package"], manifest["version"], manifest["upstream"]
    ancestor = {
        "type": "library",
        "bom-ref": purl(package, upstream["version"]),
        "name": package,
        "version": upstream["version"],
        "purl": purl(package, upstream["version"], file_name=upstream["wheel"]),
        "hashes": [{"alg": "SHA-256", "content": upstream["sha256"]}],
        "externalReferences": [
            {
                "type": "distribution",
                "url": pypi_file_url(upstream["wheel"]),
                "hashes": [{"alg": "SHA-256", "content": upstream["sha256"]}],
            },
            {"type": "website", "url": f"https://pypi.org/project/{package}/{upstream['version']}/"},
        ],
    }
    patches = []
    for entry in manifest["patches"]:
        patch: dict = {
            "type": patch_type(entry.get("upstream_status")),
            "diff": {"text": {"contentType": "text/x-diff", "content": patch_texts[entry["name"]].decode()}},
        }
        if found := resolves(entry):
            patch["resolves"] = found
        patches.append(patch)
    properties = [
        {"name": BUILD, "value": number},
        {"name": INPUTS, "value": inputs},
        {"name": REWRITE, "value": str(rewrite)},
        *({"name": TORCH, "value": t} for t in manifest.get("proven_torch", [])),
        *({"name": PATCH, "value": f"{e['name']} sha256:{e['sha256']}"} for e in manifest["patches"]),
    ]
    count = len(manifest["patches"])
    component = {
        "type": "library",
        "bom-ref": purl(package, version),
        "name": package,
        "version": version,
        "description": f"{package} {upstream['version']} rebuilt from its PyPI wheel with {count} "
        f"patch{'' if count == 1 else 'es'} (pedigree)",
        "licenses": licenses(metadata),
        "purl": purl(package, version),
        "pedigree": {"ancestors": [ancestor], "patches": patches},
        "properties": [p for p in properties if p["value"]],
    }
    if not component["licenses"]:
        del component["licenses"]
    serial = uuid.uuid5(_NAMESPACE, f"{filename}\0{inputs}")
    return {
        "$schema": "http://cyclonedx.org/schema/bom-1.6.schema.json",
        "bomFormat": "CycloneDX",
        "specVersion": "1.6",
        "serialNumber": f"urn:uuid:{serial}",
        "version": 1,
        "metadata": {
            "tools": {"components": [{"type": "application", "name": "patchwheel"}]},
            "component": component,
        },
    }


def dumps(bom: dict) -> bytes:
    """The file's bytes (the wheel's digest depends on them: never change the form without raising the rewrite
    format, :data:`patchwheel.wheels.buildno.REWRITE_FORMAT`)."""
    return (json.dumps(bom, indent=2, ensure_ascii=False) + "\n").encode()


def loads(raw: bytes) -> dict:
    """An SBOM this tool wrote, read back (ValueError: it is not one: not JSON, not CycloneDX, no component)."""
    try:
        bom = json.loads(raw)
    except ValueError:
        raise ValueError("not JSON") from None
    if not isinstance(bom, dict) or bom.get("bomFormat") != "CycloneDX":
        raise ValueError("not a CycloneDX document")
    component = (bom.get("metadata") or {}).get("component")
    if not isinstance(component, dict) or not isinstance(component.get("properties"), list):
        raise ValueError("no metadata.component with properties")
    return bom


def properties(bom: dict) -> dict[str, list[str]]:
    """The component's properties, each name with its values in order."""
    out: dict[str, list[str]] = {}
    for prop in bom["metadata"]["component"]["properties"]:
        if isinstance(prop, dict) and isinstance(prop.get("name"), str) and isinstance(prop.get("value"), str):
            out.setdefault(prop["name"], []).append(prop["value"])
    return out
