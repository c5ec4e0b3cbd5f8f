#!/usr/bin/python3
"""Writes the malformed models and files that tests/cli/bad_inputs.txt feeds to kiln.

Usage: make_bad_inputs.py DIR

Each file is built with onnx's helpers (and, where the helpers refuse, by editing the protobuf
or the bytes directly), so it is exactly as malformed as its name says and nothing else.
Every model here is under 1 KiB unless its name says otherwise (the table checks kiln's memory
on those).
"""
import os
import struct
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

D = sys.argv[1]
os.makedirs(D, exist_ok=True)


def path(name):
    return os.path.join(D, name)


def model(nodes, inputs, outputs, inits=(), opset=13, ir=None, name="g"):
    g = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    if ir is not None:
        m.ir_version = ir
    return m


def save(m, name):
    with open(path(name), "wb") as f:
        f.write(m.SerializeToString())  # onnx.save would refuse (or fix) some of these


def vi(name, dims, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, dims)


def relu(dims=(2, 3), **kw):
    return model([helper.make_node("Relu", ["x"], ["y"], name="the_node")], [vi("x", list(dims))], [vi("y", None)], **kw)


def npy_bytes(header, data=b"", version=1):
    h = header.encode()
    pad = (64 - (10 + len(h) + 1) % 64) % 64
    h = h + b" " * pad + b"\n"
    head = b"\x93NUMPY" + bytes([version, 0]) + (struct.pack("<H", len(h)) if version == 1 else struct.pack("<I", len(h)))
    return head + h + data


def write(name, data):
    with open(path(name), "wb") as f:
        f.write(data)


# --- good inputs, used by the rows that must succeed --------------------------------------------
save(relu(), "good.onnx")
np.save(path("x.npy"), np.ones((2, 3), np.float32))
np.save(path("x_neg.npy"), -np.ones((2, 3), np.float32))

# --- model structure ------------------------------------------------------------------------------
save(relu(ir=99), "ir99.onnx")
save(relu(dims=(-1, 3)), "dim_minus1.onnx")
# Shape of a value nothing defines (SIGSEGV in libonnx's inference before the fix).
save(model([helper.make_node("Shape", ["nowhere"], ["y"], name="shape_node")], [vi("x", [2])],
           [onnx.ValueInfoProto(name="y")]), "shape_undefined.onnx")
# Shape-15 (start=1) of a value nothing defines: SIGSEGV in libonnx's Shape inference before the fix.
save(model([helper.make_node("Shape", ["nowhere"], ["y"], name="shape_node", start=1)], [vi("x", [2])],
           [onnx.ValueInfoProto(name="y")], opset=15), "shape15_undefined.onnx")
# Shape of an omitted ("") input.
save(model([helper.make_node("Shape", [""], ["y"], name="shape_node")], [vi("x", [2])],
           [onnx.ValueInfoProto(name="y")]), "shape_empty_input.onnx")
# Nodes out of order: the Relu reads what the Neg after it writes.
save(model([helper.make_node("Relu", ["t"], ["y"], name="early"), helper.make_node("Neg", ["x"], ["t"], name="late")],
           [vi("x", [2, 3])], [vi("y", None)]), "out_of_order.onnx")

# --- attributes -----------------------------------------------------------------------------------
def conv(name, x=(1, 1, 5, 5), w=(1, 1, 3, 3), op="Conv", **attrs):
    wt = numpy_helper.from_array(np.ones(w, np.float32), "w")
    n = helper.make_node(op, ["x", "w"], ["y"], name="conv_node", **attrs)
    save(model([n], [vi("x", list(x))], [vi("y", None)], inits=[wt]), name)


conv("conv_stride0.onnx", strides=[0, 0])
conv("conv_dilation0.onnx", dilations=[0, 1])
conv("conv_kernel0.onnx", kernel_shape=[0, 3])
conv("conv_strides_rank.onnx", strides=[1])
conv("conv_pads_negative.onnx", pads=[-1, 0, 0, 0])
conv("conv_pads_rank.onnx", pads=[1, 1])
conv("conv_group0.onnx", group=0)
conv("conv_group_mismatch.onnx", group=3)
conv("conv_weight_rank.onnx", w=(3, 3))
conv("convtranspose_output_shape.onnx", op="ConvTranspose", output_shape=[1])
conv("convtranspose_stride0.onnx", op="ConvTranspose", strides=[0, 0])
conv("convtranspose_output_padding.onnx", op="ConvTranspose", output_padding=[1, 1, 1])
conv("convtranspose_pads_rank.onnx", op="ConvTranspose", pads=[1])


def pool(name, op="MaxPool", **attrs):
    n = helper.make_node(op, ["x"], ["y"], name="pool_node", **attrs)
    save(model([n], [vi("x", [1, 1, 5, 5])], [vi("y", None)]), name)


pool("maxpool_stride0.onnx", kernel_shape=[2, 2], strides=[0, 1])
pool("maxpool_no_kernel.onnx")
pool("avgpool_kernel0.onnx", op="AveragePool", kernel_shape=[0, 2])
pool("maxpool_kernel_rank.onnx", kernel_shape=[2, 2, 2])

