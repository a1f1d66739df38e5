"""Hooks: the Docker daemon of a ROCm host (rocm.py) and the Slurm login node over SSH (slurm.py)."""
