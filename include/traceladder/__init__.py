"""traceladder: profiling ladders for Primus training, run by Airflow, analysed TraceLens-style."""

__version__ = "0.1.0"
