"""Primus-style overrides and environment → one frozen `ProxyConfig`.

Deliberately torch-free: the launcher parses (and rejects malformed args with exit 2) before any
rank process pays the ~1.5 s torch import.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

ATTENTION_BACKENDS = ("triton_v1", "gluon_v3", "turbo")
# Primus has more backends; "eager" is its op-by-op reference, which is what triton_v1 models here.
_BACKEND_ALIASES = {"eager": "triton_v1"}
FUSION_GATES = {
    "rmsnorm": "PRIMUS_RMSNORM_TRITON",
    "rope": "PRIMUS_ROPE_TRITON",
    "sinkhorn": "PRIMUS_SINKHORN_TRITON",
    "hc": "PRIMUS_HC_TRITON",
    "router": "PRIMUS_V4_ROUTER_TRITON",
}
# The experiment YAML reads these through `${VAR:default}` placeholders; the proxy plays that
# YAML, so they set defaults and the command line still wins (docs/facts.md, "Primus under madengine: the seed ladder").
_YAML_ENV_DEFAULTS = {
    "use_turbo_deepep": "PRIMUS_USE_TURBO_DEEPEP",
    "use_v4_attention_backend": "PRIMUS_USE_V4_ATTENTION_BACKEND",
    "use_v4_csa_attention_backend": "PRIMUS_USE_V4_CSA_ATTENTION_BACKEND",
    "exp_name": "PRIMUS_EXP_NAME",
}


class ProxyConfigError(ValueError):
    """A bad argument: the launcher prints `str(err)` as one line and exits 2."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"[proxy] error: --{key}: {message}")
        self.key = key


SWIGLU_LIMIT = 7.0


@dataclass(frozen=True)
class Fusions:
    rmsnorm: bool = True
    rope: bool = True
    sinkhorn: bool = True
    hc: bool = True
    router: bool = True

    def describe(self) -> str:
        on = [name for name, value in dataclasses.asdict(self).items() if value]
        if len(on) == len(FUSION_GATES):
            return "on"
        return "+".join(on) if on else "off"


