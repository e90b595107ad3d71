"""A typical Hugging Face Accelerate training script: a model, AdamW, DataLoaders,
`accelerator.prepare`, `accelerator.backward`, `optimizer.step()`, `gather_for_metrics` for the
evaluation, `accelerator.get_state_dict(model)` / `unwrap_model` and `accelerator.save`. It imports
`accelerate` (Hugging Face), not this project's core; `accelerate launch` decides the backend.

    accelerate launch --cpu --num_processes 1 examples/accelerate_train.py --out /tmp/model.pt
    accelerate launch --multi_gpu --num_processes 2 examples/accelerate_train.py --out /tmp/model.pt \\
        --batch-size 4

`python -m harness script --implementation accelerate examples/accelerate_train.py --out
'{cell_dir}/model.pt' --batch-size '{8/processes}'` runs it, unchanged, on every backend of the
matrix (docs/script-mode.md). Seeded: the same computation on every backend when the global batch
(processes x --batch-size) is the same.
"""

from __future__ import annotations

import argparse

import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, Dataset


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
    parser.add_argument("--batch-size", type=int, default=8, help="per process")
    args = parser.parse_args()

    accelerator = Accelerator()  # `accelerate launch` decides backend and precision
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 3))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    train_data = DataLoader(Samples(64, seed=1), batch_size=args.batch_size)
    eval_data = DataLoader(Samples(20, seed=2), batch_size=4)
    model, optimizer, train_data, eval_data = accelerator.prepare(model, optimizer, train_data, eval_data)

    for epoch in range(args.epochs):
        model.train()
        for batch in train_data:
            logits = model(batch["inputs"])
            loss = nn.functional.cross_entropy(logits.float(), batch["labels"])
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        accelerator.print(f"epoch {epoch}: last loss {loss.item():.4f}")

    model.eval()
    correct = 0
    with torch.no_grad():
        for batch in eval_data:
            logits = model(batch["inputs"])
            predictions, labels = accelerator.gather_for_metrics((logits.argmax(dim=-1), batch["labels"]))
            correct += int((predictions == labels).sum())
            accelerator.gather_for_metrics(logits.float())  # the eval outputs themselves

    accelerator.wait_for_everyone()
    unwrapped = accelerator.unwrap_model(model)
    accelerator.save(accelerator.get_state_dict(model), args.out)
    accelerator.print(f"eval accuracy {correct}/{len(eval_data.dataset)}; "
                      f"{type(unwrapped).__name__} saved to {args.out}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
