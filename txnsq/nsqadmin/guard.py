# -*- test-case-name: tests.test_nsqadmin_guard -*-
"""
Cross-site request forgery protection for nsqadmin's actions.

Go nsqadmin v1.3 checks nothing but its ``--admin-user`` ACL: any page a
logged-in admin visits can make the browser ``POST`` to ``/api/topics``
(a form with a ``text/plain`` body is a "simple" request, sent without a
CORS preflight).  txnsq's nsqadmin refuses a state-changing request
(``POST``, ``PUT``, ``DELETE``, ``PATCH``) when:

- the browser says it comes from another site: ``Sec-Fetch-Site`` other
  than ``same-origin`` or ``none``, or an ``Origin`` (else a ``Referer``)
  whose host and port are not nsqadmin's own (the ``Host`` header, or a
  reverse proxy's ``X-Forwarded-Host``); ``403 CSRF_CROSS_ORIGIN``;
- it comes from a browser (it has any of those three headers) without a
  non-empty ``X-Requested-With`` header, which an HTML form cannot send
  and a cross-origin script cannot send without a CORS preflight that
  nsqadmin never approves; ``403 CSRF_HEADER_REQUIRED``.  nsqadmin's own
  script sends it.

A request with none of those browser headers (curl, scripts, Go's API
clients) is not a browser's and passes unchanged, so Go-compatible
clients keep working.  The scheme of an ``Origin`` is not compared (a
TLS-terminating proxy hides it), as Go 1.25's ``CrossOriginProtection``
does not compare it either.

The decision is :func:`csrf_refusal`, a pure function of header values.
"""

from __future__ import annotations

from typing import Iterable, Optional, Tuple
from urllib.parse import urlsplit

__all__ = [
    "CSRF_CROSS_ORIGIN",
    "CSRF_HEADER",
    "CSRF_HEADER_REQUIRED",
    "STATE_CHANGING",
    "csrf_refusal",
    "host_port",
]

#: The header nsqadmin's script sends with every action.
CSRF_HEADER = "X-Requested-With"

#: The 403 texts.
CSRF_CROSS_ORIGIN = "CSRF_CROSS_ORIGIN"
CSRF_HEADER_REQUIRED = "CSRF_HEADER_REQUIRED"

#: The methods that change something and are checked.
STATE_CHANGING = frozenset(["POST", "PUT", "DELETE", "PATCH"])

_DEFAULT_PORTS = {"http": 80, "https": 443}


def host_port(authority: str, default_port: int) -> Optional[Tuple[str, int]]:
    """
    ``host[:port]`` as a lower-cased host and a port (``default_port`` when
    none is written); None when it does not parse.
    """
    authority = authority.strip().lower()
    if not authority or "@" in authority or "/" in authority:
        return None
    try:
        parts = urlsplit("//" + authority)
        port = parts.port
    except ValueError:
        return None
    host = parts.hostname
    if not host:
        return None
    return host, port if port is not None else default_port


def _url_host_port(url: str) -> Optional[Tuple[str, int]]:
    """The host and port of an ``Origin`` or ``Referer`` URL; None for ``null`` or junk."""
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        return None
    return host_port(parts.netloc, _DEFAULT_PORTS[scheme])


def _same_site(url: str, own_hosts: Iterable[str]) -> bool:
    """Whether ``url`` names one of ``own_hosts`` (``host[:port]`` strings)."""
    theirs = _url_host_port(url)
    if theirs is None:
        return False
    scheme = urlsplit(url.strip()).scheme.lower()
    for own in own_hosts:
        # A Host without a port is the default port of the URL's scheme.
        if host_port(own, _DEFAULT_PORTS[scheme]) == theirs:
            return True
    return False


def csrf_refusal(
    method: str,
    origin: Optional[str],
    referer: Optional[str],
    sec_fetch_site: Optional[str],
    requested_with: Optional[str],
    own_hosts: Iterable[str],
) -> Optional[str]:
    """
    The 403 text refusing this request, or None to let it through.

    :param method: the request method.
    :param origin: the ``Origin`` header, or None.
    :param referer: the ``Referer`` header, or None.
    :param sec_fetch_site: the ``Sec-Fetch-Site`` header, or None.
    :param requested_with: the :data:`CSRF_HEADER` header, or None.
    :param own_hosts: the ``host[:port]`` names this nsqadmin answers to
        (its ``Host`` header and any ``X-Forwarded-Host``).
    """
    if method not in STATE_CHANGING:
        return None
    own = [host for host in own_hosts if host]
    if sec_fetch_site is not None and sec_fetch_site.strip().lower() not in (
        "same-origin",
        "none",
    ):
        return CSRF_CROSS_ORIGIN
    if origin is not None:
        if not _same_site(origin, own):
            return CSRF_CROSS_ORIGIN
    elif referer is not None and not _same_site(referer, own):
        return CSRF_CROSS_ORIGIN
    from_browser = origin is not None or referer is not None or sec_fetch_site is not None
    if from_browser and not (requested_with or "").strip():
        return CSRF_HEADER_REQUIRED
    return None
