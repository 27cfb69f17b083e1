# Reproduces: a torchmetrics metric computed in a hook decorated with @rank_zero_only; compute()
# all-gathers the metric state, which only rank 0 enters, so validation end hangs on 2+ devices.
# Provenance: https://github.com/Lightning-AI/torchmetrics/issues/2684
import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_only
from torchmetrics.image.fid import FrechetInceptionDistance


class Generator(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(16, 3 * 32 * 32)
        self.fid = FrechetInceptionDistance(feature=64)

    def validation_step(self, batch, batch_idx):
        real, noise = batch
        fake = self.net(noise).view(-1, 3, 32, 32)
        self.fid.update(real, real=True)
        self.fid.update(fake, real=False)

    @rank_zero_only
    def on_validation_end(self):
        score = self.fid.compute()  # expect: D21
        print("fid", float(score))


if __name__ == "__main__":
    L.Trainer(devices=2, strategy="ddp", max_epochs=1).fit(Generator())
