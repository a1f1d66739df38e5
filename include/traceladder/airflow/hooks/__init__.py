"""Hooks: the Docker daemon of a ROCm host (rocm.py, with its host hygiene in docker_hygiene.py), the
Slurm login node over SSH (slurm.py), and an image registry (registry.py, over its Docker Registry
HTTP API v2 client, docker_registry.py)."""
