"""The RunnerService's descriptor and full name, for the code outside ``api`` that names the service.

The composition root registers health status and reflection under the service's name; taking it
from here keeps generated code inside ``api`` (the ``generated-code`` import contract).
"""

from __future__ import annotations

from helix.runner.v1 import runner_service_pb2

SERVICE = runner_service_pb2.DESCRIPTOR.services_by_name["RunnerService"]
SERVICE_NAME = SERVICE.full_name  # "helix.runner.v1.RunnerService"
