"""FSDP2 in bf16 on CPU with gloo (a runnable twin for gpudoctor's D14 fix): are the reduced gradients bf16-rounded?"""
import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 8))
    fully_shard(model, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16))
    g = torch.Generator().manual_seed(1 + rank)
    model(torch.randn(32, 64, generator=g)).pow(2).mean().backward()
    grads = torch.cat([p.grad.to_local().flatten() for p in model.parameters()])
    rounded = bool(torch.equal(grads, grads.to(torch.bfloat16).float()))
    print(f"rank {rank} grads {grads.dtype} bf16-rounded {rounded}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
