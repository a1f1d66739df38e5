"""Seeded GPU traces for the TraceLens differential harness (issue 28).

A trace here is a real ``torch.profiler`` CPU recording of a small model, to which device
activity is then added the way a ROCm kineto trace carries it, so that TraceLens's GPU
path runs on it:

* each leaf ``cpu_op`` that would launch work on a GPU gets a runtime launch event
  (``hipLaunchKernel``, or ``hipMemcpyWithStream``/``hipMemsetAsync``) inside its span on
  the same thread, with a ``correlation`` id;
* the launched kernel (or ``gpu_memcpy``/``gpu_memset``) on a device stream, with the op's
  ``External id``, the same ``correlation``, grid/block, and a seeded duration; a stream
  runs one kernel at a time, never before its launch;
* an ``ac2g`` flow pair (``s`` at the launch, ``f`` at the kernel), process names, and the
  MI300X ``deviceProperties``.

``recordings()`` records the CPU traces (one process, a few seconds); ``gpu_trace(cpu, seed)``
returns one GPU trace as a dict; ``generated(n, seed)`` yields ``(name, trace)`` pairs.
``mutate(trace, seed)`` perturbs a real GPU trace (events dropped, fields missing, ids
reused, streams renumbered, order changed).
"""

from __future__ import annotations

import copy
import json
import random
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

Trace = dict[str, Any]

DEVICE_PROPERTIES = [
    {
        "id": 0,
        "name": "AMD Instinct MI300X",
        "totalGlobalMem": 205571227648,
        "computeMajor": 9,
        "computeMinor": 4,
        "maxThreadsPerBlock": 1024,
        "maxThreadsPerMultiprocessor": 2048,
        "regsPerBlock": 65536,
        "warpSize": 64,
        "sharedMemPerBlock": 65536,
        "numSms": 304,
        "maxSharedMemoryPerMultiProcessor": 65536,
    }
]

#: ops that only change a tensor's view or metadata: no device work
NO_KERNEL = frozenset(
    "aten::view aten::reshape aten::_reshape_alias aten::t aten::transpose aten::expand aten::empty "
    "aten::empty_strided aten::empty_like aten::as_strided aten::detach aten::detach_ detach aten::slice "
    "aten::select aten::unsqueeze aten::squeeze aten::permute aten::resize_ aten::alias aten::lift_fresh "
    "aten::result_type aten::unbind aten::split aten::chunk aten::narrow aten::numpy_T aten::_unsafe_view "
    "aten::flatten aten::contiguous aten::size aten::stride aten::is_nonzero aten::view_as aten::expand_as "
    "aten::set_ aten::_has_compatible_shallow_copy_type aten::resolve_conj aten::resolve_neg aten::dim "
    "aten::conj aten::type_as aten::requires_grad_ aten::_to_copy_meta aten::new_empty aten::new_empty_strided "
    "aten::unflatten aten::movedim aten::swapaxes aten::broadcast_to aten::_unsafe_split".split()
)

#: CPU-only op names and the name a GPU build records for the same call
GPU_NAMES = {
    "aten::mkldnn_convolution": "aten::miopen_convolution",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": "aten::_scaled_dot_product_flash_attention_backward",
}

# kernel-name families, picked by the op's name (a real name of each family's shape)
_GEMM = [
    "Cijk_Alik_Bljk_SB_MT64x64x16_MI32x32x2x1_SN_1LDSB0_APM1_ABV0_ACED0_AF0EM1_AF1EM1_AMAS2_ASE_ASGT_ASLT_ASAE01_ASCE01_ASEM1",
    "Cijk_Ailk_Bljk_SB_MT128x64x16_MI32x32x2x1_SN_1LDSB0_APM1_ABV0_ACED0_AF0EM1_AF1EM1_AMAS3_ASE_ASGT_ASLT",
    "Cijk_Alik_Bjlk_SB_MT32x32x32_MI16x16x4x1_SN_1LDSB1_APM1_ABV0_ACED0_AF0EM1_AF1EM1_AMAS0_ASE_ASGT",
    # names that carry no layout (TraceLens then leaves ``transpose`` unset)
    "ck_gemm_xdl_cshuffle_v3_f32_256x128x128",
    "wvSplitK_hf_sml_f32_1x64",
]
_ELEMENTWISE = [
    "void at::native::elementwise_kernel_manual_unroll<128, 4, at::native::gpu_kernel_impl_nocast<"
    "at::native::CUDAFunctor_add<float> >(at::TensorIteratorBase&, at::native::CUDAFunctor_add<float> const&)"
    "::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add<float> >"
    "(at::TensorIteratorBase&, at::native::CUDAFunctor_add<float> const&)::{lambda(int)#1})",
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
    "at::native::GeluType)::{lambda()#1}::operator()() const::{lambda()#3}::operator()() const::{lambda(float)#1}, "
    "std::array<char*, 2ul> >(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)"
    "::{lambda()#1}::operator()() const::{lambda()#3}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>)",
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)"
    "::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>, "
    "4, TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, "
    "at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1> >(int, float, std::array<char*, 2ul>)",
]
_REDUCE = [
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
    "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
    "unsigned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
    "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
    "unsigned int, float, 4, 4>)",
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
    "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)",
]
_NORM = [
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float, float const*, "
    "float const*, float const*, float*, float*, float*)",
    "void at::native::batch_norm_collect_statistics_kernel<float, float, float, 512>(int, int, int, float, float*)",
]
_CONV = ["naive_conv_fwd_nchw_float_double_float", "igemm_fwd_gtcx35_nhwc_fp32_bx0_ex1_bt64x128x32_wt32x32x8"]
_ATTN = ["attn_fwd", "_attn_bwd_preprocess", "FmhaFwdKernel_hdim64_fp32_batch"]
_TRITON = ["triton_poi_fused_add_mul_0", "triton_red_fused__softmax_1", "triton_per_fused_native_layer_norm_2"]
_OPTIM = [
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
    "TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4>, float*>"
    "(at::native::(anonymous namespace)::TensorListMetadata<4>, float*)",
]


