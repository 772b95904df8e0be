"""The real-model cases CI checks (tests/models) at small sizes."""
import os

# What CI checks. Every torch model at opset 17 (LayerNormalization as one op); the transformer,
# recurrent and control-flow models again at opset 13, where LayerNorm is exported decomposed.
# GELU is decomposed (Erf) at both: torch 1.13 has no Gelu export.
EXPORTED = ["resnet50", "mobilenet_v2", "efficientnet_b0", "vit_b_16", "bert", "control_flow",
            "lstm", "lstm_bidirectional"]
EXPORTED_OP13 = ["vit_b_16", "bert", "lstm", "control_flow"]
# The onnx wheel's light CNNs run at their fixed 224x224 with random weights. AlexNet, ZFNet-512
# and VGG-19 hold 60-140 M parameters in fully connected layers (0.25-0.55 GB per model file) and
# VGG-19 takes about a minute per path on the reference kernels; their ops (Conv, LRN, MaxPool,
# Gemm, Dropout) are all covered by the others, so bench/models_full.py checks them and CI does
# not unless KILN_MODELS_ALL=1.
LIGHT = ["light_densenet121", "light_inception_v1", "light_inception_v2", "light_resnet50",
         "light_shufflenet", "light_squeezenet"]
LIGHT_SLOW = ["light_bvlc_alexnet", "light_vgg19", "light_zfnet512"]
# The Python that exports the torch models: Debian's python3-torch installs for /usr/bin/python3,
# not for pyenv's; KILN_EXPORT_PYTHON names another (the H200 machine's venv).
SYSTEM_PYTHON = os.environ.get("KILN_EXPORT_PYTHON", "/usr/bin/python3")


def case_names():
    light = LIGHT + (LIGHT_SLOW if os.environ.get("KILN_MODELS_ALL") else [])
    return ([f"{n}_op17" for n in EXPORTED] + [f"{n}_op13" for n in EXPORTED_OP13] +
            sorted(light))
