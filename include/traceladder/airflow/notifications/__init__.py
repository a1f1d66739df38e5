"""Notifications: the regression notice through a webhook connection (regression.py)."""
