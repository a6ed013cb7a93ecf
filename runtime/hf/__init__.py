"""Hugging Face conversion: configs and state dicts in the runtime's terms, model folders read per rank and written
back from a checkpoint."""
