"""Per-family mixins of :class:`rlx.Graph`: one method per op of ``rlx_ir::Op``.

Every method serialises its op to the JSON form ``rlx_ir`` deserialises
(``{"op": "binary", "kind": "add"}``) and hands it to the native builder,
which infers and checks the result shape.
"""
