"""Synthetic op graphs and clusters at the scale of today's largest models.

Real exports of 7B-to-671B-parameter models are hours of work and gigabytes of disk; their
*structure* is simple and public. These generators build op-level graphs with the same op
pattern, tensor sizes, weights and FLOPs as the real models (bf16), so the roofline model
gives them realistic per-device times:

- :func:`decoder_graph` — a Llama-style decoder (RMSNorm, q/k/v/o projections, RoPE,
  fused attention, SwiGLU MLP, residual adds): 16 ops per layer plus
  embedding, final norm and LM head. ``decoder_graph(32, 4096, 11008, …)`` is 7B-class.
- :func:`moe_graph` — a DeepSeek-V3-like mixture of experts: attention as above, then a router,
  top-k, and per expert a gather, SwiGLU MLP and routing-weight scale (7 ops), a shared
  expert, and a combine. 256 experts × 61 layers is about 111k ops.
- :func:`layered_dag` — random layered DAGs of a chosen width and depth.

Every graph has exactly one source op (the embedding or the first layer's join), so every
stage but the first receives at least one tensor — a fact the aggregate bound of
:mod:`partition.aggregate_bound` can use. Module paths (``layers.3.mlp``, ``layers.3.experts.17``)
name the repeated blocks for :mod:`partition.coarsen`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .cluster import Cluster, parse_cluster
from .errors import InputError
from .graph import Op, OpClass, OpGraph, Tensor

_BF16 = 2  # bytes per element


@dataclass
class _Builder:
    """Accumulates ops and tensors; each op writes one tensor named after it."""

    name: str
    ops: list[Op] = field(default_factory=list)
    sizes: dict[str, float] = field(default_factory=dict)
    producers: dict[str, str | None] = field(default_factory=dict)
    consumers: dict[str, list[str]] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)

    def graph_input(self, name: str, size: float) -> str:
        self.sizes[name], self.producers[name], self.consumers[name] = size, None, []
        return name

    def op(
        self,
        op_id: str,
        op_type: str,
        op_class: OpClass,
        inputs: Sequence[str],
        out_bytes: float,
        *,
        flops: float = 0.0,
        weight_bytes: float = 0.0,
        read_bytes: float | None = None,
        module: str = "",
    ) -> str:
        """Add an op; it reads its inputs whole unless ``read_bytes`` says less (a gather)."""
        weights: tuple[str, ...] = ()
        if weight_bytes > 0:
            self.weights[f"{op_id}.weight"] = weight_bytes
            weights = (f"{op_id}.weight",)
        for tensor in inputs:
            self.consumers[tensor].append(op_id)
        out = f"{op_id}:0"
        self.sizes[out], self.producers[out], self.consumers[out] = out_bytes, op_id, []
        self.ops.append(
            Op(
                id=op_id,
                op_type=op_type,
                name=op_id,
                module=module,
                op_class=op_class,
                flops=flops,
                bytes_read=(sum(self.sizes[t] for t in inputs) if read_bytes is None else read_bytes)
                + weight_bytes,
                bytes_written=out_bytes,
                dtype="bf16",
                inputs=tuple(inputs),
                outputs=(out,),
                weights=weights,
            )
        )
        return out

    def matmul(self, op_id: str, x: str, tokens: int, d_in: int, d_out: int, module: str) -> str:
        return self.op(
            op_id,
            "MatMul",
            OpClass.MATMUL,
            [x],
            tokens * d_out * _BF16,
            flops=2.0 * tokens * d_in * d_out,
            weight_bytes=d_in * d_out * _BF16,
            module=module,
        )

    def elementwise(self, op_id: str, op_type: str, inputs: Sequence[str], elements: int, module: str) -> str:
        return self.op(
            op_id,
            op_type,
            OpClass.ELEMENTWISE,
            inputs,
            elements * _BF16,
            flops=float(elements * len(inputs)),
            module=module,
        )

    def norm(self, op_id: str, x: str, tokens: int, hidden: int, module: str) -> str:
        return self.op(
            op_id,
            "RMSNormalization",
            OpClass.REDUCTION,
            [x],
            tokens * hidden * _BF16,
            flops=4.0 * tokens * hidden,
            weight_bytes=hidden * _BF16,
            module=module,
        )

    def build(self) -> OpGraph:
        tensors = tuple(
            Tensor(name, self.sizes[name], self.producers[name], tuple(self.consumers[name]))
            for name in self.sizes
        )
        return OpGraph(self.name, tuple(self.ops), tensors, dict(self.weights))


def _attention(b: _Builder, x: str, layer: int, batch: int, seq: int, hidden: int) -> str:
    """Pre-norm self-attention with RoPE and its residual add; returns the block's output."""
    tokens, p, m = batch * seq, f"l{layer}.attn", f"layers.{layer}.attn"
    h = b.norm(f"{p}.norm", x, tokens, hidden, m)
    q = b.matmul(f"{p}.q", h, tokens, hidden, hidden, m)
    k = b.matmul(f"{p}.k", h, tokens, hidden, hidden, m)
    v = b.matmul(f"{p}.v", h, tokens, hidden, hidden, m)
    q = b.elementwise(f"{p}.rope_q", "RotaryEmbedding", [q], tokens * hidden, m)
    k = b.elementwise(f"{p}.rope_k", "RotaryEmbedding", [k], tokens * hidden, m)
    # fused (FlashAttention-style) scaled dot-product attention: scores never leave the kernel
    context = b.op(
        f"{p}.sdpa",
        "Attention",
        OpClass.MATMUL,
        [q, k, v],
        tokens * hidden * _BF16,
        flops=4.0 * batch * seq * seq * hidden,
        module=m,
    )
    out = b.matmul(f"{p}.o", context, tokens, hidden, hidden, m)
    return b.elementwise(f"{p}.residual", "Add", [x, out], tokens * hidden, m)


