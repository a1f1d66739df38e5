"""analysis/model/table.py writes the CSV text pandas writes, without pandas; checked against
pandas itself on the value mixes the reports produce."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from traceladder.analysis.model.table import Table, add_percentages, concat, pandas_desc_order, sort_desc_then_asc

COLUMNS = {
    "ints": [3, 1, 2, 7],
    "ints_and_none": [8, None, 8, 2],  # float64 in pandas: 8.0
    "floats_and_nan": [1.5, math.nan, 2.25, 1e-7],
    "strings_and_none": ["a,b", None, 'q"x', "plain"],
    "tuples": [(1, 2), ((10, 64), ()), ("", "1"), None],
    "bools": [True, False, True, True],
    "mixed": [1, "x", 2.5, None],
    "all_none": [None, None, None, None],
    "numpy": [np.float64(0.1), np.int64(4), np.float64(3.0), np.float64(2e20)],
}


def test_csv_text_matches_pandas(tmp_path):
    records = [{k: v[i] for k, v in COLUMNS.items()} for i in range(4)]
    ours = Table.from_records(records).write_csv(tmp_path / "ours.csv").read_text()
    pd.DataFrame(records).to_csv(tmp_path / "pandas.csv", index=False)
    assert ours == (tmp_path / "pandas.csv").read_text()


def test_empty_table_is_one_empty_line(tmp_path):
    assert Table([]).write_csv(tmp_path / "e.csv").read_text() == pd.DataFrame().to_csv(index=False)
    assert Table(["a", "b"]).write_csv(tmp_path / "h.csv").read_text() == "a,b\n"


@pytest.mark.parametrize("n", [1, 2, 7, 33, 500])
def test_desc_order_is_pandas_sort_values(n):
    rng = np.random.default_rng(n)
    for _ in range(20):
        v = rng.integers(0, 3, n).astype(float)  # many ties: the order pandas leaves them in matters
        df = pd.DataFrame({"v": v, "i": np.arange(n)})
        want = df.sort_values(by="v", ascending=False)["i"].to_numpy()
        assert pandas_desc_order(v).tolist() == want.tolist()


def _csv(table: Table, tmp_path, name: str) -> str:
    return table.write_csv(tmp_path / name).read_text()


@pytest.mark.parametrize("seed", range(6))
def test_two_key_sort_and_percentages_are_pandas(seed, tmp_path):
    """The reports' ``sort_values(by=[time, uid], ascending=[False, True])`` then
    ``Percentage (%)`` / ``cumsum`` (ties, NaN and zero times included)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    t = rng.integers(0, 4, n).astype(float) * rng.choice([1.0, 0.1, 1e-3])
    t[rng.random(n) < 0.15] = math.nan
    uid = rng.permutation(n * 3)[:n].tolist()
    recs = [{"name": f"op{i % 5}", "t_sum": float(x), "uid": u} for i, (x, u) in enumerate(zip(t, uid))]
    df = pd.DataFrame(recs).sort_values(by=["t_sum", "uid"], ascending=[False, True]).reset_index(drop=True)
    df["Percentage (%)"] = df["t_sum"] / df["t_sum"].sum() * 100
    df["Cumulative Percentage (%)"] = df["Percentage (%)"].cumsum()
    df.to_csv(tmp_path / "pandas.csv", index=False)
    ours = add_percentages(sort_desc_then_asc(Table.from_records(recs), "t_sum", "uid"), "t_sum")
    assert _csv(ours, tmp_path, "ours.csv") == (tmp_path / "pandas.csv").read_text()


def test_concat_is_pd_concat(tmp_path):
    """perf_sheets' ``_bwd`` sheets: two summaries whose param columns differ."""
    a = [{"name": "x", "param: B": "2", "t": 1.5, "n": 3}, {"name": "y", "param: B": None, "t": math.nan, "n": 1}]
    b = [{"name": "z", "param: H": "(1, 2)", "t": 0.25, "n": 2, "param: B": "4"}]
    pd.concat([pd.DataFrame(a), pd.DataFrame(b)]).to_csv(tmp_path / "pandas.csv", index=False)
    ours = concat(Table.from_records(a), Table.from_records(b))
    assert _csv(ours, tmp_path, "ours.csv") == (tmp_path / "pandas.csv").read_text()
