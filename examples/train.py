"""The user loop accelerate_core must run unchanged on every backend: one process or many (DDP),
DeepSpeed ZeRO 1/2/3, fp32/fp16/bf16. Only the `Accelerator(...)` line (or the launcher's flags
and config) says which. See docs/the-user-loop.md.

    accelerate-core launch --cpu examples/train.py --out /tmp/model.pt
    accelerate-core launch --cpu --num-processes 2 --backend deepspeed --zero-stage 3 \\
        --mixed-precision bf16 examples/train.py --out /tmp/model.pt
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from accelerate_core import Accelerator


@dataclass
class Output:
    loss: torch.Tensor | None
    logits: torch.Tensor


class Classifier(nn.Module):
    """A model that returns an output object with `.loss`, as Hugging Face models do."""

    def __init__(self, features: int = 8, classes: int = 3) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(features, 16), nn.GELU(), nn.Linear(16, classes))

    def forward(self, inputs: torch.Tensor, labels: torch.Tensor | None = None) -> Output:
        logits = self.body(inputs)
        loss = None if labels is None else nn.functional.cross_entropy(logits.float(), labels)
        return Output(loss=loss, logits=logits)


class Samples(Dataset[dict[str, torch.Tensor]]):
    def __init__(self, size: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.inputs = torch.randn(size, 8, generator=generator)
        self.labels = (self.inputs[:, :3]).argmax(dim=-1)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"inputs": self.inputs[index], "labels": self.labels[index]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="where the full state dict is saved")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=4, help="per process: N processes with "
                        "batch B train like one process with batch N x B")
    args = parser.parse_args()
    epochs, gradient_accumulation_steps = args.epochs, 2
    torch.manual_seed(0)
    model = Classifier()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    lr_scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.5)
    tr_data = DataLoader(Samples(64, seed=1), batch_size=args.batch_size)
    eval_data = DataLoader(Samples(20, seed=2), batch_size=4)

    # --- the user loop, unchanged on every backend ---------------------------------------
    accelerator = Accelerator()  # the launcher's flags and config decide backend and precision
    model, optimizer, tr_data, eval_data = accelerator.prepare(model, optimizer, tr_data, eval_data)

    for _epoch in range(epochs):
        for step, batch in enumerate(tr_data):
            output = model(**batch)
            loss = output.loss / gradient_accumulation_steps
            accelerator.backward(loss)
            if (step + 1) % gradient_accumulation_steps == 0 or step == len(tr_data) - 1:
                optimizer.step()
                optimizer.zero_grad()
                if not optimizer.is_overflow:  # fp16 loss scaling skipped this step
                    lr_scheduler.step()

    model.eval()
    correct = 0
    with torch.no_grad():
        for batch in eval_data:
            output = model(**batch)
            predictions = accelerator.gather_for_metrics(output.logits).argmax(dim=-1)
            labels = accelerator.gather_for_metrics(batch["labels"])
            correct += int((predictions == labels).sum())

    accelerator.wait_for_everyone()
    unwrapped_model = accelerator.unwrap_model(model)
    # a full (consolidated) state dict, also under ZeRO-3, saved once:
    accelerator.save(accelerator.get_state_dict(model), args.out)
    accelerator.print(f"eval accuracy {correct}/{len(eval_data.dataset)}; "
                      f"{type(unwrapped_model).__name__} saved to {args.out}")


if __name__ == "__main__":
    main()
