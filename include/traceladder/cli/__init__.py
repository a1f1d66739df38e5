"""The `traceladder` commands (`main.py`), the one-line user errors (`errors.py`) and `changes`."""
