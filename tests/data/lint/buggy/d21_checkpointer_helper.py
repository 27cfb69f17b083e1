# Reproduces: a trainer that asks its checkpointer to save only on the master process; the
# checkpointer delegates to DeepSpeed's save_checkpoint, which waits at a barrier for all ranks.
# Provenance: https://github.com/allenai/allennlp/pull/4693
import deepspeed
import torch
import torch.distributed as dist


class Checkpointer:
    def __init__(self, serialization_dir):
        self.serialization_dir = serialization_dir

    def save(self, engine, epoch):
        engine.save_checkpoint(self.serialization_dir, tag=f"epoch_{epoch}")


class Trainer:
    def __init__(self, engine, loader, checkpointer):
        self.engine = engine
        self.loader = loader
        self._checkpointer = checkpointer
        self._master = dist.get_rank() == 0

    def _save_checkpoint(self, epoch):
        self._checkpointer.save(self.engine, epoch)

    def train(self, epochs):
        for epoch in range(epochs):
            for batch in self.loader:
                loss = self.engine(batch).mean()
                self.engine.backward(loss)
                self.engine.step()
            if self._master and self._checkpointer is not None:
                self._save_checkpoint(epoch)  # expect: D21