def _kernel_family(op: str) -> list[str]:
    low = op.lower()
    if any(k in low for k in ("mm", "linear", "matmul", "baddbmm")):
        return _GEMM
    if "conv" in low:
        return _CONV
    if "attention" in low:
        return _ATTN
    if "norm" in low:
        return _NORM
    if any(k in low for k in ("sum", "mean", "softmax", "max", "min", "norm", "var")):
        return _REDUCE
    if "triton" in low or "compiled" in low:
        return _TRITON
    if "adam" in low or "sgd" in low or "_foreach" in low:
        return _OPTIM
    return _ELEMENTWISE


# ---------------------------------------------------------------------------------
# the CPU recordings


#: inference-library ops (aiter, vLLM, sglang kernels) as TraceLens's extensions see them:
#: name -> schema; each is registered as a no-op CPU op, so the recording holds the op
#: with its real argument layout and no ops inside it (it launches its own kernel)
LIBRARY_OPS = {
    "aiter::rms_norm": "(Tensor x, Tensor weight, float eps, int sensitive) -> ()",
    "aiter::rmsnorm": "(Tensor out, Tensor input, Tensor weight, float eps) -> ()",
    "aiter::add_rmsnorm": "(Tensor out, Tensor input, Tensor res_in, Tensor res_out, Tensor weight, float eps) -> ()",
    "aiter::rmsnorm2d_fwd_with_add_ck": (
        "(Tensor out, Tensor input, Tensor res_in, Tensor res_out, Tensor weight, float eps, int sensitive) -> ()"
    ),
    "aiter::rmsnorm2d_fwd_with_dynamicquant_ck": (
        "(Tensor out, Tensor input, Tensor yscale, Tensor weight, float eps, int sensitive) -> ()"
    ),
    "aiter::rmsnorm_quant": (
        "(Tensor out, Tensor input, Tensor scale, Tensor weight, float eps, int group_size, bool shuffle, "
        "bool gemma) -> ()"
    ),
    "vllm::rocm_aiter_rmsnorm_fp8_group_quant": "(Tensor x, Tensor weight, float eps, int group_size) -> ()",
    "vllm::rocm_aiter_rmsnorm_with_add_fp8_group_quant": (
        "(Tensor x, Tensor residual, Tensor weight, float eps, int group_size) -> ()"
    ),
    "vllm::rocm_aiter_triton_add_rmsnorm_pad": (
        "(Tensor x, Tensor weight, float eps, Tensor residual, int pad_to_multiple) -> ()"
    ),
    "sglang_profiler::fused_mxfp4_quant_fused_rms_mxfp4_quant": (
        "(Tensor x1, Tensor w1, float eps1, Tensor? x2, Tensor? w2, float eps2, Tensor? res1) -> ()"
    ),
    "sgl_kernel::rotary_embedding": (
        "(Tensor positions, Tensor query, Tensor key, int head_size, Tensor cos_sin_cache, bool is_neox) -> ()"
    ),
    "aiter::rope_cached_positions_2c_fwd_impl": (
        "(Tensor out_x, Tensor out_y, Tensor x, Tensor y, Tensor cos, Tensor sin, Tensor positions, "
        "int rotate_style, bool reuse_freqs_front_part, bool nope_first) -> ()"
    ),
    "sgl_kernel::silu_and_mul": "(Tensor out, Tensor input) -> ()",
    "aiter::silu_and_mul": "(Tensor out, Tensor input) -> ()",
    "_C::silu_and_mul": "(Tensor out, Tensor input) -> ()",
    "aiter::gelu_and_mul": "(Tensor out, Tensor input) -> ()",
    "aiter::gelu_tanh_and_mul": "(Tensor out, Tensor input) -> ()",
    "vllm::unified_attention_with_output": (
        "(Tensor query, Tensor key, Tensor value, Tensor output, str layer_name, Tensor? output_scale) -> ()"
    ),
    "aiter::mha_batch_prefill": "(Tensor q, Tensor k, Tensor v, Tensor cu_q, Tensor cu_kv, float scale) -> ()",
    "aiter::fmha_v3_varlen_fwd": "(Tensor q, Tensor k, Tensor v, Tensor cu_q, Tensor cu_kv, float scale) -> ()",
    "aiter::fmha_v3_fwd": "(Tensor q, Tensor k, Tensor v, float dropout_p, float scale, bool is_causal, int w) -> ()",
    "aiter::mha_fwd": "(Tensor q, Tensor k, Tensor v, float dropout_p, float scale, bool is_causal, int w) -> ()",
    "sglang::store_cache": "(Tensor k, Tensor v, Tensor k_cache, Tensor v_cache, Tensor loc, int a, int b) -> ()",
}
_FP8_GEMM = (
    "(Tensor A, Tensor scaleA_inv, Tensor B, Tensor scaleB_inv, ScalarType out_dtype, bool transA, bool transB, "
    "bool transC, str granularity) -> ()"
)
_MXFP4_QUANT = "(Tensor x, ScalarType dest_dtype" + "".join(f", bool f{i}" for i in range(10)) + ") -> ()"
#: Primus's ops (primus_turbo's grouped GEMMs, its hipBLASLt FP8 / MXFP4 GEMMs and quantize
#: ops, TransformerEngine v2's pseudo GEMMs) as TraceLens v1.0.0's tests lay out their args
#: (``tests/test_primus_turbo_grouped_gemm.py``, ``test_primus_fp8_gemm_quantize.py``,
#: ``test_primus_mxfp4_gemm_quantize.py``); registered like LIBRARY_OPS. The ``tev2::`` ops
#: lose their namespace in the GPU trace (TransformerEngine's names have none).
PRIMUS_OPS = {
    **{
        f"{ns}::{op}": "(Tensor[] a, Tensor[] b) -> ()"
        for ns in ("primus_turbo",)
        for op in ("grouped_gemm", "grouped_gemm_variable_k")
    },
    **{
        f"{ns}::{op}": "(Tensor a, Tensor b) -> ()"
        for ns, op in (
            ("primus_turbo", "grouped_gemm_impl"),
            ("primus_turbo", "grouped_gemm_variable_k_impl"),
            ("primus_turbo_cpp_extension", "grouped_gemm"),
            ("primus_turbo_cpp_extension", "grouped_gemm_variable_k"),
            ("primus_turbo_cpp_extension", "ck_grouped_gemm"),
            ("primus_turbo_cpp_extension", "ck_grouped_gemm_variable_k"),
        )
    },
    "primus_turbo_cpp_extension::hipblaslt_gemm_fp8": _FP8_GEMM,
    "primus_turbo::hipblaslt_gemm_fp8": _FP8_GEMM,
    "primus_turbo_cpp_extension::quantize_fp8_tensorwise": "(Tensor x, float scale_inv, Tensor? amax) -> ()",
    "primus_turbo::quantize_fp8_tensorwise": "(Tensor x, float scale_inv, Tensor? amax) -> ()",
    "primus_turbo_cpp_extension::hipblaslt_gemm_fp4": _FP8_GEMM,
    "primus_turbo::hipblaslt_gemm_fp4": _FP8_GEMM,
    "primus_turbo_cpp_extension::quantize_mxfp4_dual": _MXFP4_QUANT,
    "primus_turbo::quantize_mxfp4_dual": _MXFP4_QUANT,
    "primus::quantize_mxfp4_dual": _MXFP4_QUANT,
    **{
        f"tev2::{op}": "(Tensor A, Tensor B) -> ()"
        for op in (
            "_Linear_yfwd_mm",
            "_LinearBackward_xgrad_mm",
            "_LinearBackward_wgrad_mm",
            "_LayerNormLinear_yfwd_mm",
            "_LayerNormLinearBackward_xgrad_mm",
            "_LayerNormLinearBackward_wgrad_mm",
        )
    },
}
#: the step ranges of the library decoder's recording, as inference servers label their
#: steps: vLLM's label with the sq/sk aggregates and sglang's (TraceLens's attention model
#: reads them from the earliest range around the op), then vLLM's plain label (none)
STEP_LABELS = (
    "execute_8_context_1(sq6sk10sqsq36sqsk60)_generation_2(sq2sk40sqsq2sqsk40)",
    "step[MIXED bs=3 c=1 g=2 c_sq=5 c_sk=9 c_sqsq=25 c_sqsk=45 g_sq=3 g_sk=70 g_sqsq=3 g_sqsk=70]",
    "execute_context_1(6)_generation_2(2)",
)
_LIBS: list[Any] = []  # the torch.library handles (kept alive; one registration per process)


