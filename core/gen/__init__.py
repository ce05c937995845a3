"""Generation: the prefill/decode stepper with its KV cache, sampling, the KV-memory calculator,
chat templates, and their figures."""
