"""Would batching envs of one architecture into one set of launches fill a GPU? A probe for issue 35.

With CUDA graphs one `shapes` env is bound by the GPU's per-kernel latency (a chain of about
10,000 small dependent kernels per epoch), and 8 envs on their own streams overlap little
(`benchmarks/results/cuda_graphs_h100/README.md`: 2.96 times one env). Batching E envs whose hosts
share an architecture issues each layer once for all of them: a grouped convolution holds every
env's channels, so the kernel count per step stays that of one env.

This probe times the training step only (forward, cross-entropy, backward, fused AdamW; batches
of 100 16x16 images, 100 steps per host epoch) of bare width-8 `shapes` hosts, three ways:

- `separate`: E `CNNHost`s, each stepped by its own CUDA graph on its own stream (today's path,
  without the measurement pass);
- `grouped`: one module holding E hosts as grouped convolutions (the first convolution reads the
  shared images once; each later one has `groups=E`; BatchNorm is per channel, so per env; the
  classifier is a grouped 1x1 convolution), stepped by one CUDA graph;
- `grouped-nhwc`: the same module and images in channels-last memory format (cuDNN has other
  kernels for grouped convolutions in that layout);
- `bmm`: the same module, each grouped 3x3 convolution computed as an unfold and one batched
  matrix product over (image, env) pairs, so a layer is a few launches whatever E is, and no
  activation is permuted (a probe of whether cuBLAS's batched GEMM beats cuDNN's grouped kernels);
- `grouped-compiled`, `bmm-compiled`: those modules through `torch.compile` (Inductor fuses each
  BatchNorm, ReLU and pooling into fewer kernels), then captured alike;
- on the CPU both run eagerly (nothing is captured).

Before timing it checks on the probe's own device that the grouped module equals the E hosts:
the logits of a batch, and the weights after one AdamW step, within float tolerance.

The images are random tensors of the task's shape: this measures launch throughput, not
learning, and the arithmetic per step does not depend on the values.

Prints one JSON line per env count as it goes, then one JSON object: host-epochs per second (of
the training step) per arm and env count, and the ratios to one separate env. Usage:
python benchmarks/batched_envs_probe.py [--device cuda] [--envs 1,8,32] [--steps 100]
[--arms separate,grouped,grouped-nhwc,bmm] [--bf16] [--kernels 1,8]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from datetime import UTC, datetime

import torch
import torch.nn.functional as F
from torch import nn

from esper.kasmina.hosts import CNNHost

BATCH, IMAGE, CLASSES, WIDTH = 100, 16, 10, 8
ARMS = ("separate", "grouped", "grouped-nhwc", "bmm", "grouped-compiled", "bmm-compiled")


class BmmGroupedConv(nn.Conv2d):
    """A grouped 3x3 convolution (stride 1, padding 1, no bias) as an unfold and one batched matrix
    product. Its weight has the grouped convolution's shape, so hosts load into it alike.

    The input's channels are env-major, so [B, E * c_in, H, W] is [B * E, c_in, H, W] without a
    copy; each (image, env) pair's columns meet its env's weight in one `matmul` over B * E
    pairs, and the product [B, E, c_out, H * W] is the output's layout as it stands."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, _, height, width = x.shape
        envs, c_in = self.groups, self.in_channels // self.groups
        columns = F.unfold(x.reshape(batch * envs, c_in, height, width), 3, padding=1)
        columns = columns.view(batch, envs, c_in * 9, height * width)
        weight = self.weight.view(envs, self.out_channels // envs, c_in * 9)
        return torch.matmul(weight, columns).view(batch, self.out_channels, height, width)


def grouped_block(
    n_envs: int, c_in: int, c_out: int, shared_input: bool, pool: bool, conv: type[nn.Conv2d] = nn.Conv2d
) -> nn.Sequential:
    """conv-BN-ReLU-conv-BN-ReLU(-pool) for `n_envs` envs at once, env e's channels at
    [e * c_out, (e + 1) * c_out)."""
    first = (
        nn.Conv2d(c_in, n_envs * c_out, 3, padding=1, bias=False)
        if shared_input
        else conv(n_envs * c_in, n_envs * c_out, 3, padding=1, bias=False, groups=n_envs)
    )
    layers = [
        first,
        nn.BatchNorm2d(n_envs * c_out),
        nn.ReLU(),
        conv(n_envs * c_out, n_envs * c_out, 3, padding=1, bias=False, groups=n_envs),
        nn.BatchNorm2d(n_envs * c_out),
        nn.ReLU(),
    ]
    return nn.Sequential(*layers, *([nn.MaxPool2d(2)] if pool else []))


class GroupedHosts(nn.Module):
    """E width-8 `CNNHost`s of depth 3 as one module; `forward` returns logits [batch, E, classes]."""

    def __init__(self, n_envs: int, conv: type[nn.Conv2d] = nn.Conv2d) -> None:
        super().__init__()
        self.n_envs = n_envs
        widths = [WIDTH, 2 * WIDTH, 4 * WIDTH]
        c_ins = [3, *widths[:-1]]
        pairs = enumerate(zip(c_ins, widths, strict=True))
        self.blocks = nn.Sequential(
            *(grouped_block(n_envs, c_in, c, i == 0, pool=True, conv=conv) for i, (c_in, c) in pairs)
        )
        self.head = nn.Conv2d(n_envs * widths[-1], n_envs * CLASSES, 1, groups=n_envs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = F.adaptive_avg_pool2d(self.blocks(x), 1)
        return self.head(features).view(x.shape[0], self.n_envs, CLASSES)

    @torch.no_grad()
    def load_hosts(self, hosts: list[CNNHost]) -> None:
        """Copy each host's tensors into its env's slice."""
        mine = dict(self.named_parameters()) | dict(self.named_buffers())
        for name, tensor in mine.items():
            if tensor.ndim == 0:
                continue
            parts = [dict(h.named_parameters()) | dict(h.named_buffers()) for h in hosts]
            stacked = torch.cat([p[host_name(name)] for p in parts], dim=0)
            tensor.copy_(stacked.reshape(tensor.shape))


def host_name(grouped_name: str) -> str:
    """`blocks.1.3.weight` -> `segments.1.3.weight`; `head.weight` -> `segments.3.2.weight`."""
    if grouped_name.startswith("head."):
        return "segments.3.2." + grouped_name.split(".", 1)[1]
    return "segments." + grouped_name.split(".", 1)[1]


def grouped_loss(model: GroupedHosts, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The sum over envs of each env's mean cross-entropy: env e's gradient is its own loss's."""
    logits = model(x)
    return F.cross_entropy(logits.permute(0, 2, 1), y[:, None].expand(-1, model.n_envs), reduction="sum") / x.shape[0]


def separate_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(x), y)


def optimizer(model: nn.Module, device: torch.device) -> torch.optim.AdamW:
    """AdamW as the envs use it (fused on CUDA); capturable there, its learning rate a device tensor."""
    if device.type != "cuda":
        return torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
    lr = torch.tensor(1e-3, device=device)
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4, fused=True, capturable=True)


class Stepper:
    """One model's training step, captured as a CUDA graph on its own stream (run eagerly on the CPU)."""

    def __init__(
        self,
        model: nn.Module,
        loss_fn,
        device: torch.device,
        layout: torch.memory_format = torch.contiguous_format,
        bf16: bool = False,
    ) -> None:
        self.model, self.loss_fn, self.device, self.bf16 = model.to(memory_format=layout), loss_fn, device, bf16
        self.opt = optimizer(model, device)
        self.x = torch.randn(BATCH, 3, IMAGE, IMAGE, device=device).to(memory_format=layout)
        self.y = torch.randint(0, CLASSES, (BATCH,), device=device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None

    def eager_step(self) -> None:
        self.opt.zero_grad(set_to_none=False)
        with torch.autocast(self.device.type, torch.bfloat16, enabled=self.bf16):
            loss = self.loss_fn(self.model, self.x, self.y)
        loss.backward()
        self.opt.step()

    def capture(self) -> None:
        if self.device.type != "cuda":
            return
        with torch.cuda.stream(self.stream):
            for _ in range(3):  # optimizer state and workspaces first
                self.eager_step()
        torch.cuda.synchronize(self.device)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, stream=self.stream):
            self.eager_step()

    def step(self) -> None:
        if self.graph is None:
            self.eager_step()
        else:
            with torch.cuda.stream(self.stream):
                self.graph.replay()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def host_epochs_per_second(steppers: list[Stepper], envs_per_stepper: int, steps: int, device: torch.device) -> float:
    for s in steppers:
        s.capture()
    for _ in range(2):
        for s in steppers:
            s.step()
    synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        for s in steppers:
            s.step()
    synchronize(device)
    seconds = time.perf_counter() - start
    return len(steppers) * envs_per_stepper * (steps / 100) / seconds


def kernel_table(stepper: Stepper, envs: int, steps: int = 10) -> dict:
    """Where a step's GPU time goes: each kernel's time per step and per env, summed over `steps`
    eager steps under the profiler (a graph replays the same kernels; eager steps name them)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        stepper.eager_step()
    synchronize(stepper.device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            stepper.eager_step()
        synchronize(stepper.device)
    kernels = [e for e in prof.key_averages() if e.device_type == DeviceType.CUDA and e.self_device_time_total > 0]
    kernels.sort(key=lambda e: -e.self_device_time_total)
    total = sum(e.self_device_time_total for e in kernels) / steps
    return {
        "envs": envs,
        "kernel_microseconds_per_step": round(total, 1),
        "kernel_microseconds_per_env_step": round(total / envs, 1),
        "kernels_per_step": round(sum(e.count for e in kernels) / steps, 1),
        "top": [[e.key[:70], round(e.self_device_time_total / steps, 1), e.count // steps] for e in kernels[:12]],
    }


def check_equal(n_envs: int, device: torch.device, conv: type[nn.Conv2d] = nn.Conv2d) -> dict[str, float]:
    """Grouped (or bmm) against separate hosts: logits, and every weight after one AdamW step (eager)."""
    torch.manual_seed(0)
    hosts = [CNNHost(3, CLASSES, WIDTH).to(device) for _ in range(n_envs)]
    grouped = GroupedHosts(n_envs, conv).to(device)
    grouped.load_hosts(hosts)
    x = torch.randn(BATCH, 3, IMAGE, IMAGE, device=device)
    y = torch.randint(0, CLASSES, (BATCH,), device=device)
    with torch.no_grad():
        logits = torch.stack([h(x) for h in hosts], dim=1)
        logits_error = (grouped(x) - logits).abs().max().item()
    opts = [optimizer(h, device) for h in hosts]
    for h, o in zip(hosts, opts, strict=True):
        separate_loss(h, x, y).backward()
        o.step()
    opt = optimizer(grouped, device)
    grouped_loss(grouped, x, y).backward()
    opt.step()
    after = GroupedHosts(n_envs).to(device)
    after.load_hosts(hosts)
    pairs = zip(after.state_dict().values(), grouped.state_dict().values(), strict=True)
    weight_error = max((a - b).abs().max().item() for a, b in pairs if a.ndim > 0)
    return {"max_logit_difference": logits_error, "max_weight_difference_after_one_step": weight_error}


def env_counts(text: str) -> list[int]:
    """`--envs` and `--kernels`: comma-separated env counts, each at least 1 (an empty text: none)."""
    counts = [part for part in text.split(",") if part]
    if not all(part.isdigit() and int(part) >= 1 for part in counts):
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated env counts, each at least 1")
    return [int(part) for part in counts]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--envs", type=env_counts, default="1,8,32", help="env counts, comma-separated")
    parser.add_argument("--steps", type=int, default=100, help="timed training steps (100 make a host epoch)")
    parser.add_argument("--cudnn-benchmark", action="store_true", help="let cuDNN time its kernels per shape")
    parser.add_argument("--arms", default="separate,grouped", help="of " + ",".join(ARMS) + "; separate first")
    parser.add_argument("--bf16", action="store_true", help="every arm's step under bfloat16 autocast")
    parser.add_argument(
        "--kernels", type=env_counts, default="", help="env counts whose steps are profiled kernel by kernel (CUDA)"
    )
    args = parser.parse_args()
    arms = args.arms.split(",")
    if arms[0] != "separate" or not set(arms) <= set(ARMS):
        parser.error(f"--arms {args.arms!r}: a comma-separated list of {', '.join(ARMS)}, beginning with separate")
    torch.set_num_threads(1)
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    device = torch.device(args.device)
    counts = args.envs
    result: dict = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor(),
        "torch": torch.__version__,
        "threads": 1,
        "cudnn_benchmark": args.cudnn_benchmark,
        "bf16": args.bf16,
        "what": "training step only (no measurement pass), bare width-8 shapes hosts, random images",
        "equality": check_equal(4, device),
    }
    if "bmm" in arms:
        result["equality_bmm"] = check_equal(4, device, BmmGroupedConv)
    print(json.dumps(result), flush=True)
    rates: dict[str, dict[int, float]] = {arm: {} for arm in arms}
    profiled = set(args.kernels) if device.type == "cuda" else set()
    tables: dict[str, dict[int, dict]] = {arm: {} for arm in arms}
    for n in counts:
        for arm in arms:
            torch.manual_seed(0)
            if arm == "separate":
                steppers = [
                    Stepper(CNNHost(3, CLASSES, WIDTH).to(device), separate_loss, device, bf16=args.bf16)
                    for _ in range(n)
                ]
            else:
                conv = BmmGroupedConv if arm.startswith("bmm") else nn.Conv2d
                layout = torch.channels_last if arm == "grouped-nhwc" else torch.contiguous_format
                model = GroupedHosts(n, conv).to(device)
                if arm.endswith("-compiled"):
                    model = torch.compile(model)
                steppers = [Stepper(model, grouped_loss, device, layout, args.bf16)]
            rates[arm][n] = host_epochs_per_second(steppers, n // len(steppers), args.steps, device)
            if n in profiled:
                tables[arm][n] = kernel_table(steppers[0], n // len(steppers))
                print(json.dumps({"arm": arm, **tables[arm][n]}), flush=True)
            del steppers
        print(json.dumps({"envs": n, **{arm: round(r[n], 2) for arm, r in rates.items()}}), flush=True)
    one = rates["separate"][counts[0]]
    result["host_epochs_per_second"] = {arm: {n: round(v, 3) for n, v in r.items()} for arm, r in rates.items()}
    if profiled:
        result["kernels"] = tables
    result["over_one_separate_env"] = {arm: {n: round(v / one, 3) for n, v in r.items()} for arm, r in rates.items()}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
