"""What the runtime dispatches: aten operations counted and traced, for operation-count checks and the cost model."""
