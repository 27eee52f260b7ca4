"""Each importer on tiny fixtures written in the upstream formats, plus format detection."""
import numpy as np
import pytest

from vtrain.costmodel.errors import UserError
from vtrain.dataset import store
from vtrain.dataset.detect import convert, detect, import_sources
from vtrain.dataset.paths import data_root

GT_HEADER = ("# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence length,"
             "tensor parallelism,data parallelism,pipeline parallelism,iteration time (ms)")


def write(path, text, bom=False, crlf=False):
    path.parent.mkdir(parents=True, exist_ok=True)
    if crlf:
        text = text.replace("\n", "\r\n")
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode())
    return path


def run(path):
    fmt = detect(path)
    assert fmt is not None, path
    return convert(path, fmt)


def test_vtrain_ground_truth_bom_crlf(tmp_path):
    path = write(tmp_path / "ground_truth_single.csv", GT_HEADER + "\n"
                 "8,32,4,1024,16,24,1024,2,2,2,219.5\n"      # ok
                 "8,32,4,1024,16,24,1024,4,1,1,100.0\n"      # tp*pp*dp != num_gpus
                 "4,16,2,1024,16,24,2048,1,4,1,0\n", bom=True, crlf=True)
    res = run(path)
    assert res.format == "vtrain_ground_truth"
    runs = res.tables["runs"]
    assert len(runs) == 1
    row = runs.iloc[0]
    assert row["iteration_time_s"] == pytest.approx(0.2195)
    assert (row["gpu"], row["recompute"], row["schedule"], row["precision"]) == ("a100-80gb", "full", "1f1b", "fp16")
    assert (row["vocab_size"], row["gpus_per_node"], row["seq_len"], row["tp"], row["pp"], row["dp"]) == \
        (50257, 8, 1024, 2, 2, 2)
    assert row["global_batch"] == 32 and row["source"] == "vtrain:ground_truth_single.csv"
    assert len(res.rejected) == 2
    assert any(r.startswith("impossible config: num_gpus") for r in res.rejected)
    assert "non-positive time" in res.rejected


