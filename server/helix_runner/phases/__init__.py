"""The application layer: phases admitted, run, controlled and queried.

``queries`` is the read model the API asks (jobs, phases, tool calls, cost totals, a running
phase's snapshot), answering with the plain values of ``views``. Nothing is re-exported here, so
importing one module of the package does not import the others (they depend on each other).
"""
