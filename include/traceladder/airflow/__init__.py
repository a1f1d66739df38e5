"""traceladder's Airflow provider: its reusable parts, as a provider package holds them. Hooks
(hooks/: a ROCm host's Docker daemon and its hygiene, the Slurm login node, an image registry),
operators (operators/: a rung as a container or a Slurm job), triggers (triggers/), notifications
(notifications/), the provider's info (provider.py), and what the operators share (blocks.py: a
block's slot spec; ladders.py: a ladder's file and store). Our own DAGs are built in
traceladder.workflows, which this package never imports."""
