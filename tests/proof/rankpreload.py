"""The code under test, imported once in the rank harness's fork server, with a record of what its import read.

The fork server (harness.py) imports this module last of its PRELOAD. It imports LIBRARIES, the parts of
transformers and accelerate that nearly every rank imports (about 2 s of CPU a rank), so that a rank forked from the
server finds them imported. A rank of a real job imports them after torchrun has set its environment, so this is
the same only where the import read nothing that differs between the two. While they are imported, every variable
they read from ``os.environ`` is recorded with the server's value (None where unset), and every variable they set
(what they read after setting it is theirs, not the environment's). A rank then checks its environment
(:func:`differences`) and refuses to run where one they read differs; it sets what they set again, as its own import
would have done. A library that reads the whole environment while importing (iterates over it) cannot be checked
this way, and every rank refuses.

A library missing from the environment is skipped; one whose import fails is left for the rank to import (and fail)
itself, as it would without this module. What is recorded is what goes through ``os.environ``: a read through
``os.environb`` or C code's ``getenv`` is not (none of the libraries' imports reads so today).
"""

from __future__ import annotations

import gc
import os
import traceback
from dataclasses import dataclass, field

#: imported in this order; a name the environment lacks is skipped
LIBRARIES = (
    "transformers",
    "transformers.modeling_utils",
    "transformers.trainer",
    "transformers.models.llama.modeling_llama",
    "accelerate",
)


@dataclass
class Record:
    """What importing ``imported`` read from and did to ``os.environ``."""

    imported: list[str] = field(default_factory=list)
    #: variable -> the value it had when a library read it (None: it was unset)
    read: dict[str, str | None] = field(default_factory=dict)
    #: variable -> the value a library set (None: it deleted it)
    wrote: dict[str, str | None] = field(default_factory=dict)
    #: where a library iterated over the whole environment, as "module: file:line"
    whole: list[str] = field(default_factory=list)


def record_imports(names: tuple[str, ...]) -> Record:
    """Import ``names`` in order, recording what they read from and write to ``os.environ`` meanwhile."""
    record = Record()
    environ = type(os.environ)
    getitem, setitem, delitem, iterate = environ.__getitem__, environ.__setitem__, environ.__delitem__, environ.__iter__
    current = [""]

    def recorded_getitem(self, key):
        outside = self is os.environ and key not in record.wrote  # not a value the library set itself
        try:
            value = getitem(self, key)
        except KeyError:
            if outside:
                record.read.setdefault(key, None)
            raise
        if outside:
            record.read.setdefault(key, value)
        return value

    def recorded_setitem(self, key, value):
        if self is os.environ:
            record.wrote[key] = value
        setitem(self, key, value)

    def recorded_delitem(self, key):
        if self is os.environ:
            record.wrote[key] = None
        delitem(self, key)

    def recorded_iter(self):
        if self is os.environ:
            caller = next((f for f in reversed(traceback.extract_stack()[:-1]) if not f.filename.startswith("<")), None)
            record.whole.append(f"{current[0]}: {caller.filename}:{caller.lineno}" if caller else current[0])
        return iterate(self)

    recorders = {
        "__getitem__": recorded_getitem,
        "__setitem__": recorded_setitem,
        "__delitem__": recorded_delitem,
        "__iter__": recorded_iter,
    }
    originals = {name: getattr(environ, name) for name in recorders}
    for name, recorder in recorders.items():
        setattr(environ, name, recorder)
    try:
        for name in names:
            current[0] = name
            try:
                __import__(name)
            except ImportError:
                continue
            except Exception:  # noqa: BLE001 - the rank imports it again and sees the error itself
                continue
            record.imported.append(name)
    finally:
        for name, original in originals.items():
            setattr(environ, name, original)
    return record


def differences(environ, record: Record) -> str:
    """Why a rank with ``environ`` may not use what ``record`` imported ('' where it may)."""
    if record.whole:
        return (
            f"{', '.join(record.whole)} read the whole environment while importing in the fork server, so a rank "
            "cannot check that its own import would have gone alike; take that library out of rankpreload.LIBRARIES"
        )
    differ = sorted(k for k, v in record.read.items() if environ.get(k) != v)
    if not differ:
        return ""
    said = ", ".join(f"{k} ({_compared(record.read[k], environ.get(k))})" for k in differ)
    return (
        f"{', '.join(record.imported)} read {said} at import in the fork server, before this rank's environment was "
        "set; set it in the environment of the test process before it imports the harness, not in "
        "run_ranks(env=...) or later"
    )


def _compared(there: str | None, here: str | None) -> str:
    """How a variable differs, without its values (a token or a password may be one)."""
    if there is None or here is None:
        return f"{'unset' if there is None else 'set'} there, {'unset' if here is None else 'set'} here"
    return "another value here"


def redo_writes(environ, record: Record) -> None:
    """Set what the libraries set in the environment at import, as the rank's own import would have."""
    for key, value in record.wrote.items():
        if value is None:
            environ.pop(key, None)
        else:
            environ[key] = value


#: what importing LIBRARIES read and did, in the process that imports this module (the fork server)
RECORD = record_imports(LIBRARIES)
# Everything the server imported stays for the life of every rank: out of the cyclic garbage collector's sight
# (gc.freeze, made for servers that fork). Without it each gc.collect() of a rank walks the whole imported heap
# (0.25 s with transformers imported; Trainer and Accelerator call it through accelerate's free_memory) and writes to
# every page of it, which the fork shared. What the rank itself allocates is collected as before.
gc.freeze()
