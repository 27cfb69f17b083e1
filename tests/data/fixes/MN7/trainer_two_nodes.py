# A Hugging Face Trainer script launched on two nodes, each saving to its own local disk: the best model and the
# checkpoints exist only where the main process ran (MN7). The fix makes every node save its own copy.
from transformers import AutoModelForSequenceClassification, Trainer, TrainingArguments

model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased", num_labels=2)
args = TrainingArguments(
    output_dir="/scratch/run1",
    per_device_train_batch_size=16,
    evaluation_strategy="epoch",
    save_strategy="epoch",
    load_best_model_at_end=True,
)
trainer = Trainer(model=model, args=args, train_dataset=train_ds, eval_dataset=eval_ds)
trainer.train()
