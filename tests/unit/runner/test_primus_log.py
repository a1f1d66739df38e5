"""Primus log parsing: every line shape in FACTS.md "Primus", dedupe, warm-up, window, median."""

from __future__ import annotations

import gzip
import math

import pytest

from traceladder.runner.primus_log import (
    IterationRecord,
    PrimusLogError,
    parse_iterations,
    parse_log_file,
    summarize,
)

# The full example line of FACTS.md (current shape), with the rocm segment filled in.
FACTS_LINE = (
    "[2026-10-08 14:03:21.512345] iteration        7/      10 | consumed samples:           56 | "
    "elapsed time per iteration (ms): 239.7/239.6 | compute per GPU (TFLOP/s/GPU): 1117.4 (avg 1117.0) "
    "| tokens/s/GPU inst/harmonic mean: 17087.9/17094.1 | learning rate: 2.061074E-06 | global batch "
    "size:     8 | lm loss: 1.158734E+01 | loss scale: 1.0 | grad norm: 1.873 | number of skipped "
    "iterations:   0 | number of nan iterations:   0 | hip mem usage/free/total/usage_ratio: "
    "121.37GB/166.61GB/287.98GB/42.15%  | rocm mem usage/free/total/usage_ratio: "
    "125.02GB/162.96GB/287.98GB/43.41% | rank-3 rocm max mem usage/usage_ratio: 128.10GB/44.48%"
)


def current(it, ms, tflops, tok, *, total=10, loss=11.5, hip=121.37, maxmem=128.10, rank=3, gbs=8, prefix=""):
    return (
        f"{prefix}[2026-10-08 14:03:{it:02d}.000000] iteration {it:>8}/{total:>8} | consumed samples: "
        f"{it * gbs:>12} | elapsed time per iteration (ms): {ms:.1f}/{ms + 0.3:.1f} | compute per GPU "
        f"(TFLOP/s/GPU): {tflops:.1f} (avg {tflops - 1:.1f}) | tokens/s/GPU inst/harmonic mean: "
        f"{tok:.1f}/{tok + 5:.1f} | learning rate: 2.061074E-06 | global batch size: {gbs:>5} | lm loss: "
        f"{loss:.6E} | loss scale: 1.0 | grad norm: 1.873 | number of skipped iterations:   0 | number of "
        f"nan iterations:   0 | hip mem usage/free/total/usage_ratio: {hip:.2f}GB/166.61GB/287.98GB/42.15%"
        f"  | rocm mem usage/free/total/usage_ratio: 125.02GB/162.96GB/287.98GB/43.41% | rank-{rank} rocm "
        f"max mem usage/usage_ratio: {maxmem:.2f}GB/44.48%"
    )


def v2651(it, ms, tflops, tok, total=10):
    return (
        f"iteration {it:>8}/{total:>8} | consumed samples: {it * 8:>12} | elapsed time per iteration "
        f"(ms): {ms:.1f}/{ms:.1f} | throughput per GPU (TFLOP/s/GPU): {tflops:.1f}/{tflops - 2:.1f} | "
        f"tokens/s/GPU inst/harmonic mean: {tok:.1f}/{tok - 3:.1f} | learning rate: 1.000000E-05 | "
        f"global batch size:     8 | lm loss: 1.100000E+01 | loss scale: 1.0 | grad norm: 2.000 | "
        f"number of skipped iterations:   0 | number of nan iterations:   0 | "
        f"hip mem usage/free/total/usage_ratio: 110.00GB/178.00GB/288.00GB/38.19%"
    )


def v264(it, ms, tflops, tok, total=10):
    return (
        f"iteration {it:>8}/{total:>8} | consumed samples: {it * 8:>12} | elapsed time per iteration "
        f"(ms): {ms:.1f}/{ms:.1f} | throughput per GPU (TFLOP/s/GPU): {tflops:.1f}/{tflops:.1f} | "
        f"tokens per GPU (tokens/s/GPU): {tok:.1f}/{tok - 10:.1f} | learning rate: 1.000000E-05 | "
        f"global batch size:    16 | lm loss: 1.050000E+01 | loss scale: 1.0 | grad norm: 2.000 | "
        f"number of skipped iterations:   0 | number of nan iterations:   0 |"
    )


