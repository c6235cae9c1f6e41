"""The tiered-resource ledger, and its only owner.

Reservations of vCPUs, DRAM, slow memory (node-local or from a rack pool) and a contiguous run
of LLC ways live in the service's database (tables in store/orm.py, changed only by migrations).
Everything that writes them, and the one rule for the cluster's utilization vector U that
Algorithm 1 prices packing against, lives here: the extender, the API and the periodic snapshot
all call in, and an import contract (pyproject.toml) keeps the scheduler from reaching the tables
any other way.
"""
