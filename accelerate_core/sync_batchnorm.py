"""Batch statistics synchronised over the processes: `Accelerator(sync_batchnorm=True)`.

A BatchNorm layer normalises with the statistics of the batch it sees. On N processes each sees
its own shard, so plain BatchNorm normalises with per-process statistics: losses, gradients and
running statistics then differ from one process training on the whole batch. Synchronised
BatchNorm computes the statistics of the global batch instead, so N processes train exactly as
one would on the N shards together.

torch's `nn.SyncBatchNorm` does this on CUDA, but DistributedDataParallel refuses it on CPU
("SyncBatchNorm layers only work with GPU modules", torch 2.13) and its kernels are CUDA ones.
`convert_sync_batchnorm` therefore gives each BatchNorm layer on CUDA torch's module and each
on CPU this module's `SyncBatchNorm`:

- forward: all-reduce (sum) of the per-process sums and counts -> the global mean; then of the
  per-process sums of squared deviations from that mean -> the global (biased) variance, which
  normalises, as BatchNorm does. Two reductions rather than one of sums and squared sums: the
  sum of squares minus the squared mean cancels catastrophically when the mean is large against
  the spread; deviations from the global mean keep the two-pass accuracy of torch's own kernel.
- backward: the gradient of the input depends on every process's outputs through the shared
  statistics, so the per-channel sums of dy and dy * x_hat are all-reduced too (as torch's
  SyncBatchNorm does); the weight and bias gradients stay per process, because DDP / DeepSpeed
  average parameter gradients afterwards.
- running statistics: updated with the global mean and the unbiased global variance (n / (n-1)),
  exactly as BatchNorm updates them from a whole batch, so every process holds the same buffers.
- everything is computed in fp32, whatever the input's dtype (fp16 / bf16 under mixed precision,
  or a DeepSpeed engine's half weights), and the output is cast back to the input's dtype: what
  torch's CPU batch_norm does for a half input with fp32 statistics under torch.autocast.

Every process must run the same BatchNorm layers the same number of times (each call is a
collective). With one process, or in eval mode, it is plain BatchNorm.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

Reduce = Callable[[torch.Tensor], None]  # sums a tensor in place over the processes


def _channel_shape(x: torch.Tensor) -> list[int]:
    """The shape that broadcasts a per-channel vector over x (N, C, *)."""
    return [1, x.shape[1]] + [1] * (x.dim() - 2)


def _reduce_dims(x: torch.Tensor) -> list[int]:
    return [0, *range(2, x.dim())]


class _SyncBatchNormFunction(torch.autograd.Function):
    """y = (x - mean) / sqrt(var + eps) * weight + bias with global mean and var."""

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
        eps: float, reduce: Reduce,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        shape, dims = _channel_shape(x), _reduce_dims(x)
        with torch.autocast(x.device.type, enabled=False):
            x32 = x.float()
            local_count = x32.numel() // x32.shape[1]
            sums = torch.cat([x32.sum(dims), x32.new_tensor([float(local_count)])])
            reduce(sums)
            count = float(sums[-1].item())
            if count <= 1:
                raise ValueError(
                    f"Expected more than 1 value per channel when training over all processes, got "
                    f"{count:g} (input size {list(x.shape)} on this process)"
                )
            mean = sums[:-1] / count
            centered = x32 - mean.view(shape)
            squares = (centered * centered).sum(dims)
            reduce(squares)
            var = squares / count  # biased: what normalises, as in BatchNorm
            invstd = torch.rsqrt(var + eps)
            x_hat = centered * invstd.view(shape)
            y = x_hat
            # A copy, never the parameter itself: ZeRO-3 releases a parameter's data after forward.
            w32 = None if weight is None else weight.detach().to(torch.float32, copy=True)
            if w32 is not None:
                y = y * w32.view(shape)
            if bias is not None:
                y = y + bias.detach().float().view(shape)
        ctx.save_for_backward(x_hat, invstd, w32)
        ctx.count = count
        ctx.reduce = reduce
        ctx.dtypes = (x.dtype, None if weight is None else weight.dtype, None if bias is None else bias.dtype)
        unbiased = var * (count / (count - 1))
        ctx.mark_non_differentiable(mean, unbiased)
        return y.to(x.dtype), mean, unbiased

    @staticmethod
    def backward(
        ctx: Any, grad_y: torch.Tensor, _grad_mean: Any, _grad_var: Any
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None, None, None]:
        x_hat, invstd, w32 = ctx.saved_tensors
        x_dtype, w_dtype, b_dtype = ctx.dtypes
        shape, dims = _channel_shape(x_hat), _reduce_dims(x_hat)
        with torch.autocast(grad_y.device.type, enabled=False):
            g = grad_y.float()
            sum_dy = g.sum(dims)  # this process's share: the bias gradient
            sum_dy_xhat = (g * x_hat).sum(dims)  # this process's share: the weight gradient
            grad_w = sum_dy_xhat.to(w_dtype) if ctx.needs_input_grad[1] else None
            grad_b = sum_dy.to(b_dtype) if ctx.needs_input_grad[2] else None
            grad_x = None
            if ctx.needs_input_grad[0]:
                # The input's gradient sees every process's outputs through the statistics.
                total = torch.cat([sum_dy, sum_dy_xhat])
                ctx.reduce(total)
                mean_dy, mean_dy_xhat = (total / ctx.count).chunk(2)
                scale = invstd if w32 is None else invstd * w32
                grad_x = ((g - mean_dy.view(shape) - x_hat * mean_dy_xhat.view(shape))
                          * scale.view(shape)).to(x_dtype)
        return grad_x, grad_w, grad_b, None, None


def sync_batch_norm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                    eps: float, reduce: Reduce) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Normalise x (N, C, *) with the statistics of the global batch; `reduce` sums a tensor in
    place over the processes. Returns (y, global mean, unbiased global variance), the last two
    for the running statistics (and not differentiable)."""
    out: tuple[torch.Tensor, torch.Tensor, torch.Tensor] = _SyncBatchNormFunction.apply(
        x, weight, bias, eps, reduce)
    return out


