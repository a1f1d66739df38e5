"""Ladder to plan: the rung specs, the block design and seeds (`build.py`), and the DAG's slot grid
(`grid.py`)."""
