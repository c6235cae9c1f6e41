"""The placement half's Python processes: the publisher, which writes the service's decisions as
TieredRecommendation objects; the feeder, which keeps the ledger a mirror of the bound pods and
nodes; and the relay of the nodes' reports onto their pods. The placement rule itself is the Go
engine in scheduler/plugin (tmc-scheduler and tmc-extender)."""
