"""The composition root: builds a server from its parts (``assembly``), each a component with a
start and a stop that owns its section of the config (``lifecycle``: the stack that starts and
stops them). Only ``serve`` (cli/serve.py) and tests start one.
"""

from helix_runner.server.assembly import RunningServer, serve, start_server
from helix_runner.server.lifecycle import StartupError
from helix_runner.server.model_access import ChildCredentials, child_credentials, egress_ports

__all__ = ["ChildCredentials", "RunningServer", "StartupError", "child_credentials", "egress_ports", "serve",
           "start_server"]
