"""Model presets by name (public architecture figures from each model's paper or config)."""
from __future__ import annotations

# Each entry holds canonical model fields; missing ones take the spec defaults.
MODELS: dict[str, dict] = {
    # GPT-3 family (Brown et al. 2020, Table 2.1); vocab padded to 51200 as in Megatron.
    "gpt3-1.3b": dict(arch="gpt", num_layers=24, hidden_size=2048, num_attention_heads=16, seq_len=2048,
                      vocab_size=51200),
    "gpt3-2.7b": dict(arch="gpt", num_layers=32, hidden_size=2560, num_attention_heads=32, seq_len=2048,
                      vocab_size=51200),
    "gpt3-6.7b": dict(arch="gpt", num_layers=32, hidden_size=4096, num_attention_heads=32, seq_len=2048,
                      vocab_size=51200),
    "gpt3-13b": dict(arch="gpt", num_layers=40, hidden_size=5120, num_attention_heads=40, seq_len=2048,
                     vocab_size=51200),
    "gpt3-175b": dict(arch="gpt", num_layers=96, hidden_size=12288, num_attention_heads=96, seq_len=2048,
                      vocab_size=51200),
    # Megatron-Turing NLG 530B (Smith et al. 2022).
    "mt-nlg-530b": dict(arch="gpt", num_layers=105, hidden_size=20480, num_attention_heads=128, seq_len=2048,
                        vocab_size=51200),
    # Llama 2 (Touvron et al. 2023) and Llama 3 (Meta 2024) Hugging Face configs.
    "llama2-7b": dict(arch="llama", num_layers=32, hidden_size=4096, num_attention_heads=32, num_kv_heads=32,
                      ffn_hidden_size=11008, vocab_size=32000, seq_len=4096),
    "llama2-13b": dict(arch="llama", num_layers=40, hidden_size=5120, num_attention_heads=40, num_kv_heads=40,
                       ffn_hidden_size=13824, vocab_size=32000, seq_len=4096),
    "llama2-70b": dict(arch="llama", num_layers=80, hidden_size=8192, num_attention_heads=64, num_kv_heads=8,
                       ffn_hidden_size=28672, vocab_size=32000, seq_len=4096),
    "llama3-8b": dict(arch="llama", num_layers=32, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
                      ffn_hidden_size=14336, vocab_size=128256, seq_len=8192),
    "llama3-70b": dict(arch="llama", num_layers=80, hidden_size=8192, num_attention_heads=64, num_kv_heads=8,
                       ffn_hidden_size=28672, vocab_size=128256, seq_len=8192),
    "llama3-405b": dict(arch="llama", num_layers=126, hidden_size=16384, num_attention_heads=128, num_kv_heads=8,
                        ffn_hidden_size=53248, vocab_size=128256, seq_len=8192),
    # Mixture of experts (Hugging Face config.json of each checkpoint; seq_len is a training choice,
    # 4096 here, as for Llama 2). Mixtral (Jiang et al. 2024, "Mixtral of Experts"): 8 experts, top-2,
    # every layer MoE; 46.7B total / 12.9B active and 141B / 39B parameters.
    "mixtral-8x7b": dict(arch="llama", num_layers=32, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
                         ffn_hidden_size=14336, vocab_size=32000, seq_len=4096, num_experts=8, experts_per_token=2),
    "mixtral-8x22b": dict(arch="llama", num_layers=56, hidden_size=6144, num_attention_heads=48, num_kv_heads=8,
                          ffn_hidden_size=16384, vocab_size=32768, seq_len=4096, num_experts=8, experts_per_token=2),
    # DeepSeek-V3 (DeepSeek-AI 2024, arXiv:2412.19437, and its config.json): 61 layers, the first 3
    # dense (ffn 18432), then 256 routed experts (ffn 2048, top-8) + 1 shared expert; pre-trained at
    # seq 4096. MLA is approximated by multi-head attention with 128 heads of 7168/128 = 56 dims
    # (docs/moe.md); the multi-token-prediction module is left out. 671B total / 37B active.
    "deepseek-v3": dict(arch="llama", num_layers=61, hidden_size=7168, num_attention_heads=128, num_kv_heads=128,
                        ffn_hidden_size=18432, vocab_size=129280, seq_len=4096, num_experts=256, experts_per_token=8,
                        moe_ffn_hidden_size=2048, shared_experts=1, first_dense_layers=3),
    # Qwen1.5-MoE-A2.7B (Qwen/Qwen1.5-MoE-A2.7B config.json): 60 experts (ffn 1408), top-4, a shared
    # expert of ffn 5632 = 4 x 1408 (its sigmoid gate is left out); 14.3B total / 2.7B active.
    "qwen1.5-moe-a2.7b": dict(arch="llama", num_layers=24, hidden_size=2048, num_attention_heads=16,
                              num_kv_heads=16, ffn_hidden_size=5632, vocab_size=151936, seq_len=4096,
                              num_experts=60, experts_per_token=4, moe_ffn_hidden_size=1408, shared_experts=4),
}


def model_names() -> list[str]:
    return list(MODELS)


def lookup_model(name: str) -> dict | None:
    """Canonical model fields for preset `name` (case-insensitive), or None."""
    key = str(name).strip().lower().replace("_", "-")
    key = {"gpt3": "gpt3-175b", "mt-nlg": "mt-nlg-530b", "mtnlg-530b": "mt-nlg-530b"}.get(key, key)
    entry = MODELS.get(key)
    return dict(entry) if entry is not None else None
