#!/usr/bin/env bash
# Installs everything kiln's build, tests and demo need on Debian 12 (clang-14 and its runtime
# libraries only for the importer fuzzer, `make fuzz-import`: libFuzzer ships with clang; the OpenCL
# ICD loader, headers and PoCL for `--device opencl` and its tests, clinfo to see the devices).
# Idempotent: when every package is present it only runs dpkg-query and exits.
set -euo pipefail

APT_PACKAGES=(
  build-essential cmake make pkg-config
  libonnx-dev libprotobuf-dev protobuf-compiler
  libgtest-dev googletest
  libonnx-testdata
  python3-onnx python3-numpy
  python3-torch python3-torchvision
  graphviz
  ccache
  clang-14 libclang-rt-14-dev
  ocl-icd-opencl-dev opencl-headers pocl-opencl-icd clinfo
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# ONNX Runtime for `kiln bench --compare` (the baseline kiln is measured against), installed with
# the default python3 (pip); Debian's python3 keeps torch/onnx for the model exports.
if ! python3 -c "import onnxruntime" >/dev/null 2>&1; then
  echo "setup: installing onnxruntime (pip)"
  python3 -m pip install --quiet onnxruntime numpy || echo "setup: onnxruntime not installed; kiln bench --compare will be unavailable"
fi
# OpenVINO, the second anchor of `kiln bench --compare` (CPU plugin, LATENCY hint, f32).
if ! python3 -c "import openvino" >/dev/null 2>&1; then
  echo "setup: installing openvino (pip)"
  python3 -m pip install --quiet openvino || echo "setup: openvino not installed; kiln bench --compare will run without it"
fi

# The Python package (python/, docs/python.md): its build dependencies (nanobind, scikit-build-core)
# and pytest, for the default python3, the one CMake builds the extension for. Installed here so
# that the package's tests, including the offline `pip wheel --no-build-isolation` one, need no
# network at test time.
if ! python3 -c "import nanobind, scikit_build_core, pytest, onnx, onnxruntime, numpy" >/dev/null 2>&1; then
  echo "setup: installing nanobind, scikit-build-core, pytest, onnx (pip)"
  python3 -m pip install --quiet nanobind scikit-build-core pytest onnx onnxruntime numpy \
    || echo "setup: Python build dependencies not installed; the Python package kiln will not be built"
fi
# Ray, for `kiln tune --measurer ray` (measurement jobs on a cluster of identical machines,
# docs/tuning.md) and its test, which starts a private one-node cluster on loopback. Pinned: the
# driver (tools/ray_measure.py) was written and tested against this version.
if ! python3 -c "import ray" >/dev/null 2>&1; then
  echo "setup: installing ray (pip)"
  python3 -m pip install --quiet "ray==2.40.0" \
    || echo "setup: ray not installed; kiln tune --measurer ray and its test (tune_ray_measurer) will fail"
fi
# Hugging Face Transformers for bench/models/hf_models.py and its ctest (hf_models_compiled_check):
# models as Hugging Face's code builds and exports them. Not a Debian package, and the current
# release needs a newer torch than Debian's 1.13, so a pinned set that runs on it goes into its own
# folder (KILN_HF_DEPS), which the exporter puts on Debian's Python's path; --no-deps keeps pip
# from pulling a torch into it.
HF_DEPS=${KILN_HF_DEPS:-$HOME/.cache/kiln/hf-pydeps}
if ! /usr/bin/python3 -c "import sys; sys.path.insert(0, '$HF_DEPS'); import transformers" >/dev/null 2>&1; then
  echo "setup: installing transformers 4.30.2 into $HF_DEPS (pip)"
  python3 -m pip install --quiet --upgrade --no-deps --target "$HF_DEPS" \
    transformers==4.30.2 huggingface_hub==0.16.4 safetensors==0.3.3 tokenizers==0.13.3 regex==2026.12.2 \
    packaging==26.4 pyyaml==6.0.4 filelock==4.3.2 tqdm==4.70.1 requests==2.34.2 urllib3==2.8.0 idna==3.20 \
    certifi==2026.10.19.post1 charset_normalizer==3.5.3 fsspec==2026.9.0 typing_extensions==4.16.0 \
    || echo "setup: transformers not installed; hf_models_compiled_check will fail"
fi
