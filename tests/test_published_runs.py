"""The published-runs importer: column mapping, metric conversion, refusals with reasons, detection."""
import csv

import pytest

from vtrain.dataset import store
from vtrain.dataset.detect import convert, detect
from vtrain.dataset.import_published import refusal_reasons, source_group
from vtrain.training.published import default_path, load_published, summarize_by_source

HEADER = ("source_id,source,model,params_b,num_layers,hidden_size,ffn_hidden_size,num_attention_heads,num_kv_heads,"
          "seq_len,vocab_size,gpu,num_gpus,tp,pp,dp,cp,ep,virtual_pp,micro_batch,global_batch,seq_parallel,recompute,"
          "zero_stage,precision,measured_metric,measured_value,measured_unit,notes").split(",")
BASE = dict(source="paper", model="GPT 175B", num_layers=96, hidden_size=12288, ffn_hidden_size=49152,
            num_attention_heads=96, num_kv_heads=96, seq_len=2048, vocab_size=51200, gpu="A100-SXM4-80GB (Selene)",
            num_gpus=64, tp=8, pp=8, dp=1, virtual_pp=3, micro_batch=1, global_batch=64, seq_parallel="yes",
            recompute="selective (attention core only)", zero_stage="", precision="mixed 16-bit",
            measured_metric="iteration_time_s", measured_value=13.75, measured_unit="s", notes="")


def write_rows(path, rows):
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=HEADER)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: row.get(k, "") for k in HEADER})
    return path


def rows_fixture():
    return [
        dict(BASE, source_id="korthikanti2022_t5_r04"),
        dict(BASE, source_id="torchtitan_a100_r03", model="Llama 3 70B", num_layers=80, hidden_size=8192,
             ffn_hidden_size=28672, num_attention_heads=64, num_kv_heads=8, seq_len=8192, vocab_size=128000,
             gpu="A100 80GB", num_gpus=64, tp=1, pp=1, dp=64, cp=1, virtual_pp="", micro_batch=1, global_batch=64,
             seq_parallel="", recompute="full", zero_stage="3 (FSDP2 full shard, 1D)", precision="bf16 mixed",
             measured_metric="tokens_per_s_per_gpu", measured_value=331.0),
        dict(BASE, source_id="bloom_prequel_L947", num_layers=70, hidden_size=14336, ffn_hidden_size=57344,
             num_attention_heads=64, num_kv_heads=64, vocab_size="", num_gpus=384, tp=4, pp=12, dp=8, virtual_pp="",
             micro_batch=2, global_batch=2048, seq_parallel="", recompute="full (activation checkpointing)",
             zero_stage=1, precision="bf16 (new BF16 optimizer)"),
        dict(BASE, source_id="torchtitan_h100_2412_r05", gpu="H100 96GB HBM2e, 500W power limit (Grand Teton)", cp=2),
        dict(BASE, source_id="llama3_405b_t4_r01", gpu="H100 80GB HBM3, 700W (Grand Teton)", micro_batch="",
             measured_metric="tflops_per_gpu", measured_value=430),
        dict(BASE, source_id="torchtitan_a100_r02", recompute="selective (per op)"),
    ]


def test_published_rows_kept_converted_or_refused_with_reasons(tmp_path):
    path = write_rows(tmp_path / "runs.csv", rows_fixture())
    assert detect(path) == "published_runs"
    res = convert(path, "published_runs")
    runs = res.tables["runs"]
    assert list(runs["source"]) == ["published:runs.csv#korthikanti2022_t5_r04", "published:runs.csv#torchtitan_a100_r03",
                                    "published:runs.csv#bloom_prequel_L947", "published:runs.csv#torchtitan_a100_r02"]
    k = runs.iloc[0]
    assert (k["schedule"], k["vpp"], k["recompute"], k["sequence_parallel"], k["zero_stage"], k["precision"]) == \
        ("interleaved", 3, "selective", True, 0, "fp16")
    assert k["iteration_time_s"] == pytest.approx(13.75)
    t = runs.iloc[1]
    assert (t["arch"], t["num_kv_heads"], t["zero_stage"], t["precision"]) == ("llama", 8, 3, "bf16")
    # tokens/s per GPU -> seconds with the row's own batch: 64 * 8192 / (331 * 64)
    assert t["iteration_time_s"] == pytest.approx(64 * 8192 / (331.0 * 64))
    reasons = refusal_reasons(res.rejected)
    assert len(res.rejected) == 2  # one string per refused row
    # BLOOM's 70 layers on pp=12 are accepted (uneven stages 5 + 10 x 6 + 5)
    assert runs.iloc[2]["pp"] == 12 and runs.iloc[2]["num_layers"] == 70
    # cp is a field now: this row's 64 GPUs do not factor as tp*pp*cp*dp = 8*8*2*1
    assert any(r.startswith("impossible config: num_gpus: 64 != tp*pp*cp*dp") for r in reasons)
    assert not any(r.startswith(("GPU", "context parallelism")) for r in reasons)
    assert any("micro_batch not given" in r for r in reasons)
    # torchtitan's op-level selective AC is modelled (recompute=selective-op); Megatron's rows ran
    # the unfused attention, torchtitan's FlashAttention
    assert runs.iloc[3]["recompute"] == "selective-op"
    assert (k["attention"], t["attention"]) == ("unfused", "flash")


