"""tritonserver: find it (:mod:`.locate`), run it (:mod:`.process`), talk to it (:mod:`.health`), read its log."""

from .errors import ServerError, StaleServerError
from .health import ServerHandle, States, version_note
from .locate import find_tritonserver, python_tag, stub_for_python, triton_version
from .ports import free_port, free_ports, port_in_use
from .process import LOG_KEEP, TritonServer

__all__ = [
    "LOG_KEEP",
    "ServerError",
    "ServerHandle",
    "StaleServerError",
    "States",
    "TritonServer",
    "find_tritonserver",
    "free_port",
    "free_ports",
    "port_in_use",
    "python_tag",
    "stub_for_python",
    "triton_version",
    "version_note",
]