# A Constant whose `value` is a FLOAT attribute instead of a tensor.
cn = helper.make_node("Constant", [], ["c"], name="const_node")
cn.attribute.append(helper.make_attribute("value", 1.5))
save(model([cn, helper.make_node("Add", ["x", "c"], ["y"], name="add")], [vi("x", [2, 3])], [vi("y", None)]),
     "constant_float_value.onnx")

# Reshape of 6 elements to [7, 5].
shape = numpy_helper.from_array(np.array([7, 5], np.int64), "shape")
save(model([helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape_node")], [vi("x", [2, 3])],
           [vi("y", None)], inits=[shape]), "reshape_bad_count.onnx")

# --- sizes (memory amplification) ----------------------------------------------------------------
# An opset-1 Log on a 2 GiB input: ONNX cannot type it, kiln's type completion used to evaluate it.
log = helper.make_node("Log", ["x"], ["y"], name="log_node")
save(model([log], [vi("x", [1 << 29])], [vi("y", None)], opset=1, ir=3), "log_2gib.onnx")
# An initializer declaring 4 GiB with no data.
big = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1 << 30])
save(model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [vi("x", [1])], [vi("y", None)], inits=[big]),
     "init_4gib_nodata.onnx")
big_raw = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1 << 30], raw_data=b"\0" * 16)
save(model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [vi("x", [1])], [vi("y", None)], inits=[big_raw]),
     "init_4gib_raw16.onnx")
# dims whose product overflows int64.
ovf = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1 << 62, 1 << 62, 4])
save(model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [vi("x", [1])], [vi("y", None)], inits=[ovf]),
     "init_dims_overflow.onnx")
# A graph input declaring 2^62 x 4 elements (its size overflows).
save(relu(dims=(1 << 62, 4)), "input_dims_overflow.onnx")

# Small nodes with large outputs (4 GiB each): typing them must not evaluate them.
def shape_const(name, vals, t=np.int64):
    return numpy_helper.from_array(np.array(vals, t), name)


save(model([helper.make_node("ConstantOfShape", ["s"], ["y"], name="cos")], [vi("x", [1])], [vi("y", None)],
           inits=[shape_const("s", [1 << 30])]), "constantofshape_4gib.onnx")
save(model([helper.make_node("Expand", ["x", "s"], ["y"], name="expand")], [vi("x", [1])], [vi("y", None)],
           inits=[shape_const("s", [1 << 30])]), "expand_4gib.onnx")
save(model([helper.make_node("Tile", ["x", "s"], ["y"], name="tile")], [vi("x", [1])], [vi("y", None)],
           inits=[shape_const("s", [1 << 30])]), "tile_4gib.onnx")
save(model([helper.make_node("Range", ["a", "b", "c"], ["y"], name="range")], [vi("x", [1])], [vi("y", None)],
           inits=[shape_const("a", 0.0, np.float32), shape_const("b", float(1 << 30), np.float32),
                  shape_const("c", 1.0, np.float32)]), "range_4gib.onnx")

# --- external data --------------------------------------------------------------------------------
def ext(name, entries, dims=(3,)):
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=list(dims))
    w.data_location = TensorProto.EXTERNAL
    for k, v in entries:
        e = w.external_data.add()
        e.key, e.value = k, v
    save(model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [vi("x", [3])], [vi("y", None)], inits=[w]), name)


write("weights.bin", np.arange(3, dtype=np.float32).tobytes())
np.save(path("x3.npy"), np.ones(3, np.float32))
ext("ext_good.onnx", [("location", "weights.bin")])
ext("ext_offset_abc.onnx", [("location", "weights.bin"), ("offset", "abc")])
ext("ext_offset_huge.onnx", [("location", "weights.bin"), ("offset", "100000000000000000000")])
ext("ext_offset_big.onnx", [("location", "weights.bin"), ("offset", "4611686018427387904")])
ext("ext_length_abc.onnx", [("location", "weights.bin"), ("length", "12x")])
ext("ext_length_short.onnx", [("location", "weights.bin"), ("length", "8")])
ext("ext_offset_negative.onnx", [("location", "weights.bin"), ("offset", "-4")])
os.makedirs(path("a_directory"), exist_ok=True)
ext("ext_directory.onnx", [("location", "a_directory")])
ext("ext_fifo.onnx", [("location", "a_fifo")])
if not os.path.exists(path("a_fifo")):
    os.mkfifo(path("a_fifo"))
ext("ext_missing.onnx", [("location", "no_such_file.bin")])
ext("ext_escape.onnx", [("location", "../../etc/passwd")])
ext("ext_4gib.onnx", [("location", "weights.bin")], dims=(1 << 30,))

