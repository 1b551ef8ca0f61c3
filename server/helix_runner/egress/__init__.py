"""The phases' way to the network: the model-API gateway and the egress proxy (issue 21).

``service.Egress`` starts both; ``capabilities`` are the per-phase tokens they authenticate;
``gateway`` forwards the CLI's Messages API requests with the real key; ``proxy`` is the HTTP(S)
proxy with a per-phase allowlist; ``allowlist`` and ``addresses`` are the pure rules it applies;
``upstream`` and ``usage_meter`` serve the gateway. This layer imports only ``domain``, ``errors``
and libraries (pyproject.toml, the layers contract).
"""
