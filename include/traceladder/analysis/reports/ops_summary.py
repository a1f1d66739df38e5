"""``ops_summary.csv`` and ``ops_summary_by_category.csv`` (TraceLens v1.0.0 semantics).

GPU traces: every GPU event (kernel / gpu_memcpy / gpu_memset) linked to a runtime
launch, except communication kernels, is charged to its *launcher*: the first
``cpu_op`` above the runtime call in the host call tree (a pass-through ``execute``
op is skipped), or the runtime call itself when no cpu_op encloses it.  Per launcher:
``total_direct_kernel_time`` = busy time (interval union) of its own kernels,
``total_subtree_kernel_time`` = busy time of every GPU event launched anywhere below
it (communication included).  Launchers are grouped by name; the op category comes
from TraceLens's op registry, then the ``^triton`` / ``^record_param_comms``
patterns, then the first kernel's name (``void at::native`` + elementwise / reduce /
multi_tensor_apply), else ``other``.

CPU-only traces: the "launchers" are the main thread's cpu_ops (collective stubs
excluded); an op's self time (duration less its child ops: the leaf work it does
itself) stands in for its direct kernel time, its full duration for the subtree time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..events import GPU_CATS, EventTable
from ..table import Table, pandas_desc_order
from ..common.intervals import grouped_busy
from .gpu_timeline import CpuSelection, cpu_selection, gpu_event_classes

__all__ = [
    "OPS_SUMMARY_COLUMNS",
    "BY_CATEGORY_COLUMNS",
    "Launchers",
    "gpu_launchers",
    "cpu_launchers",
    "ops_summary_table",
    "ops_summary_by_category_table",
    "categorize_op",
    "write_csvs",
]

OPS_SUMMARY_COLUMNS = [
    "name",
    "total_direct_kernel_time_sum",
    "total_subtree_kernel_time_sum",
    "total_direct_kernel_time_ms",
    "total_subtree_kernel_time_ms",
    "Count",
    "Categories",
    "Percentage (%)",
    "Cumulative Percentage (%)",
]
BY_CATEGORY_COLUMNS = [
    "op category",
    "Count",
    "total_direct_kernel_time_ms",
    "Percentage (%)",
    "Cumulative Percentage (%)",
]

# TraceLens v1.0.0 OP_CATEGORY_REGISTRY (PerfModel/torch_op_mapping.py: perf-model op
# categories plus the category-only ops), as data: category -> op names.
_OP_CATEGORY_NAMES = {
    'CONV_bwd': (
        'ConvBiasReLU_Backward',
        'ConvBias_Backward',
        'aten::convolution_backward',
    ),
    'CONV_fwd': (
        'ConvBiasReLU_',
        'ConvBias_',
        'aten::convolution',
        'aten::cudnn_convolution',
        'aten::miopen_convolution',
    ),
    'CrossEntropy_bwd': (
        'CrossEntropyFunctionBackward',
    ),
    'CrossEntropy_fwd': (
        'CrossEntropyFunction',
    ),
    'CustomCollective': (
        '_C_custom_ar::all_reduce',
        '_C_custom_ar::qr_all_reduce',
        'aiter::all_gather_reg',
        'aiter::allgather_lastdim<std::bfloat16_t, 2>(aiter::RankData*, aiter::RankSignals, aiter::Signal*, std::bfloat16_t*, int, int, int) (Synthetic Op)',
        'aiter::allgather_lastdim<std::bfloat16_t, 4>(aiter::RankData*, aiter::RankSignals, aiter::Signal*, std::bfloat16_t*, int, int, int) (Synthetic Op)',
        'aiter::fused_allreduce_rmsnorm',
        'aiter::fused_allreduce_rmsnorm_',
        'aiter::reduce_scatter',
        'sgl_kernel::all_reduce_reg',
        'sgl_kernel::qr_all_reduce',
        'sglang::reg_all_gather_into_tensor',
    ),
    'FusedRoPE': (
        'aiter::unified_attention_with_output_base->_fused_qk_rope_reshape_and_cache_kernel (Synthetic Op)',
        'aiter::v4_attention_with_output->_inverse_rope_gptj_kernel (Synthetic Op)',
        'aiter::v4_attention_with_output->hca_norm_rope_scatter_D512_RD64_R128_KB1_rmsbf16_flydsl (Synthetic Op)',
        'aiter::v4_attention_with_output->qk_norm_rope_H32_D512_RD64_flydsl (Synthetic Op)',
        'aiter::v4_attention_with_output->qk_norm_rope_H64_D512_RD64_flydsl (Synthetic Op)',
    ),
    'GEMM': (
        '_LayerNormLinearBackward_wgrad_mm',
        '_LayerNormLinearBackward_xgrad_mm',
        '_LayerNormLinear_yfwd_mm',
        '_LinearBackward_wgrad_mm',
        '_LinearBackward_xgrad_mm',
        '_Linear_yfwd_mm',
        'aiter::_gemm_a16w16_asm',
        'aiter::_gemm_a4w4_asm',
        'aiter::_gemm_a8w8_blockscale_bpreshuffle_asm',
        'aiter::batched_gemm_a16wfp4_',
        'aiter::flatmm_a8w8_blockscale_asm',
        'aiter::gemm_a16w16',
        'aiter::gemm_a16w16_atomic_',
        'aiter::gemm_a4w4',
        'aiter::gemm_a8w8_blockscale_bpreshuffle_ck',
        'aiter::gemm_a8w8_blockscale_bpreshuffle_cktile',
        'aiter::gemm_a8w8_blockscale_ck',
        'aiter::gemm_a8w8_blockscale_cktile',
        'aiter::gemm_a8w8_bpreshuffle',
        'aiter::gemm_a8w8_bpreshuffle_ck',
        'aiter::gemm_a8w8_ck',
        'aiter::gemm_afp4wfp4_',
        'aiter::gfx950_a8w8_blockscale_asm',
        'aten::_scaled_mm',
        'aten::addmm',
        'aten::baddbmm',
        'aten::bmm',
        'aten::mm',
        'bitsandbytes::int8_linear_matmul',
        'primus_turbo::hipblaslt_gemm_fp4',
        'primus_turbo::hipblaslt_gemm_fp8',
        'primus_turbo_cpp_extension::hipblaslt_gemm_fp4',
        'primus_turbo_cpp_extension::hipblaslt_gemm_fp8',
        'sglang_profiler::batched_gemm_a8w8_a_per_token_group_prequant_w_per_batched_tensor_quant_batched_gemm_a8w8_a_per_token_group_prequant_w_per_batched_tensor_quant',
        'sglang_profiler::fp8_utils_gemm_a8w8_blockscale',
        'sglang_profiler::gemm_a8w8_blockscale_gemm_a8w8_blockscale',
        'sglang_profiler::gemm_kernels_flydsl_hgemm',
        'tex_ts::te_gemm_ts',
        'trtllm::cublas_scaled_mm',
        'vllm::_rocm_aiter_preshuffled_per_token_w8a8_gemm',
        'vllm::gemm_with_dynamic_quant',
        'vllm::rocm_aiter_triton_gemm_a8w8_blockscale',
        'vllm::rocm_unquantized_gemm',
    ),
    'GroupQuant': (
        'aiter::dynamic_per_group_scaled_quant',
        'aiter::dynamic_per_group_scaled_quant_fp4',
        'aiter::dynamic_per_tensor_quant',
        'aiter::dynamic_per_token_scaled_quant',
        'aiter::fused_dynamic_mx_quant_moe_sort_hip',
        'sglang_profiler::fused_mxfp4_quant_fused_flatten_mxfp4_quant',
        'sglang_profiler::quant_dynamic_mxfp4_quant',
        'vllm::triton_per_token_group_quant_fp8',
    ),
    'GroupedGEMM_fwd': (
        'primus_turbo::grouped_gemm',
        'primus_turbo::grouped_gemm_impl',
        'primus_turbo::grouped_gemm_variable_k',
        'primus_turbo::grouped_gemm_variable_k_impl',
        'primus_turbo_cpp_extension::ck_grouped_gemm',
        'primus_turbo_cpp_extension::ck_grouped_gemm_variable_k',
        'primus_turbo_cpp_extension::grouped_gemm',
        'primus_turbo_cpp_extension::grouped_gemm_variable_k',
    ),
    'InferenceAttention': (
        '_C_cache_ops::concat_and_cache_mla',
        '_C_cache_ops::reshape_and_cache_flash',
        'aiter::fmha_v3_varlen_fwd',
        'aiter::get_mla_metadata_v1',
        'aiter::indexer_score_topk',
        'aiter::linear_attention_with_output_base',
        'aiter::mha_batch_prefill',
        'aiter::mha_varlen_fwd',
        'aiter::pa_decode_gluon',
        'aiter::pa_sparse_prefill_opus_fwd',
        'aiter::v4_attention_with_output->_swa_write_kernel (Synthetic Op)',
        'aiter::v4_attention_with_output->_update_compressor_states_kernel (Synthetic Op)',
        'aiter::v4_attention_with_output->fused_compress_attn_D128_RD64_R4_OVL_SS8_KB32_Q_ue8m0_psh_rmsbf16_pf_flydsl (Synthetic Op)',
        'aiter::v4_attention_with_output->fused_compress_attn_D512_RD64_R4_OVL_SS8_KB32_rmsbf16_pf_flydsl (Synthetic Op)',
        'aiter::v4_attention_with_output->hca_compress_forward_D512_R128_NW4_SL256_S128_flydsl (Synthetic Op)',
        'aiter::v4_attention_with_output->hca_compress_forward_D512_R128_NW8_SL128_S128_flydsl (Synthetic Op)',
        'hipModuleLaunchKernel->kv_indices_generate_kernel (Synthetic Op)',
        'pseudo_mla_decode_fwd',
        'pseudo_mla_prefill_fwd',
        'pseudo_v4_paged_decode_csa',
        'pseudo_v4_paged_decode_hca',
        'pseudo_v4_paged_decode_swa',
        'sglang::store_cache',
        'sglang_profiler::attention_paged_attention_ragged',
        'sglang_profiler::tilelang_kernel_tilelang_sparse_fwd',
        'vllm::gdn_attention_core',
        'vllm::unified_attention_with_output',
    ),
    'MoE_aux': (
        '_moe_C::moe_align_block_size',
        'aiter::biased_grouped_topk_hip',
        'aiter::fused_dynamic_mxfp4_quant_moe_sort_hip',
        'aiter::fused_moe_->_fused_dynamic_mxfp4_quant_moe_sort_kernel (Synthetic Op)',
        'aiter::grouped_topk',
        'aiter::moe_align_block_size',
        'aiter::moe_fused_gate',
        'aiter::moe_sorting_fwd',
        'aiter::moe_sorting_opus_fwd',
        'aiter::moe_sum',
        'aiter::mxfp4_moe_sort_hip',
        'aiter::topk_sigmoid',
        'aiter::topk_softmax',
        'aiter::topk_softmax_asm',
        'aiter::topk_softplus',
        'sglang_profiler::fused_moe_triton_kernels_fused_append_shared_experts',
    ),
    'MoE_comm_bwd': (
        'MoECombineBackward',
        'MoEDispatchBackward',
        'TokenPermuteMaskMapBackward',
        '_OperationFuserAutogradFunctionBackward',
    ),
    'MoE_comm_fwd': (
        'MoECombine',
        'MoEDispatch',
        'TokenPermuteMaskMap',
        '_OperationFuserAutogradFunction',
    ),
    'MoE_fused': (
        'aiter::fmoe_fp8_blockscale_g1u1',
        'aiter::fmoe_g1u1',
        'pseudo_op::moe_aiter_fused_1stage',
    ),
    'MoE_unfused': (
        'aiter::ck_moe_stage1',
        'aiter::ck_moe_stage2',
        'aiter::moe_cktile2stages_gemm1_ck',
        'aiter::moe_cktile2stages_gemm2_ck',
        'pseudo_op::moe_flydsl_stage1',
        'pseudo_op::moe_flydsl_stage2',
        'pseudo_op::moe_gptq_awq_down',
        'pseudo_op::moe_gptq_awq_up',
        'pseudo_op::moe_triton_unfused_down',
        'pseudo_op::moe_triton_unfused_up',
        'sglang_profiler::fused_moe_triton_kernels_invoke_fused_moe_kernel',
    ),
    'NORM_bwd': (
        'aten::_fused_rms_norm_backward',
        'aten::batch_norm_backward',
        'aten::cudnn_batch_norm_backward',
        'aten::cudnn_group_norm_backward',
        'aten::cudnn_instance_norm_backward',
        'aten::cudnn_layer_norm_backward',
        'aten::cudnn_rms_norm_backward',
        'aten::group_norm_backward',
        'aten::instance_norm_backward',
        'aten::layer_norm_backward',
        'aten::miopen_batch_norm_backward',
        'aten::miopen_group_norm_backward',
        'aten::miopen_instance_norm_backward',
        'aten::miopen_layer_norm_backward',
        'aten::miopen_rms_norm_backward',
        'aten::native_batch_norm_backward',
        'aten::native_group_norm_backward',
        'aten::native_instance_norm_backward',
        'aten::native_layer_norm_backward',
        'aten::native_rms_norm_backward',
        'aten::rms_norm_backward',
        'primus::fused_ln_modulate_backward',
    ),
    'NORM_fwd': (
        'aiter::_groupnorm_run',
        'aten::_fused_rms_norm',
        'aten::batch_norm',
        'aten::cudnn_batch_norm',
        'aten::cudnn_group_norm',
        'aten::cudnn_instance_norm',
        'aten::cudnn_layer_norm',
        'aten::group_norm',
        'aten::instance_norm',
        'aten::layer_norm',
        'aten::miopen_batch_norm',
        'aten::miopen_group_norm',
        'aten::miopen_instance_norm',
        'aten::miopen_layer_norm',
        'aten::native_batch_norm',
        'aten::native_group_norm',
        'aten::native_instance_norm',
        'aten::native_layer_norm',
        'primus::fused_ln_modulate',
    ),
    'RMSNorm': (
        'aiter::_fuse_rmsnorm_fp4_quant',
        'aiter::add_rmsnorm',
        'aiter::fused_add_rmsnorm_pad_',
        'aiter::rms_norm',
        'aiter::rmsnorm',
        'aiter::rmsnorm2d_fwd_ck',
        'aiter::rmsnorm2d_fwd_with_add_ck',
        'aiter::rmsnorm2d_fwd_with_dynamicquant_ck',
        'aiter::rmsnorm_quant',
        'sglang_profiler::fused_mxfp4_quant_fused_rms_mxfp4_quant',
        'vllm::rocm_aiter_rmsnorm_fp8_group_quant',
        'vllm::rocm_aiter_rmsnorm_with_add_fp8_group_quant',
        'vllm::rocm_aiter_triton_add_rmsnorm_pad',
    ),
    'RoPE_bwd': (
        'FusedRoPEFuncBackward',
    ),
    'RoPE_fwd': (
        'FusedRoPEFunc',
        'aiter::fused_qk_rope_cat_and_cache_mla',
        'aiter::fused_qk_rope_concat_and_cache_mla',
        'aiter::rope_cached_positions_2c_fwd_impl',
        'sgl_kernel::rotary_embedding',
    ),
    'SDPA_bwd': (
        'FlashAttnFuncBackward',
        'FusedAttnFuncBackward',
        'aiter::_flash_attn_backward',
        'aiter::mha_bwd',
        'aiter::wrapper_fmha_v3_bwd',
        'aten::_efficient_attention_backward',
        'aten::_scaled_dot_product_cudnn_attention_backward',
        'aten::_scaled_dot_product_efficient_attention_backward',
        'aten::_scaled_dot_product_flash_attention_backward',
        'flash_attn::_flash_attn_backward',
        'flash_attn::_flash_attn_varlen_backward',
    ),
    'SDPA_fwd': (
        'EvoformerAttention',
        'FlashAttnFunc',
        'aiter::_flash_attn_forward',
        'aiter::fmha_v3_fwd',
        'aiter::mha_fwd',
        'aiter::wrapper_fmha_v3_fwd',
        'aten::_efficient_attention_forward',
        'aten::_scaled_dot_product_cudnn_attention',
        'aten::_scaled_dot_product_efficient_attention',
        'aten::_scaled_dot_product_flash_attention',
        'flash_attn::_flash_attn_forward',
        'flash_attn::_flash_attn_varlen_forward',
        'flash_attn_3::fwd',
    ),
    'SSM_bwd': (
        'DaoAILab::_causal_conv1d_bwd_cpp',
        'MambaSplitConv1dScanCombinedFnBackward',
    ),
    'SSM_fwd': (
        'DaoAILab::_causal_conv1d_fwd_cpp',
        'MambaSplitConv1dScanCombinedFn',
    ),
    'elementwise': (
        'LigerSiLUMulFunction',
        '_C::silu_and_mul',
        'aiter::gelu_and_mul',
        'aiter::gelu_tanh_and_mul',
        'aiter::mixed_sample_outer_exponential',
        'aiter::silu_and_mul',
        'aten::add',
        'aten::add_',
        'aten::clamp_max',
        'aten::clamp_max_',
        'aten::clamp_min',
        'aten::clamp_min_',
        'aten::copy',
        'aten::copy_',
        'aten::div',
        'aten::div_',
        'aten::mul',
        'aten::mul_',
        'aten::neg',
        'aten::pow',
        'aten::replication_pad1d',
        'aten::replication_pad2d',
        'aten::replication_pad3d',
        'aten::rsqrt',
        'aten::sigmoid',
        'aten::sigmoid_backward',
        'aten::silu',
        'aten::threshold_backward',
        'aten::upsample_nearest1d',
        'aten::upsample_nearest2d',
        'aten::upsample_nearest3d',
        'primus::quantize_mxfp4_dual',
        'primus_turbo::quantize_fp8_tensorwise',
        'primus_turbo::quantize_mxfp4_dual',
        'primus_turbo_cpp_extension::quantize_fp8_tensorwise',
        'primus_turbo_cpp_extension::quantize_mxfp4_dual',
        'sgl_kernel::silu_and_mul',
    ),
    'mHC': (
        'aiter::mhc_fused_post_pre_gemm_sqrsum',
        'aiter::mhc_post',
        'aiter::mhc_pre_big_fuse_rmsnorm',
        'aiter::mhc_pre_gemm_sqrsum',
    ),
    'reduce': (
        'aten::amax',
        'aten::amin',
        'aten::cumprod',
        'aten::cumsum',
        'aten::linalg_norm',
        'aten::logsumexp',
        'aten::max',
        'aten::mean',
        'aten::min',
        'aten::norm',
        'aten::std',
        'aten::sum',
        'aten::var',
    ),
}

OP_CATEGORY = {op: cat for cat, ops in _OP_CATEGORY_NAMES.items() for op in ops}
_KERNEL_PREFIX = "void at::native"
_KERNEL_FALLBACK = (("elementwise", "elementwise"), ("reduce", "reduce"), ("multi_tensor_apply", "multi_tensor_apply"))


def categorize_op(name: str, first_kernel: str | None = None) -> str:
    cat = OP_CATEGORY.get(name)
    if cat is not None:
        return cat
    if name.startswith("triton"):
        return "triton"
    if name.startswith("record_param_comms"):
        return "record_param_comms"
    if first_kernel and first_kernel.startswith(_KERNEL_PREFIX):
        for needle, c in _KERNEL_FALLBACK:
            if needle in first_kernel:
                return c
    return "other"


@dataclass
class Launchers:
    """One row per launcher event, in launcher start-time order (TraceLens's order)."""

    idx: np.ndarray  # event index of each launcher
    direct_us: np.ndarray
    subtree_us: np.ndarray
    count: np.ndarray  # number of directly launched GPU events
    names: list[str]
    categories: list[str]
    kernel_idx: list[np.ndarray] | None = None  # direct GPU events per launcher (ts order)

    def frame(self):
        import pandas as pd

        return pd.DataFrame(
            {
                "name": self.names,
                "op category": self.categories,
                "total_direct_kernel_time": self.direct_us,
                "total_subtree_kernel_time": self.subtree_us,
                "direct_kernel_count": self.count,
            }
        )


def gpu_launchers(t: EventTable) -> Launchers:
    tree = t.call_tree()
    cls = gpu_event_classes(t)
    gpu_idx = np.flatnonzero(t.is_cat(*GPU_CATS) & (tree.gpu_runtime >= 0))
    gpu_idx = gpu_idx[~cls["comm"][t.name[gpu_idx]]]
    cpu_op = t.cat_code("cpu_op")
    pyfn = t.cat_code("python_function")
    execute = t.names.index("execute") if "execute" in t.names else -2
    host_parent = tree.host_parent
    cat = t.cat
    name = t.name
    memo: dict[int, int] = {}

    def launcher_of(r: int) -> int:
        got = memo.get(r)
        if got is not None:
            return got
        cur = int(host_parent[r])
        found = -1
        while cur >= 0:
            c = cat[cur]
            if c == cpu_op:
                if name[cur] == execute:
                    cur = int(host_parent[cur])
                    continue
                found = cur
                break
            if c == pyfn:
                cur = int(host_parent[cur])
                continue
            break
        res = found if found >= 0 else r
        memo[r] = res
        return res

    rts = tree.gpu_runtime[gpu_idx].tolist()
    k_launcher = np.fromiter((launcher_of(r) for r in rts), dtype=np.int64, count=len(rts))
    # launcher order: first appearance (kernel file order), then stable sort by start
    uniq, first_pos = np.unique(k_launcher, return_index=True)
    by_first = uniq[np.argsort(first_pos, kind="stable")]
    order = by_first[np.argsort(t.ts[by_first], kind="stable")]
    nL = order.size
    pos = np.full(len(t), -1, dtype=np.int64)
    pos[order] = np.arange(nL)
    g = pos[k_launcher]
    ks = t.ts[gpu_idx]
    ke = ks + t.dur[gpu_idx]
    direct = grouped_busy(g, ks, ke, nL)
    count = np.bincount(g, minlength=nL)

    # subtree: every (runtime, GPU event) link is charged to the runtime and to all of
    # its host ancestors; keep the launchers among them
    is_launcher = pos >= 0
    chain_memo: dict[int, list[int]] = {}
    sg: list[int] = []
    sk: list[int] = []
    for r, k in zip(tree.pairs_rt.tolist(), tree.pairs_gpu.tolist()):
        for L in _chain_iter(r, host_parent, is_launcher, pos, chain_memo):
            sg.append(L)
            sk.append(k)
    sk_a = np.asarray(sk, dtype=np.int64)
    ss = t.ts[sk_a]
    subtree = grouped_busy(np.asarray(sg, dtype=np.int64), ss, ss + t.dur[sk_a], nL)

    # kernel details: direct kernels of each launcher by start time (stable)
    korder = np.lexsort((t.ts[gpu_idx], g))  # stable within launcher, kernels in file order
    sorted_k = gpu_idx[korder]
    bounds = np.searchsorted(g[korder], np.arange(nL + 1))
    kernel_lists = [sorted_k[bounds[i]:bounds[i + 1]] for i in range(nL)]
    names = t.names_of(order)
    cats = []
    for i in range(nL):
        kl = kernel_lists[i]
        first = t.names[t.name[kl[0]]] if kl.size else None
        cats.append(categorize_op(names[i], first))
    return Launchers(order, direct, subtree, count, names, cats, kernel_lists)


def _chain_iter(r, host_parent, is_launcher, pos, memo):
    got = memo.get(r)
    if got is not None:
        return got
    chain = []
    cur = r
    visited = []
    while cur >= 0:
        hit = memo.get(cur)
        if hit is not None:
            chain.extend(hit)
            break
        visited.append(cur)
        if is_launcher[cur]:
            chain.append(int(pos[cur]))
        cur = int(host_parent[cur])
    # memoise every node on the walked path (suffixes of the chain)
    suffix = chain
    for v in visited:
        memo[v] = suffix
        if is_launcher[v]:
            suffix = suffix[1:]
    return chain


def cpu_launchers(t: EventTable, sel: CpuSelection | None = None) -> Launchers:
    """CPU-only traces: each main-thread cpu_op with self time is a "launcher".

    direct time = the op's self time (its duration less its child cpu_ops'), the CPU
    analogue of "kernel time launched directly from it"; subtree time = its duration.
    """
    sel = sel or cpu_selection(t)
    idx = sel.compute_idx
    if idx.size == 0:
        return Launchers(idx, np.empty(0), np.empty(0), np.empty(0, np.int64), [], [])
    tree = t.call_tree()
    par = tree.host_parent[idx]
    child_sum = np.zeros(len(t), dtype=np.float64)
    has = par >= 0
    np.add.at(child_sum, par[has], t.dur[idx[has]])
    s = t.ts[idx]
    incl = (s + t.dur[idx]) - s
    self_t = incl - child_sum[idx]
    keep = self_t > 0
    idx, self_t, incl = idx[keep], self_t[keep], incl[keep]
    order = np.argsort(t.ts[idx], kind="stable")
    idx, self_t, incl = idx[order], self_t[order], incl[order]
    names = t.names_of(idx)
    cats = [categorize_op(n) for n in names]
    return Launchers(idx, self_t, incl, np.ones(idx.size, dtype=np.int64), names, cats, None)


def _cumulative(pcts: list[float]) -> list[float]:
    out, acc = [], 0.0
    for p in pcts:
        acc += p
        out.append(acc)
    return out


def ops_summary_table(launchers: Launchers) -> Table:
    """TraceLens get_df_kernel_launchers_summary: group by name (key order), sum /
    count / sorted categories, sort by direct time descending (pandas' quicksort ties),
    then percent and cumulative percent in that order."""
    if launchers.idx.size == 0:
        return Table(list(OPS_SUMMARY_COLUMNS))
    groups: dict[str, list[int]] = {}
    for i, nm in enumerate(launchers.names):
        groups.setdefault(nm, []).append(i)
    direct = np.asarray(launchers.direct_us, dtype=np.float64)
    subtree = np.asarray(launchers.subtree_us, dtype=np.float64)
    recs = []
    for nm in sorted(groups):
        m = groups[nm]
        recs.append((nm, math.fsum(direct[m].tolist()), math.fsum(subtree[m].tolist()), len(m),
                     str(sorted({launchers.categories[i] for i in m}))))
    recs = [recs[i] for i in pandas_desc_order([r[1] for r in recs]).tolist()]
    ms = [r[1] / 1000 for r in recs]
    total_ms = float(np.sum(ms))
    pct = [x / total_ms * 100 for x in ms]
    cum = _cumulative(pct)
    rows = [[nm, d, sub, d / 1000, sub / 1000, c, cats, p, cp]
            for (nm, d, sub, c, cats), p, cp in zip(recs, pct, cum)]
    return Table(list(OPS_SUMMARY_COLUMNS), rows)


def ops_summary_by_category_table(launchers: Launchers) -> Table:
    """TraceLens get_df_kernel_launchers_summary_by_category."""
    if launchers.idx.size == 0:
        return Table(list(BY_CATEGORY_COLUMNS))
    groups: dict[str, list[int]] = {}
    for i, c in enumerate(launchers.categories):
        groups.setdefault(c, []).append(i)
    direct = np.asarray(launchers.direct_us, dtype=np.float64)
    recs = [(c, len(groups[c]), math.fsum(direct[groups[c]].tolist())) for c in sorted(groups)]
    recs = [recs[i] for i in pandas_desc_order([r[2] for r in recs]).tolist()]
    ms = [r[2] / 1000 for r in recs]
    total_ms = float(np.sum(ms))
    pct = [x / total_ms * 100 for x in ms]
    rows = [[c, n, m, p, cp] for (c, n, _), m, p, cp in zip(recs, ms, pct, _cumulative(pct))]
    return Table(list(BY_CATEGORY_COLUMNS), rows)


def write_csvs(launchers: Launchers, out_dir: Path) -> tuple[Table, Table]:
    out_dir = Path(out_dir)
    ops = ops_summary_table(launchers)
    bycat = ops_summary_by_category_table(launchers)
    ops.write_csv(out_dir / "ops_summary.csv")
    bycat.write_csv(out_dir / "ops_summary_by_category.csv")
    return ops, bycat