class SyncBatchNorm(_BatchNorm):
    """BatchNorm over any number of dimensions (N, C, *) with statistics synchronised over
    `process_group` (default: every process) in training; plain BatchNorm otherwise.

    Same parameters, buffers and state-dict keys as nn.BatchNorm1d/2d/3d, so checkpoints and
    goldens of the plain model load into it and back.
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True, process_group: Any = None,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device=device,
                         dtype=dtype)
        self.process_group = process_group

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (N, C, ...), got {input.dim()}D input")

    def _world_size(self) -> int:
        if not (dist.is_available() and dist.is_initialized()):
            return 1
        return int(dist.get_world_size(self.process_group))

    def _reduce(self, tensor: torch.Tensor) -> None:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=self.process_group)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(input)
        # As nn.BatchNorm's forward: the momentum, or a cumulative average when it is None.
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        use_batch_stats = self.training or (self.running_mean is None and self.running_var is None)
        if not (use_batch_stats and self.training and self._world_size() > 1):
            return nn.functional.batch_norm(
                input,
                self.running_mean if not self.training or self.track_running_stats else None,
                self.running_var if not self.training or self.track_running_stats else None,
                self.weight, self.bias, use_batch_stats, factor, self.eps)
        y, mean, unbiased = sync_batch_norm(input, self.weight, self.bias, self.eps, self._reduce)
        if self.track_running_stats and self.running_mean is not None and self.running_var is not None:
            with torch.no_grad():
                self.running_mean.mul_(1 - factor).add_(mean.to(self.running_mean.dtype), alpha=factor)
                self.running_var.mul_(1 - factor).add_(unbiased.to(self.running_var.dtype), alpha=factor)
        return y


def _replacement(bn: _BatchNorm, process_group: Any) -> nn.Module:
    """The synchronised twin of one BatchNorm layer, holding the SAME parameter objects (an
    optimizer built before prepare() keeps training them) and the same buffers."""
    tensors = [t for t in (bn.weight, bn.running_mean) if t is not None]
    if any(t.device.type == "cuda" for t in tensors):
        converted: nn.Module = nn.SyncBatchNorm.convert_sync_batchnorm(bn, process_group)
        return converted
    sync = SyncBatchNorm(bn.num_features, bn.eps, bn.momentum, bn.affine, bn.track_running_stats,
                         process_group)
    if bn.affine:
        sync.weight = bn.weight
        sync.bias = bn.bias
    sync.running_mean = bn.running_mean
    sync.running_var = bn.running_var
    sync.num_batches_tracked = bn.num_batches_tracked
    sync.training = bn.training
    sync.qconfig = getattr(bn, "qconfig", None)  # type: ignore[assignment]
    return sync


def convert_sync_batchnorm(module: nn.Module, process_group: Any = None) -> nn.Module:
    """Replace every BatchNorm1d/2d/3d in `module` (and `module` itself, when it is one) by its
    synchronised twin: torch's nn.SyncBatchNorm for layers on CUDA, this module's SyncBatchNorm
    for layers on CPU. Like torch's `nn.SyncBatchNorm.convert_sync_batchnorm`: children are
    replaced in place and the (possibly new) root is returned; parameters are the same objects.
    Layers already synchronised are left as they are."""
    if isinstance(module, _BatchNorm) and not isinstance(module, (SyncBatchNorm, nn.SyncBatchNorm)):
        return _replacement(module, process_group)
    for name, child in module.named_children():
        converted = convert_sync_batchnorm(child, process_group)
        if converted is not child:
            module.add_module(name, converted)
    return module


def count_batchnorm_layers(module: nn.Module) -> tuple[int, int]:
    """(plain BatchNorm layers, synchronised ones) in `module`: what a record can show."""
    plain = synced = 0
    for layer in module.modules():
        if isinstance(layer, (SyncBatchNorm, nn.SyncBatchNorm)):
            synced += 1
        elif isinstance(layer, _BatchNorm):
            plain += 1
    return plain, synced