def _swiglu(b: _Builder, x: str, prefix: str, module: str, tokens: int, hidden: int, inner: int) -> str:
    gate = b.matmul(f"{prefix}.gate", x, tokens, hidden, inner, module)
    up = b.matmul(f"{prefix}.up", x, tokens, hidden, inner, module)
    act = b.elementwise(f"{prefix}.silu", "Silu", [gate], tokens * inner, module)
    both = b.elementwise(f"{prefix}.mul", "Mul", [act, up], tokens * inner, module)
    return b.matmul(f"{prefix}.down", both, tokens, inner, hidden, module)


def _check(**values: int) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"{name} must be a whole number ≥ 1, got {value!r}")


def _embedding(b: _Builder, tokens: int, hidden: int, vocab: int) -> str:
    ids = b.graph_input("input_ids", tokens * 8)
    return b.op(
        "embed",
        "Gather",
        OpClass.DATA_MOVEMENT,
        [ids],
        tokens * hidden * _BF16,
        weight_bytes=vocab * hidden * _BF16,
        module="embed",
    )


def _head(b: _Builder, x: str, tokens: int, hidden: int, vocab: int) -> None:
    h = b.norm("final_norm", x, tokens, hidden, "head")
    b.matmul("lm_head", h, tokens, hidden, vocab, "head")


def decoder_graph(
    layers: int = 32,
    hidden: int = 4096,
    intermediate: int = 11008,
    *,
    vocab: int = 32000,
    batch: int = 1,
    seq: int = 4096,
) -> OpGraph:
    """A Llama-style decoder; the defaults are Llama-2-7B at one 4096-token sequence."""
    _check(
        layers=layers,
        hidden=hidden,
        intermediate=intermediate,
        vocab=vocab,
        batch=batch,
        seq=seq,
    )
    tokens = batch * seq
    b = _Builder(f"decoder-{layers}x{hidden}")
    x = _embedding(b, tokens, hidden, vocab)
    for layer in range(layers):
        x = _attention(b, x, layer, batch, seq, hidden)
        m = f"layers.{layer}.mlp"
        h = b.norm(f"l{layer}.mlp.norm", x, tokens, hidden, m)
        out = _swiglu(b, h, f"l{layer}.mlp", m, tokens, hidden, intermediate)
        x = b.elementwise(f"l{layer}.mlp.residual", "Add", [x, out], tokens * hidden, m)
    _head(b, x, tokens, hidden, vocab)
    return b.build()