@dataclass(frozen=True)
class ProxyConfig:
    # sizes
    num_layers: int = 8
    compress_ratios: tuple[int, ...] = (0, 0, 4, 128, 4, 128, 4, 0)
    hidden_size: int = 64
    num_attention_heads: int = 4
    attn_sliding_window: int = 64
    hc_mult: int = 4
    hc_sinkhorn_iters: int = 10
    vocab_size: int = 512
    num_experts: int = 256
    moe_router_topk: int = 6
    moe_ffn_hidden_size: int = 16
    # V4's experts clamp the SwiGLU's gate (above) and up (both sides) projections at this limit
    # (v4_grouped_experts_support_clamped_swiglu); 0 = plain SwiGLU.
    swiglu_limit: float = 0.0
    seq_length: int = 256
    micro_batch_size: int = 1
    global_batch_size: int = 2
    train_iters: int = 10
    seed: int = 1234
    expert_model_parallel_size: int = 2
    moe_router_force_load_balancing: bool = True
    # optimiser (Megatron names)
    lr: float = 1e-3
    min_lr: float = 0.0
    lr_warmup_iters: int = 0
    lr_decay_style: str = "cosine"
    weight_decay: float = 0.1
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95
    clip_grad: float = 1.0
    init_method_std: float = 0.02
    norm_epsilon: float = 1e-6
    bf16: bool = False
    # logging
    log_avg_skip_iterations: int = 2
    # Megatron's --manual-gc: the threshold collector off, a full collection every N iterations
    # (0: only before the loop), so collections stop landing at random points of the timed steps
    manual_gc: bool = False
    manual_gc_interval: int = 0
    # switches
    fusions: Fusions = field(default_factory=Fusions)
    attention_backend: str = "triton_v1"
    csa_attention_backend: str = "triton_v1"
    use_turbo_deepep: bool = False
    grouped_gemm: bool = False
    mega_moe: bool = False
    mega_moe_chunks: int = 2
    recompute_granularity: str | None = None
    recompute_method: str = "block"
    recompute_num_layers: int = 0
    # profiling
    profile: bool = False
    use_pytorch_profiler: bool = False
    profile_ranks: tuple[int, ...] = (0,)
    profile_step_start: int = 10
    profile_step_end: int = 12
    torch_profiler_use_gzip: bool = True
    exp_name: str = "proxy"
    # the positive control: extra matmul work per iteration, in % of the warm-up step's time
    extra_work_pct: float = 0.0
    # the named region the extra work is recorded under (a build that slows one region: issue 51)
    extra_work_region: str = "extra_work"
    # what the extra work is a share of: the warm-up step's wall time, or its compute-thread CPU
    # time (the slowest rank's), which a `metric: cpu` ladder judges
    extra_work_basis: str = "wall"
    workspace: str = "./output"
    distributed_timeout_minutes: float = 3.0
    ignored_keys: tuple[str, ...] = ()

    @property
    def world_size(self) -> int:
        return self.expert_model_parallel_size

    @property
    def num_micro_batches(self) -> int:
        return self.global_batch_size // (self.micro_batch_size * self.world_size)

    @property
    def local_experts(self) -> int:
        return self.num_experts // self.world_size

    @property
    def layer_ratios(self) -> tuple[int, ...]:
        """compress_ratios fitted to num_layers (truncated or cycled), so `--num_layers 2` alone works."""
        r = self.compress_ratios or (0,)
        return tuple(r[i % len(r)] for i in range(self.num_layers))

    @property
    def profiling(self) -> bool:
        return self.profile and self.use_pytorch_profiler

    @property
    def dispatcher(self) -> str:
        if self.mega_moe:
            return "mega_moe"
        return "alltoall" if self.use_turbo_deepep else "allgather"

    def recomputed_layers(self) -> list[int]:
        """Layer indices whose whole block is checkpointed (full granularity)."""
        if self.recompute_granularity != "full" or self.recompute_num_layers <= 0:
            return []
        if self.recompute_method == "uniform":
            return list(range(self.num_layers))
        return list(range(min(self.recompute_num_layers, self.num_layers)))

    def header(self) -> str:
        return (
            f"[proxy] world_size={self.world_size} layers={self.num_layers} experts={self.num_experts} "
            f"topk={self.moe_router_topk} hidden={self.hidden_size} heads={self.num_attention_heads} "
            f"moe_ffn={self.moe_ffn_hidden_size} seq={self.seq_length} vocab={self.vocab_size} "
            f"hc_mult={self.hc_mult} window={self.attn_sliding_window} "
            f"compress_ratios=[{','.join(map(str, self.layer_ratios))}] "
            f"micro_batch={self.micro_batch_size} global_batch={self.global_batch_size} "
            f"micro_batches_per_rank={self.num_micro_batches} iters={self.train_iters} "
            f"dtype={'bf16' if self.bf16 else 'fp32'} | switches: fusions={self.fusions.describe()} "
            f"attention={self.attention_backend} csa_attention={self.csa_attention_backend} "
            f"dispatcher={self.dispatcher} grouped_gemm={self.grouped_gemm} mega_moe={self.mega_moe} "
            f"recompute_granularity={self.recompute_granularity} recompute_method={self.recompute_method} "
            f"recompute_num_layers={self.recompute_num_layers} "
            f"profile={'ranks' + str(list(self.profile_ranks)) if self.profiling else 'off'}"
            + (f" extra_work_pct={self.extra_work_pct:g}" if self.extra_work_pct else "")
            + (f" extra_work_region={self.extra_work_region}" if self.extra_work_pct else "")
            + (f" extra_work_basis={self.extra_work_basis}" if self.extra_work_pct else "")
        )


# ---------------------------------------------------------------- value parsers

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _bool(text: str) -> bool:
    low = text.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ValueError(f"expected true/false, got {text!r}")


def _swiglu_limit(text: str) -> float:
    """The flag turns on V4's clamp at its limit, 7.0 (as GPT-OSS's clamped SwiGLU)."""
    return SWIGLU_LIMIT if _bool(text) else 0.0


def _int(text: str) -> int:
    return int(text.strip())


def _float(text: str) -> float:
    return float(text.strip())


