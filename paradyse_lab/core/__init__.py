"""The core types: the model spec (and Hugging Face configs read into it), the strategy catalog, the layer graph,
the plan, grouped steps and the search problem."""
