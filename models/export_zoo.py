"""Export the model zoo: real architectures as graph-only ONNX files plus ``manifest.json``.

Needs the optional extra (``pip install -e .[models]``: torch, transformers, onnxscript); the
package and its tests never import this script, they read the committed ``.onnx`` files.

Every model is built from its configuration with random weights (``HF_HUB_OFFLINE=1``: nothing
is downloaded) and exported with torch's dynamo exporter. Weights are then *stripped*: each
initializer keeps its name, dtype and dims but its data points at an external file that is not
committed (``<model>.weights``), so a 7B-parameter graph is a few hundred kB and the importer
is exercised on exactly the case users hit when they bring a graph without its weights. Small
integer initializers (shape constants) stay inline, since shape inference needs their values.

Multi-billion-parameter shapes are built on the ``meta`` device: parameters have dims but no
storage, so nothing is materialised; the exporter traces with fake tensors all the same.

The manifest records, per model: architecture, the config fields that differ from the class
defaults, input shapes, the parameter count torch reports (unique tensors, so tied weights once),
the matmul/conv GFLOPs of one forward pass counted by ``torch.utils.flop_counter`` (an
independent reference for the importer's count), the ONNX node count, and the export time.

Usage: ``python models/export_zoo.py [NAME ...]`` (default: all models, one at a time).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import onnx
import torch
from torch import nn

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "manifest.json"
_KEEP_INLINE_BYTES = 4096  # integer initializers up to this size stay inline (shape constants)
_INTEGER_TYPES = {
    onnx.TensorProto.INT64,
    onnx.TensorProto.INT32,
    onnx.TensorProto.INT16,
    onnx.TensorProto.INT8,
    onnx.TensorProto.UINT8,
    onnx.TensorProto.BOOL,
}


@dataclass
class Spec:
    """One zoo entry: the module to export, example inputs, and what to record about it."""

    architecture: str
    module: nn.Module
    inputs: dict[str, torch.Tensor]
    config: dict = field(default_factory=dict)
    reference_parameters: float | None = None  # a published count, for the tests
    meta: bool = False  # built on the meta device: no weights materialised
    dynamic: dict[str, dict[int, str]] = field(default_factory=dict)  # input → axis → dim name
    legacy: bool = False  # torch's TorchScript exporter: ``/``-path node names, shape subgraphs
    fuse: dict = field(default_factory=dict)  # onnxruntime transformer-optimizer arguments


class _Outputs(nn.Module):
    """Wraps an HF model so that forward returns plain tensors (what the exporter needs)."""

    def __init__(self, model: nn.Module, pick: Callable[[object], object]) -> None:
        super().__init__()
        self.model = model
        self._pick = pick

    def forward(self, *args: torch.Tensor):
        names = self._input_names
        return self._pick(self.model(**dict(zip(names, args, strict=True))))


def _wrap(model: nn.Module, inputs: dict[str, torch.Tensor], pick: Callable[[object], object]) -> nn.Module:
    # eager attention: explicit matmuls, which torch's FLOP counter sees (it misses fused SDPA)
    model.set_attn_implementation("eager")
    wrapper = _Outputs(model.eval(), pick)
    wrapper._input_names = list(inputs)
    return wrapper.eval()


def _diff(config) -> dict:
    """The config fields that differ from the class defaults, without the label tables."""
    fields = config.to_diff_dict()
    for key in ("id2label", "label2id"):
        fields.pop(key, None)
    return json.loads(json.dumps(fields, default=str))


def _ids(batch: int, seq: int, vocab: int, device: str = "cpu") -> torch.Tensor:
    if device == "meta":
        return torch.empty((batch, seq), dtype=torch.long, device="meta")
    return torch.randint(0, vocab, (batch, seq), dtype=torch.long)


def gpt2() -> Spec:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(use_cache=False)
    inputs = {"input_ids": _ids(1, 128, config.vocab_size)}
    model = GPT2LMHeadModel(config)
    return Spec("GPT2LMHeadModel", _wrap(model, inputs, lambda o: o.logits), inputs, _diff(config), 124.44e6)


def gpt2_dynamic() -> Spec:
    """GPT-2 with symbolic batch and sequence dims: the importer needs ``--dim batch=… seq=…``."""
    spec = gpt2()
    spec.inputs = {"input_ids": _ids(2, 128, 50257)}  # torch.export specializes dims of size 1
    spec.dynamic = {"input_ids": {0: "batch", 1: "seq"}}
    return spec


def bert_base() -> Spec:
    from transformers import BertConfig, BertModel

    config = BertConfig()
    inputs = {
        "input_ids": _ids(1, 128, config.vocab_size),
        "attention_mask": torch.ones(1, 128, dtype=torch.long),
    }
    model = BertModel(config)
    pick = lambda o: (o.last_hidden_state, o.pooler_output)  # noqa: E731
    return Spec("BertModel", _wrap(model, inputs, pick), inputs, _diff(config), 109.48e6)


def bert_legacy() -> Spec:
    """BERT-base through the TorchScript exporter with symbolic dims, as older exports come."""
    spec = bert_base()
    spec.legacy = True
    spec.dynamic = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
    return spec


def bert_ort_fused() -> Spec:
    """BERT-base as onnxruntime's transformer optimizer leaves it: com.microsoft fused ops."""
    spec = bert_base()
    spec.legacy = True
    spec.fuse = {"model_type": "bert", "num_heads": 12, "hidden_size": 768}
    return spec


