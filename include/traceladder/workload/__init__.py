"""DeepSeek-V4-Flash-shaped CPU proxy of Primus `train pretrain`: `python -m traceladder.workload`."""
