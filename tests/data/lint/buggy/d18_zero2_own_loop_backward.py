# Reproduces: a hand-written ZeRO-2 training loop that wraps the model with deepspeed.initialize but still calls
# loss.backward() and optimizer.step() itself; ZeRO's gradient hooks fail inside autograd (an IndexError in the
# gradient bucket) on every rank.
# Provenance: https://github.com/deepspeedai/DeepSpeed/issues/6995 (a sketch of the pattern, not the reporter's code)
import deepspeed
import torch
import torch.nn.functional as F


def train(args, model, loader):
    engine, optimizer, _, _ = deepspeed.initialize(args=args, model=model, model_parameters=model.parameters())
    for x, y in loader:
        x, y = x.to(engine.device), y.to(engine.device)
        loss = F.binary_cross_entropy_with_logits(engine(x), y)
        optimizer.zero_grad()
        loss.backward()  # expect: D18
        optimizer.step()