def test_vtrain_ground_truth_missing_column(tmp_path):
    path = write(tmp_path / "ground_truth_single.csv", GT_HEADER.replace("micro batch,", "") + "\n1,2,3\n",
                 bom=True, crlf=True)
    with pytest.raises(UserError, match="missing column 'micro batch'.*") as err:
        run(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_vtrain_lut(tmp_path):
    text = ("size(B),count,type,time(ns),busbw(GB/s),time(ns),busbw(GB/s)\n"
            "1048576,262144,float,92790,19.78,92150,19.91\n2097152,524288,float,93250,39.36,93000,39.47\n")
    res = run(write(tmp_path / "a100" / "AR_GPU4_1M_1024M_LUT", text))
    df = res.tables["collectives"]
    assert df["time_s"].tolist() == pytest.approx([92150e-9, 93000e-9])
    assert set(df["group_size"]) == {4} and set(df["ranks_per_node"]) == {4} and set(df["num_nodes"]) == {1}
    assert set(df["gpu"]) == {"a100-80gb"} and set(df["dtype"]) == {"fp32"} and set(df["bw_convention"]) == {"busbw"}
    bad = run(write(tmp_path / "tpu9" / "AR_GPU2_1M_1024M_LUT", text))
    assert len(bad.tables["collectives"]) == 0 and bad.rejected[0].startswith("unknown GPU 'tpu9'")


MLP_OPS = ["emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "post_attention_layernorm",
           "mlp_up_proj", "mlp_act", "mlp_down_proj", "add"]


def _mlp_csv(ops, tokens_rows, gated="True"):
    stats = [f"time_stats.{op}.{s}" for op in ops for s in ("min", "max", "mean", "median", "std")]
    header = stats + ["n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size", "use_gated_mlp",
                      "num_tokens", "num_tensor_parallel_workers"]
    lines = [",".join(header)]
    for tokens, tp, median in tokens_rows:
        vals = []
        for _ in ops:
            vals += ["0.1", "0.3", "0.2", str(median), "0.01"]
        lines.append(",".join(vals + ["8", "2", "512", "1024", "32000", gated, str(tokens), str(tp)]))
    return "\n".join(lines) + "\n"


def test_vidur_mlp(tmp_path):
    path = write(tmp_path / "compute" / "h100" / "org" / "Model-1b" / "mlp.csv",
                 _mlp_csv(MLP_OPS, [(128, 2, 0.25), (256, 1, "")]))
    res = run(path)
    df = res.tables["kernels"].set_index("op_name")
    assert len(df) == len(MLP_OPS)  # the second row has no times
    assert res.rejected == ["missing time"] * len(MLP_OPS)
    head_dim = 512 // 8
    qkv = df.loc["attn_pre_proj"]
    assert (qkv["op_class"], qkv["m"], qkv["k"], qkv["n"]) == ("gemm", 128, 512, (8 + 2 * 2) * head_dim // 2)
    assert (df.loc["attn_post_proj", "k"], df.loc["attn_post_proj", "n"]) == (256, 512)
    assert df.loc["mlp_up_proj", "n"] == 2 * 1024 // 2 and df.loc["mlp_down_proj", "k"] == 512
    assert df.loc["input_layernorm", "op_class"] == "norm" and df.loc["input_layernorm", "num_elements"] == 128 * 512
    assert df.loc["mlp_act", "op_class"] == "elementwise" and df.loc["mlp_act", "num_elements"] == 128 * 1024 // 2
    assert df.loc["emb", "op_class"] == "embedding"
    assert set(df["gpu"]) == {"h100-sxm"} and set(df["dtype"]) == {"fp16"} and set(df["direction"]) == {"fwd"}
    assert df["time_s"].tolist() == pytest.approx([0.25e-3] * len(MLP_OPS))
    assert df["time_std_s"].tolist() == pytest.approx([0.01e-3] * len(MLP_OPS))
    assert qkv["flops"] == 2 * 128 * 512 * qkv["n"]


def test_vidur_elementwise_flops_match_the_simulators_op_graph(tmp_path):
    """A measured op and the simulator's op of the same kind have the same FLOP per element, so the
    efficiency network can tell a SwiGLU from a residual add by arithmetic intensity."""
    from vtrain.costmodel.encode import encode
    from vtrain.costmodel.ops import layer_forward_ops
    from vtrain.costmodel.spec import build_config

    path = write(tmp_path / "compute" / "h100" / "org" / "Model-1b" / "mlp.csv", _mlp_csv(MLP_OPS, [(128, 2, 0.25)]))
    df = run(path).tables["kernels"].set_index("op_name")
    measured = (df["flops"] / df["num_elements"]).to_dict()
    d = encode([build_config(dict(arch="llama", num_layers=2, hidden_size=512, num_attention_heads=8, num_gpus=1))])
    graph = {op["name"]: float(op["flops"][0] / op["m"][0]) for op in layer_forward_ops(d, np) if op["cls"] != "gemm"
             and op["m"][0] > 0}
    assert measured["mlp_act"] == graph["mlp_act"] and measured["attn_rope"] == graph["rope"]
    assert measured["add"] == graph["attn_residual"] and measured["input_layernorm"] == graph["input_norm"]
    assert len({measured["mlp_act"], measured["attn_rope"], measured["add"]}) == 3


def test_vidur_mlp_not_gated_and_missing_column(tmp_path):
    res = run(write(tmp_path / "compute" / "a40" / "o" / "m" / "mlp.csv",
                    _mlp_csv(["mlp_up_proj"], [(64, 1, 0.5)], gated="False")))
    row = res.tables["kernels"].iloc[0]
    assert (row["n"], row["gpu"]) == (1024, "a40")
    text = _mlp_csv(["mlp_up_proj"], [(64, 1, 0.5)]).replace("num_tokens", "tokens")
    with pytest.raises(UserError, match="missing column 'num_tokens'"):
        run(write(tmp_path / "compute" / "a40" / "o" / "m2" / "mlp.csv", text))


def test_vidur_attention_keeps_prefill_without_kv_cache(tmp_path):
    header = ("time_stats.attn_prefill.min,time_stats.attn_prefill.max,time_stats.attn_prefill.mean,"
              "time_stats.attn_prefill.median,time_stats.attn_prefill.std,n_embd,n_q_head,n_kv_head,block_size,"
              "num_tensor_parallel_workers,max_model_len,batch_size,prefill_chunk_size,kv_cache_size,is_prefill")
    text = (header + "\n0.1,0.2,0.15,0.15,0.01,8192,64,8,16,2,4096,2,512,0,True\n"
            ",,,,,8192,64,8,16,2,4096,1,0,32,False\n0.1,0.2,0.15,0.15,0.01,8192,64,8,16,2,4096,1,512,512,True\n")
    res = run(write(tmp_path / "profiling" / "a100" / "attention.csv", text))
    df = res.tables["kernels"]
    assert len(df) == 1 and len(res.rejected) == 2
    row = df.iloc[0]
    assert (row["op_class"], row["heads"], row["seq"], row["batch"], row["k"]) == ("attention", 32, 512, 2, 128)
    assert row["time_s"] == pytest.approx(0.15e-3) and row["gpu"] == "a100-80gb"


def test_vidur_network(tmp_path):
    text = (",time_stats.all_reduce.min,time_stats.all_reduce.max,time_stats.all_reduce.mean,"
            "time_stats.all_reduce.median,time_stats.all_reduce.std,rank,num_workers,size,collective,"
            "devices_per_node,max_devices_per_node\n"
            "0,0.031,0.077,0.05,0.043,0.019,0,16,2048,all_reduce,8,8\n"
            "1,0.04,0.075,0.057,-0.5,0.014,0,2,10240,all_reduce,2,8\n")
    res = run(write(tmp_path / "a100_dgx" / "all_reduce.csv", text))
    df = res.tables["collectives"]
    assert len(df) == 1 and res.rejected == ["non-positive time"]
    row = df.iloc[0]
    assert (row["gpu"], row["network"], row["op"], row["bytes"], row["group_size"], row["ranks_per_node"],
            row["num_nodes"], row["dtype"]) == ("a100-80gb", "dgx-a100", "all_reduce", 2048, 16, 8, 2, "fp16")
    assert row["time_s"] == pytest.approx(0.043e-3)
    pair = run(write(tmp_path / "h100_pairwise_nvlink" / "all_reduce.csv", text)).tables["collectives"]
    assert set(pair["network"]) == {"pairwise-nvlink"} and set(pair["gpu"]) == {"h100-sxm"}


XLA_MATMUL_CSV = ("device_key,b,m,n,k,lhs_dtype,rhs_dtype,out_dtype,dtype_key,flops_per_s,time_us,tflops\n"
                  "sm_90,2,256,512,1024,bf16,bf16,bf16,bf16xbf16->bf16,100000000000000,5.36870912,100\n"
                  "sm_90,2,256,512,1024,f8e4m3fn,f8e5m2,bf16,f8e4m3fnxf8e5m2->bf16,200000000000000,2.68435456,200\n")
XLA_MATMUL_TXTPB = """# proto-file: third_party/tensorflow/compiler/xla/xla_data.proto
# proto-message: xla.GemmPerfTable

entries {
  key: "sm_90"
  value {
    entries {
      b: 2
      m: 256
      n: 512
      k: 1024
      flops { key: "bf16xbf16->bf16" value: 100000000000000 }
      flops { key: "f32xf32->f32" value: 50000000000000 }
    }
  }
}
"""


def test_xla_matmul_csv_and_txtpb_agree_and_dedupe(tmp_path):
    csv_res = run(write(tmp_path / "matmul_perf_table.csv", XLA_MATMUL_CSV, crlf=True))
    df = csv_res.tables["kernels"]
    assert df["dtype"].tolist() == ["bf16", "fp8"] and set(df["gpu"]) == {"h100-sxm"}
    row = df.iloc[0]
    assert (row["batch"], row["m"], row["n"], row["k"]) == (2, 256, 512, 1024)
    assert row["time_s"] == pytest.approx(2 * 2 * 256 * 512 * 1024 / 1e14)
    pb_res = run(write(tmp_path / "default_matmul_perf_table.txtpb", XLA_MATMUL_TXTPB))
    assert pb_res.format == "xla_matmul_txtpb"
    pb = pb_res.tables["kernels"]
    assert pb["dtype"].tolist() == ["bf16", "fp32"]
    assert pb["time_s"].iloc[0] == pytest.approx(row["time_s"])
    store.append(tmp_path / "ds", "kernels", df)
    assert store.append(tmp_path / "ds", "kernels", pb) == 1  # the bf16 entry is already stored


XLA_COLL_CSV_HEADER = ("device_key,opcode,element_type,elem_bytes,output_shape,output_elems,num_replica_groups,"
                       "num_devices_per_group,iota_reshape_dims,iota_transpose_perm,num_devices,source_target_pairs,"
                       "tensor_size_bytes,network_throughput_bytes_per_sec,time_us,fingerprint\n")
XLA_COLL_TXTPB = """# proto-message: xla.gpu.DeviceHloInstructionProfiles
#   bazel run --config=cuda -- //xla/tools:collective_perf_table_gen_main
entries {
  key: "sm_90"
  value {
    entries {
      instruction {
        name: "_"
        opcode: "reduce-scatter"
        shape {
          element_type: F32
          dimensions: 1024
          layout { minor_to_major: 0 tail_padding_alignment_in_elements: 1 }
        }
        iota_collective_device_list {
          num_replica_groups: 2
          num_devices_per_group: 4
          iota_reshape_dims: 8
          iota_transpose_perm: 0
        }
      }
      fingerprint: "abc"
      network_throughput_bytes_per_sec: 1000000000
    }
    entries {
      instruction {
        opcode: "collective-permute"
        shape { element_type: F32 dimensions: 256 }
        source_target_pairs { target: 1 }
        source_target_pairs { source: 1 }
      }
      network_throughput_bytes_per_sec: 2000000000
    }
  }
}
"""


def test_xla_collectives_csv_and_txtpb(tmp_path):
    text = (XLA_COLL_CSV_HEADER +
            "sm_90,reduce-scatter,F32,4,1024,1024,2,4,8,0,8,,16384,1000000000,16.384,abc\n"
            "sm_100_GB200,all-gather,F32,4,4096,4096,1,72,72,0,72,,16384,1000000000,16.384,def\n"
            "sm_90,collective-permute,F32,4,256,256,,,,,8,0->1;1->2;2->3;3->0,1024,2000000000,0.512,x\n")
    df = run(write(tmp_path / "collective_perf_table.csv", text, crlf=True)).tables["collectives"]
    assert df["op"].tolist() == ["reduce_scatter", "all_gather", "send_recv"]
    assert df["gpu"].tolist() == ["h100-sxm", "gb200", "h100-sxm"]
    assert df["group_size"].tolist() == [4, 72, 4] and df["ranks_per_node"].tolist() == [4, 72, 4]
    assert df["time_s"].tolist() == pytest.approx([16.384e-6, 16.384e-6, 0.512e-6])
    assert set(df["bw_convention"]) == {"algbw"} and set(df["dtype"]) == {"fp32"}
    pb = run(write(tmp_path / "default_collective_perf_table.txtpb", XLA_COLL_TXTPB)).tables["collectives"]
    # reduce-scatter: bytes = input = output elements * 4 bytes * group
    assert pb["bytes"].tolist() == [1024 * 4 * 4, 256 * 4]
    assert pb["time_s"].tolist() == pytest.approx([16384 / 1e9, 1024 / 2e9])
    assert pb["group_size"].tolist() == [4, 2]  # a pairwise swap is a 2-rank exchange


def test_llmcompass(tmp_path):
    mm = run(write(tmp_path / "matmul_A100.csv", "64, 12288, 12288, 0.1900ms, 101.7124Tflops\n"
                   "128, 12288, 12288, 0.2003ms, 193.0114Tflops")).tables["kernels"]
    assert mm["m"].tolist() == [64, 128] and mm["time_s"].tolist() == pytest.approx([0.19e-3, 0.2003e-3])
    assert set(mm["gpu"]) == {"a100-80gb"}
    sm = run(write(tmp_path / "softmax_MI210.csv", "4096, 32, 10.0\n32, 4096, 0\n"))
    df = sm.tables["kernels"]
    assert len(df) == 1 and sm.rejected == ["non-positive time"]
    assert (df["gpu"].iloc[0], df["num_elements"].iloc[0]) == ("mi210", 4096 * 32)
    assert df["time_s"].iloc[0] == pytest.approx(4096 * 32 / 10e9)


NCCL_LOG = """# Collective test starting: all_reduce_perf
# nThread 1 nGpus 2 minBytes 1024 maxBytes 4096 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid     41 on     node01 device  0 [0x07] NVIDIA A100-SXM4-80GB
#  Rank  1 Group  0 Pid     41 on     node01 device  1 [0x0b] NVIDIA A100-SXM4-80GB
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
        1024           256     float     sum      -1    10.50    0.10    0.10      0    10.00    0.10    0.10      0
        2048           512      half     sum      -1    11.50    0.18    0.18      0    11.00    0.19    0.19      0
        4096          1024     float     sum      -1    12.50    0.33    0.33      0     0.00    0.00    0.00      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0.2
"""


def test_nccl_tests_log(tmp_path):
    res = run(write(tmp_path / "ar.log", NCCL_LOG))
    assert res.format == "nccl_tests_log"
    df = res.tables["collectives"]
    assert df["bytes"].tolist() == [1024, 2048] and df["dtype"].tolist() == ["fp32", "fp16"]
    assert df["time_s"].tolist() == pytest.approx([10e-6, 11e-6])
    assert set(df["gpu"]) == {"a100-80gb"} and set(df["group_size"]) == {2} and set(df["num_nodes"]) == {1}
    assert res.rejected == ["non-positive time"]
    gather = run(write(tmp_path / "ag.txt", NCCL_LOG.replace("all_reduce_perf", "broadcast_perf")))
    assert len(gather.tables["collectives"]) == 0
    assert gather.rejected[0] == "unsupported collective 'broadcast'"


def test_generic_csv_tables(tmp_path):
    runs = run(write(tmp_path / "runs.csv", "num_layers,hidden_size,num_attention_heads,num_gpus,tp,gpu,"
                     "iteration_time_s\n2,64,4,2,2,h100,1.5\n2,64,4,2,3,h100,1.0\n2,64,4,1,1,tpu-v9,1.0\n"))
    df = runs.tables["runs"]
    assert len(df) == 1 and (df["gpu"].iloc[0], df["dp"].iloc[0]) == ("h100-sxm", 1)
    assert runs.rejected[0].startswith("impossible config: ") and runs.rejected[1].startswith("unknown GPU: gpu:")
    kern = run(write(tmp_path / "k.csv", "gpu,dtype,op_class,m,n,k,time_s\nA40,fp16,gemm,8,8,8,1e-5\n"
                     "a40,fp16,gemm,0,8,8,1e-5\na40,fp16,conv,8,8,8,1e-5\n"))
    assert len(kern.tables["kernels"]) == 1 and kern.tables["kernels"]["gpu"].iloc[0] == "a40"
    assert kern.rejected == ["non-positive gemm shape", "unknown op class 'conv'"]
    coll = run(write(tmp_path / "c.csv", "gpu,op,bytes,group_size,dtype,time_s\nh100,all_gather,64,4,bf16,2e-6\n"))
    assert coll.tables["collectives"]["ranks_per_node"].tolist() == [4]


def test_detection_errors_and_directory_walk(tmp_path):
    unknown = write(tmp_path / "notes.txt", "hello\n")
    with pytest.raises(UserError, match="notes.txt: unknown format; supported: vTrain"):
        import_sources([unknown])
    with pytest.raises(UserError, match="no such file"):
        import_sources([tmp_path / "missing.csv"])
    folder = tmp_path / "src"
    write(folder / "README.md", "# docs")
    write(folder / "LICENSE", "MIT")
    write(folder / "a100" / "AR_GPU2_1M_1024M_LUT",
          "size(B),count,type,time(ns),busbw(GB/s),time(ns),busbw(GB/s)\n1048576,262144,float,1,1,2,1\n")
    write(folder / "junk.bin", "\x00\x01")
    results = import_sources([folder])
    assert [r.format for r in results] == ["vtrain_lut", "skipped"]
    assert results[1].note == "unknown format, skipped"


@pytest.mark.skipif(data_root() is None or not (data_root() / "vtrain").is_dir(), reason="shared data not present")
def test_real_vtrain_ground_truth_imports_completely():
    results = import_sources([data_root() / "vtrain" / "ground_truth_multi.csv"])
    assert results[0].rejected == []
    runs = results[0].tables["runs"]
    assert len(runs) > 50 and runs["num_gpus"].max() >= 256 and (runs["iteration_time_s"] > 0).all()
    assert (runs["num_gpus"] == runs["tp"] * runs["pp"] * runs["dp"]).all()
