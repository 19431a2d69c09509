"""The sandboxd front-end (kubernetes-sigs/agent-sandbox KEP-539.2 runtime protocol).

Layout: ``process`` (the ``process.v1.ProcessService`` servicer over ``backend.processes``),
``files`` (the REST filesystem API as an ASGI app over the backend's file operations),
``server`` (both, plus ``grpc.health.v1``, on their listeners), and the pieces they share:
``_status`` (errors to gRPC/HTTP statuses, one table), ``_paths`` (request paths and query
values, sans I/O), ``_multipart`` (a form's ``file`` part, streamed, sans I/O) and ``_auth`` (the
token header). The HTTP server is the one every HTTP front-end runs on (``.._http``).
"""

from .files import FilesApp as FilesApp
from .process import ProcessServicer as ProcessServicer
from .server import SandboxdServer as SandboxdServer

__all__ = ["FilesApp", "ProcessServicer", "SandboxdServer"]
