"""Model presets by name (public architecture figures from each model's paper or config)."""
from __future__ import annotations

# Each entry holds canonical model fields; missing ones take the spec defaults.
MODELS: dict[str, dict] = {
    # GPT-3 family (Brown et al. 2020, Table 2.1); vocab padded to 51200 as in Megatron.
    "gpt3-1.3b": dict(arch="gpt", num_layers=24, hidden_size=2048, num_attention_heads=16, seq_len=2048),
    "gpt3-2.7b": dict(arch="gpt", num_layers=32, hidden_size=2560, num_attention_heads=32, seq_len=2048),
    "gpt3-6.7b": dict(arch="gpt", num_layers=32, hidden_size=4096, num_attention_heads=32, seq_len=2048),
    "gpt3-13b": dict(arch="gpt", num_layers=40, hidden_size=5120, num_attention_heads=40, seq_len=2048),
    "gpt3-175b": dict(arch="gpt", num_layers=96, hidden_size=12288, num_attention_heads=96, seq_len=2048),
    # Megatron-Turing NLG 530B (Smith et al. 2022).
    "mt-nlg-530b": dict(arch="gpt", num_layers=105, hidden_size=20480, num_attention_heads=128, seq_len=2048),
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
}


def model_names() -> list[str]:
    return list(MODELS)


def lookup_model(name: str) -> dict | None:
    """Canonical model fields for preset `name` (case-insensitive), or None."""
    key = str(name).strip().lower().replace("_", "-")
    key = {"gpt3": "gpt3-175b", "mt-nlg": "mt-nlg-530b", "mtnlg-530b": "mt-nlg-530b"}.get(key, key)
    entry = MODELS.get(key)
    return dict(entry) if entry is not None else None
