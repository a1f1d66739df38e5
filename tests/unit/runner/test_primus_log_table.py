"""Issue 60's done-when: the parser reads the lines Primus prints, as the upstream table's
`log_segment` rows write them. Each shape's lines are assembled from the table's format strings with
the values filled in (testkit/standin/upstream_table.py, the renderer the stand-in primus-cli prints
with): Primus main, v26.5.1, v26.4.0 (the training_log patch and the legacy trainer) and Megatron's
raw line; primus_log gives back the step time, tokens/s/GPU, TFLOP/s, memory and loss."""

from __future__ import annotations

import statistics

import pytest

from testkit.standin import upstream_table
from traceladder.runner.primus_log import parse_iterations, summarize

SKIP = 2
MS = [1000.8, 560.4, 557.1, 559.3, 556.0, 561.2, 558.8]  # iteration 1's warm-up is slow
GBS, SEQ, GPUS = 8, 4096, 8
HIP, ROCM, PEAK, TOTAL = 121.37, 123.37, 128.10, 287.98


def figures(it: int, shape: str) -> dict[str, float | int]:
    ms = MS[it - 1]
    used = MS[SKIP:it]
    tflops = [1117.4 * 239.7 / t for t in used]
    tokens = [GBS * SEQ / (t / 1000) / GPUS for t in used]
    return {
        "iteration": it,
        "train_iters": len(MS),
        "consumed_samples": it * GBS,
        "elapsed_ms": ms,
        "elapsed_ms_avg": statistics.fmean(used) if used else ms,
        "tflops": 1117.4 * 239.7 / ms,
        "tflops_avg": statistics.fmean(tflops) if used else 0.0,
        "tokens": GBS * SEQ / (ms / 1000) / GPUS,
        # v26.4.0 averages tokens/s arithmetically, later releases harmonically
        "tokens_avg": (statistics.fmean if shape.startswith("v26.4.0") else statistics.harmonic_mean)(tokens)
        if used
        else 0.0,
        "learning_rate": 2.0e-6,
        "global_batch_size": GBS,
        "lm_loss": 11.9 - 0.03 * it,
        "loss_scale": 1.0,
        "grad_norm": 1.873,
        "hip_used_gb": HIP,
        "hip_total_gb": TOTAL,
        "rocm_used_gb": ROCM,
        "rocm_total_gb": TOTAL,
        "max_rank": 3,
        "max_used_gb": PEAK - 2.0 if it == 1 else PEAK,
    }


def lines(shape: str) -> list[str]:
    out = []
    for it in range(1, len(MS) + 1):
        stamp = f"[2026-12-07 10:00:{it:02d}.000000]"
        if shape == "v26.4.0-legacy":  # no timestamp of its own: the logger's prefix (a rank-N of its own)
            out.append(
                upstream_table.iteration_line(shape, figures(it, shape), prefix="[rank-7/8][INFO] [trainer.py:2425]:")
            )
        elif shape != "megatron" and it <= SKIP:  # Primus leaves Megatron's line before averaging starts
            out.append(upstream_table.iteration_line("megatron", figures(it, shape), prefix=stamp))
        else:
            out.append(upstream_table.iteration_line(shape, figures(it, shape), prefix=stamp))
    return out


def expected_median(values: list[float], places: int = 1) -> float:
    return statistics.median(round(v, places) for v in values)


@pytest.mark.parametrize("shape", ["main", "v26.5.1", "v26.4.0", "v26.4.0-legacy", "megatron"])
def test_the_parser_reads_every_shape_the_table_holds(shape: str) -> None:
    text = lines(shape)
    records = parse_iterations(text)
    assert [r.iteration for r in records] == list(range(1, len(MS) + 1)), text[-1]
    metrics = summarize(records, SKIP)
    used = MS[SKIP:]
    assert metrics.iterations_used == [3, 4, 5, 6, 7]
    assert metrics.step_ms == pytest.approx(statistics.median(used))
    assert metrics.tflops == pytest.approx(expected_median([1117.4 * 239.7 / t for t in used]), abs=0.051)
    assert metrics.lm_loss_last == pytest.approx(11.9 - 0.03 * len(MS), rel=1e-6)
    assert {r.global_batch_size for r in records} == {GBS}
    last = records[-1]
    if shape == "megatron":  # one number per field, no tokens, no memory
        assert metrics.tokens_per_sec_per_gpu is None and metrics.peak_mem_gb is None
        assert last.elapsed_ms_avg is None and last.tflops_avg is None
        return
    tokens = [GBS * SEQ / (t / 1000) / GPUS for t in used]
    assert metrics.tokens_per_sec_per_gpu == pytest.approx(expected_median(tokens), abs=0.051)
    assert last.elapsed_ms_avg == pytest.approx(statistics.fmean(used), abs=0.051)
    assert last.tflops_avg == pytest.approx(statistics.fmean(1117.4 * 239.7 / t for t in used), abs=0.051)
    mean = statistics.fmean(tokens) if shape.startswith("v26.4.0") else statistics.harmonic_mean(tokens)
    assert last.tokens_per_sec_per_gpu_avg == pytest.approx(mean, abs=0.051)
    assert metrics.peak_mem_gb == pytest.approx(PEAK) and metrics.peak_mem_source == "rocm_max_mem"
    assert (last.hip_mem_gb, last.rocm_mem_gb, last.max_mem_rank) == (pytest.approx(HIP), pytest.approx(ROCM), 3)


def test_the_shapes_print_what_primus_prints() -> None:
    """Spot checks of the assembled text: the segments each shape renames, and where memory goes."""
    main, v2651, v264, legacy, raw = (
        lines(s)[-1] for s in ("main", "v26.5.1", "v26.4.0", "v26.4.0-legacy", "megatron")
    )
    assert "| compute per GPU (TFLOP/s/GPU): 479.3 (avg 479.6)  | tokens/s/GPU inst/harmonic mean: " in main
    assert "| throughput per GPU (TFLOP/s/GPU): 479.3/479.6  | tokens/s/GPU inst/harmonic mean: " in v2651
    assert "| throughput per GPU (TFLOP/s/GPU): 479.3/479.6  | tokens per GPU (tokens/s/GPU): " in v264
    for line in (main, v2651, v264):  # the patch appends memory last, GB
        assert line.endswith(" | rank-3 rocm max mem usage/usage_ratio: 128.10GB/44.48%"), line
        assert "number of nan iterations:   0 | hip mem usage/free/total/usage_ratio: 121.37GB/" in line
    assert "| rank-3 max mem usage/usage_ratio: 128.10GiB/44.48% | throughput per GPU" in legacy
    assert legacy.endswith("number of nan iterations:   0 |")
    assert raw.startswith("[2026-12-07 10:00:07.000000] iteration        7/       7 | consumed samples:           56 |")
    assert "| elapsed time per iteration (ms): 558.8 | throughput per GPU (TFLOP/s/GPU): 479.3 |" in raw


def test_the_renderer_fills_only_format_expressions() -> None:
    snippet = "log_string += ' consumed samples: {:12d} |'.format(args.consumed_train_samples)"
    assert upstream_table.render(snippet, {"args.consumed_train_samples": 24}) == " consumed samples:           24 |"
    with pytest.raises(KeyError, match="args"):
        upstream_table.render(snippet, {})
    with pytest.raises(ValueError, match="not a format expression"):
        upstream_table.render("x = ''.join(parts)", {"parts": "ab"})
    with pytest.raises(ValueError, match="not a format expression"):
        upstream_table.render("x = f'{v.__class__}'", {"v": 1})
