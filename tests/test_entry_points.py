"""One config (build_config + encode), a table (encode_table) and a strategy grid (the search
encoder) give identical simulator inputs for the same configurations; the rules reject the same
configurations with the same message whichever entry point sees them."""
from __future__ import annotations

import numpy as np
import pytest

from vtrain.costmodel.encode import SimInput, encode
from vtrain.costmodel.rules import RECOMPUTE_MODES, SCHEDULES, divisors
from vtrain.strategy.search import SearchSpace, encode_strategies, enumerate_strategies, strategy_values
from vtrain.costmodel.spec import ConfigError, build_config
from vtrain.tables.columns import encode_table

BASE = dict(arch="llama", num_layers=16, hidden_size=1024, num_attention_heads=16, num_kv_heads=4, seq_len=1024,
            global_batch=64, gpu="h100-sxm", precision="bf16")


def _fields(d: SimInput) -> dict:
    return d._asdict()


def test_three_entry_points_give_identical_inputs():
    cfg = build_config(dict(BASE, num_gpus=16, tp=1))
    strategies = enumerate_strategies(cfg, SearchSpace(num_gpus=16, max_micro_batch=4))
    n = len(strategies["tp"])
    assert n > 200
    from_grid = encode_strategies(cfg, strategies)
    rows = [strategy_values(cfg, strategies, i) for i in range(n)]
    from_configs = encode([build_config(r) for r in rows])
    table = {k: [r[k] for r in rows] for k in rows[0]}
    from_table, errors = encode_table(table)
    assert all(e is None for e in errors)
    for name, ref in _fields(from_configs).items():
        np.testing.assert_array_equal(getattr(from_grid, name), ref, err_msg=name)
        np.testing.assert_array_equal(getattr(from_table, name), ref, err_msg=name)
    # every schedule, recompute mode and ZeRO stage is in the grid
    assert set(strategies["schedule"]) == {SCHEDULES.index("1f1b"), SCHEDULES.index("interleaved")}
    assert set(strategies["recompute"]) == set(range(len(RECOMPUTE_MODES)))


def test_grid_holds_exactly_the_layouts_build_config_accepts():
    """Every (tp, pp, dp, micro_batch, vpp, schedule) the enumeration could propose and build_config
    accepts is in the grid, and nothing else."""
    cfg = build_config(dict(BASE, num_gpus=8))
    space = SearchSpace(num_gpus=8, recompute=("none",), zero_stages=(0,), sequence_parallel=(False,),
                        schedules=("1f1b", "interleaved"), max_micro_batch=64)
    s = enumerate_strategies(cfg, space)
    got = set(zip(s["tp"], s["pp"], s["dp"], s["micro_batch"], s["vpp"], s["schedule"]))
    want = set()
    for tp in divisors(8):
        for pp in divisors(8 // tp):
            for mb in divisors(64):
                for sched, vpps in (("1f1b", [1]), ("interleaved", [v for v in divisors(16) if v > 1])):
                    for vpp in vpps:
                        try:
                            c = build_config(dict(cfg.flat(), tp=tp, pp=pp, dp=8 // (tp * pp), num_gpus=8,
                                                  micro_batch=mb, vpp=vpp, schedule=sched))
                        except ConfigError:
                            continue
                        p = c.parallel
                        want.add((p.tp, p.pp, p.dp, p.micro_batch, p.vpp, SCHEDULES.index(p.schedule)))
    assert got == want and len(got) > 10


@pytest.mark.parametrize("bad", [dict(tp=3), dict(pp=3), dict(global_batch=63), dict(schedule="interleaved", pp=1),
                                 dict(vpp=2), dict(zero_stage=3, pp=2), dict(num_kv_heads=3), dict(gpu="tpu")])
def test_one_row_and_a_table_reject_with_the_same_message(bad):
    values = dict(BASE, num_gpus=8, **bad)
    with pytest.raises(ConfigError) as err:
        build_config(values)
    _, errors = encode_table({k: [v, v] for k, v in values.items()})
    assert list(errors) == [str(err.value)] * 2
