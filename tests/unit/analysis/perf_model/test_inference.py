"""The parser behind the inference-extension perf model (issue 28): step labels to chunk
statistics. The expected values are what the real TraceLens v1.0.0 wrote for the same names (its
own test traces' ``perf_params``)."""

from __future__ import annotations

import pytest

from traceladder.analysis.perf_model import MODELS, inference


def test_vllm_label_with_aggregates():
    label = "execute_8192_context_2(sq8155sk8430sqsq7475785sqsk7671310)_generation_37(sq37sk34489sqsq37sqsk34489)"
    assert inference.chunk_stats(label) == {
        "c_sq": 8155,
        "c_sk": 8430,
        "c_sqsq": 7475785,
        "c_sqsk": 7671310,
        "g_sq": 37,
        "g_sk": 34489,
        "g_sqsq": 37,
        "g_sqsk": 34489,
    }


def test_sglang_and_atom_labels():
    sg = inference.chunk_stats(
        "step[MIXED bs=2 c=1 g=1 c_sq=5 c_sk=8 c_sqsq=25 c_sqsk=40 g_sq=1 g_sk=12 g_sqsq=1 g_sqsk=12]"
    )
    assert (sg["c_sq"], sg["c_sqsk"], sg["g_sk"]) == (5, 40, 12)
    atom = inference.chunk_stats("decode[bs=32 tok=128 d=32 spec=3 sqsq=512 sqsk=262144 sk=65536]")
    assert (atom["g_sq"], atom["g_sk"], atom["g_sqsq"], atom["g_sqsk"], atom["c_sq"]) == (128, 65536, 512, 262144, 0)


@pytest.mark.parametrize(
    "label",
    ["execute_context_2(14721)_generation_0(0)", "step[DECODE bs=64]", "ProfilerStep#0", "None", "prefill[bs=2 tok=7]"],
)
def test_labels_without_aggregates(label):
    with pytest.raises(ValueError):
        inference.chunk_stats(label)


def test_attention_without_label_has_no_estimate():
    args = {"Input Dims": [[8, 4, 16], [8, 2, 16], [8, 2, 16]], "Input type": ["c10::BFloat16"] * 3}
    p = inference.attention_params("aiter::mha_batch_prefill", args)
    assert p["_no_perf"] is True
    with pytest.raises(ValueError):
        MODELS["aiter::mha_batch_prefill"].metrics("aiter::mha_batch_prefill", p, False, args)