def vit_b16() -> Spec:
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(num_labels=1000)
    inputs = {"pixel_values": torch.randn(1, 3, 224, 224)}
    model = ViTForImageClassification(config)
    return Spec(
        "ViTForImageClassification", _wrap(model, inputs, lambda o: o.logits), inputs, _diff(config), 86.57e6
    )


def resnet50() -> Spec:
    from transformers import ResNetConfig, ResNetForImageClassification

    config = ResNetConfig(num_labels=1000)
    inputs = {"pixel_values": torch.randn(1, 3, 224, 224)}
    model = ResNetForImageClassification(config)
    return Spec(
        "ResNetForImageClassification",
        _wrap(model, inputs, lambda o: o.logits),
        inputs,
        _diff(config),
        25.56e6,
    )


def t5_small() -> Spec:
    from transformers import T5Config, T5ForConditionalGeneration

    config = T5Config(
        d_model=512, d_ff=2048, d_kv=64, num_layers=6, num_heads=8, vocab_size=32128, use_cache=False
    )
    inputs = {
        "input_ids": _ids(1, 128, config.vocab_size),
        "decoder_input_ids": _ids(1, 128, config.vocab_size),
    }
    model = T5ForConditionalGeneration(config)
    return Spec(
        "T5ForConditionalGeneration", _wrap(model, inputs, lambda o: o.logits), inputs, _diff(config), 60.51e6
    )


def clip_b32() -> Spec:
    from transformers import CLIPConfig, CLIPModel

    config = CLIPConfig()
    inputs = {
        "input_ids": _ids(1, 77, config.text_config.vocab_size),
        "pixel_values": torch.randn(1, 3, 224, 224),
        "attention_mask": torch.ones(1, 77, dtype=torch.long),
    }
    model = CLIPModel(config)
    pick = lambda o: (o.logits_per_image, o.text_embeds, o.image_embeds)  # noqa: E731
    return Spec("CLIPModel", _wrap(model, inputs, pick), inputs, _diff(config), 151.28e6)


def llama_7b() -> Spec:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=4096,
        intermediate_size=11008,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=32,
        vocab_size=32000,
        use_cache=False,
    )
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    inputs = {"input_ids": _ids(1, 128, config.vocab_size, "meta")}
    return Spec(
        "LlamaForCausalLM",
        _wrap(model, inputs, lambda o: o.logits),
        inputs,
        _diff(config),
        6.738e9,
        meta=True,
    )


