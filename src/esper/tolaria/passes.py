"""The passes an env runs on its device: training steps on its own CUDA stream, and the
measurements (the selection split with every counterfactual, the test split).

On CUDA each env owns a stream: batches are copied there once the producing stream's work is
done, every pass of the env runs there, and the env's stream waits for the device's current
stream (where snapshots, restores and allocations run) before it trains or measures. With
`graphs`, the training step and the selection measurement are CUDA graphs replayed on that
stream (`esper.tolaria.graphs`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable

import torch

from esper.kasmina import MorphogeneticModel
from esper.kasmina.model import BatchNormStats
from esper.tolaria.datasets import Batch, TaskData
from esper.tolaria.graphs import MeasurementGraph, TrainingGraph
from esper.tolaria.training import (
    Precision,
    TrainingEpoch,
    ValidationStats,
    recalibrate_batchnorm,
    validate,
    validation_sums,
)

VALIDATION_BATCH_SIZE = 500


class DevicePasses:
    def __init__(self, device: torch.device, data: TaskData, amp: Precision | None, graphs: bool = False) -> None:
        """`graphs`: replay the training step and the selection measurement as CUDA graphs
        (on CUDA only; the caller leaves it off for fp16 and `torch.compile`)."""
        self.device, self.amp = device, amp
        self.data = data.to(device)
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        """The env's own CUDA stream: its training, validation and counterfactuals run there."""
        graphed = graphs and self.stream is not None
        self.training_graph = TrainingGraph(self.stream) if graphed else None
        self.measurement_graph = MeasurementGraph(self.stream) if graphed else None

    def join(self) -> None:
        """The env's stream waits for the device's current stream."""
        if self.stream is not None:
            self.stream.wait_stream(torch.cuda.current_stream(self.device))

    def on_stream(self) -> contextlib.AbstractContextManager:
        return torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext()

    def open_epoch(
        self,
        model: MorphogeneticModel,
        optimizers: list[torch.optim.Optimizer],
        scaler: torch.amp.GradScaler | None,
        forward: Callable[[torch.Tensor], torch.Tensor],
    ) -> TrainingEpoch:
        """A training epoch, its running sums zeroed on the env's stream (the training graph's,
        while it holds)."""
        with self.on_stream():
            if self.training_graph is None:
                return TrainingEpoch(model, optimizers, self.amp, scaler, forward)
            sums = self.training_graph.open_epoch(model, optimizers)
            return TrainingEpoch(model, optimizers, self.amp, scaler, forward, sums, autocast_cache=False)

    def train_step(self, training: TrainingEpoch, x: torch.Tensor, y: torch.Tensor) -> None:
        """One optimisation step (no host-device sync). On CUDA the batch is copied to the env's
        stream without blocking, once the producing stream's work is done, and recorded there so
        its memory is not reused while the env still reads it."""
        if self.stream is None:
            self._step(training, x.to(self.device), y.to(self.device))
            return
        producer = torch.cuda.current_stream(x.device) if x.is_cuda else None
        with torch.cuda.stream(self.stream):
            if producer is not None:
                self.stream.wait_stream(producer)
            x = x.to(self.device, non_blocking=True)
            y = y.to(self.device, non_blocking=True)
            x.record_stream(self.stream)
            y.record_stream(self.stream)
            self._step(training, x, y)

    def _step(self, training: TrainingEpoch, x: torch.Tensor, y: torch.Tensor) -> None:
        if self.training_graph is None:
            training.step(x, y)
        else:
            self.training_graph.step(training, x, y)

    def measure(self, model: MorphogeneticModel) -> ValidationStats:
        """The selection split with every blended seed's counterfactual, BatchNorm statistics
        recomputed on the training split's calibration images first (`validate`). Call it on
        the env's stream."""
        ablate = model.blended_slots()
        if self.measurement_graph is None:
            return self.measure_on(model, self.data.val_batches(VALIDATION_BATCH_SIZE), ablate)

        def measure() -> tuple[torch.Tensor, int]:
            val = self.data.val_batches(VALIDATION_BATCH_SIZE)
            calibration = self.data.calibration_batches(VALIDATION_BATCH_SIZE)
            return validation_sums(model, val, ablate, self.amp, calibration, autocast_cache=False)

        sums, n_items = self.measurement_graph.run(model, ablate, measure)
        return ValidationStats.from_sums(sums.tolist(), n_items, ablate)

    def launch_measurement(self, model: MorphogeneticModel) -> None:
        """Queue the selection measurement's graph now, when it holds, for `measure` to read."""
        if self.measurement_graph is not None:
            with self.on_stream():
                self.measurement_graph.launch(model, model.blended_slots())

    def cancel_launched_measurement(self) -> None:
        """The step a launched measurement measured was undone: it must not be read."""
        if self.measurement_graph is not None:
            self.measurement_graph.cancel()

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
