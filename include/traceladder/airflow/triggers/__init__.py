"""Triggers: the deferred wait on a Slurm job (slurm.py)."""
