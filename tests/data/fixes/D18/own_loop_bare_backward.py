# A hand-written DeepSpeed ZeRO-2 loop: the engine wraps the model, but the loop still drives autograd itself.
import argparse

import deepspeed
import torch
import torch.nn.functional as F


def train(args, model, loader):
    base_opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    model_engine, optimizer, _, _ = deepspeed.initialize(args=args, model=model, optimizer=base_opt)
    for epoch in range(args.epochs):
        for step, (x, y) in enumerate(loader):
            x, y = x.to(model_engine.device), y.to(model_engine.device)
            loss = F.cross_entropy(model_engine(x), y)
            loss.backward()  # autograd straight away
            optimizer.step()
            optimizer.zero_grad()
            if step % 50 == 0 and model_engine.global_rank == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}")


def evaluate(model, loader):
    # no engine here: a plain backward for a probe of the gradients is not the engine's business
    for x, y in loader:
        F.mse_loss(model(x), y).backward()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser = deepspeed.add_config_arguments(parser)
    train(parser.parse_args(), torch.nn.Linear(16, 4), [])
