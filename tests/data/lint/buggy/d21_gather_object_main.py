# Reproduces: accelerate's gather_object() called only on the main process of an Accelerator; the
# other processes never join and the program hangs.
# Provenance: https://github.com/huggingface/accelerate/issues/2733
from accelerate import Accelerator
from accelerate.utils import gather_object


def grade(prompts):
    state = Accelerator()
    outputs = []
    with state.split_between_processes(prompts) as mine:
        for prompt in mine:
            outputs.append(prompt.upper())
    if state.is_main_process:
        everything = gather_object(outputs)  # expect: D21
        print(len(everything))


if __name__ == "__main__":
    grade([f"prompt {i}" for i in range(16)])
