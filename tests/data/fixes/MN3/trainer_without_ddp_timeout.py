from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

tokenizer = AutoTokenizer.from_pretrained("gpt2")
model = AutoModelForCausalLM.from_pretrained("gpt2")
args = TrainingArguments(
    output_dir="out",
    per_device_train_batch_size=8,
    num_train_epochs=1,
)
with args.main_process_first(desc="tokenize"):
    data = load_dataset("text", data_files="corpus.txt")["train"].map(
        lambda rows: tokenizer(rows["text"]), batched=True, num_proc=8
    )
Trainer(model=model, args=args, train_dataset=data).train()
