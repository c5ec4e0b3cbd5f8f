#!/usr/bin/python3
"""Export Hugging Face Transformers models (random weights from their configs) for kiln's model checks.

Usage: /usr/bin/python3 bench/models/hf_models.py [--out DIR] [--list] [NAME ...]

Models as Hugging Face's own code builds and exports them, not graphs written for kiln: its
attention-mask arithmetic, relative position buckets (T5), disentangled attention (DeBERTa), rotary
embeddings and RMSNorm (LLaMA, GPT-NeoX), TensorFlow SAME padding as Pad ops (MobileNetV2),
efficient attention over reduced keys (SegFormer), CLIP's 32x32 patches. Small widths and depths
keep them quick; the structure is the real one. Same files as make_models.py: NAME.onnx (opset 14,
one input, output "out"), NAME.input.npy, NAME.output.npy (PyTorch's output) and NAME.json, last.
Text models take input_ids (int64, [1, 64], the last 8 positions padding id 0); the attention
mask is computed inside the graph from the ids, as pipelines do. Image models take pixel_values.

Transformers is not a Debian package: scripts/setup.sh installs a pinned version (one that runs on
Debian's torch 1.13) into KILN_HF_DEPS (default ~/.cache/kiln/hf-pydeps), which this script puts
on sys.path. Use Debian's Python (/usr/bin/python3): it has torch and onnx.
"""

import argparse
import os
import sys
import time
import traceback

HF_DEPS = os.environ.get("KILN_HF_DEPS", os.path.join(os.path.expanduser("~"), ".cache", "kiln", "hf-pydeps"))
sys.path.insert(0, HF_DEPS)

import numpy as np  # noqa: E402
import torch  # noqa: E402

try:
    import transformers as T  # noqa: E402
except ImportError as e:
    sys.exit(f"hf_models: cannot import transformers from {HF_DEPS} ({e}); run scripts/setup.sh")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_models  # noqa: E402  (calibrate_batchnorm, accept_export, write_meta)

OPSET = 14
SEQ = 64
PAD = 8  # trailing padding positions of the text inputs
DEFAULT_OUT = "/tmp/kiln_hf"
SMALL = dict(hidden_size=256, num_hidden_layers=2, num_attention_heads=4, intermediate_size=1024)


def text(cfg, model, causal=False, **kw):
    return ("text", causal, lambda: model(cfg(**kw)))


def image(cfg, model, size=224, **kw):
    return ("image", size, lambda: model(cfg(**kw)))


# name -> (kind, causal or image size, constructor), description
MODELS = {
    "hf_bert": (text(T.BertConfig, T.BertModel, **SMALL), "BERT encoder, 2 layers, d 256"),
    "hf_distilbert": (text(T.DistilBertConfig, T.DistilBertModel, dim=256, n_layers=2, n_heads=4, hidden_dim=1024),
                      "DistilBERT, 2 layers"),
    "hf_roberta": (text(T.RobertaConfig, T.RobertaModel, **SMALL), "RoBERTa (position ids from the padding mask)"),
    "hf_albert": (text(T.AlbertConfig, T.AlbertModel, embedding_size=128, **SMALL), "ALBERT (shared layers)"),
    "hf_t5enc": (text(T.T5Config, T.T5EncoderModel, d_model=256, d_kv=64, d_ff=1024, num_layers=2, num_heads=4),
                 "T5 encoder (relative position buckets, RMS norm)"),
    "hf_deberta": (text(T.DebertaV2Config, T.DebertaV2Model, **SMALL), "DeBERTa-v2 (disentangled attention)"),
    "hf_gpt2": (text(T.GPT2Config, T.GPT2Model, causal=True, n_embd=256, n_layer=2, n_head=4), "GPT-2, 2 blocks"),
    "hf_llama": (text(T.LlamaConfig, T.LlamaModel, causal=True, hidden_size=256, num_hidden_layers=2,
                      num_attention_heads=4, intermediate_size=688), "LLaMA (rotary, RMSNorm, SwiGLU), 2 layers"),
    "hf_gptneox": (text(T.GPTNeoXConfig, T.GPTNeoXModel, causal=True, **SMALL), "GPT-NeoX (partial rotary), 2 layers"),
    "hf_vit": (image(T.ViTConfig, T.ViTModel, **SMALL), "ViT, 16x16 patches, 2 layers"),
    "hf_clipvision": (image(T.CLIPVisionConfig, T.CLIPVisionModel, **SMALL), "CLIP vision tower, 32x32 patches"),
    "hf_swin": (image(T.SwinConfig, T.SwinModel, embed_dim=48, depths=[2, 2, 2, 2], num_heads=[2, 4, 8, 16]),
                "Swin (shifted windows), width 48"),
    "hf_convnext": (image(T.ConvNextConfig, T.ConvNextModel, hidden_sizes=[48, 96, 192, 384], depths=[1, 1, 2, 1]),
                    "ConvNeXt, small widths"),
    "hf_segformer": (image(T.SegformerConfig, T.SegformerModel), "SegFormer-B0 encoder (efficient attention, Mix-FFN)"),
    "hf_mobilevit": (image(T.MobileViTConfig, T.MobileViTModel, size=256, image_size=256), "MobileViT-S"),
    "hf_mobilenetv2": (image(T.MobileNetV2Config, T.MobileNetV2Model), "MobileNetV2 with TensorFlow SAME padding"),
    "hf_resnet": (image(T.ResNetConfig, T.ResNetModel), "ResNet-50"),
    "hf_levit": (image(T.LevitConfig, T.LevitModel), "LeViT-128S (attention with biases, hardswish)"),
    "hf_poolformer": (image(T.PoolFormerConfig, T.PoolFormerModel), "PoolFormer-S12"),
}


