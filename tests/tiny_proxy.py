"""The CPU proxy shrunk to what the fault, scheduler and secret tests need: one layer, four
experts, a 32-token sequence, four iterations. They check the pipeline around a rung, not the
proxy, so its 8-layer, 256-expert model would only cost time. Every test folder imports it as
`tests.tiny_proxy` (pytest's `pythonpath` puts the repository root on sys.path)."""

TINY_MODEL = {
    "num_layers": 1,
    "compress_ratios": [0],
    "num_experts": 4,
    "moe_router_topk": 2,
    "seq_length": 32,
    "max_position_embeddings": 32,
    "index_topk": 8,
    "train_iters": 4,
}
