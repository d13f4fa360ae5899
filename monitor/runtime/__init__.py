"""The runtime: the process that loads the components and runs them (CLI, config loading,
sidecar, pipeline)."""
