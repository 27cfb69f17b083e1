# Reproduces: a metric logged with sync_dist=True from code gated on global rank 0; the logging
# reduction is a collective the other ranks never join and training freezes after the first epoch.
# Provenance: https://github.com/choderalab/modelforge/pull/313
import time

import lightning as L
import torch


class Potential(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)
        self.epoch_start = 0.0

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def on_train_epoch_start(self):
        self.epoch_start = time.time()

    def on_train_epoch_end(self):
        if self.global_rank == 0:
            self.log("epoch_time", time.time() - self.epoch_start, sync_dist=True)  # expect: D21

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters())
