"""tritonserver: find it (:mod:`.locate`), run it (:mod:`.process`), talk to it (:mod:`.health`), read its log."""

from .errors import ServerError, StaleServerError
from .health import ServerHandle, States, version_note
from .locate import find_tritonserver, python_tag, stub_for_python, triton_version
from .ports import free_port, free_ports, port_in_use
from .process import TritonServer
from .pyenv import PythonEnv
from .serverlog import LOG_KEEP

__all__ = [
    "LOG_KEEP",
    "PythonEnv",
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
