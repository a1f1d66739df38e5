"""Stand-in rocm-trace-lite (tests only): see cli.py."""

__version__ = "0.3.3"
