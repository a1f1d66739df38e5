"""One analyzer per job: a trace (`trace.py`), the ranks of a run (`ranks.py`), two runs (`diff.py`)."""
