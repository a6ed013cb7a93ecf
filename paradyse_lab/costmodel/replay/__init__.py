"""The replay cost model: a trace of the operations one rank issues (recorded from the runtime's own code on meta
tensors), priced from per-machine tables on a host-dispatch / device / communication critical path. Torch-free:
traces are plain data, so the simulator can price cached ones."""
