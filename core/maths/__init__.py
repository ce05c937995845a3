"""The maths of attention: the five steps of scaled dot-product attention, masks, multi-head /
GQA / MQA bookkeeping, positions (sinusoidal, RoPE), and their figures."""
