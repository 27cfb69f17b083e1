import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_only
from torchmetrics.classification import MulticlassAccuracy


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(32, 5)
        self.val_acc = MulticlassAccuracy(num_classes=5)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.val_acc.update(self.net(x), y)

    @rank_zero_only
    def on_validation_epoch_end(self):
        # report once, from the main process
        acc = self.val_acc.compute()
        print(f"val acc {acc:.3f}")
        self.val_acc.reset()

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)
