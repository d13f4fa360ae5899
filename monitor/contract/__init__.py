"""The contract: everything a component (a collector, a detector, a command) may import."""
