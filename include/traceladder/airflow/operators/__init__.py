"""Operators: a rung as a container on a ROCm host (docker.py) or as a Slurm batch job (slurm.py)."""