def _capacity_experts(
    self: nn.Module, hidden: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
) -> torch.Tensor:
    """Mixtral's experts with GShard-style capacity dispatch: static shapes, top-k compute.

    transformers' own implementations either loop over experts with data-dependent shapes (the
    exported graph has dims no one can pin) or gather a weight copy per token (GBs of activations).
    Each expert takes at most C = k·S/E tokens (capacity factor 1; overflow is dropped, as in
    GShard); dispatch and combine are one-hot einsums, and the expert FFNs are batched einsums
    over (expert, slot), so the graph's FLOPs are the routed top-k FLOPs.
    """
    tokens, _ = hidden.shape
    experts, top_k = self.num_experts, top_k_index.shape[-1]
    capacity = max(1, top_k * tokens // experts)
    choice = nn.functional.one_hot(top_k_index, experts).to(hidden.dtype)  # (S, k, E)
    flat = choice.reshape(tokens * top_k, experts)  # token-major, so earlier tokens win slots
    slot = (torch.cumsum(flat, dim=0) - 1.0) * flat  # (S·k, E): position within each expert
    kept = flat * (slot < capacity).to(hidden.dtype)
    slot = slot.clamp(max=capacity - 1).long()  # overflow positions are masked out by `kept`
    slots = nn.functional.one_hot(slot, capacity).to(hidden.dtype) * kept.unsqueeze(-1)
    dispatch = slots.reshape(tokens, top_k, experts, capacity).sum(dim=1)  # (S, E, C)
    combine = (slots.reshape(tokens, top_k, experts, capacity) * top_k_weights[..., None, None]).sum(dim=1)
    expert_in = torch.einsum("sec,sh->ech", dispatch, hidden)
    gate, up = torch.einsum("ech,eoh->eco", expert_in, self.gate_up_proj).chunk(2, dim=-1)
    expert_out = torch.einsum("eci,ehi->ech", self.act_fn(gate) * up, self.down_proj)
    return torch.einsum("sec,ech->sh", combine, expert_out)


def mixtral_moe() -> Spec:
    from transformers import MixtralConfig, MixtralForCausalLM

    config = MixtralConfig(
        hidden_size=1024,
        intermediate_size=3584,
        num_hidden_layers=4,
        num_attention_heads=16,
        num_key_value_heads=4,
        num_local_experts=8,
        num_experts_per_tok=2,
        vocab_size=32000,
        use_cache=False,
    )
    inputs = {"input_ids": _ids(1, 128, config.vocab_size)}
    model = MixtralForCausalLM(config)
    for layer in model.model.layers:
        layer.mlp.experts.forward = types.MethodType(_capacity_experts, layer.mlp.experts)
    return Spec("MixtralForCausalLM", _wrap(model, inputs, lambda o: o.logits), inputs, _diff(config))


class _DoubleConv(nn.Module):
    """(3×3 conv → batch norm → ReLU) twice; named children, so module paths read as layers."""

    def __init__(self, cin: int, cout: int, pool: bool = False) -> None:
        super().__init__()
        self.pool = nn.MaxPool2d(2) if pool else nn.Identity()
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1, bias=False)
        self.norm1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.norm2 = nn.BatchNorm2d(cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.norm1(self.conv1(self.pool(x))))
        return torch.relu(self.norm2(self.conv2(x)))


