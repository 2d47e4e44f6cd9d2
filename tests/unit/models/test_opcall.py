"""The one `OpCall` encoding: records round-trip, older files still read, and signatures keep the keys of the
shipped kernel database."""

import json

import pytest
import torch

from phantora.models.compute import KernelDatabase
from phantora.models.opcall import decode_op, decode_value, encode_op, loose_signature, signature
from phantora.models.ops import OpCall, TensorMeta
from phantora.specs import load_profile


def t(shape, dtype="float32", stride=None, device="cuda", offset=0):
    if stride is None:
        stride = tuple(int(torch.empty(shape).stride()[i]) for i in range(len(shape)))
    return TensorMeta(tuple(shape), dtype, tuple(stride), device, offset)


MM = OpCall("aten.mm.default", (t((37, 53)), t((53, 29))), (), (t((37, 29)),))
FOREACH = OpCall("aten._foreach_mul.Scalar", ((t((64,)),) * 6, 0.9), (), (t((64,)),) * 6)
TO_BF16 = OpCall("aten._to_copy.default", (t((8, 16), offset=3, stride=(32, 1)),),
                 (("device", "cuda:0"), ("dtype", "bfloat16"), ("layout", "torch.strided")), (t((8, 16), "bfloat16"),))


@pytest.mark.parametrize("op", [MM, FOREACH, TO_BF16])
def test_a_record_round_trips_through_json(op):
    assert decode_op(json.loads(json.dumps(encode_op(op)))) == op


def test_a_run_of_equal_items_is_written_once():
    record = encode_op(FOREACH)
    assert record["args"][0] == {"rep": [6, {"T": [[64], "float32", [1], "cuda"]}]}
    assert record["outputs"] == {"rep": [6, {"T": [[64], "float32", [1], "cuda"]}]}


def test_an_ops_file_line_written_before_reads_as_the_call_it_was():
    line = ('{"sig":"x","op":"aten._to_copy.default","args":[{"T":[[8,16],"float32",[32,1],"cuda"],"off":3}],'
            '"kwargs":[["device","cuda:0"],["dtype","bfloat16"],["layout","torch.strided"]],'
            '"outputs":[{"T":[[8,16],"bfloat16",[16,1],"cuda"]}],"calls":2,"source":"analytic","est_ns":900}')
    assert decode_op(json.loads(line)) == TO_BF16


def test_a_measurement_record_reads_as_the_call_the_runtime_builds():
    """The measurement scripts' older form: "name", floats as {"f"}, dtypes and devices as objects, outputs
    nested in lists; dtypes come back as names, as the runtime passes them."""
    record = {"name": "aten._to_copy.default", "ctx": "llama|step8", "k": [],
              "args": [{"T": [[8, 16], "float32", [32, 1], "cuda"], "off": 3}],
              "kwargs": [["device", {"device": "cuda"}], ["dtype", {"dtype": "bfloat16"}],
                         ["layout", {"repr": "torch.strided"}]],
              "outputs": [[{"T": [[8, 16], "bfloat16", [16, 1], "cuda"]}]]}
    op = decode_op(record)
    assert op.kwargs == (("device", "cuda"), ("dtype", "bfloat16"), ("layout", "torch.strided"))
    assert op.outputs == TO_BF16.outputs
    assert signature(op) == signature(TO_BF16)
    assert decode_value({"f": 1.0}) == 1.0


def test_an_unknown_encoded_value_is_an_error():
    with pytest.raises(ValueError, match="unknown encoded value"):
        decode_value({"tensor": [1]})


def test_a_signature_keeps_what_chooses_the_kernel():
    assert signature(MM) == ('["aten.mm.default",[["T",[37,53],"float32",[53,1],"cuda"],'
                             '["T",[53,29],"float32",[29,1],"cuda"]],[]]')
    shifted = OpCall(MM.name, (t((37, 53), offset=7, device="cuda:3"), MM.args[1]), (), ())
    assert signature(shifted) == signature(MM)  # offsets, device indices and outputs do not choose the kernel
    assert signature(FOREACH) == signature(OpCall(FOREACH.name, (FOREACH.args[0], 0.1), (), ()))
    assert signature(OpCall(TO_BF16.name, TO_BF16.args, (("dtype", torch.bfloat16),), ())) == \
        signature(OpCall(TO_BF16.name, TO_BF16.args, (("dtype", "bfloat16"),), ()))
    transposed = OpCall(MM.name, (t((37, 53), stride=(1, 37)), MM.args[1]), (), ())
    assert signature(transposed) != signature(MM) and loose_signature(transposed) != loose_signature(MM)
    padded = OpCall(MM.name, (t((37, 53), stride=(64, 1)), MM.args[1]), (), ())
    assert loose_signature(padded) == loose_signature(transposed)  # both "not contiguous"


def _call_from_signature(sig: str) -> OpCall:
    """A call whose signature should be `sig` (floats, offsets and outputs are not in a signature)."""
    def value(v):
        if isinstance(v, list) and len(v) == 5 and v[0] == "T":
            return TensorMeta(tuple(v[1]), v[2], tuple(v[3]), v[4])
        if isinstance(v, list) and len(v) == 3 and v[0] == "rep":
            return ("rep", v[1], value(v[2]))
        if isinstance(v, list):
            items = []
            for item in map(value, v):
                items.extend((item[2],) * item[1] if isinstance(item, tuple) and item[:1] == ("rep",) else [item])
            return tuple(items)
        return 0.5 if v == "<float>" else v

    name, args, kwargs = json.loads(sig)
    return OpCall(name, value(args), tuple((k, value(v)) for k, v in kwargs), ())


def test_the_shipped_kernel_database_keys_are_the_signatures_of_their_calls():
    database = load_profile("h200").kernels.value
    assert len(database) > 1000
    for sig in database.entries:
        assert signature(_call_from_signature(sig)) == sig
