"""How many small kernels a GPU runs per second, on one stream and on several: a probe for issue 35.

With CUDA graphs a `shapes` env-epoch is about 10,000 small kernels (batches of 100 16x16 images
through an 8-channel host) and one env runs them as one dependent chain. Eight envs on their own
streams ran 2.4 to 2.8 times one env on an H100 and an H200, even when the CPU queued an epoch's
work in a fifth of the epoch (`phases` in `scaling.py`, ten steps per graph). If the GPU ran at
most so many small kernels per second whatever the streams, that ceiling would cap envs of this
size, and only fewer kernels per env-epoch (envs batched into one kernel) would lift it.

Each stream replays its own CUDA graph of `--kernels` in-place adds on a tensor of `--elements`
floats (by default the size of the host's first activations: 100 x 8 x 16 x 16), chained as a
training step's kernels are. The figure is kernels per second summed over streams, for 1, 2, 4,
8 and 16 streams, and for a one-element tensor (no arithmetic to speak of: the GPU's own cost
per kernel).

Prints one JSON object. Usage: python benchmarks/kernel_rate_probe.py [--streams 1,2,4,8,16]
[--kernels 1000] [--replays 20] [--elements 204800]
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime

import torch


def graph_of_adds(x: torch.Tensor, kernels: int, stream: torch.cuda.Stream) -> torch.cuda.CUDAGraph:
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        x.add_(1.0)  # warm-up outside the capture
        graph.capture_begin()
        for _ in range(kernels):
            x.add_(1.0)
        graph.capture_end()
    return graph


def kernels_per_second(n_streams: int, elements: int, kernels: int, replays: int) -> float:
    streams = [torch.cuda.Stream() for _ in range(n_streams)]
    tensors = [torch.zeros(elements, device="cuda") for _ in streams]
    graphs = [graph_of_adds(x, kernels, s) for x, s in zip(tensors, streams, strict=True)]
    torch.cuda.synchronize()
    for graph, stream in zip(graphs, streams, strict=True):  # one untimed replay each
        with torch.cuda.stream(stream):
            graph.replay()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(replays):
        for graph, stream in zip(graphs, streams, strict=True):
            with torch.cuda.stream(stream):
                graph.replay()
    torch.cuda.synchronize()
    return n_streams * kernels * replays / (time.perf_counter() - start)


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def stream_counts(text: str) -> list[int]:
    """Comma-separated counts, starting at 1: the others are divided by it."""
    counts = [positive(n) for n in text.split(",")]
    if counts[0] != 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} starts at {counts[0]}; start at 1, the count the others are divided by"
        )
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=stream_counts, default="1,2,4,8,16", help="stream counts, from 1")
    parser.add_argument("--kernels", type=positive, default=1000, help="kernels per graph")
    parser.add_argument("--replays", type=positive, default=20, help="timed replays per stream")
    parser.add_argument("--elements", type=positive, default=100 * 8 * 16 * 16, help="floats each kernel adds to")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        parser.error("this probe needs a CUDA device, and torch sees none")
    counts = args.streams
    figures: dict = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "device_name": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "kernels_per_graph": args.kernels,
        "replays": args.replays,
    }
    for label, elements in (("kernels_per_second", args.elements), ("kernels_per_second_one_element", 1)):
        rates = {str(n): round(kernels_per_second(n, elements, args.kernels, args.replays)) for n in counts}
        figures[label] = rates
        figures[label.replace("kernels_per_second", "over_one_stream")] = {
            n: round(r / rates[str(counts[0])], 3) for n, r in rates.items()
        }
    figures["elements"] = args.elements
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