def _int_list(text: str) -> tuple[int, ...]:
    body = text.strip()
    if body.startswith("[") and body.endswith("]"):
        body = body[1:-1]
    elif "[" in body or "]" in body:
        raise ValueError(f"unbalanced list {text!r}")
    parts = [p.strip() for p in body.replace(" ", ",").split(",") if p.strip()]
    return tuple(int(p) for p in parts)


def _optional_str(text: str) -> str | None:
    low = text.strip()
    return None if low.lower() in {"", "none", "null"} else low


def _backend(text: str) -> str:
    value = _BACKEND_ALIASES.get(text.strip(), text.strip())
    if value not in ATTENTION_BACKENDS:
        raise ValueError(f"expected one of {', '.join(ATTENTION_BACKENDS)}, got {text!r}")
    return value


def _one(text: str) -> int:
    value = int(text)
    if value != 1:
        raise ValueError(f"the proxy models TP=PP=1 only, got {value}")
    return value


# key → (ProxyConfig field or None for a check-only key, parser)
_KEYS: dict[str, tuple[str | None, Callable[[str], Any]]] = {
    "num_layers": ("num_layers", _int),
    "compress_ratios": ("compress_ratios", _int_list),
    "hidden_size": ("hidden_size", _int),
    "num_attention_heads": ("num_attention_heads", _int),
    "attn_sliding_window": ("attn_sliding_window", _int),
    "hc_mult": ("hc_mult", _int),
    "hc_sinkhorn_iters": ("hc_sinkhorn_iters", _int),
    "vocab_size": ("vocab_size", _int),
    "num_experts": ("num_experts", _int),
    "moe_router_topk": ("moe_router_topk", _int),
    "moe_ffn_hidden_size": ("moe_ffn_hidden_size", _int),
    "v4_grouped_experts_support_clamped_swiglu": ("swiglu_limit", _swiglu_limit),
    "seq_length": ("seq_length", _int),
    "micro_batch_size": ("micro_batch_size", _int),
    "global_batch_size": ("global_batch_size", _int),
    "train_iters": ("train_iters", _int),
    "seed": ("seed", _int),
    "expert_model_parallel_size": ("expert_model_parallel_size", _int),
    "moe_router_force_load_balancing": ("moe_router_force_load_balancing", _bool),
    "lr": ("lr", _float),
    "min_lr": ("min_lr", _float),
    "lr_warmup_iters": ("lr_warmup_iters", _int),
    "lr_decay_style": ("lr_decay_style", str),
    "weight_decay": ("weight_decay", _float),
    "adam_beta1": ("adam_beta1", _float),
    "adam_beta2": ("adam_beta2", _float),
    "clip_grad": ("clip_grad", _float),
    "init_method_std": ("init_method_std", _float),
    "norm_epsilon": ("norm_epsilon", _float),
    "bf16": ("bf16", _bool),
    "log_avg_skip_iterations": ("log_avg_skip_iterations", _int),
    "manual_gc": ("manual_gc", _bool),
    "manual_gc_interval": ("manual_gc_interval", _int),
    "use_v4_attention_backend": ("attention_backend", _backend),
    "use_v4_csa_attention_backend": ("csa_attention_backend", _backend),
    "use_turbo_deepep": ("use_turbo_deepep", _bool),
    "use_turbo_grouped_gemm": ("grouped_gemm", _bool),
    "moe_grouped_gemm": ("grouped_gemm", _bool),
    "use_turbo_mega_moe": ("mega_moe", _bool),
    "mega_moe_chunks": ("mega_moe_chunks", _int),
    "recompute_granularity": ("recompute_granularity", _optional_str),
    "recompute_method": ("recompute_method", str),
    "recompute_num_layers": ("recompute_num_layers", _int),
    "profile": ("profile", _bool),
    "use_pytorch_profiler": ("use_pytorch_profiler", _bool),
    "profile_ranks": ("profile_ranks", _int_list),
    "profile_step_start": ("profile_step_start", _int),
    "profile_step_end": ("profile_step_end", _int),
    "torch_profiler_use_gzip": ("torch_profiler_use_gzip", _bool),
    "exp_name": ("exp_name", str),
    "extra_work_pct": ("extra_work_pct", _float),
    "extra_work_region": ("extra_work_region", str),
    "extra_work_basis": ("extra_work_basis", str),
    "distributed_timeout_minutes": ("distributed_timeout_minutes", _float),
    "tensor_model_parallel_size": (None, _one),
    "pipeline_model_parallel_size": (None, _one),
}