# --- .npy files -----------------------------------------------------------------------------------
write("npy_odd_spacing.npy", npy_bytes("{'descr':'<f4','fortran_order':False,'shape':(2,3)}", b"\0" * 24))
write("npy_spaces.npy", npy_bytes("{ 'descr' :  '<f4' ,  'fortran_order' : False , 'shape' : ( 2 , 3 ) }", b"\0" * 24))
write("npy_no_value.npy", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape':"))
write("npy_value_at_end.npy", npy_bytes("{'shape': (2, 3), 'fortran_order': False, 'descr':"))
write("npy_empty_shape.npy", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': , }"))
write("npy_shape_not_tuple.npy", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': 6, }", b"\0" * 24))
write("npy_4gib.npy", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1073741824,), }"))
write("npy_1tib.npy", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (274877906944,), }"))
write("npy_negative_dim.npy", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 3), }"))
write("npy_dim_overflow.npy", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }"))
write("npy_truncated.npy", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", b"\0" * 8))
write("npy_bad_magic.npy", b"NOTNUMPY" + b"\0" * 64)
write("npy_short.npy", b"\x93NUMPY\x01")
write("npy_big_endian.npy", npy_bytes("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", b"\0" * 24))

# --- output names that are not file names ---------------------------------------------------------
def named_output(name, file):
    save(model([helper.make_node("Relu", ["x"], [name], name="the_node")], [vi("x", [2, 3])], [vi(name, None)]), file)


named_output("line1\nline2", "output_newline.onnx")
named_output("o" * 10000, "output_long.onnx")
named_output("../../escape", "output_dotdot.onnx")

# An empty input that is also a graph output (copied out with memcpy of 0 bytes: null pointers
# there were undefined behaviour, reported by UBSan in the sanitizer stage).
save(model([helper.make_node("Relu", ["x"], ["y"], name="the_node")], [vi("x", [0, 3])], [vi("x", [0, 3]), vi("y", None)]),
     "empty_passthrough.onnx")
np.save(path("x_empty.npy"), np.ones((0, 3), np.float32))

# --- compiled Gather with indices out of range at run time ----------------------------------------
gather = helper.make_node("Gather", ["data", "idx"], ["y"], name="gather_node", axis=0)
save(model([gather], [vi("data", [4, 3]), vi("idx", [2], TensorProto.INT64)], [vi("y", None)]), "gather.onnx")
np.save(path("data43.npy"), np.arange(12, dtype=np.float32).reshape(4, 3))
np.save(path("idx_ok.npy"), np.array([3, -4], np.int64))
np.save(path("idx_bad.npy"), np.array([1, 7], np.int64))
np.save(path("idx_bad_neg.npy"), np.array([-5, 0], np.int64))
# The Gather inside a fused kernel (Gather -> Relu is one kernel): the error names the Gather.
save(model([gather, helper.make_node("Relu", ["y"], ["z"], name="relu_node")],
           [vi("data", [4, 3]), vi("idx", [2], TensorProto.INT64)], [vi("z", None)]), "gather_relu.onnx")
# A Slice in the same kernel uses only the first two rows: the bad index in row 3 is still refused
# (the reference checks every index).
save(model([gather, helper.make_node("Slice", ["y", "st", "en"], ["z"], name="slice_node")],
           [vi("data", [4, 3]), vi("idx", [4], TensorProto.INT64)], [vi("z", None)],
           inits=[numpy_helper.from_array(np.array([0], np.int64), "st"),
                  numpy_helper.from_array(np.array([2], np.int64), "en")]), "gather_slice.onnx")
np.save(path("idx4_bad_unused.npy"), np.array([0, 1, 9, 2], np.int64))
# GatherElements and GatherND read run-time indices the same way.
save(model([helper.make_node("GatherElements", ["data", "idx"], ["y"], name="ge_node", axis=0)],
           [vi("data", [4, 3]), vi("idx", [2, 3], TensorProto.INT64)], [vi("y", None)]), "gather_elements.onnx")
np.save(path("idx_ge_ok.npy"), np.array([[0, -1, 3], [-4, 2, 1]], np.int64))
np.save(path("idx_ge_bad.npy"), np.array([[0, 1, 2], [3, 4, 0]], np.int64))
save(model([helper.make_node("GatherND", ["data", "idx"], ["y"], name="gnd_node")],
           [vi("data", [4, 3]), vi("idx", [2, 2], TensorProto.INT64)], [vi("y", None)]), "gather_nd.onnx")
np.save(path("idx_nd_ok.npy"), np.array([[3, 2], [-1, -3]], np.int64))
np.save(path("idx_nd_bad.npy"), np.array([[0, 0], [1, 3]], np.int64))
# CumSum's axis given at run time: checked like an index (compiled code scanned the last axis).
save(model([helper.make_node("CumSum", ["x", "axis"], ["y"], name="cumsum_node")],
           [vi("x", [2, 3]), vi("axis", [], TensorProto.INT64)], [vi("y", None)]), "cumsum_axis.onnx")
np.save(path("axis_ok.npy"), np.array(-2, np.int64))
np.save(path("axis_bad.npy"), np.array(2, np.int64))

for f in os.listdir(D):
    p = path(f)
    if f.endswith(".onnx") and "4gib" not in f and "2gib" not in f and os.path.getsize(p) >= 1024 and "long" not in f:
        sys.exit(f"make_bad_inputs: {f} is {os.path.getsize(p)} bytes; models here are meant to be under 1 KiB")
