"""Schema and parquet store: round trip, append-only, dedupe, data root."""
import math
from dataclasses import fields

import pandas as pd
import pyarrow as pa
import pytest

from vtrain.costmodel.errors import UserError
from vtrain.costmodel.spec import ALL_FIELDS, ClusterSpec, ModelSpec, ParallelSpec
from vtrain.dataset import paths, schema, store
from vtrain.dataset.rows import collective_row, kernel_row, run_row


def _runs(times):
    return pd.DataFrame([run_row(dict(num_layers=2, hidden_size=64, num_attention_heads=4, tp=1, dp=d), t,
                                 "test:a.csv", "nvlink") for d, t in times])


def test_runs_schema_has_every_canonical_field_with_its_type():
    arrow = {"int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(), "str": pa.string()}
    for cls in (ModelSpec, ParallelSpec, ClusterSpec):
        for f in fields(cls):
            assert schema.RUNS.field(f.name).type == arrow[f.type], f.name
    assert set(ALL_FIELDS) < set(schema.RUNS.names)
    assert schema.RUNS.field("iteration_time_s").metadata[b"unit"] == b"s"
    assert schema.KERNELS.field("time_s").metadata[b"unit"] == b"s"
    assert schema.COLLECTIVES.field("bytes").metadata[b"unit"] == b"bytes"


def test_load_of_missing_store_is_empty_with_columns(tmp_path):
    for table in schema.TABLES:
        df = store.load(tmp_path / "nope", table)
        assert len(df) == 0 and list(df.columns) == schema.columns(table)


def test_round_trip_all_tables(tmp_path):
    frames = {
        "runs": _runs([(1, 0.5), (2, 0.25)]),
        "kernels": pd.DataFrame([kernel_row("t", "cpu", "fp32", "gemm", "qkv", "fwd", 1e-3, 1e-5, 3, m=4, n=8, k=16,
                                            batch=1)]),
        "collectives": pd.DataFrame([collective_row("t", "a100-80gb", "nvlink", "all_reduce", 1024, 8, 8, "fp16",
                                                    2e-5)]),
    }
    for table, df in frames.items():
        assert store.append(tmp_path, table, df) == len(df)
        back = store.load(tmp_path, table)
        pd.testing.assert_frame_equal(back, store.conform(df, table))
        assert [p.name.startswith("part-") for p in store.part_files(tmp_path, table)] == [True]
    runs = store.load(tmp_path, "runs")
    assert runs["dp"].tolist() == [1, 2] and runs["gpu"].tolist() == ["a100-80gb"] * 2
    assert runs["recompute"].tolist() == ["none"] * 2


def test_append_never_rewrites_or_loses_rows_and_dedupes(tmp_path):
    store.append(tmp_path, "runs", _runs([(1, 0.5)]))
    first = store.part_files(tmp_path, "runs")[0]
    before = first.read_bytes()
    # same config, new time: duplicate (first measurement wins); new config: appended in a new part
    written = store.append(tmp_path, "runs", _runs([(1, 0.9), (2, 0.3), (2, 0.31)]))
    assert written == 1
    assert first.read_bytes() == before
    assert len(store.part_files(tmp_path, "runs")) == 2
    runs = store.load(tmp_path, "runs").sort_values("dp")
    assert runs["iteration_time_s"].tolist() == [0.5, 0.3]
    assert store.append(tmp_path, "runs", _runs([(1, 0.1)])) == 0
    assert len(store.part_files(tmp_path, "runs")) == 2
    assert not list((tmp_path / "runs").glob(".tmp-*"))


def test_dedupe_key_excludes_only_measurement_columns():
    assert "time_s" not in schema.key_columns("kernels") and "source" not in schema.key_columns("kernels")
    assert "op_name" in schema.key_columns("kernels") and "gpu" in schema.key_columns("collectives")
    assert "iteration_time_s" not in schema.key_columns("runs") and "tp" in schema.key_columns("runs")


def test_append_rejects_frames_missing_columns(tmp_path):
    with pytest.raises(UserError, match="time_s"):
        store.append(tmp_path, "kernels", pd.DataFrame({"gpu": ["cpu"]}))
    with pytest.raises(UserError, match="unknown"):
        store.load(tmp_path, "bogus")


def test_kernel_row_flop_and_byte_counts():
    fwd = kernel_row("t", "cpu", "bf16", "gemm", "g", "fwd", 1.0, m=2, n=3, k=5, batch=7)
    assert fwd["flops"] == 2 * 7 * 2 * 3 * 5 and fwd["bytes_moved"] == 2 * 7 * (2 * 5 + 5 * 3 + 2 * 3)
    bwd = kernel_row("t", "cpu", "bf16", "gemm", "g", "bwd", 1.0, m=2, n=3, k=5, batch=7)
    assert bwd["flops"] == 2 * fwd["flops"]
    norm = kernel_row("t", "cpu", "fp32", "norm", "ln", "fwd", 1.0, num_elements=10)
    assert norm["bytes_moved"] == 2 * 10 * 4 and math.isnan(norm["time_std_s"])


def test_data_root_prefers_env(monkeypatch, tmp_path):
    monkeypatch.setenv("VTRAIN_DATA", str(tmp_path))
    assert paths.data_root() == tmp_path
    monkeypatch.delenv("VTRAIN_DATA")
    root = paths.data_root()
    assert root is None or root.name == "data"


def test_write_part_into_an_unwritable_folder_is_a_parameter_error(tmp_path):
    from vtrain.costmodel.errors import ParameterError

    (tmp_path / "runs").write_text("not a folder")
    with pytest.raises(ParameterError) as err:
        store.write_part(tmp_path, "runs", _runs([(1, 0.5)]))
    assert err.value.parameter == "dataset_dir" and "cannot write" in str(err.value)
