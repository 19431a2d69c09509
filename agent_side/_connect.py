"""``connect(url)``: the one place that picks a backend."""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from typing import Any

from operations import Backend, InvalidArgument, RecordingBackend

__all__ = ["connect", "register_scheme"]

Factory = Callable[[urllib.parse.SplitResult, dict[str, Any]], Backend]

_SCHEMES: dict[str, Callable[[], Factory]] = {}


def register_scheme(scheme: str, loader: Callable[[], Factory]) -> None:
    """Make ``scheme:`` URLs open a backend. ``loader`` is called on first use (lazy imports)."""
    _SCHEMES[scheme] = loader


def _load_local() -> Factory:
    from broker import Broker

    def open_local(parts: urllib.parse.SplitResult, options: dict[str, Any]) -> Backend:
        path = urllib.parse.unquote(parts.path)
        if parts.netloc or not path.startswith("/"):
            raise InvalidArgument(
                "connect", parts.geturl(), "expected an absolute root path, as in 'local:/srv/ws'"
            )
        return Broker(path, **options)

    return open_local


register_scheme("local", _load_local)


def connect(url: str, **options: Any) -> Backend:
    """Open the backend that ``url`` names.

    ``memory:`` (in process, for CI harnesses), ``local:/path/to/root`` (the broker core in
    process), ``grpc://host:port`` / ``grpcs://`` / ``grpc+unix:///path.sock`` and
    ``ssh://user@host:port`` (a broker process). Keyword options go to the backend (``token=``,
    ``client_keys=``, ...). The result is an async context manager; close it with ``aclose()``.

    ``record=FILE`` records the session to the cassette ``FILE``
    (:class:`~operations.RecordingBackend`), for ``InMemoryOperations.from_cassette(FILE)`` to
    replay; the options (tokens, keys) and the URL's credentials are never written to it.

    Raises:
        InvalidArgument: the URL is malformed or its scheme is unknown.
    """
    if not isinstance(url, str) or not url:
        raise InvalidArgument("connect", str(url), "expected a backend URL such as 'memory:'")
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError as exc:
        raise InvalidArgument("connect", url, f"malformed URL: {exc}") from None
    scheme = parts.scheme.lower()
    loader = _SCHEMES.get(scheme)
    if loader is None:
        known = ", ".join(f"{s}:" for s in sorted(_SCHEMES))
        raise InvalidArgument(
            "connect", url, f"unknown backend scheme {scheme!r}; use one of {known}"
        )
    record = options.pop("record", None)
    backend = loader()(parts, options)
    if record is None:
        return backend
    source = parts._replace(netloc=parts.netloc.rpartition("@")[2], query="", fragment="")
    return RecordingBackend(backend, record, source=source.geturl())


def _memory_factory(parts: urllib.parse.SplitResult, options: dict[str, Any]) -> Backend:
    from operations import InMemoryOperations

    if parts.netloc or parts.query or parts.fragment:
        raise InvalidArgument(
            "connect",
            parts.geturl(),
            "a memory URL takes only a root path, e.g. 'memory:/workspace'",
        )
    if parts.path:
        options = {"root": parts.path, **options}
    try:
        return InMemoryOperations(**options)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument("connect", parts.geturl(), str(exc)) from None


def _grpc() -> Factory:
    from ._remote.grpc import open_from_url

    return open_from_url


def _register_builtins() -> None:
    register_scheme("memory", lambda: _memory_factory)
    for scheme in ("grpc", "grpcs", "grpc+unix"):
        register_scheme(scheme, _grpc)


_register_builtins()


def _load_ssh() -> Factory:
    from ._remote.ssh import open_ssh_url

    return open_ssh_url


register_scheme("ssh", _load_ssh)
