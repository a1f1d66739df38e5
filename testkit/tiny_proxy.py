"""The CPU proxy shrunk to what the fault, scheduler and secret tests need: one layer, four
experts, a 32-token sequence, four iterations. They check the pipeline around a rung, not the
proxy, so its 8-layer, 256-expert model would only cost time. The unit, integration and fault
tests import it as `testkit.tiny_proxy` (pytest's `pythonpath` puts the repository root on sys.path)."""

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
# The torch lenses' window for a ladder that extends proxy-local with TINY_MODEL. proxy-local's
# lens values set their own train_iters (a profiled run stops at its window's end), and a ladder's
# switch values deep-merge over it, so the tiny one is said again here.
TINY_LENS = {"model_args": {"train_iters": TINY_MODEL["train_iters"], "profile_step_start": 2, "profile_step_end": 4}}


# The fusion gates Primus reads (PRIMUS_*_TRITON): "0" turns one off.
FUSION_GATES = (
    "PRIMUS_RMSNORM_TRITON",
    "PRIMUS_ROPE_TRITON",
    "PRIMUS_SINKHORN_TRITON",
    "PRIMUS_HC_TRITON",
    "PRIMUS_V4_ROUTER_TRITON",
)
# A 2-layer proxy for the workload and attribution tests, in each override syntax Primus takes
# (`--key value`, `--key=value`, `key=value`).
TWO_LAYER_ARGS = [
    "--num_layers",
    "2",
    "--compress_ratios=[0,4]",
    "hidden_size=32",
    "--num_attention_heads",
    "2",
    "--num_experts",
    "8",
    "--moe_router_topk",
    "2",
    "--moe_ffn_hidden_size",
    "8",
    "--seq_length",
    "64",
    "--attn_sliding_window",
    "16",
    "--vocab_size",
    "64",
    "--seed",
    "7",
]
# Record iteration 2 of 3 (Primus's window is [start, end), 1-based).
PROFILE_SECOND_OF_THREE = [
    "--train_iters",
    "3",
    "--profile",
    "True",
    "--use_pytorch_profiler",
    "True",
    "--profile_step_start",
    "2",
    "--profile_step_end",
    "3",
    "--exp_name",
    "t",
]
