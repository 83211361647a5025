"""URLs that may carry credentials: a package index or torch source named with a user and password
(``https://USER:PASSWORD@host/simple``, PATCHWHEEL_INDEX_URL, TORCH_SOURCE, PIP_INDEX_URL), and the links read
from its pages.

:func:`redact` is the one way such a URL is shown or stored: every error (:class:`~patchwheel.errors.PatchwheelError`
redacts its message and hint), every line printed about an index, every marker that records where something came
from. The user and password become ``***`` (``https://***@host/simple``, as pip's ``redact_auth_from_url`` hides
them), and so does each value of a query string (a signed download link's token). :func:`split_auth` takes them out
of a URL for the one place that sends them, as a basic-auth header (``wheels/fetch.py``); an installer (uv, pip) is
given the URL whole, and reads them itself, never on its command line (``proofenv._install``).
"""

from __future__ import annotations

import re
import urllib.parse

#: A URL in text: a scheme and ``//``, up to white space, a quote or an angle bracket.
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]*")
#: What stands for the user and password, and for a query value.
HIDDEN = "***"


def redact(text: str) -> str:
    """``text`` with every URL in it shown without its user, password and query values."""
    return _URL.sub(lambda m: _redact_url(m.group()), text)


def _redact_url(url: str) -> str:
    scheme, _, rest = url.partition("://")
    # Everything up to the URL's last '@' is hidden: a password with a '/', '?', '#' or '@' that was not
    # percent-encoded (no URL parser reads it whole) is hidden too, at the cost of the host of a URL whose path or
    # query holds an '@'. A file: URL names a path on this machine, which may hold an '@': only its authority (up to
    # the first '/') is looked at.
    authority = rest.partition("/")[0] if scheme.lower() == "file" else rest
    if "@" in authority:
        rest = f"{HIDDEN}@{rest[authority.rindex('@') + 1 :]}"
    before_query, q, query = rest.partition("?")
    if q:
        query, h, fragment = query.partition("#")
        query = re.sub(r"=[^&;]*", f"={HIDDEN}", query) + h + fragment
    return f"{scheme}://{before_query}{q}{query}"


def split_auth(url: str) -> tuple[str, tuple[str, str] | None]:
    """The URL without its user and password, and them (percent-decoded; no password: ``""``), or None."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    userinfo, _, host = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    start = url.index("//") + 2  # the netloc as written, right after it
    bare = url[:start] + host + url[start + len(parts.netloc) :]
    return bare, (urllib.parse.unquote(user), urllib.parse.unquote(password))
