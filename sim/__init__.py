"""Tiered-memory host simulator: the ground truth tmc is measured against (docs/sim.md).

It simulates accesses; it never evaluates the TMC equation (that is what it tests).

    sim.workload   the workload format (tmc.sim-workload/v1, TOML or JSON)
    sim.catalog    the six workloads of the paper's Table 5 (sim/workloads/*.toml)
    sim.machine    hosts: core, LLC, memory tiers; Optane, local CXL and rack-pool presets
    sim.host       simulate() one configuration, ground_truth_grid() many
    sim.profile    reference_bundle(): the tmc.profile/v1 bundle an agent would upload
    sim.trace, sim.engine, sim.kernels, sim.placement   the machinery
"""
