"""onnxruntime's own static INT8 ResNet-50 files, for bench/quantize/resnet50_int8_side_by_side.sh
and the QOperator comparison in bench/results/2026-12-07p-cpu-int8-ort-files.md:
quant_pre_process, then quantize_static in the QDQ and QOperator formats with QUInt8 weights per
tensor and per channel (and QInt8 per tensor in QDQ), uint8 activations, four random
calibration images (fine for speed).

    python3 bench/quantize/ort_resnet50_files.py [RESNET50.onnx] [OUT_DIR]

Defaults: /tmp/tv/resnet50.onnx (bench/export_torchvision.py), /tmp/u8. Writes
OUT_DIR/r50_{qdq,qop}_{u8,s8}_{pt,pc}.onnx.
"""
import os
import sys

import numpy as np
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                      quantize_static)
from onnxruntime.quantization.shape_inference import quant_pre_process


class RandomImages(CalibrationDataReader):
    def __init__(self):
        rng = np.random.default_rng(0)
        self.sets = [{"input": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}
                     for _ in range(4)]

    def get_next(self):
        return self.sets.pop() if self.sets else None


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "/tmp/tv/resnet50.onnx"
    out = sys.argv[2] if len(sys.argv) > 2 else "/tmp/u8"
    os.makedirs(out, exist_ok=True)
    pre = os.path.join(out, "r50_pre.onnx")
    quant_pre_process(src, pre)
    for fmt, fmt_name in ((QuantFormat.QDQ, "qdq"), (QuantFormat.QOperator, "qop")):
        for per_channel in (False, True):
            for weights, w_name in ((QuantType.QUInt8, "u8"), (QuantType.QInt8, "s8")):
                if w_name == "s8" and (fmt == QuantFormat.QOperator or per_channel):
                    continue
                path = os.path.join(out, f"r50_{fmt_name}_{w_name}_{'pc' if per_channel else 'pt'}.onnx")
                quantize_static(pre, path, RandomImages(), quant_format=fmt,
                                per_channel=per_channel, weight_type=weights,
                                activation_type=QuantType.QUInt8)
                print(path)


if __name__ == "__main__":
    main()
