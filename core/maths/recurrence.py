"""Why attention replaced recurrence, measured: how strongly the last position's output depends on each
earlier input, in a recurrent layer and in one causal self-attention layer.

An RNN reaches token t from the last position only through the T − t steps in between: its
sensitivity ‖∂h_T/∂x_t‖ is a product of T − t Jacobians, and for a freshly initialised tanh RNN that
product shrinks by about the same factor at every step. Self-attention connects every position to
every earlier one in one step: ‖∂y_T/∂x_t‖ stays of one size however far back t lies. Both layers are
PyTorch's default initialisation from a fixed seed, untrained (LSTM and GRU gates were designed to slow
the RNN's decay; they do not remove the T − t sequential steps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch
from torch import nn

REACH_T = 32  # positions of the demo
REACH_D = 32  # width of both layers
REACH_SEED = 0


@dataclass(frozen=True)
class Reach:
    rnn: np.ndarray  # [T] ‖∂h_T/∂x_t‖_F of the tanh RNN, t = 0 … T − 1
    attention: np.ndarray  # [T] ‖∂y_T/∂x_t‖_F of one causal self-attention head


def reach_layers(d: int = REACH_D, seed: int = REACH_SEED) -> tuple[nn.RNN, nn.Linear, nn.Linear, nn.Linear]:
    """The RNN and the attention head's q, k, v projections, initialised from ``seed``."""
    with torch.random.fork_rng(devices=[]):  # the global generator is left as it was found
        torch.manual_seed(seed)
        rnn = nn.RNN(d, d, nonlinearity="tanh", batch_first=True)
        q, k, v = (nn.Linear(d, d, bias=False) for _ in range(3))
    return rnn, q, k, v


def reach_input(T: int = REACH_T, d: int = REACH_D, seed: int = REACH_SEED) -> torch.Tensor:
    """[T, d] the inputs both layers read."""
    return torch.randn(T, d, generator=torch.Generator().manual_seed(seed))


def attention_last(x: torch.Tensor, q: nn.Linear, k: nn.Linear, v: nn.Linear) -> torch.Tensor:
    """[d] the last position's output of one causal self-attention head over x [T, d]."""
    T, d = x.shape
    s = q(x) @ k(x).T / math.sqrt(d)  # [T, T]
    s = s + torch.triu(torch.full((T, T), float("-inf")), 1)  # causal: no key after its query
    return (torch.softmax(s, -1) @ v(x))[-1]


def _jacobian_norms(f, x: torch.Tensor) -> np.ndarray:
    J = torch.autograd.functional.jacobian(f, x)  # [d_out, T, d_in]
    return J.pow(2).sum(dim=(0, 2)).sqrt().double().numpy()  # [T]


@lru_cache(maxsize=4)
def reach(T: int = REACH_T, d: int = REACH_D, seed: int = REACH_SEED) -> Reach:
    """Both layers' sensitivity of the last output to every input, by autograd."""
    rnn, q, k, v = reach_layers(d, seed)
    x = reach_input(T, d, seed)
    r = _jacobian_norms(lambda z: rnn(z[None])[0][0, -1], x)  # h_T: the state after the last step
    a = _jacobian_norms(lambda z: attention_last(z, q, k, v), x)
    for arr in (r, a):
        arr.flags.writeable = False
    return Reach(r, a)


def reach_readout(res: Reach) -> dict[str, str]:
    """The caption's numbers: the RNN's decay factor per step (geometric mean over the last 16 steps),
    its reach to the first token against the last, and attention's smallest and largest reach."""
    tail = res.rnn[-16:]
    factor = float(np.exp(np.mean(np.log(tail[1:] / tail[:-1]))))
    return {"T": str(len(res.rnn)), "factor": f"{factor:.2f}", "rnn_first": f"{res.rnn[0]:.2e}", "rnn_last": f"{res.rnn[-1]:.3g}",
            "att_min": f"{res.attention.min():.3g}", "att_max": f"{res.attention.max():.3g}"}
