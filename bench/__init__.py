"""flupfast's benchmarks (not installed with the package): ``python -m bench [--quick]``."""