def raw(it, ms, tflops, total=10):
    """Megatron's raw shape (Primus's first log_avg_skip_iterations): one number, no tokens."""
    return (
        f" [2026-10-08 14:02:{it:02d}] iteration {it:>8}/{total:>8} | consumed samples: {it * 8:>12} | "
        f"elapsed time per iteration (ms): {ms:.1f} | throughput per GPU (TFLOP/s/GPU): {tflops:.1f} | "
        f"learning rate: 1.000000E-05 | global batch size:     8 | lm loss: 1.217436E+01 | "
        f"loss scale: 1.0 | grad norm: 14.523 | number of skipped iterations:   0 | "
        f"number of nan iterations:   0 |"
    )


PREFIX = "INFO [2026-10-08 14:03:21][rank-7/8][DEBUG] [primus/backends/megatron/training.py:1423] : "


def test_the_facts_example_line():
    (rec,) = parse_iterations([FACTS_LINE])
    assert rec == IterationRecord(
        iteration=7,
        train_iters=10,
        elapsed_ms=239.7,
        tflops=1117.4,
        tokens_per_sec_per_gpu=17087.9,
        hip_mem_gb=121.37,
        max_mem_gb=128.10,
        lm_loss=11.58734,
        global_batch_size=8,
        elapsed_ms_avg=239.6,
        tflops_avg=1117.0,
        tokens_per_sec_per_gpu_avg=17094.1,
        rocm_mem_gb=125.02,
        max_mem_rank=3,
    )


def test_facts_line_with_unfilled_rocm_segment():
    line = FACTS_LINE.replace("125.02GB/162.96GB/287.98GB/43.41%", "...")
    (rec,) = parse_iterations([line])
    assert rec.rocm_mem_gb is None and rec.max_mem_gb == 128.10 and rec.hip_mem_gb == 121.37


def test_v26_5_1_shape():
    (rec,) = parse_iterations([v2651(5, 330.5, 1010.2, 12395.0)])
    assert (rec.iteration, rec.train_iters, rec.elapsed_ms) == (5, 10, 330.5)
    assert rec.tflops == 1010.2 and rec.tflops_avg == 1008.2
    assert rec.tokens_per_sec_per_gpu == 12395.0 and rec.tokens_per_sec_per_gpu_avg == 12392.0
    assert rec.hip_mem_gb == 110.0 and rec.max_mem_gb is None
    assert rec.global_batch_size == 8 and rec.lm_loss == 11.0


def test_v26_4_and_older_shape():
    (rec,) = parse_iterations([v264(6, 556.0, 640.0, 7367.0)])
    assert rec.elapsed_ms == 556.0 and rec.tflops == 640.0
    assert rec.tokens_per_sec_per_gpu == 7367.0 and rec.tokens_per_sec_per_gpu_avg == 7357.0
    assert rec.global_batch_size == 16 and rec.hip_mem_gb is None


def test_megatron_raw_warmup_shape():
    (rec,) = parse_iterations([raw(1, 30412.5, 8.8)])
    assert rec.iteration == 1 and rec.elapsed_ms == 30412.5 and rec.elapsed_ms_avg is None
    assert rec.tflops == 8.8 and rec.tflops_avg is None
    assert rec.tokens_per_sec_per_gpu is None and rec.lm_loss == pytest.approx(12.17436)


def test_logger_prefixes_and_noise_lines():
    lines = [
        "INFO [2026-10-08 14:00:00][rank-0/8][INFO] [primus/cli.py:10] : starting train pretrain",
        "WARNING: elapsed time per iteration is not the point of this line",
        "[rank-0] saving checkpoint at iteration 5",
        "number of skipped iterations: 0",
        PREFIX + current(2, 300.0, 1000.0, 14000.0),
        "\x1b[32mINFO\x1b[0m [2026-10-08][rank-1/8][DEBUG] [x.py:1] : " + current(3, 301.0, 1001.0, 14001.0),
        "(rank 5) " + v2651(4, 302.0, 1002.0, 14002.0),
    ]
    recs = parse_iterations(lines)
    assert [r.iteration for r in recs] == [2, 3, 4]
    assert [r.elapsed_ms for r in recs] == [300.0, 301.0, 302.0]
    assert recs[0].max_mem_rank == 3  # "rank-7/8" in the prefix is not the max-mem rank


