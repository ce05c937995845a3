"""Inside the real model: tokens and embeddings, the same token in context, the head atlas, head
ablation, and their figures."""
