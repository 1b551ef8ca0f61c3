"""Sending webhooks over HTTP (issue 26): the URL rules, the Standard Webhooks signature, and a POST that
reaches only an address it checked.

An adapter beside ``egress`` and ``store``: the phases layer's dispatcher (``phases/webhook_dispatcher``)
drives it. Its SSRF checks use the same address rules as the egress proxy (``domain/addresses.py``,
plain domain code), so it needs nothing of ``egress``.
"""
