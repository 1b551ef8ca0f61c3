"""Sending webhooks over HTTP (issue 26): the URL rules, the Standard Webhooks signature, and a POST that
reaches only an address it checked.

An adapter beside ``egress`` and ``store``: the phases layer's dispatcher (``phases/webhook_dispatcher``)
drives it. It reuses the egress proxy's address rules (``egress/addresses.py``), which is why it sits
one layer above the other adapters in the import contract.
"""
