"""Dev and test harness: the embedded S3, the local Airflow, stack and services, demo and up.

Nothing outside `dev`, `cli` and the tests imports it."""
