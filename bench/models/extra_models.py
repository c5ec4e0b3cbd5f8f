#!/usr/bin/python3
"""Export models kiln's fusion partitioner has not been tuned on, for a sweep against ONNX Runtime.

Usage: /usr/bin/python3 bench/models/extra_models.py [--out DIR] [--list] [--ops] [NAME ...]

Same files and conventions as make_models.py (whose export_model, calibrate_batchnorm and checks
this script reuses by importing it): for each model NAME (all when none are given) it writes into
DIR (default /tmp/kiln_extra) NAME.onnx (opset 13, constant folding on, batch 1, input "input",
output "output"), NAME.input.npy, NAME.output.npy (PyTorch's output) and, last, NAME.json.
Weights are random from a fixed per-model seed; BatchNorm running statistics are measured with
train-mode passes (momentum=None) before eval. Export runs with autograd enabled (never under
torch.no_grad()), so no fused fast path is traced.

A model that fails to export is skipped and reported; the exit status is 1 if any failed.
Use Debian's Python (/usr/bin/python3): it has torch, torchvision and onnx.
"""

import argparse
import math
import os
import sys
import traceback

import torch
import torch.nn as nn
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_models  # noqa: E402  (export_model, calibrate_batchnorm, checks)

DEFAULT_OUT = "/tmp/kiln_extra"


