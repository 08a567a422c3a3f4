"""The passes an env runs on its device: training steps on its own CUDA stream, and the
measurements (the selection split with every counterfactual, the test split).

On CUDA each env owns a stream: batches are copied there once the producing stream's work is
done, every pass of the env runs there, and the env's stream waits for the device's current
stream (where snapshots, restores and allocations run) before it trains or measures.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

import torch

from esper.kasmina import MorphogeneticModel
from esper.kasmina.model import BatchNormStats
from esper.tolaria.datasets import Batch, TaskData
from esper.tolaria.training import Precision, TrainingEpoch, ValidationStats, recalibrate_batchnorm, validate

VALIDATION_BATCH_SIZE = 500


class DevicePasses:
    def __init__(self, device: torch.device, data: TaskData, amp: Precision | None) -> None:
        self.device, self.amp = device, amp
        self.data = data.to(device)
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        """The env's own CUDA stream: its training, validation and counterfactuals run there."""

    def join(self) -> None:
        """The env's stream waits for the device's current stream."""
        if self.stream is not None:
            self.stream.wait_stream(torch.cuda.current_stream(self.device))

    def on_stream(self) -> contextlib.AbstractContextManager:
        return torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext()

    def train_step(self, training: TrainingEpoch, x: torch.Tensor, y: torch.Tensor) -> None:
        """One optimisation step (no host-device sync). On CUDA the batch is copied to the env's
        stream without blocking, once the producing stream's work is done, and recorded there so
        its memory is not reused while the env still reads it."""
        if self.stream is None:
            training.step(x.to(self.device), y.to(self.device))
            return
        producer = torch.cuda.current_stream(x.device) if x.is_cuda else None
        with torch.cuda.stream(self.stream):
            if producer is not None:
                self.stream.wait_stream(producer)
            x = x.to(self.device, non_blocking=True)
            y = y.to(self.device, non_blocking=True)
            x.record_stream(self.stream)
            y.record_stream(self.stream)
            training.step(x, y)

    def measure(self, model: MorphogeneticModel) -> ValidationStats:
        """The selection split with every blended seed's counterfactual, BatchNorm statistics
        recomputed on the training split's calibration images first (`validate`). Call it on
        the env's stream."""
        return self.measure_on(model, self.data.val_batches(VALIDATION_BATCH_SIZE), model.blended_slots())

    def measure_on(
        self, model: MorphogeneticModel, batches: Iterable[Batch], ablate: tuple[str, ...]
    ) -> ValidationStats:
        """The same measurement on other images (the test split; a second sample, to see how
        much of a reading is the sample's): the counterfactual of each slot in `ablate`, after
        the same calibration."""
        return validate(model, batches, ablate, self.amp, self.data.calibration_batches(VALIDATION_BATCH_SIZE))

    def measure_test(self, model: MorphogeneticModel) -> ValidationStats:
        """The test split, for reports only."""
        self.join()
        with self.on_stream():
            return self.measure_on(model, self.data.test_batches(VALIDATION_BATCH_SIZE), ())

    def inference_batchnorm_stats(self, model: MorphogeneticModel) -> BatchNormStats:
        """The BatchNorm statistics `measure_test` normalises with (the same calibration batches
        and procedure), for writing into a network saved for inference."""
        self.join()
        with self.on_stream():
            calibration = self.data.calibration_batches(VALIDATION_BATCH_SIZE)
            return recalibrate_batchnorm(model, calibration, (), self.amp).model
