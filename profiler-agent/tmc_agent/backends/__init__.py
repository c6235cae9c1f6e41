"""Profile backends: `hardware` (PMU, resctrl, NUMA), `trace` (valgrind lackey + the simulator's
host model), `sim` (the simulator's synthetic workloads). Each returns a checked bundle."""