class _Up(nn.Module):
    """Upsample (transposed conv, or bilinear resize + 1×1 conv), pad to the skip, concat, convolve."""

    def __init__(self, cin: int, cout: int, bilinear: bool) -> None:
        super().__init__()
        self.bilinear = bilinear
        self.up = nn.Conv2d(cin, cin // 2, 1) if bilinear else nn.ConvTranspose2d(cin, cin // 2, 2, stride=2)
        self.conv = _DoubleConv(cin, cout)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        if self.bilinear:
            x = nn.functional.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
        x = self.up(x)
        dy, dx = skip.shape[2] - x.shape[2], skip.shape[3] - x.shape[3]
        x = nn.functional.pad(x, [dx // 2, dx - dx // 2, dy // 2, dy - dy // 2])
        return self.conv(torch.cat([skip, x], dim=1))


class UNet(nn.Module):
    """The U-Net of Ronneberger et al. (2015) with batch norm: 4 levels down, 4 up, skip concats.

    The deepest up-step resizes bilinearly (ONNX ``Resize``); the others use transposed
    convolutions, so both decoder styles appear in one graph.
    """

    def __init__(self, channels: int = 3, classes: int = 2, width: int = 64) -> None:
        super().__init__()
        w = [width * 2**i for i in range(5)]
        self.encoder = nn.ModuleList(
            [_DoubleConv(channels, w[0]), *(_DoubleConv(w[i], w[i + 1], pool=True) for i in range(4))]
        )
        self.decoder = nn.ModuleList(_Up(w[4 - i], w[3 - i], bilinear=i == 0) for i in range(4))
        self.head = nn.Conv2d(w[0], classes, 1)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        skips = []
        x = image
        for level in self.encoder:
            x = level(x)
            skips.append(x)
        skips.pop()
        for up in self.decoder:
            x = up(x, skips.pop())
        return self.head(x)


def unet() -> Spec:
    model = UNet().eval()
    inputs = {"image": torch.randn(1, 3, 256, 256)}
    return Spec("UNet", model, inputs, {"channels": 3, "classes": 2, "width": 64, "levels": 4})


ZOO: dict[str, Callable[[], Spec]] = {
    "resnet50": resnet50,
    "vit_b16": vit_b16,
    "bert_base": bert_base,
    "bert_legacy": bert_legacy,
    "bert_ort_fused": bert_ort_fused,
    "gpt2": gpt2,
    "gpt2_dynamic": gpt2_dynamic,
    "unet": unet,
    "t5_small": t5_small,
    "clip_b32": clip_b32,
    "mixtral_moe": mixtral_moe,
    "llama_7b": llama_7b,
}


def _matmul_gflops(spec: Spec) -> float:
    """GFLOPs of matmuls and convolutions in one forward pass, counted by torch (not by us).

    Meta-device models run under a fake-tensor mode: shapes propagate, nothing is computed, and
    library code that would read a value (``.item()``) sees a tracer and takes the traced path.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    if spec.meta:
        with FakeTensorMode(allow_non_fake_inputs=True) as mode, torch.no_grad(), counter:
            spec.module(*(mode.from_tensor(t) for t in spec.inputs.values()))
    else:
        with torch.no_grad(), counter:
            spec.module(*spec.inputs.values())
    return counter.get_total_flops() / 1e9


def _strip(model: onnx.ModelProto, weights_file: str) -> onnx.ModelProto:
    """Keep every initializer's name, dtype and dims; point float data at an absent file."""
    offset = 0
    for tensor in model.graph.initializer:
        inline = tensor.data_location != onnx.TensorProto.EXTERNAL and (
            tensor.data_type in _INTEGER_TYPES and len(tensor.SerializeToString()) <= _KEEP_INLINE_BYTES
        )
        if inline:
            continue
        size = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
        length = size
        for dim in tensor.dims:
            length *= dim
        stripped = onnx.TensorProto(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims)
        stripped.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (("location", weights_file), ("offset", str(offset)), ("length", str(length))):
            entry = stripped.external_data.add()
            entry.key, entry.value = key, value
        offset += length
        tensor.CopyFrom(stripped)
    for node in model.graph.node:  # keep the module path; the rest (fx nodes, traces) is bulk
        keep = [p for p in node.metadata_props if p.key == "pkg.torch.onnx.name_scopes"]
        del node.metadata_props[:]
        node.metadata_props.extend(keep)
        node.doc_string = ""
    return model


def _dynamic_shapes(spec: Spec) -> tuple | None:
    """``Spec.dynamic`` as torch.export wants it for ``forward(*args)``: one entry per input."""
    if not spec.dynamic:
        return None
    dims = {n: torch.export.Dim(n, max=1024) for axes in spec.dynamic.values() for n in axes.values()}
    return (tuple({a: dims[n] for a, n in spec.dynamic.get(k, {}).items()} or None for k in spec.inputs),)


def _export(spec: Spec, name: str) -> onnx.ModelProto:
    args = tuple(spec.inputs.values())
    with tempfile.TemporaryDirectory() as tmp:
        if spec.legacy:
            path = Path(tmp) / f"{name}.onnx"
            torch.onnx.export(
                spec.module,
                args,
                str(path),
                input_names=list(spec.inputs),
                dynamic_axes=spec.dynamic or None,
                opset_version=17,
                dynamo=False,
            )
            if spec.fuse:  # fusion reads weight values (it concatenates Q, K, V): before stripping
                from onnxruntime.transformers.optimizer import optimize_model

                fused = optimize_model(str(path), **spec.fuse, opt_level=0, use_gpu=False)
                return fused.model
            return onnx.load(str(path), load_external_data=False)
        program = torch.onnx.export(
            spec.module,
            args,
            input_names=list(spec.inputs),
            dynamic_shapes=_dynamic_shapes(spec),
            dynamo=True,
            external_data=True,
            optimize=not spec.meta,  # the optimizer's constant folding reads weight values
        )
        if spec.meta:  # serialize directly: saving would try to read the (absent) weights
            import onnx_ir as ir

            _drop_meta_data(program, f"{name}.weights")
            return ir.serde.serialize_model(program.model)
        path = Path(tmp) / f"{name}.onnx"
        program.save(str(path), external_data=True)
        return onnx.load(str(path), load_external_data=False)


def _drop_meta_data(program, weights_file: str) -> None:
    """Replace meta-device initializer values (dims, no storage) by references to an absent file."""
    import onnx_ir as ir

    offset = 0
    for value in program.model.graph.initializers.values():
        tensor = value.const_value
        if tensor is None:
            continue
        length = tensor.nbytes
        value.const_value = ir.ExternalTensor(
            weights_file, offset, length, tensor.dtype, shape=tensor.shape, name=value.name, base_dir=""
        )
        offset += length


def export_one(name: str) -> dict:
    start = time.perf_counter()
    torch.manual_seed(0)
    spec = ZOO[name]()
    if not spec.meta:  # no two weights alike: the exporter's optimizer merges equal initializers
        with torch.no_grad():
            for parameter in spec.module.parameters():
                parameter.normal_(0.0, 0.02)
    parameters = sum(p.numel() for p in spec.module.parameters())
    parameter_bytes = sum(p.numel() * p.element_size() for p in spec.module.parameters())
    gflops = _matmul_gflops(spec)
    model = _strip(_export(spec, name), f"{name}.weights")
    out = HERE / f"{name}.onnx"
    if spec.dynamic and not all(d.dim_param for v in model.graph.input for d in v.type.tensor_type.shape.dim):
        raise SystemExit(f"{name}: the export did not keep the symbolic input dims")
    onnx.save(model, str(out))
    elapsed = time.perf_counter() - start
    entry = {
        "file": out.name,
        "architecture": spec.architecture,
        "config": spec.config,
        "inputs": {k: list(v.shape) for k, v in spec.inputs.items()},
        "dims": {n: spec.inputs[k].shape[a] for k, axes in spec.dynamic.items() for a, n in axes.items()},
        "parameters": parameters,
        "parameter_bytes": parameter_bytes,
        "reference_parameters": spec.reference_parameters,
        "torch_matmul_gflops": round(gflops, 6),
        "onnx_nodes": len(model.graph.node),
        "opset": next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
        "file_bytes": out.stat().st_size,
        "export_seconds": round(elapsed, 1),
        "torch": torch.__version__,
    }
    print(
        f"{name}: {parameters / 1e6:.2f} M params, {gflops:.2f} GFLOPs (matmul/conv), "
        f"{entry['onnx_nodes']} nodes, {entry['file_bytes'] / 1e6:.2f} MB, {elapsed:.1f} s",
        file=sys.stderr,
        flush=True,
    )
    return entry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"models to export (default: all of {', '.join(ZOO)})")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in ZOO]
    if unknown:
        parser.error(f"unknown model(s): {', '.join(unknown)}")
    manifest = json.loads(MANIFEST.read_text()) if MANIFEST.exists() else {}
    for name in args.names or list(ZOO):
        manifest[name] = export_one(name)
        MANIFEST.write_text(json.dumps(dict(sorted(manifest.items())), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
