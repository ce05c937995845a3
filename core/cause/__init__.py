"""Cause and effect: two prompts that differ in one fact, activation patching (causal tracing) and
attribution — where in the network, and from which input tokens, the answer comes.

* ``pair``: the clean and corrupted prompts, their answers, the logit difference;
* ``patching``: patched runs (residual stream, attention / MLP outputs, single heads), batched;
* ``attribution``: gradient × input and integrated gradients on the embeddings;
* ``figures``: the plotly figures of the section's pages.
"""