def gelu_tanh(x):
    """HuggingFace's NewGELUActivation (the tanh approximation), spelled out."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class BertSelfAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = d // heads
        self.query = nn.Linear(d, d)
        self.key = nn.Linear(d, d)
        self.value = nn.Linear(d, d)

    def split_heads(self, x):
        b, s, _ = x.shape
        return x.view(b, s, self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, h, mask):
        q = self.split_heads(self.query(h))
        k = self.split_heads(self.key(h))
        v = self.split_heads(self.value(h))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        scores = scores + mask
        probs = torch.softmax(scores, dim=-1)
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        b, s = ctx.shape[0], ctx.shape[1]
        return ctx.view(b, s, self.heads * self.head_dim)


class BertLayer(nn.Module):
    """One HuggingFace-BERT encoder layer (post-norm), dropout omitted (eval)."""

    def __init__(self, d, heads, ff):
        super().__init__()
        self.attention = BertSelfAttention(d, heads)
        self.attn_out = nn.Linear(d, d)
        self.attn_norm = nn.LayerNorm(d, eps=1e-12)
        self.intermediate = nn.Linear(d, ff)
        self.output = nn.Linear(ff, d)
        self.out_norm = nn.LayerNorm(d, eps=1e-12)

    def forward(self, h, mask):
        a = self.attn_norm(self.attn_out(self.attention(h, mask)) + h)
        return self.out_norm(self.output(gelu_tanh(self.intermediate(a))) + a)


class BertEncoder(nn.Module):
    """2 BERT layers, d=256, 4 heads, FFN 1024, seq 64, with an additive attention mask.

    The mask is HuggingFace's extended mask: (1 - attention_mask)[:, None, None, :] * -10000,
    a [1, 1, 1, S] float tensor built from a constant attention_mask whose last 8 positions are
    padding; constant folding turns it into an initializer added to the scores before softmax.
    """

    def __init__(self, d=256, heads=4, ff=1024, layers=2, seq=64, pad=8):
        super().__init__()
        attention_mask = torch.ones(1, seq)
        attention_mask[:, seq - pad:] = 0.0
        self.register_buffer("attention_mask", attention_mask)
        self.layers = nn.ModuleList([BertLayer(d, heads, ff) for _ in range(layers)])

    def forward(self, x):
        mask = (1.0 - self.attention_mask[:, None, None, :]) * -10000.0
        for layer in self.layers:
            x = layer(x, mask)
        return x


class GptBlock(nn.Module):
    """One GPT-2 decoder block (pre-norm): causal self-attention with a fused QKV projection split
    into heads, a tanh-GELU MLP, residuals. Dropout omitted (eval)."""

    def __init__(self, d, heads, seq):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(d)
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.c_fc = nn.Linear(d, 4 * d)
        self.mlp_proj = nn.Linear(4 * d, d)
        self.register_buffer("bias", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
        hd = d // self.heads
        q = q.view(b, s, self.heads, hd).transpose(1, 2)
        k = k.view(b, s, self.heads, hd).transpose(1, 2)
        v = v.view(b, s, self.heads, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(self.bias[:, :, :s, :s] == 0, float("-inf"))
        att = torch.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, s, d)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(gelu_tanh(self.c_fc(self.ln_2(x))))


class Gpt(nn.Module):
    """A small GPT-2 style decoder: 3 blocks, d 384, 6 heads, seq 128, final LayerNorm."""

    def __init__(self, d=384, heads=6, layers=3, seq=128):
        super().__init__()
        self.blocks = nn.ModuleList([GptBlock(d, heads, seq) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)

    def forward(self, x):
        for blk in self.blocks:
            x = blk(x)
        return self.ln_f(x)


def vit_small():
    """A ViT-S/16 shape (d 384, 6 heads, MLP 1536) with 4 layers: the ViT pattern (patch conv,
    class token, position embedding, pre-norm blocks, GELU MLP) at a quarter of the depth."""
    m = tv.VisionTransformer(image_size=224, patch_size=16, num_layers=4, num_heads=6, hidden_dim=384,
                             mlp_dim=1536)
    # torchvision zero-initialises the classifier (fine-tuning practice): give it weights, so the
    # output says something about the network.
    nn.init.normal_(m.heads.head.weight, std=0.02)
    return m


def vit_b_16():
    """torchvision's ViT-B/16 (12 layers, d 768), its classifier given weights as vit_small's."""
    m = tv.vit_b_16(weights=None)
    nn.init.normal_(m.heads.head.weight, std=0.02)
    return m


class RnnEncoder(nn.Module):
    """Recurrent layers as PyTorch exports them: a 2-layer LSTM and a bidirectional GRU
    (linear_before_reset=1, initial states through Expand), then a linear head on the last step."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(32, 48, num_layers=2, batch_first=True)
        self.gru = nn.GRU(48, 40, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(80, 10)

    def forward(self, x):
        h, _ = self.lstm(x)
        g, _ = self.gru(h)
        return self.fc(g[:, -1])


class AudioEncoder(nn.Module):
    """A wav2vec-style front end: strided Conv1d feature extractor with GroupNorm and GELU, then a
    pre-norm transformer layer over the 399 frames of 8000 samples (heads of 24: the shapes whose
    attention kernel once crashed, runtime_regression_test.cc)."""

    def __init__(self):
        super().__init__()
        self.convs = nn.Sequential(nn.Conv1d(1, 64, 10, stride=5), nn.GroupNorm(64, 64), nn.GELU(),
                                   nn.Conv1d(64, 64, 3, stride=2), nn.GELU(), nn.Conv1d(64, 64, 2, stride=2), nn.GELU())
        self.proj = nn.Linear(64, 96)
        self.layer = nn.TransformerEncoderLayer(96, 4, 192, activation="gelu", batch_first=True, norm_first=True)

    def forward(self, x):
        return self.layer(self.proj(self.convs(x).transpose(1, 2)))


class UNetSmall(nn.Module):
    """A small U-Net: InstanceNorm, GroupNorm and BatchNorm, strided and dilated convs, ConvTranspose,
    bilinear Upsample, skip Concats, PixelShuffle, and ELU/Hardswish/LeakyReLU/ReLU6/SiLU."""

    def __init__(self):
        super().__init__()
        c = 16
        self.e1 = nn.Sequential(nn.Conv2d(3, c, 3, padding=1), nn.InstanceNorm2d(c, affine=True), nn.LeakyReLU(0.1))
        self.e2 = nn.Sequential(nn.Conv2d(c, 2 * c, 3, stride=2, padding=1), nn.GroupNorm(4, 2 * c), nn.SiLU())
        self.e3 = nn.Sequential(nn.Conv2d(2 * c, 4 * c, 3, stride=2, padding=1), nn.BatchNorm2d(4 * c), nn.ReLU6())
        self.up1 = nn.ConvTranspose2d(4 * c, 2 * c, 2, stride=2)
        self.d1 = nn.Sequential(nn.Conv2d(4 * c, 2 * c, 3, padding=2, dilation=2), nn.ELU())
        self.up2 = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.d2 = nn.Sequential(nn.Conv2d(3 * c, c, 3, padding=1), nn.Hardswish())
        self.ps = nn.Sequential(nn.Conv2d(c, 12, 1), nn.PixelShuffle(2))

    def forward(self, x):
        a = self.e1(x)
        b = self.e2(a)
        d = self.d1(torch.cat([self.up1(self.e3(b)), b], 1))
        e = self.d2(torch.cat([self.up2(d), a], 1))
        return torch.sigmoid(self.ps(e))


class SegmentationOut(torch.nn.Module):
    """A torchvision segmentation model's "out" map (its forward returns a dict)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        return self.m(x)["out"]


class RaftFlow(torch.nn.Module):
    """RAFT-small on two frames stacked along the channels (one input), the last flow estimate."""

    def __init__(self):
        super().__init__()
        self.m = torchvision.models.optical_flow.raft_small(weights=None)

    def forward(self, x):
        return self.m(x[:, :3], x[:, 3:], num_flow_updates=12)[-1]


IMG = (1, 3, 224, 224)
tv = torchvision.models
seg = torchvision.models.segmentation
# name -> (seed, constructor, input shape, description), as in make_models.MODELS
EXTRA_MODELS = {
    "efficientnet_b0": (200, lambda: tv.efficientnet_b0(weights=None), IMG, "torchvision efficientnet_b0"),
    "mobilenet_v3_small": (201, lambda: tv.mobilenet_v3_small(weights=None), IMG,
                           "torchvision mobilenet_v3_small"),
    "squeezenet1_1": (202, lambda: tv.squeezenet1_1(weights=None), IMG, "torchvision squeezenet1_1"),
    "densenet121": (203, lambda: tv.densenet121(weights=None), IMG, "torchvision densenet121"),
    "vgg11": (204, lambda: tv.vgg11(weights=None), IMG, "torchvision vgg11 (no BN)"),
    "resnet50": (205, lambda: tv.resnet50(weights=None), IMG, "torchvision resnet50"),
    "shufflenet_v2_x1_0": (206, lambda: tv.shufflenet_v2_x1_0(weights=None), IMG,
                           "torchvision shufflenet_v2_x1_0"),
    "googlenet": (207, lambda: tv.googlenet(weights=None, aux_logits=False, init_weights=True), IMG,
                  "torchvision googlenet, aux_logits=False, init_weights=True"),
    "bert": (208, BertEncoder, (1, 64, 256),
             "hand-written HF-BERT encoder: 2 layers, d 256, 4 heads, ff 1024, seq 64, tanh GELU, mask"),
    "vit_s4": (209, vit_small, IMG, "torchvision VisionTransformer: ViT-S/16 widths, 4 layers"),
    "convnext_tiny": (210, lambda: tv.convnext_tiny(weights=None), IMG, "torchvision convnext_tiny"),
    "regnet_y_400mf": (211, lambda: tv.regnet_y_400mf(weights=None), IMG,
                       "torchvision regnet_y_400mf (grouped convs, squeeze-excitation)"),
    "gpt": (212, Gpt, (1, 128, 384), "hand-written GPT-2 decoder: 3 blocks, d 384, 6 heads, causal mask"),
    "swin_t": (213, lambda: tv.swin_t(weights=None), IMG, "torchvision swin_t (shifted windows)"),
    "mnasnet0_5": (214, lambda: tv.mnasnet0_5(weights=None), IMG, "torchvision mnasnet0_5"),
    "rnn_encoder": (215, RnnEncoder, (1, 20, 32), "2-layer LSTM + bidirectional GRU + linear head, 20 steps"),
    "audio_encoder": (216, AudioEncoder, (1, 1, 8000), "Conv1d feature extractor + transformer layer, 399 frames"),
    "unet_small": (217, UNetSmall, (1, 3, 64, 64), "small U-Net: norms, ConvTranspose, Upsample, PixelShuffle"),
    "deeplabv3_mbv3": (218, lambda: SegmentationOut(seg.deeplabv3_mobilenet_v3_large(
        weights=None, weights_backbone=None, aux_loss=False)), IMG,
        "torchvision deeplabv3_mobilenet_v3_large (dilated convs, ASPP, bilinear Resize)"),
    "lraspp_mbv3": (219, lambda: SegmentationOut(seg.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None)),
                    IMG, "torchvision lraspp_mobilenet_v3_large"),
    "maxvit_t": (220, lambda: tv.maxvit_t(weights=None), IMG,
                 "torchvision maxvit_t (MBConv, block and grid attention, relative position bias)"),
    "regnet_x_400mf": (221, lambda: tv.regnet_x_400mf(weights=None), IMG,
                       "torchvision regnet_x_400mf (16-channel groups)"),
    "mobilenet_v3_large": (222, lambda: tv.mobilenet_v3_large(weights=None), IMG, "torchvision mobilenet_v3_large"),
    # Added in the twentieth session's sweep of models kiln had not seen (docs/benchmarks.md).
    "inception_v3": (223, lambda: tv.inception_v3(weights=None, aux_logits=False, init_weights=True), (1, 3, 299, 299),
                     "torchvision inception_v3 (1x7/7x1 convs, 8x8 maps)"),
    "resnext50_32x4d": (224, lambda: tv.resnext50_32x4d(weights=None), IMG, "torchvision resnext50_32x4d (32 groups)"),
    "efficientnet_v2_s": (225, lambda: tv.efficientnet_v2_s(weights=None), IMG,
                          "torchvision efficientnet_v2_s (fused MBConv)"),
    "regnet_y_1_6gf": (226, lambda: tv.regnet_y_1_6gf(weights=None), IMG, "torchvision regnet_y_1_6gf"),
    "shufflenet_v2_x0_5": (227, lambda: tv.shufflenet_v2_x0_5(weights=None), IMG, "torchvision shufflenet_v2_x0_5"),
    "r3d_18": (228, lambda: torchvision.models.video.r3d_18(weights=None), (1, 3, 8, 112, 112),
               "torchvision video r3d_18 (3x3x3 convs), 8 frames of 112x112"),
    "r3d_18_small": (229, lambda: torchvision.models.video.r3d_18(weights=None), (1, 3, 4, 56, 56),
                     "torchvision video r3d_18, 4 frames of 56x56 (the test's size)"),
    "r2plus1d_18": (230, lambda: torchvision.models.video.r2plus1d_18(weights=None), (1, 3, 8, 112, 112),
                    "torchvision video r2plus1d_18 (factorised (1,3,3) and (3,1,1) convs)"),
    "mc3_18": (231, lambda: torchvision.models.video.mc3_18(weights=None), (1, 3, 8, 112, 112),
               "torchvision video mc3_18 (3-D stem, 2-D layers)"),
    "fcn_resnet50": (232, lambda: SegmentationOut(seg.fcn_resnet50(weights=None, weights_backbone=None, aux_loss=False)), IMG,
                     "torchvision fcn_resnet50 (dilated ResNet-50, bilinear upsampling)"),
    "vit_b_16": (233, vit_b_16, IMG, "torchvision vit_b_16 (12 layers, d 768)"),
    # Added in the twenty-first session: a video model with separable 3-D convs and 3-D pools.
    # (torchvision's mvit_v2_s needs 16 frames of 224x224 and ran out of this machine's 24 GiB in
    # PyTorch before its export; swin_v2_t uses aten::zero, which PyTorch 1.13 cannot export.)
    "s3d": (234, lambda: torchvision.models.video.s3d(weights=None), (1, 3, 16, 224, 224),
            "torchvision video s3d (separable (1,3,3)+(3,1,1) convs, 3-D max pools), 16 frames of 224x224"),
    "raft_small": (236, RaftFlow, (1, 6, 128, 128),
                   "torchvision optical_flow raft_small (GridSample, correlation pyramid, 12 unrolled updates)"),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"models (default: all of {', '.join(EXTRA_MODELS)})")
    parser.add_argument("--out", default=DEFAULT_OUT, help="output directory (default: %(default)s)")
    parser.add_argument("--list", action="store_true", help="list the models and exit")
    parser.add_argument("--ops", action="store_true", help="print each model's op histogram")
    args = parser.parse_args()

    if args.list:
        for name, (_, _, shape, description) in EXTRA_MODELS.items():
            print(f"{name:19s} {'x'.join(map(str, shape)):12s} {description}")
        return 0
    unknown = [n for n in args.names if n not in EXTRA_MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(EXTRA_MODELS)}")

    # export_model looks models up in make_models.MODELS.
    clash = set(EXTRA_MODELS) & set(make_models.MODELS)
    assert not clash, f"names already used by make_models.py: {clash}"
    make_models.MODELS.update(EXTRA_MODELS)
    make_models.MODEL_OPSET.update({"raft_small": 16})

    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)  # bit-reproducible reference outputs, as in make_models.py
    failed = []
    for name in args.names or list(EXTRA_MODELS):
        try:
            meta = make_models.export_model(name, args.out)
        except Exception as e:  # noqa: BLE001 - report and go on with the next model
            failed.append(name)
            print(f"{name}: EXPORT FAILED: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            traceback.print_exc(limit=3, file=sys.stderr)
            continue
        if args.ops:
            print("  " + ", ".join(f"{op} {n}" for op, n in meta["ops"].items()), flush=True)
    if failed:
        print(f"failed to export: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
