"""overlay-fixes.json, the manifest each +fixed wheel carries in its .dist-info: the format's one definition (its
name, its version, its keys), how it is made, written as bytes and read back.

The build makes it (:func:`make`), rewrite writes it into the wheel (:func:`dumps`), verify, distdir and ``status``
read it (:func:`loads`, :func:`problem`). Standard library only, and Python 3.8: ``status.py`` runs alone inside
the environment it inspects and carries this file there (it loads it from beside itself).
"""

from __future__ import annotations

import hashlib
import json

#: The file's name inside the wheel's .dist-info folder.
NAME = "overlay-fixes.json"
#: The format's version, the manifest's "schema" key.
SCHEMA = 1
#: Each patch's entry: its key, and the patch trailer it is taken from (None: the patch's own name, subject, sha256).
PATCH_KEYS = (
    ("name", None),
    ("subject", None),
    ("sha256", None),
    ("upstream_status", "Upstream-Status"),
    ("upstream_issue", "Upstream-Issue"),
    ("proof_test", "Proof-Test"),
    ("feature_test", "Feature-Test"),
    ("drop_when", "Drop-When"),
)


def patch_entry(name: str, subject: str, sha256: str, trailers) -> dict:
    """One patch as the manifest records it (``trailers``: the patch's trailers, a mapping)."""
    own = {"name": name, "subject": subject, "sha256": sha256}
    return {key: own[key] if trailer is None else trailers.get(trailer) for key, trailer in PATCH_KEYS}


def make(
    package: str,
    version: str,
    upstream: dict,
    patches: list,
    patched_files: dict,
    proven_torch=(),
) -> dict:
    """The manifest of one +fixed wheel. ``upstream``: the pinned wheel's version, file name and sha256;
    ``patches``: :func:`patch_entry` dicts in series order; ``patched_files``: wheel path -> new bytes (None: deleted,
    not recorded); ``proven_torch``: the torch versions the line is proven on (recorded only when there are any)."""
    out = {
        "schema": SCHEMA,
        "package": package,
        "version": version,
        "upstream": {key: upstream[key] for key in ("version", "wheel", "sha256")},
        "patches": list(patches),
        "patched_files": {
            path: hashlib.sha256(data).hexdigest() for path, data in sorted(patched_files.items()) if data is not None
        },
    }
    if proven_torch:
        out["proven_torch"] = list(proven_torch)
    return out


def dumps(manifest: dict) -> bytes:
    """The file's bytes, as the wheel carries them (the wheel's digest depends on them: never change the form)."""
    return (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()


def loads(raw) -> dict:
    """The manifest in ``raw`` (bytes or text), checked to be one the tool can read; ValueError saying why not."""
    try:
        manifest = json.loads(raw)
    except ValueError:
        raise ValueError("not JSON") from None
    why = problem(manifest)
    if why is not None:
        raise ValueError(why)
    return manifest


def problem(manifest) -> str | None:
    """Why ``manifest`` (parsed JSON) is not a manifest the tool can read; None when it is one."""
    if not isinstance(manifest, dict):
        return "not a JSON object"
    up = manifest.get("upstream")
    if not isinstance(up, dict) or not all(isinstance(up.get(k), str) for k in ("version", "sha256")):
        return "'upstream' is not an object with a version and a sha256"
    patches = manifest.get("patches")
    if not isinstance(patches, list) or not all(isinstance(p, dict) for p in patches):
        return "'patches' is not a list of objects"
    for i, p in enumerate(patches, 1):
        why = patch_problem(p, i)
        if why is not None:
            return why
    files = manifest.get("patched_files", {})
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        return "'patched_files' is not an object of paths and digests"
    return None


def patch_problem(patch, i: int) -> str | None:
    """Why ``patch`` (the i-th of a manifest or a status report) cannot be shown: a name, and the texts status shows
    when it has them (a manifest written by hand for a test may have only the name)."""
    if not isinstance(patch, dict):
        return f"patch {i} is not an object"
    if not isinstance(patch.get("name"), str):
        return f"patch {i} has no 'name'" if "name" not in patch else f"'name' of patch {i} is not a string"
    for key in ("subject", "upstream_status", "upstream_issue"):
        if not (patch.get(key) is None or isinstance(patch.get(key), str)):
            return f"{key!r} of patch {i} is not a string"
    return None
