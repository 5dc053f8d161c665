"""``torch.nn.LSTM`` / ``GRU`` / ``RNN`` oracle fixtures (``tests/fixtures/rnn/``; the
file layout is described in scripts/make_seq_fixtures.py, which runs this with
``--what rnn``). Run with the peer python (torch)."""

from __future__ import annotations

import json
from typing import Any, Callable

import numpy as np
from make_seq_fixtures import RNN_DIR, SEED


def make_rnn() -> list[str]:
    """torch.nn.LSTM / GRU / RNN fixtures over every small config combination."""
    import torch

    RNN_DIR.mkdir(parents=True, exist_ok=True)
    inp, hid, seq, batch = 5, 7, 9, 3
    written = []
    modes: list[tuple[str, Callable[..., Any]]] = [
        ("lstm", lambda **k: torch.nn.LSTM(**k)),
        ("gru", lambda **k: torch.nn.GRU(**k)),
        ("rnn_tanh", lambda **k: torch.nn.RNN(nonlinearity="tanh", **k)),
        ("rnn_relu", lambda **k: torch.nn.RNN(nonlinearity="relu", **k)),
    ]
    for mi, (mode, ctor) in enumerate(modes):
        for layers in (1, 2):
            for bidir in (False, True):
                for batch_first in (True, False):
                    for with_h0 in (True, False):
                        seed = (
                            SEED + 1000 * mi + 100 * layers + 10 * bidir + 2 * batch_first + with_h0
                        )
                        torch.manual_seed(seed)
                        m = ctor(
                            input_size=inp,
                            hidden_size=hid,
                            num_layers=layers,
                            bidirectional=bidir,
                            batch_first=batch_first,
                        ).eval()
                        dirs = 2 if bidir else 1
                        x = torch.randn((batch, seq, inp) if batch_first else (seq, batch, inp))
                        h0 = torch.randn(layers * dirs, batch, hid)
                        c0 = torch.randn(layers * dirs, batch, hid)
                        with torch.no_grad():
                            if not with_h0:
                                y, st = m(x)
                            elif mode == "lstm":
                                y, st = m(x, (h0, c0))
                            else:
                                y, st = m(x, h0)
                        arrs: dict[str, np.ndarray] = {
                            n: p.detach().numpy().astype(np.float32)
                            for n, p in m.named_parameters()
                        }
                        arrs["x"] = x.numpy()
                        if with_h0:
                            arrs["h0"] = h0.numpy()
                            if mode == "lstm":
                                arrs["c0"] = c0.numpy()
                        arrs["output"] = y.numpy()
                        if mode == "lstm":
                            arrs["h_n"], arrs["c_n"] = st[0].numpy(), st[1].numpy()
                        else:
                            arrs["h_n"] = st.numpy()
                        arrs["num_layers"] = np.asarray(layers, dtype=np.int64)
                        arrs["bidirectional"] = np.asarray(bidir)
                        arrs["batch_first"] = np.asarray(batch_first)
                        arrs["hidden_size"] = np.asarray(hid, dtype=np.int64)
                        fname = (
                            f"{mode}_l{layers}_{'bi' if bidir else 'uni'}_"
                            f"{'bf' if batch_first else 'sf'}_{'h0' if with_h0 else 'noh0'}.npz"
                        )
                        np.savez(RNN_DIR / fname, **arrs)
                        written.append(fname)
    (RNN_DIR / "meta.json").write_text(
        json.dumps(
            {
                "torch": torch.__version__,
                "input_size": inp,
                "hidden_size": hid,
                "seq_len": seq,
                "batch": batch,
                "init": "torch default (uniform +-1/sqrt(hidden)), seeded per file",
                "files": written,
            },
            indent=1,
        )
        + "\n"
    )
    return written