def _library_ops() -> Any:
    """``torch.ops``, with LIBRARY_OPS and PRIMUS_OPS registered (once) as no-op CPU ops."""
    import torch

    if not _LIBS:
        by_ns: dict[str, list[tuple[str, str]]] = {}
        for full, schema in {**LIBRARY_OPS, **PRIMUS_OPS}.items():
            ns, name = full.split("::")
            by_ns.setdefault(ns, []).append((name, schema))
        for ns, ops in by_ns.items():
            lib = torch.library.Library(ns, "FRAGMENT")
            for name, schema in ops:
                lib.define(name + schema)
                lib.impl(name, lambda *a, **k: None, "CPU")
            _LIBS.append(lib)
    return torch.ops


def _models() -> list[tuple[str, Any, Any, bool]]:
    """(name, model, input, train) for each small model; built inside the recording process."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    class Attn(nn.Module):
        def __init__(self, d: int, heads: int) -> None:
            super().__init__()
            self.qkv, self.out, self.heads = nn.Linear(d, 3 * d), nn.Linear(d, d), heads

        def forward(self, x: Any) -> Any:
            b, s, d = x.shape
            q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.out(y.transpose(1, 2).reshape(b, s, d))

    class Block(nn.Module):
        def __init__(self, d: int) -> None:
            super().__init__()
            self.n1, self.att, self.n2 = nn.LayerNorm(d), Attn(d, 4), nn.LayerNorm(d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x: Any) -> Any:
            x = x + self.att(self.n1(x))
            return x + self.mlp(self.n2(x))

    class Chain(nn.Module):
        """elementwise-heavy: many small pointwise ops"""

        def forward(self, x: Any) -> Any:
            for _ in range(3):
                x = torch.sigmoid(x) * x + 0.5
                x = torch.tanh(x).clamp(-0.9, 0.9) - x.mean(dim=-1, keepdim=True)
                x = torch.exp(-x.abs()) / (1 + x * x)
            return x.sum()

    class BMM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(4, 32, 16))

        def forward(self, x: Any) -> Any:
            return torch.bmm(x, self.w).softmax(-1) @ self.w.transpose(1, 2)

    mlp = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 32), nn.Tanh(), nn.Linear(32, 10))
    cnn = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 10),
    )
    resize = nn.Sequential(
        nn.ReplicationPad2d((1, 2, 1, 0)),
        nn.Conv2d(3, 4, 3),
        nn.Upsample(scale_factor=2, mode="nearest"),
        nn.GroupNorm(2, 4),
        nn.Flatten(2),
        nn.Upsample(scale_factor=2, mode="nearest"),
    )
    norms = nn.Sequential(nn.Linear(48, 48), nn.LayerNorm(48), nn.GroupNorm(4, 48), nn.Dropout(0.1))

    class LibraryDecoder(nn.Module):
        """A decoder layer of an inference server, its norms, RoPE and activation through
        library ops (LIBRARY_OPS), its projections through aten; bf16 like the real ones."""

        def __init__(self, d: int = 64, heads: int = 4, kv_heads: int = 2) -> None:
            super().__init__()
            self.d, self.hd, self.kvh = d, d // heads, kv_heads
            self.qkv = nn.Linear(d, d + 2 * kv_heads * (d // heads)).to(torch.bfloat16)
            self.up = nn.Linear(d, 4 * d).to(torch.bfloat16)
            self.down = nn.Linear(2 * d, d).to(torch.bfloat16)
            self.w = torch.ones(d, dtype=torch.bfloat16)
            self.cache = torch.randn(128, self.hd, dtype=torch.bfloat16)

        def forward(self, x: Any) -> Any:
            ops = _library_ops()
            t, d, e = x.shape[0], self.d, 1e-6
            like = torch.empty_like
            out, res = like(x), like(x)
            ops.aiter.rms_norm(x, self.w, e, 0)
            ops.aiter.rmsnorm(out, x, self.w, e)
            ops.aiter.add_rmsnorm(out, x, res, res, self.w, e)
            ops.aiter.rmsnorm2d_fwd_with_add_ck(out, x, res, res, self.w, e, 0)
            ops.aiter.rmsnorm2d_fwd_with_dynamicquant_ck(out, x, torch.empty(t, 1), self.w, e, 0)
            ops.aiter.rmsnorm_quant(out, x, torch.empty(t, d // 32), self.w, e, 32, False, False)
            ops.vllm.rocm_aiter_rmsnorm_fp8_group_quant(x, self.w, e, 16)
            ops.vllm.rocm_aiter_rmsnorm_with_add_fp8_group_quant(x, res, self.w, e, 16)
            ops.vllm.rocm_aiter_triton_add_rmsnorm_pad(x, self.w, e, res, 48)
            ops.sglang_profiler.fused_mxfp4_quant_fused_rms_mxfp4_quant(x, self.w, e, x[:, :32], self.w[:32], e, res)
            qkv = self.qkv(x)
            q, k = qkv[:, :d].contiguous(), qkv[:, d : d + self.kvh * self.hd].contiguous()
            pos = torch.arange(t)
            ops.sgl_kernel.rotary_embedding(pos, q, k, self.hd, self.cache, True)
            q4, k4 = q.view(1, t, -1, self.hd), k.view(1, t, -1, self.hd)
            cos = self.cache[:, : self.hd // 2].reshape(128, 1, 1, -1)
            ops.aiter.rope_cached_positions_2c_fwd_impl(q4, k4, q4, k4, cos, cos, pos.view(1, t), 0, False, False)
            self.attention(ops, q.view(t, -1, self.hd), k.view(t, -1, self.hd))
            h = self.up(x)
            act = like(h[:, : 2 * d])
            ops.sgl_kernel.silu_and_mul(act, h)
            ops.aiter.silu_and_mul(act, h)
            ops._C.silu_and_mul(act, h)
            ops.aiter.gelu_and_mul(act, h)
            ops.aiter.gelu_tanh_and_mul(act, h.float())
            return self.down(act)

        def attention(self, ops: Any, q: Any, k: Any) -> None:
            """The attention ops (vLLM's also inside a range of its own, which starts later
            than the step's, and with fewer tokens)."""
            from torch.profiler import record_function

            cu = torch.tensor([0, q.shape[0]], dtype=torch.int32)
            cache = torch.empty(64, k.shape[1] * k.shape[2], dtype=torch.bfloat16)
            out = torch.empty_like(q)
            ops.vllm.unified_attention_with_output(q, k, k, out, "layer.0", None)
            with record_function(STEP_LABELS[0]):
                ops.vllm.unified_attention_with_output(q[:4], k[:4], k[:4], out[:4], "layer.0", None)
            ops.aiter.mha_batch_prefill(q, k, k, cu, cu, 0.125)
            ops.aiter.fmha_v3_varlen_fwd(q, k, k, cu, cu, 0.125)
            # aiter's fixed-length attention: (batch, tokens, heads, head dim)
            qb, kb = q.view(2, -1, *q.shape[1:]), k.view(2, -1, *k.shape[1:])
            ops.aiter.fmha_v3_fwd(qb, qb, qb, 0.0, 0.25, False, -1)
            ops.aiter.mha_fwd(qb, kb, kb, 0.0, 0.25, True, -1)
            kv = k.reshape(k.shape[0], -1)
            ops.sglang.store_cache(kv, kv, cache, cache, torch.arange(k.shape[0]), 2048, 0)

    def autograd_fn(name: str, n_grads: int) -> Any:
        """A torch.autograd.Function called ``name`` (the profiler records its apply under
        the class name, with its args): x * 2 forward, the same backward."""

        def forward(ctx: Any, x: Any, *rest: Any) -> Any:
            return x * 2

        def backward(ctx: Any, g: Any) -> Any:
            return (g * 2,) + (None,) * n_grads

        return type(
            name, (torch.autograd.Function,), {"forward": staticmethod(forward), "backward": staticmethod(backward)}
        )

    class PrimusMoE(nn.Module):
        """A Primus MoE layer's ops, bf16, training: MoE dispatch / combine, TransformerEngine's
        fused RoPE and cross-entropy (autograd functions), primus_turbo's grouped GEMMs, its FP8 /
        MXFP4 GEMMs and quantize ops, TransformerEngine v2's pseudo GEMMs (PRIMUS_OPS)."""

        def __init__(self, d: int = 32, experts: int = 4) -> None:
            super().__init__()
            self.d, self.g = d, experts
            self.scale = nn.Parameter(torch.ones(d, dtype=torch.bfloat16))  # few aten ops: the fixture stays small
            self.dispatch, self.combine = autograd_fn("MoEDispatch", 6), autograd_fn("MoECombine", 2)
            self.rope, self.xent = autograd_fn("FusedRoPEFunc", 6), autograd_fn("CrossEntropyFunction", 3)

        def forward(self, x: Any) -> Any:
            ops, bf = _library_ops(), torch.bfloat16
            t, d, g = x.shape[0], self.d, self.g
            h = x * self.scale
            tok = self.dispatch.apply(h, torch.zeros(t, 8, dtype=torch.long), torch.rand(t, 8), 64, True, True, 32768)
            e = torch.empty
            pt, ce = ops.primus_turbo, ops.primus_turbo_cpp_extension
            # zipped (per-group tensor lists) and compact ([M, K] x [G, K, N] or [G, N, K]) layouts
            pt.grouped_gemm([e(4, 8, dtype=bf), e(5, 8, dtype=bf)], [e(8, 16, dtype=bf), e(8, 16, dtype=bf)])
            pt.grouped_gemm_impl(e(t, d, dtype=bf), e(g, d, 48, dtype=bf))
            pt.grouped_gemm_impl(e(t, d, dtype=bf), e(g, 24, d, dtype=bf))
            ce.grouped_gemm(e(t, d, dtype=bf), e(g, d, 16, dtype=bf))
            ce.ck_grouped_gemm(e(2 * t, d, dtype=bf), e(g, d, 64, dtype=bf))
            pt.grouped_gemm_variable_k([e(4, 8, dtype=bf), e(5, 6, dtype=bf)], [e(8, 16, dtype=bf), e(6, 12, dtype=bf)])
            pt.grouped_gemm_variable_k_impl(e(t, 24, dtype=bf), e(t, d, dtype=bf))
            ce.grouped_gemm_variable_k(e(t, 40, dtype=bf), e(t, d, dtype=bf))
            ce.ck_grouped_gemm_variable_k(e(t, 16, dtype=bf), e(t, 48, dtype=bf))
            # FP8: A [M, K], B [N, K] (transB), scales as 0-d fp32; the transC swap too
            f8, sc = torch.float8_e4m3fnuz, e((), dtype=torch.float32)
            ce.hipblaslt_gemm_fp8(e(t, d, dtype=f8), sc, e(48, d, dtype=f8), sc, bf, False, True, False, "TENSORWISE")
            pt.hipblaslt_gemm_fp8(e(d, t, dtype=f8), sc, e(d, 24, dtype=f8), sc, bf, True, False, True, "TENSORWISE")
            ce.quantize_fp8_tensorwise(h, 1.0, None)
            pt.quantize_fp8_tensorwise(e(2 * t, d, dtype=bf), 0.5, None)
            # MXFP4: K packed two to a byte, E8M0 scales per 32 elements
            f4, e8 = torch.float4_e2m1fn_x2, torch.float8_e8m0fnu
            a4, b4 = e(t, 2 * d, dtype=f4), e(48, 2 * d, dtype=f4)
            s_a, s_b = e(t, 4 * d // 32, dtype=e8), e(48, 4 * d // 32, dtype=e8)
            ce.hipblaslt_gemm_fp4(a4, s_a, b4, s_b, bf, False, True, False, "MX_BLOCKWISE")
            pt.hipblaslt_gemm_fp4(a4, s_a, b4, s_b, bf, False, True, True, "MX_BLOCKWISE")
            flags = (False,) * 10
            ce.quantize_mxfp4_dual(e(t, 64, dtype=bf), torch.float4_e2m1fn_x2, *flags)
            pt.quantize_mxfp4_dual(e(2 * t, 96, dtype=bf), torch.float4_e2m1fn_x2, *flags)
            ops.primus.quantize_mxfp4_dual(e(t, 33, dtype=bf), torch.float4_e2m1fn_x2, *flags)
            # TransformerEngine v2's pseudo GEMMs: A [M, K], B [K, N]
            tv = ops.tev2
            tv._Linear_yfwd_mm(e(t, d, dtype=bf), e(d, 48, dtype=bf))
            tv._LinearBackward_xgrad_mm(e(t, 48, dtype=bf), e(48, d, dtype=bf))
            tv._LinearBackward_wgrad_mm(e(48, t, dtype=bf), e(t, d, dtype=bf))
            tv._LayerNormLinear_yfwd_mm(e(t, d, dtype=bf), e(d, 96, dtype=bf))
            tv._LayerNormLinearBackward_xgrad_mm(e(t, 96, dtype=bf), e(96, d, dtype=bf))
            tv._LayerNormLinearBackward_wgrad_mm(e(t, d, dtype=f8), e(d, 96, dtype=f8))
            out = self.combine.apply(tok, True, True)
            # RoPE on (seq, batch, heads, head dim), cross-entropy on (batch, 1, vocab) logits
            q = self.rope.apply(out.view(t, 1, 4, d // 4), torch.rand(t, 1, 1, d // 4), None, 1, None, 0, 1)
            logits = q.reshape(t, 1, d)
            return self.xent.apply(logits, torch.zeros(t, 1, dtype=torch.long), 0.0, -100)

    return [
        ("mlp", mlp, torch.randn(16, 64), True),
        ("mlp_infer", mlp, torch.randn(4, 64), False),
        ("cnn", cnn, torch.randn(2, 3, 16, 16), True),
        ("cnn_infer", cnn, torch.randn(1, 3, 12, 12), False),
        ("transformer", Block(32), torch.randn(2, 8, 32), True),
        ("transformer_infer", Block(32), torch.randn(1, 16, 32), False),
        ("chain", Chain(), torch.randn(8, 24), False),
        ("bmm", BMM(), torch.randn(4, 8, 32), True),
        ("norms", norms, torch.randn(6, 48), True),
        ("resize", resize, torch.randn(1, 3, 8, 8), True),
        ("resize_infer", resize, torch.randn(1, 3, 6, 6), False),
        ("library_decoder", LibraryDecoder(), torch.randn(8, 64, dtype=torch.bfloat16), False),
        ("primus_moe", PrimusMoE(), torch.randn(16, 32, dtype=torch.bfloat16), True),
    ]


def _record(name: str, model: Any, x: Any, train: bool, shapes: bool, stack: bool, out: Path) -> Path:
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    opt = torch.optim.Adam(model.parameters(), lr=1e-3) if train else None
    path = out / f"{name}{'_shapes' if shapes else ''}{'_stack' if stack else ''}.json"
    # the library decoder's steps carry an inference server's step labels
    steps = STEP_LABELS if name == "library_decoder" else tuple(f"ProfilerStep#{i}" for i in range(2))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=shapes, with_stack=stack) as prof:
        for step_label in steps:
            with record_function(step_label):
                if opt is None:
                    with torch.no_grad(), record_function("forward"):
                        model(x)
                    continue
                with record_function("forward"):
                    y = model(x)
                    loss = y.float().pow(2).mean() if y.dim() else y
                with record_function("backward"):
                    loss.backward()
                with record_function("optimizer"):
                    opt.step()
                    opt.zero_grad()
    prof.export_chrome_trace(str(path))
    return path


def recordings(out: Path, only: str | None = None, shapes_stack: tuple | None = None) -> list[Path]:
    """Record every model (or the one named ``only``) with and without shapes and stacks
    (or with the one ``(shapes, stack)`` given); returns the CPU trace paths."""
    import torch

    torch.set_num_threads(1)
    paths = []
    for name, model, x, train in _models():
        if only is not None and name != only:
            continue
        for shapes, stack in [shapes_stack] if shapes_stack else ((True, False), (True, True), (False, False)):
            paths.append(_record(name, model, x, train, shapes, stack, out))
    if not paths:
        raise ValueError(f"tracegen: no model named {only!r}")
    return paths


# ---------------------------------------------------------------------------------
# device activity


#: ops that launch their own kernel on a GPU even where the CPU build records ops inside
#: them (GEMMs, norms, convolutions, attention, softmax, reductions)
OWN_LAUNCH = frozenset(
    "aten::mm aten::addmm aten::bmm aten::baddbmm aten::native_layer_norm aten::native_batch_norm "
    "aten::native_group_norm aten::native_layer_norm_backward aten::native_batch_norm_backward "
    "aten::native_group_norm_backward aten::miopen_convolution aten::convolution_backward "
    "aten::_scaled_dot_product_flash_attention aten::_scaled_dot_product_flash_attention_backward "
    "aten::_softmax aten::_softmax_backward_data aten::sum aten::mean aten::max_pool2d_with_indices "
    "aten::_adaptive_avg_pool2d aten::addcmul_ aten::addcdiv_ aten::mul aten::add".split()
)


def _launch_windows(events: list[dict]) -> list[tuple[dict, float, float]]:
    """(op, lo, hi): where on its thread a launch by ``op`` may sit, outside every cpu_op
    inside it: a leaf's whole span; for an OWN_LAUNCH op with ops inside, the gap after
    its last child (or before its first)."""
    by_thread: dict[tuple, list[dict]] = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "cpu_op":
            by_thread.setdefault((e["pid"], e["tid"]), []).append(e)
    out = []
    for ops in by_thread.values():
        ops.sort(key=lambda e: (e["ts"], -e["dur"]))
        kids: dict[int, list[dict]] = {}
        stack: list[dict] = []
        for e in ops:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
                stack.pop()
            if stack:
                kids.setdefault(id(stack[-1]), []).append(e)
            stack.append(e)
        for e in ops:
            mine = kids.get(id(e))
            start, end = e["ts"], e["ts"] + e["dur"]
            if not mine:
                out.append((e, start, end))
            elif e["name"] in OWN_LAUNCH:
                last = max(k["ts"] + k["dur"] for k in mine)
                first = min(k["ts"] for k in mine)
                if end - last > 0.01:
                    out.append((e, last + 0.001, end))
                elif first - start > 0.01:
                    out.append((e, start, first - 0.001))
    return out


#: torch.compile's Triton kernel ops some traces stand in for elementwise and reduction
#: ops: name templates ({k}: the kernel's number), some whose names do not split into
#: known ops; the pointwise ones take xnumel, the reductions (xnumel, rnumel)
TRITON_NAMES = (
    "triton_poi_fused_add_mul_{k}",
    "triton_poi_fused__unsafe_view_mul_silu_{k}",
    "triton_poi_fused__to_copy_add_exp_neg_{k}",
    "triton_poi_fused_addmm_gelu_view_{k}",
    "triton_red_fused_add_mean_mul_pow_rsqrt_{k}",
    "triton_per_fused__softmax_native_layer_norm_{k}",
    "triton_red_fused_sum_{k}",
    "triton_poi_fused_frobnicate_{k}",
)
_TRITON_STANDS_FOR = frozenset(
    "aten::add aten::mul aten::sigmoid aten::tanh aten::exp aten::gelu aten::silu aten::sum aten::mean".split()
)


def _as_triton(op: dict, rng: random.Random, k: int) -> None:
    """Turn a recorded elementwise / reduction op into a Triton kernel op, in place: its
    tensor args (some in bf16 or fp16), then the element counts as ints (sometimes none)."""
    a = op.get("args", {})
    dims, types = a.get("Input Dims"), a.get("Input type")
    if not dims or not types:
        return
    name = rng.choice(TRITON_NAMES).format(k=k)
    tensors = [(d, t) for d, t in zip(dims, types) if d and t not in ("Scalar", "")]
    if not tensors:
        return
    dtype = rng.choice(["c10::BFloat16", "c10::Half", "float", "c10::Float"])
    new_dims = [list(d) for d, _ in tensors]
    new_types = [dtype if t == "float" else t for _, t in tensors]
    numel = 1
    for x in new_dims[0]:
        numel *= x
    counts = [numel] if name.startswith("triton_poi_") else [numel // max(new_dims[0][-1], 1), new_dims[0][-1]]
    if rng.random() < 0.15:  # no element counts: TraceLens has no model for the op
        counts = []
    op["name"] = name
    a["Input Dims"] = new_dims + [[] for _ in counts]
    a["Input type"] = new_types + ["Scalar" for _ in counts]
    a["Input Strides"] = [[] for _ in a["Input Dims"]]
    a["Concrete Inputs"] = ["" for _ in new_dims] + [str(c) for c in counts]


#: the other namespaces of LIBRARY_OPS, whose ops launch their kernel too
_LIBRARY_NS = ("sgl_kernel::", "vllm::", "_C::", "sglang_profiler::", "sglang::")
#: Primus's namespaces and TransformerEngine's pseudo GEMMs (PRIMUS_OPS), which launch theirs
_PRIMUS_PREFIXES = ("primus_turbo::", "primus_turbo_cpp_extension::", "primus::", "_Linear", "_LayerNormLinear")


def _primus_args(events: list[dict], seed: int) -> None:
    """PRIMUS_OPS as a GPU trace holds them, in place: the ``tev2::`` ops lose the namespace;
    a grouped GEMM's tensor lists, which the profiler types ``TensorList``, get the element
    dtype TraceLens's tests give them in about half the calls (a generator of its own)."""
    typed = random.Random(seed * 13 + 5)
    for e in events:
        if e.get("cat") != "cpu_op":
            continue
        if e["name"].startswith("tev2::"):
            e["name"] = e["name"][len("tev2::") :]
        a = e.get("args", {})
        if a.get("Input type") == ["TensorList", "TensorList"] and typed.random() < 0.5:
            a["Input type"] = ["c10::BFloat16", "c10::BFloat16"]


def gpu_trace(cpu: Trace, seed: int) -> Trace:
    """The CPU trace with seeded device activity added (a new dict; ``cpu`` is not changed)."""
    rng = random.Random(seed)
    trace = copy.deepcopy(cpu)
    events: list[dict] = trace["traceEvents"]
    # some traces call group norm through aiter's op (TraceLens models it as aten's)
    renames = dict(GPU_NAMES, **({"aten::group_norm": "aiter::_groupnorm_run"} if rng.random() < 0.5 else {}))
    # and linear layers through a library GEMM op (same args: x, weight [N, K], bias)
    library_gemm = rng.choice([None, None, "vllm::rocm_unquantized_gemm", "aiter::gemm_a16w16"])
    if library_gemm:
        renames["aten::linear"] = library_gemm
    for e in events:
        if e.get("cat") == "cpu_op" and e.get("name") in renames:
            e["name"] = renames[e["name"]]
    # some traces are torch.compile'd: Triton kernel ops stand in for some elementwise and
    # reduction ops (a generator of its own, so that the rest of the trace is unchanged)
    compiled = random.Random(seed * 7 + 17)
    if compiled.random() < 0.3:
        k = 0
        for e in events:
            if e.get("cat") == "cpu_op" and e.get("name") in _TRITON_STANDS_FOR and compiled.random() < 0.5:
                _as_triton(e, compiled, k)
                k += 1
    _primus_args(events, seed)
    gpu_pid = rng.choice([0, 2, 4])
    streams = rng.choice([[0], [0], [7], [0, 3], [7, 11, 13]])
    free = {s: 0.0 for s in streams}
    launch_us = rng.uniform(3.0, 12.0)
    scale = rng.choice([0.3, 1.0, 3.0, 20.0])
    corr = rng.randrange(1, 1000)
    added: list[dict] = []
    for op, lo, hi in sorted(_launch_windows(events), key=lambda w: w[1]):
        name = op["name"]
        if name in NO_KERNEL or not name.startswith(
            ("aten::", "aiter::", "triton", "Optimizer") + _LIBRARY_NS + _PRIMUS_PREFIXES
        ):
            continue
        ext = op.get("args", {}).get("External id")
        if ext is None or rng.random() < 0.03:  # a few ops launch nothing
            continue
        nkern = 2 if rng.random() < 0.08 else 1
        for k in range(nkern):
            corr += 1
            if "copy_" in name or name in ("aten::to", "aten::_to_copy") or "item" in name:
                cat, api = "gpu_memcpy", "hipMemcpyWithStream"
                kname = rng.choice(["Memcpy DtoD (Device -> Device)", "Memcpy HtoD (Host -> Device)"])
            elif name in ("aten::zero_", "aten::fill_", "aten::zeros") and rng.random() < 0.5:
                cat, api, kname = "gpu_memset", "hipMemsetAsync", "Memset (Device)"
            else:
                cat, api = "kernel", rng.choice(["hipLaunchKernel", "hipLaunchKernel", "hipExtLaunchKernel"])
                kname = rng.choice(_kernel_family(name))
            # the launch sits inside the op's window, on its thread
            span = hi - lo
            rt_dur = max(0.001, min(span * 0.4 / nkern, rng.uniform(1.0, launch_us)))
            rt_ts = lo + span * (k + 0.5) / (nkern + 1)
            rt_ts = round(max(lo, min(rt_ts, hi - rt_dur)), 3)
            added.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": api,
                    "pid": op["pid"],
                    "tid": op["tid"],
                    "ts": rt_ts,
                    "dur": round(rt_dur, 3),
                    "args": {"External id": ext, "cid": rng.randrange(1, 80), "correlation": corr},
                }
            )
            stream = streams[0] if len(streams) == 1 or rng.random() < 0.7 else rng.choice(streams[1:])
            start = max(free[stream] + rng.uniform(0.0, 2.0), rt_ts + launch_us)
            dur = round(max(0.3, rng.lognormvariate(0.5, 1.1) * scale), 3)
            start = round(start, 3)
            free[stream] = start + dur
            args: dict[str, Any] = {"External id": ext, "device": gpu_pid, "stream": stream, "correlation": corr}
            if cat == "kernel":
                args.update({"kind": "Dispatch Kernel", "grid": [rng.randrange(1, 512), 1, 1], "block": [256, 1, 1]})
            elif cat == "gpu_memcpy":
                args.update({"kind": "DtoD", "bytes": rng.randrange(4, 1 << 20)})
            else:
                args.update({"kind": "Memset", "bytes": rng.randrange(4, 1 << 16)})
            added.append(
                {
                    "ph": "X",
                    "cat": cat,
                    "name": kname,
                    "pid": gpu_pid,
                    "tid": stream,
                    "ts": start,
                    "dur": dur,
                    "args": args,
                }
            )
            added.append(
                {"ph": "s", "id": corr, "pid": op["pid"], "tid": op["tid"], "ts": rt_ts, "cat": "ac2g", "name": "ac2g"}
            )
            added.append(
                {
                    "ph": "f",
                    "id": corr,
                    "pid": gpu_pid,
                    "tid": stream,
                    "ts": start,
                    "cat": "ac2g",
                    "name": "ac2g",
                    "bp": "e",
                }
            )
    added.append(
        {"name": "process_name", "ph": "M", "ts": 0, "pid": gpu_pid, "tid": 0, "args": {"name": "GPU " + str(gpu_pid)}}
    )
    for s in streams:
        added.append(
            {"name": "thread_name", "ph": "M", "ts": 0, "pid": gpu_pid, "tid": s, "args": {"name": f"stream {s}"}}
        )
    events.extend(added)
    trace["deviceProperties"] = copy.deepcopy(DEVICE_PROPERTIES)
    trace["roctracer_version"] = 4
    return trace


def generated(n: int, seed: int, work: Path | None = None) -> Iterator[tuple[str, Trace]]:
    """``n`` GPU traces: the recordings in turn, each with its own seed of device activity."""
    work = work or Path(tempfile.mkdtemp(prefix="tracegen-"))
    cpu = [(p.stem, json.loads(p.read_text())) for p in recordings(work)]
    for i in range(n):
        stem, base = cpu[i % len(cpu)]
        s = seed * 100003 + i
        yield f"gen{i:03d}_{stem}_s{s}", gpu_trace(base, s)


# ---------------------------------------------------------------------------------
# mutations of real GPU traces

MUTATIONS = ("drop_kernels", "drop_fields", "reuse_ids", "renumber_streams", "shuffle")


def mutate(trace: Trace, seed: int, kind: str) -> Trace:
    """One seeded perturbation (``kind`` from MUTATIONS) of a GPU trace; a new dict."""
    rng = random.Random(seed)
    out = copy.deepcopy(trace)
    ev: list[dict] = out["traceEvents"]
    gpu = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    if kind == "drop_kernels":
        drop = {id(e) for e in gpu if rng.random() < 0.05}
        out["traceEvents"] = [e for e in ev if id(e) not in drop]
    elif kind == "drop_fields":
        for e in ev:
            a = e.get("args")
            if e.get("cat") == "cpu_op" and a and rng.random() < 0.1:
                for f in ("Input Dims", "Input type", "Concrete Inputs", "Input Strides"):
                    a.pop(f, None)
            if e.get("cat") == "kernel" and a and rng.random() < 0.05:
                a.pop("grid", None)
                a.pop("block", None)
    elif kind == "reuse_ids":
        # External ids of some cpu_ops reused by a later op
        ops = [e for e in ev if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})]
        for e in ops:
            if rng.random() < 0.05 and ops:
                e["args"]["External id"] = rng.choice(ops)["args"]["External id"]
    elif kind == "renumber_streams":
        sids = sorted({e.get("tid") for e in gpu}, key=str)
        new = {s: 100 + i * 7 for i, s in enumerate(sids)}
        for e in gpu:
            e["tid"] = new[e.get("tid")]
            if "stream" in e.get("args", {}):
                e["args"]["stream"] = e["tid"]
        for e in ev:
            if e.get("ph") == "f" and e.get("cat") == "ac2g" and e.get("tid") in new:
                e["tid"] = new[e["tid"]]
    elif kind == "shuffle":
        rng.shuffle(ev)
    else:
        raise ValueError(f"mutate: unknown kind {kind!r}, expected one of {MUTATIONS}")
    return out