def test_published_mfu_converts_with_eq7(tmp_path):
    row = dict(BASE, source_id="korthikanti2022_t5_r10", measured_metric="mfu_percent", measured_value=50.0)
    res = convert(write_rows(tmp_path / "runs.csv", [row]), "published_runs")
    flops = 72 * 64 * 2048 * 96 * 12288**2 * (1 + 2048 / (6 * 12288) + 51200 / (12 * 12288 * 96))
    assert res.tables["runs"].iloc[0]["iteration_time_s"] == pytest.approx(flops / (0.5 * 64 * 312e12))


def test_published_import_cli_and_summary(tmp_path, cli):
    (tmp_path / "src").mkdir()
    path = write_rows(tmp_path / "src" / "runs.csv", rows_fixture())
    out = tmp_path / "ds"
    result = cli("dataset", "import", path.parent, "-o", out)
    assert result.returncode == 0, result.stderr
    assert "published_runs" in result.stdout and "tp*pp*cp*dp" in result.stdout
    assert len(store.load(out, "runs")) == 4
    runs, refused = load_published(path)
    table = summarize_by_source(runs, {"x": runs["iteration_time_s"] * 1.1}, refused)
    by = table.set_index("group")
    assert by.loc["korthikanti2022_t5", "x_median"] == pytest.approx(10.0)
    assert by.loc["korthikanti2022_t5", "x_bias"] == pytest.approx(10.0)
    assert by.loc["bloom_prequel", "rows"] == 1 and by.loc["bloom_prequel", "refused"] == 0
    assert by.loc["all", "rows"] == 4 and by.loc["all", "refused"] == 2


def test_source_group():
    assert source_group("bloom_prequel_L947") == "bloom_prequel"
    assert source_group("megatron_readme2021_gpt3_r01") == "megatron_readme2021_gpt3"


@pytest.mark.skipif(default_path() is None, reason="shared data not available")
def test_real_published_file_every_row_accounted_for():
    runs, refused = load_published(default_path())
    with open(default_path(), newline="") as fh:
        total = sum(1 for _ in csv.DictReader(fh))
    assert len(runs) + len(refused) == total
    assert len(runs) >= 40 and all(reasons for _, reasons in refused)


def test_power_capped_h100_rows_import_with_the_gpu_overrides(tmp_path):
    from vtrain.dataset.import_published import H100_POWER_CAPPED

    row = dict(BASE, source_id="torchtitan_h100_2412_r01", model="Llama 3 8B", num_layers=32, hidden_size=4096,
               ffn_hidden_size=14336, num_attention_heads=32, num_kv_heads=8, seq_len=8192, vocab_size=128256,
               gpu="H100 96GB HBM2e, 500W power limit (Grand Teton)", num_gpus=8, tp=1, pp=1, dp=8, virtual_pp="",
               micro_batch=2, global_batch=16, seq_parallel="", recompute="selective", zero_stage="3 (FSDP2)",
               precision="bf16 mixed", measured_metric="tokens_per_s_per_gpu", measured_value=5762.0)
    res = convert(write_rows(tmp_path / "runs.csv", [row]), "published_runs")
    assert not res.rejected
    r = res.tables["runs"].iloc[0]
    assert (r["gpu"], r["peak_tflops"], r["hbm_bandwidth_GBps"], r["gpu_memory_GiB"]) == \
        tuple(H100_POWER_CAPPED[k] for k in ("gpu", "peak_tflops", "hbm_bandwidth_GBps", "gpu_memory_GiB"))


