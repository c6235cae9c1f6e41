"""The tiered-resource ledger, and its only owner.

The bound pods' reservations of vCPUs, DRAM, slow memory (node-local or from a rack pool) and a
contiguous run of LLC ways are mirrored into the service's database (tables in store/orm.py,
changed only by migrations); the scheduler's Go engine reserves, and the publisher's feeder
writes the mirror from the pods' placements. Everything that writes these tables, and the one rule
for the cluster's utilization vector U that Algorithm 1 prices packing against, lives here: the
feeder, the API and the periodic snapshot all call in, and an import contract (pyproject.toml)
keeps the scheduler's Python side from reaching the tables any other way.
"""