# Primus keys a ladder passes the proxy as it passes Primus (the seed's fusions, router and profiler
# flags) that the proxy does not model: it takes them and leaves them out (`ignored_keys`).
PRIMUS_KEYS_NOT_MODELLED = frozenset(
    {
        "cross_entropy_loss_fusion",
        "enable_primus_turbo",
        "gradient_accumulation_fusion",
        "index_topk",
        "log_interval",
        "max_position_embeddings",
        "mock_data",
        "moe_permute_fusion",
        "moe_router_enable_expert_bias",
        "moe_router_force_load_balancing_type",
        "moe_use_fused_router_with_aux_score",
        "mtp_num_layers",
        "rope_type",
        "torch_profiler_record_shapes",
        "torch_profiler_with_stack",
        "turbo_sync_free_moe_stage",
        "use_turbo_attention",
        "use_turbo_rms_norm",
        "use_v4_compiled_sinkhorn",
        "v4_indexer_distill_loss_coeff",
    }
)
# The proxy's own key list: what a ladder that runs it may set (config/validate.py holds ladders to it).
PROXY_KEYS: frozenset[str] = frozenset(_KEYS) | PRIMUS_KEYS_NOT_MODELLED


# ---------------------------------------------------------------- argv → {key: text}


def split_overrides(argv: Sequence[str]) -> dict[str, str]:
    """`--key value`, `--key=value`, `key=value` (last one wins, as in Primus); a bare `--flag`
    followed by another `--key` or nothing means True. `train pretrain` may lead, as in primus-cli."""
    args = list(argv)
    while args and args[0] in ("train", "pretrain"):
        args.pop(0)
    out: dict[str, str] = {}
    i = 0
    while i < len(args):
        tok = args[i]
        if tok.startswith("--"):
            body = tok[2:]
            if "=" in body:
                key, value = body.split("=", 1)
                i += 1
            elif i + 1 < len(args) and not args[i + 1].startswith("--"):
                key, value = body, args[i + 1]
                i += 2
            else:
                key, value = body, "true"
                i += 1
        elif "=" in tok and not tok.startswith("="):
            key, value = tok.split("=", 1)
            i += 1
        else:
            raise ProxyConfigError(tok, "unexpected argument (expected --key value, --key=value or key=value)")
        key = key.strip().replace("-", "_")
        if not key:
            raise ProxyConfigError(tok, "empty key")
        out[key] = value
    return out


def _fusions(env: Mapping[str, str]) -> Fusions:
    # Primus: a gate is on unless its variable is exactly "0".
    return Fusions(**{name: env.get(var, "1").strip() != "0" for name, var in FUSION_GATES.items()})


def parse(argv: Sequence[str], env: Mapping[str, str] | None = None) -> ProxyConfig:
    env = os.environ if env is None else env
    raw = split_overrides(argv)
    # YAML placeholders first, then the command line (which beats the YAML in Primus).
    merged: dict[str, str] = {k: env[v] for k, v in _YAML_ENV_DEFAULTS.items() if env.get(v, "").strip()}
    merged.update(raw)
    values: dict[str, Any] = {}
    ignored: list[str] = []
    for key, text in merged.items():
        if key not in _KEYS:
            if key in raw:
                ignored.append(key)
            continue
        target, conv = _KEYS[key]
        try:
            value = conv(text)
        except ValueError as err:
            raise ProxyConfigError(key, f"bad value {text!r} ({err})") from None
        if target is not None:
            # use_turbo_grouped_gemm / moe_grouped_gemm are aliases: either one turns it on.
            if target == "grouped_gemm" and values.get("grouped_gemm"):
                continue
            values[target] = value
    if "use_v4_attention_backend" in merged and "use_v4_csa_attention_backend" not in merged:
        values["csa_attention_backend"] = values["attention_backend"]
    values["fusions"] = _fusions(env)
    values["workspace"] = env.get("PRIMUS_WORKSPACE", "").strip() or "./output"
    values["ignored_keys"] = tuple(ignored)
    settings = ProxyConfig(**values)
    return _validate(settings, bf16_ok=cpu_has_bf16())