def test_torchtitan_async_tp_and_per_layer_ac_rows_are_expressed(tmp_path):
    tp_row = dict(BASE, source_id="torchtitan_h100_2412_r12", model="Llama 3.1 70B", num_layers=80, hidden_size=8192,
                  ffn_hidden_size=28672, num_attention_heads=64, num_kv_heads=8, seq_len=8192, vocab_size=128256,
                  gpu="H100 96GB HBM2e, 500W power limit (Grand Teton)", num_gpus=256, tp=8, pp=1, dp=32, cp=1,
                  virtual_pp="", micro_batch=16, global_batch=512, seq_parallel="", recompute="full",
                  zero_stage="3 (FSDP2)", precision="fp8 linears (torchao Float8) + bf16",
                  measured_metric="tokens_per_s_per_gpu", measured_value=876.0,
                  notes="2D + AsyncTP (+ torch.compile + Float8); local batch 16")
    vanilla = dict(tp_row, source_id="torchtitan_h100_2412_r11", notes="2D (+ torch.compile + Float8)")
    layer_ac = dict(BASE, source_id="torchtitan_a100_r05", model="Llama 2 13B", num_layers=40, hidden_size=5120,
                    ffn_hidden_size=13824, num_attention_heads=40, num_kv_heads=40, seq_len=4096, vocab_size="",
                    gpu="A100 80GB", num_gpus=64, tp=1, pp=1, dp=64, cp=1, virtual_pp="", micro_batch=2,
                    global_batch=128, seq_parallel="", recompute="selective (per layer)",
                    zero_stage="3 (FSDP2 full shard, 1D)", precision="bf16 mixed",
                    measured_metric="tokens_per_s_per_gpu", measured_value=1914.0)
    res = convert(write_rows(tmp_path / "runs.csv", [tp_row, vanilla, layer_ac]), "published_runs")
    assert not res.rejected
    runs = res.tables["runs"]
    # torchtitan's TP plan is sequence parallel; "AsyncTP" in the notes turns on async TP
    assert list(runs["sequence_parallel"]) == [True, True, False]
    assert list(runs["async_tp"]) == [True, False, False]
    assert (runs.iloc[0]["precision"], runs.iloc[2]["recompute"]) == ("fp8", "selective-layer")


def test_float8_rowwise_rows_are_refused_and_tensorwise_rows_kept(tmp_path):
    row = dict(BASE, source_id="torchtitan_asynctp_2506_r09", model="Llama 3 8B", num_layers=32, hidden_size=4096,
               ffn_hidden_size=14336, num_attention_heads=32, num_kv_heads=8, seq_len=8192, vocab_size=128256,
               gpu="H100 96GB HBM2e, 500W power limit (Grand Teton)", num_gpus=64, tp=8, pp=1, dp=8, cp=1,
               virtual_pp="", micro_batch=12, global_batch=96, seq_parallel="", recompute="selective",
               zero_stage="3 (FSDP2)", precision="float8 tensorwise (torchao)",
               measured_metric="tokens_per_s_per_gpu", measured_value=5078.1)
    rowwise = dict(row, source_id="torchtitan_asynctp_2506_r11", precision="float8 rowwise (torchao)",
                   measured_value=3708.5)
    res = convert(write_rows(tmp_path / "runs.csv", [row, rowwise]), "published_runs")
    runs = res.tables["runs"]
    assert list(runs["source"]) == ["published:runs.csv#torchtitan_asynctp_2506_r09"]
    assert runs.iloc[0]["precision"] == "fp8"
    assert len(res.rejected) == 1 and "rowwise" in res.rejected[0] and "not modelled" in res.rejected[0]


def test_torchtitan_rows_without_torch_compile_run_eager(tmp_path):
    row = dict(BASE, source_id="torchtitan_h100_2412_r01", model="Llama 3.1 8B", num_layers=32, hidden_size=4096,
               ffn_hidden_size=14336, num_attention_heads=32, num_kv_heads=8, seq_len=8192, vocab_size=128000,
               gpu="H100 96GB HBM2e, 500W power limit (Grand Teton)", num_gpus=8, tp=1, pp=1, dp=8, cp=1,
               virtual_pp="", micro_batch=2, global_batch=16, seq_parallel="", recompute="selective",
               zero_stage="3 (FSDP2)", precision="bf16 mixed", measured_metric="tokens_per_s_per_gpu",
               measured_value=5762, notes="FSDP; local batch 2")
    compiled = dict(row, source_id="torchtitan_h100_2412_r02", measured_value=6667,
                    notes="FSDP + torch.compile; local batch 2")
    # another source's row without the word keeps the fused default (its doc does not say)
    other = dict(row, source_id="torchtitan_a100_r01", gpu="A100 80GB", notes="")
    runs = convert(write_rows(tmp_path / "runs.csv", [row, compiled, other]), "published_runs").tables["runs"]
    assert list(runs["eager"]) == [True, False, False]