def test_lines_repeated_per_rank_are_deduped_by_iteration():
    lines = []
    for it in range(1, 6):
        for rank in range(8):
            lines.append(
                f"INFO [...][rank-{rank}/8][DEBUG] [...] : "
                + current(it, 240.0 + it, 1100.0, 17000.0 + it, hip=100.0 + rank, maxmem=120.0 + rank, rank=rank)
            )
    recs = parse_iterations(lines)
    assert [r.iteration for r in recs] == [1, 2, 3, 4, 5]
    assert all(r.elapsed_ms == 240.0 + r.iteration for r in recs)
    # each rank prints its own memory: the merged record keeps the largest
    assert all(r.hip_mem_gb == 107.0 and r.max_mem_gb == 127.0 and r.max_mem_rank == 7 for r in recs)


def test_records_come_back_in_iteration_order():
    lines = [current(3, 3.0, 1, 1), current(1, 1.0, 1, 1), current(2, 2.0, 1, 1), current(1, 9.0, 1, 1)]
    recs = parse_iterations(lines)
    assert [(r.iteration, r.elapsed_ms) for r in recs] == [(1, 1.0), (2, 2.0), (3, 3.0)]


def test_mixed_warmup_then_current_shape_skips_warmup():
    lines = [raw(1, 30000.0, 8.8), raw(2, 900.0, 300.0), raw(3, 560.0, 600.0)]
    lines += [
        current(i, ms, 1117.0 + i, 17000.0 + 10 * i)
        for i, ms in zip(range(4, 11), [241, 239, 240, 238, 260, 239.5, 240.5])
    ]
    recs = parse_iterations(lines)
    assert len(recs) == 10
    m = summarize(recs, skip_iterations=3)
    assert m.iterations_used == [4, 5, 6, 7, 8, 9, 10]
    assert m.step_ms_values == [241, 239, 240, 238, 260, 239.5, 240.5]
    assert m.step_ms == 240.0  # the median: the 260 ms outlier does not move it
    assert m.tokens_per_sec_per_gpu == 17070.0
    assert m.tflops == 1124.0
    assert m.train_iters == 10 and m.lm_loss_last == 11.5
    assert m.peak_mem_gb == 128.10 and m.peak_mem_source == "rocm_max_mem"
    assert m.iterations_parsed == 10 and m.skip_iterations == 3 and m.window is None


def test_even_count_median_and_no_tokens_shape():
    recs = parse_iterations([raw(i, ms, 500.0 + i) for i, ms in zip(range(1, 6), [900, 400, 100, 300, 200])])
    m = summarize(recs, skip_iterations=1)
    assert m.iterations_used == [2, 3, 4, 5]
    assert m.step_ms == 250.0  # median of 100, 200, 300, 400
    assert m.tokens_per_sec_per_gpu is None
    assert m.tflops == 503.5
    assert m.peak_mem_gb is None and m.peak_mem_source is None


def test_profiler_window_selects_start_to_end_exclusive():
    recs = parse_iterations([current(i, 200.0 + i, 1000.0, 15000.0 + i, total=12) for i in range(1, 13)])
    m = summarize(recs, skip_iterations=3, window=(10, 12))
    assert m.iterations_used == [10, 11]
    assert m.step_ms == 210.5 and m.tokens_per_sec_per_gpu == 15010.5
    assert m.window == (10, 12) and m.train_iters == 12
    # the window and the warm-up skip both apply
    assert summarize(recs, skip_iterations=10, window=(10, 12)).iterations_used == [11]


def test_peak_memory_falls_back_to_hip_and_spans_all_records():
    recs = parse_iterations([v2651(i, 300.0, 1000.0, 12000.0) for i in range(1, 5)])
    recs[0] = IterationRecord(**{**recs[0].to_dict(), "hip_mem_gb": 140.0})
    m = summarize(recs, skip_iterations=2)
    assert m.peak_mem_gb == 140.0 and m.peak_mem_source == "hip_mem"  # iteration 1 counts too