def cpu_has_bf16() -> bool:
    """bf16 is a trap on AVX2-only CPUs (docs/facts.md, "The CPU proxy"); allow it only with hw support."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            flags = fh.read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def _validate(s: ProxyConfig, bf16_ok: bool) -> ProxyConfig:
    positive = [
        "num_layers",
        "hidden_size",
        "num_attention_heads",
        "vocab_size",
        "num_experts",
        "moe_router_topk",
        "moe_ffn_hidden_size",
        "seq_length",
        "micro_batch_size",
        "global_batch_size",
        "train_iters",
        "expert_model_parallel_size",
        "hc_mult",
        "attn_sliding_window",
        "mega_moe_chunks",
    ]
    for key in positive:
        if getattr(s, key) <= 0:
            raise ProxyConfigError(key, f"must be positive, got {getattr(s, key)}")
    if s.hidden_size % s.num_attention_heads or (s.hidden_size // s.num_attention_heads) % 2:
        raise ProxyConfigError(
            "num_attention_heads", "hidden_size / num_attention_heads must be an even integer (RoPE pairs)"
        )
    if s.num_experts % s.world_size:
        raise ProxyConfigError("num_experts", f"{s.num_experts} experts do not split over {s.world_size} EP ranks")
    if s.moe_router_topk > s.num_experts:
        raise ProxyConfigError("moe_router_topk", "larger than num_experts")
    if s.global_batch_size % (s.micro_batch_size * s.world_size):
        raise ProxyConfigError(
            "global_batch_size",
            f"{s.global_batch_size} is not a multiple of micro_batch_size x "
            f"data-parallel size ({s.micro_batch_size} x {s.world_size})",
        )
    if s.manual_gc_interval < 0:
        raise ProxyConfigError("manual_gc_interval", f"must be >= 0, got {s.manual_gc_interval}")
    if any(r < 0 for r in s.compress_ratios):
        raise ProxyConfigError("compress_ratios", "ratios must be >= 0")
    if not 0 <= s.extra_work_pct <= 1000:
        raise ProxyConfigError("extra_work_pct", f"must be between 0 and 1000, got {s.extra_work_pct}")
    if s.extra_work_basis not in ("wall", "cpu"):
        raise ProxyConfigError("extra_work_basis", f"must be wall or cpu, got {s.extra_work_basis!r}")
    if not s.extra_work_region or not all(c.isalnum() or c in "_.-" for c in s.extra_work_region):
        raise ProxyConfigError(
            "extra_work_region", f"must be a region name (letters, digits, _ . -), got {s.extra_work_region!r}"
        )
    if s.recompute_granularity not in (None, "full", "selective"):
        raise ProxyConfigError("recompute_granularity", "expected full, selective or null")
    if s.recompute_method not in ("block", "uniform"):
        raise ProxyConfigError("recompute_method", "expected block or uniform")
    if s.lr_decay_style not in ("cosine", "linear", "constant"):
        raise ProxyConfigError("lr_decay_style", "expected cosine, linear or constant")
    if s.profiling:
        if s.profile_step_start < 1 or s.profile_step_end <= s.profile_step_start:
            raise ProxyConfigError(
                "profile_step_end",
                f"need 1 <= profile_step_start < profile_step_end, got {s.profile_step_start}..{s.profile_step_end}",
            )
        if s.profile_step_end > s.train_iters:
            raise ProxyConfigError(
                "profile_step_end",
                f"{s.profile_step_end} > train_iters {s.train_iters}: "
                "the trace is written when iteration profile_step_end starts",
            )
    if s.bf16 and not bf16_ok:
        return dataclasses.replace(s, bf16=False)  # the caller warns: see bf16_fallback()
    return s


def bf16_fallback(raw_argv: Sequence[str], settings: ProxyConfig) -> bool:
    """True when --bf16 True was asked for but the CPU lacks bf16 support (we run fp32)."""
    try:
        asked = _bool(split_overrides(raw_argv).get("bf16", "false"))
    except ValueError:
        return False
    return asked and not settings.bf16
