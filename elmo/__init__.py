"""ELMo in pure PyTorch: the official weights, deterministic embeddings, downstream mixes."""
