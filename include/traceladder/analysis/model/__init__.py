"""The trace model the readers build and the reports read: the event table, host tree, op args,
autograd links, the CSV table, and the shared helpers (intervals, op categories, values, vectors)."""
