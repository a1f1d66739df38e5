"""The CPU proxy shrunk to what the fault, scheduler and secret tests need: one layer, four
experts, a 32-token sequence, four iterations. They check the pipeline around a rung, not the
proxy, so its 8-layer, 256-expert model would only cost time. Every test folder imports it as
`tests.tiny_proxy` (pytest's `pythonpath` puts the repository root on sys.path)."""

TINY_MODEL = {
    "num_layers": 1,
    # proxy-local's width is 32 (its calibration); the pipeline tests keep 64, the width their
    # noise margins were measured at (tests/integration/test_adaptive_dag.py)
    "hidden_size": 64,
    "compress_ratios": [0],
    "num_experts": 4,
    "moe_router_topk": 2,
    "seq_length": 32,
    "max_position_embeddings": 32,
    "index_topk": 8,
    "train_iters": 4,
}
