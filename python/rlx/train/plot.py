"""The loss-curve PNG the training examples and ``rlx train`` write
(matplotlib, headless Agg backend; imported only when a plot is asked for)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Union

from rlx.errors import RlxError


def loss_curve(
    path: Union[str, Path], losses: Sequence[float], title: str, xlabel: str = "step"
) -> None:
    """Plot ``losses`` against their index and save the figure to ``path``."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise RlxError(
            "[train] the loss-curve PNG needs matplotlib (pip install matplotlib)"
        ) from e
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    ax.plot(range(1, len(losses) + 1), list(losses), lw=1.2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("loss")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
