"""Persistence behind two ports: ``protocol.Store`` (jobs, phases, events, tool calls, costs) and
``cluster.Cluster`` (the replicas sharing the database), opened together by ``factory.open_storage``.

Everything else here is the drivers' business: ``sql_store`` (the queries both databases share),
``sqlite_store`` (embedded, ``SingleNode``), and the PostgreSQL modules (``postgres_store``,
``postgres_cluster``, ``postgres_admission``, ``postgres_notify``, ``postgres_migrations``). The
import contracts keep them behind the ports (pyproject.toml). Nothing is re-exported here, so a
SQLite-only server never loads the PostgreSQL driver.
"""
