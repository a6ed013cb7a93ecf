"""Results and their provenance: result keys and the code version, measured timings kept apart, software
versions."""