def test_no_usable_iterations_is_one_line_error():
    recs = parse_iterations([current(i, 240.0, 1000.0, 1.0) for i in (1, 2, 3)])
    with pytest.raises(PrimusLogError) as ei:
        summarize(recs, skip_iterations=3)
    msg = str(ei.value)
    assert "\n" not in msg and "3 iterations parsed (1..3)" in msg and "iteration > 3" in msg
    with pytest.raises(PrimusLogError, match="no iteration lines parsed"):
        summarize(parse_iterations(["nothing here", "iteration without numbers"]), skip_iterations=0)
    with pytest.raises(PrimusLogError, match="10 <= iteration < 12"):
        summarize(recs, skip_iterations=0, window=(10, 12))
    with pytest.raises(PrimusLogError):
        summarize(recs, skip_iterations=0, window=(5, 5))


def test_nan_loss_and_units():
    line = current(4, 240.0, 1000.0, 1.0).replace("lm loss: 1.150000E+01", "lm loss: nan")
    line = line.replace("121.37GB/166.61GB", "124280.88MB/166.61GB")
    (rec,) = parse_iterations([line])
    assert math.isnan(rec.lm_loss)
    assert rec.hip_mem_gb == pytest.approx(121.368, abs=1e-3)


def test_parse_log_file_plain_and_gzip(tmp_path):
    text = "\n".join([raw(1, 999.0, 1.0)] + [current(i, 240.0, 1000.0, 17000.0) for i in range(2, 5)]) + "\n"
    plain = tmp_path / "log.txt"
    plain.write_text(text)
    packed = tmp_path / "log.txt.gz"
    packed.write_bytes(gzip.compress(text.encode() + b"\xff\xfe broken bytes\n"))
    assert parse_log_file(plain) == parse_log_file(packed)
    assert [r.iteration for r in parse_log_file(packed)] == [1, 2, 3, 4]


def test_metrics_to_dict_is_json_ready():
    import json

    m = summarize(parse_iterations([current(i, 240.0, 1000.0, 17000.0) for i in range(1, 5)]), 1, (2, 4))
    d = json.loads(json.dumps(m.to_dict()))
    assert d["window"] == [2, 4] and d["iterations_used"] == [2, 3] and d["step_ms"] == 240.0


def test_the_proxys_cpu_time_is_parsed_beside_the_elapsed_time() -> None:
    def line(it: int, ms: float, cpu: float) -> str:
        return current(it, ms, 1.0, 2048.0 / (ms / 1000)).replace(
            "| compute per GPU", f"| step cpu time per iteration (ms): {cpu:.1f} | compute per GPU"
        )

    # the last iteration stretched, as the VM's slow spells stretch CPU time
    lines = [line(it, 100.0 + it, 81.0 if it == 5 else 50.0 + it) for it in range(1, 6)]
    m = summarize(parse_iterations(lines), skip_iterations=1)
    # the run's CPU cost per step: the mean over the kept iterations (their median would be 53.5)
    assert m.step_cpu_ms_values == [52.0, 53.0, 54.0, 81.0] and m.step_cpu_ms == pytest.approx(60.0)
    assert m.step_cpu_statistic == "mean"  # recorded, so the block model floors it as a mean
    # tokens per rank per CPU-second: 4 steps of 2048 tokens over their 240 CPU ms
    assert m.tokens_per_cpu_s_per_gpu == pytest.approx(4 * 2048 / 0.240)
    # Primus's lines up to log_avg_skip_iterations carry no tokens/s: a step's tokens come from
    # the lines that do, and the CPU time from every kept line
    bare_second = lines[1].replace("tokens/s/GPU inst/harmonic mean:", "no tokens here:")
    bare = summarize(parse_iterations([lines[0], bare_second, *lines[2:]]), skip_iterations=1)
    assert bare.step_cpu_ms == pytest.approx(60.0)
    assert bare.tokens_per_cpu_s_per_gpu == pytest.approx(4 * 2048 / 0.240)
    # Primus's own lines carry no CPU time: no figure, not a zero
    plain = summarize(parse_iterations([current(it, 100.0, 1.0, 1.0) for it in range(1, 4)]), skip_iterations=1)
    assert plain.step_cpu_ms is None and plain.step_cpu_ms_values is None and plain.tokens_per_cpu_s_per_gpu is None
    assert plain.step_cpu_statistic is None