class Exported(torch.nn.Module):
    """The model's first output from one input; a text model's attention mask from its ids."""

    def __init__(self, model, kind, causal):
        super().__init__()
        self.model, self.kind, self.causal = model, kind, causal

    def forward(self, x):
        if self.kind == "text" and not self.causal:
            return self.model(input_ids=x, attention_mask=(x != 0).long(), return_dict=False)[0]
        if self.kind == "text":
            return self.model(input_ids=x, return_dict=False)[0]
        return self.model(pixel_values=x, return_dict=False)[0]


def export(name, out_dir, seed):
    (kind, extra, ctor), description = MODELS[name]
    t0 = time.perf_counter()
    torch.manual_seed(seed)
    model = Exported(ctor().eval(), kind, extra if kind == "text" else False).eval()
    rng = np.random.default_rng(seed)
    if kind == "image":  # BatchNorm statistics measured on activations (make_models.calibrate_batchnorm)
        make_models.calibrate_batchnorm(model, (1, 3, extra, extra))
    if kind == "text":
        ids = rng.integers(5, 1000, (1, SEQ))
        ids[0, SEQ - PAD:] = 0
        x = torch.tensor(ids, dtype=torch.int64)
        input_name = "input_ids"
    else:
        x = torch.tensor(rng.standard_normal((1, 3, extra, extra)), dtype=torch.float32)
        input_name = "pixel_values"
    with torch.no_grad():
        expected = model(x).numpy()
        path = os.path.join(out_dir, f"{name}.onnx")
        tmp = f"{path}.tmp{os.getpid()}"
        torch.onnx.export(model, (x,), tmp, opset_version=OPSET, do_constant_folding=True,
                          input_names=[input_name], output_names=["out"])
    proto, ops, max_abs = make_models.accept_export(name, tmp, path, x.numpy(), expected, out_dir)
    meta = {"name": name, "description": description, "opset": OPSET, "input_name": input_name,
            "output_name": "out", "input_shape": list(x.shape), "output_shape": list(expected.shape),
            "output_max_abs": max_abs, "num_nodes": len(proto.graph.node), "ops": ops,
            "transformers": T.__version__}
    make_models.write_meta(out_dir, name, meta)
    print(f"{name}: exported ({len(proto.graph.node)} nodes, {time.perf_counter() - t0:.1f} s)", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"models (default: all of {', '.join(MODELS)})")
    parser.add_argument("--out", default=DEFAULT_OUT, help="output directory (default: %(default)s)")
    parser.add_argument("--list", action="store_true", help="list the models and exit")
    args = parser.parse_args()
    if args.list:
        for name, (_, description) in MODELS.items():
            print(f"{name:16s} {description}")
        return 0
    unknown = [n for n in args.names if n not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}")
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)  # reproducible reference outputs, as in make_models.py
    failed = []
    for i, name in enumerate(MODELS):
        if args.names and name not in args.names:
            continue
        try:
            export(name, args.out, 300 + i)
        except Exception as e:  # noqa: BLE001 - report and go on with the next model
            failed.append(name)
            print(f"{name}: EXPORT FAILED: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            traceback.print_exc(limit=3, file=sys.stderr)
    if failed:
        print(f"failed to export: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
