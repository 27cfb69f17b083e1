import torch
import torch.distributed as dist


def write_samples(model, prompts, out_path):
    """Generate a few samples for the report; only the main process does it."""
    if dist.get_rank() != 0:
        return
    with torch.no_grad():
        samples = [model.module.generate(p) for p in prompts]
    with open(out_path, "w") as fh:
        fh.write("\n".join(samples))
    dist.barrier()  # let everyone continue once the file exists