def moe_graph(
    layers: int = 61,
    experts: int = 256,
    *,
    hidden: int = 7168,
    expert_intermediate: int = 2048,
    top_k: int = 8,
    shared_experts: int = 1,
    vocab: int = 129280,
    batch: int = 1,
    seq: int = 4096,
) -> OpGraph:
    """A DeepSeek-V3-like MoE decoder: every layer routes each token to ``top_k`` of ``experts``.

    Routing is taken as perfectly balanced (each expert sees ``tokens · top_k / experts``
    tokens), the usual planning assumption; attention is modelled as standard multi-head
    attention of the same width (MLA's compression changes FLOPs by a few percent).
    """
    _check(
        layers=layers, experts=experts, hidden=hidden, expert_intermediate=expert_intermediate, top_k=top_k
    )
    _check(vocab=vocab, batch=batch, seq=seq)
    if top_k > experts:
        raise InputError(f"top_k ({top_k}) cannot exceed the number of experts ({experts})")
    tokens = batch * seq
    routed = max(1, tokens * top_k // experts)
    b = _Builder(f"moe-{layers}x{experts}")
    x = _embedding(b, tokens, hidden, vocab)
    for layer in range(layers):
        x = _attention(b, x, layer, batch, seq, hidden)
        p, m = f"l{layer}.moe", f"layers.{layer}.moe"
        h = b.norm(f"{p}.norm", x, tokens, hidden, m)
        logits = b.matmul(f"{p}.router", h, tokens, hidden, experts, m)
        routes = b.op(
            f"{p}.topk",
            "TopK",
            OpClass.OTHER,
            [logits],
            tokens * top_k * 12,
            flops=tokens * experts,
            module=m,
        )
        outputs = []
        for e in range(experts):
            pe, me = f"{p}.e{e}", f"{m}.experts.{e}"
            picked = b.op(
                f"{pe}.gather",
                "Gather",
                OpClass.DATA_MOVEMENT,
                [h, routes],
                routed * hidden * _BF16,
                read_bytes=routed * (hidden * _BF16 + 12),
                module=me,
            )
            out = _swiglu(b, picked, pe, me, routed, hidden, expert_intermediate)
            outputs.append(
                b.op(
                    f"{pe}.scale",
                    "Mul",
                    OpClass.ELEMENTWISE,
                    [out, routes],
                    routed * hidden * _BF16,
                    flops=float(routed * hidden),
                    read_bytes=routed * (hidden * _BF16 + 12),
                    module=me,
                )
            )
        for s in range(shared_experts):
            ps = f"{p}.shared{s}"
            outputs.append(_swiglu(b, h, ps, f"{m}.shared.{s}", tokens, hidden, expert_intermediate))
        combined = b.op(
            f"{p}.combine",
            "ScatterElements",
            OpClass.DATA_MOVEMENT,
            outputs,
            tokens * hidden * _BF16,
            flops=float(tokens * hidden * (top_k + shared_experts)),
            module=m,
        )
        x = b.elementwise(f"{p}.residual", "Add", [x, combined], tokens * hidden, m)
    _head(b, x, tokens, hidden, vocab)
    return b.build()


def layered_dag(
    depth: int,
    width: int,
    *,
    seed: int = 0,
    fan_in: int = 3,
    hidden: int = 4096,
    tokens: int = 2048,
) -> OpGraph:
    """``depth`` layers of ``width`` ops, each reading 1..``fan_in`` ops of the layer before.

    Ops are matmuls of random width (so times vary over two orders of magnitude) behind one
    source op; a final op joins the last layer. ``depth · width + 2`` ops in all.
    """
    _check(depth=depth, width=width, fan_in=fan_in, hidden=hidden, tokens=tokens)
    rng = np.random.default_rng(seed)
    b = _Builder(f"layered-{depth}x{width}-s{seed}")
    source = b.op(
        "source",
        "Gather",
        OpClass.DATA_MOVEMENT,
        [b.graph_input("input", tokens * 8)],
        tokens * hidden * _BF16,
    )
    previous = [source]
    for layer in range(depth):
        current = []
        for i in range(width):
            picks = rng.choice(
                len(previous), size=min(len(previous), int(rng.integers(1, fan_in + 1))), replace=False
            )
            d_out = int(hidden * rng.choice([0.25, 0.5, 1, 2, 4]))
            current.append(
                b.matmul(f"n{layer}_{i}", previous[int(picks[0])], tokens, hidden, d_out, f"layers.{layer}")
                if len(picks) == 1
                else b.op(
                    f"n{layer}_{i}",
                    "MatMul",
                    OpClass.MATMUL,
                    [previous[int(p)] for p in picks],
                    tokens * d_out * _BF16,
                    flops=2.0 * tokens * hidden * d_out,
                    weight_bytes=hidden * d_out * _BF16,
                    module=f"layers.{layer}",
                )
            )
        previous = current
    b.elementwise("sink", "Sum", previous, tokens * hidden, "head")
    return b.build()


def cluster_of(
    hosts: Sequence[tuple[str, int, str]], *, inter_host_link: str = "ib-ndr", name: str = ""
) -> Cluster:
    """A cluster of hosts given as ``(device type, count, intra-host link)`` triples."""
    document = {
        "name": name or "+".join(f"{count}x{kind}" for kind, count, _ in hosts),
        "hosts": [
            {"name": f"host{h}", "devices": {kind: count}, "intra_link": link}
            for h, (kind, count, link) in enumerate(hosts)
        ],
        "inter_host_link": inter_host_link,
    }
    return parse_cluster(document, where="synthetic cluster")


def hetero_cluster(hosts: int = 8, per_host: int = 8) -> Cluster:
    """``hosts`` hosts of ``per_host`` devices cycling through three device types.

    Host ``h`` holds MI300X (xGMI), H100 SXM (NVLink 4) or A100 80 GB (NVLink 3) for
    ``h mod 3`` = 0, 1, 2; hosts talk over InfiniBand NDR. 8 × 8 gives 64 devices of 3 types.
    """
    _check(hosts=hosts, per_host=per_host)
    kinds = (("MI300X", "xgmi"), ("H100-SXM", "nvlink4"), ("A100-80GB", "nvlink3"))
    return cluster_of(
        [(kinds[h % 3][0], per_host, kinds[h % 3][1]) for h in range(hosts)],
        name=f"hetero-{hosts}x{per_host}",
    )
