"""The embedded default: what runs on a machine with no cluster. The embedded S3, the local
Airflow, stack and services with the ports they use, the demo and `up`.

Nothing outside `embedded`, `cli` and the tests imports it."""
