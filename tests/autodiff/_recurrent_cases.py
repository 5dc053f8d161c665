"""The recurrent cases of ``tests/fixtures/grad/ops.npz``, one list shared by
``scripts/make_op_grad_fixtures.py`` (torch writes each case's op and
gradient) and ``test_op_grad_fixtures.py`` (rlx builds the same op). Plain
data, no torch: the test imports it, never the torch script.
"""

from __future__ import annotations

#: name, kind (``lstm`` / ``gru`` / ``rnn``), bidirectional, layers, relu
#: (``rnn`` only): nets written out step by step on rlx's stacked layout
RECURRENT: list[tuple[str, str, bool, int, bool]] = [
    ("lstm", "lstm", False, 1, False),
    ("lstm_bidir", "lstm", True, 1, False),
    ("lstm_2layer_bidir", "lstm", True, 2, False),
    ("gru", "gru", False, 1, False),
    ("gru_bidir_2layer", "gru", True, 2, False),
    ("rnn_tanh_bidir", "rnn", True, 1, False),
    ("rnn_relu_2layer", "rnn", False, 2, True),
]

#: the same fields for torch.nn's own nets, the output followed by rlx's
#: ``carry`` rows (final h, then for the LSTM final c)
RECURRENT_CARRY: list[tuple[str, str, bool, int, bool]] = [
    ("lstm_carry_2layer_bidir", "lstm", True, 2, False),
    ("gru_carry", "gru", False, 1, False),
    ("rnn_carry_relu_bidir", "rnn", True, 1, True),
]
