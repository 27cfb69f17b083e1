# Correct: the parser accepts both spellings of the local-rank argument, and torchrun's LOCAL_RANK when neither is given.
import argparse
import os

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", "--local-rank", type=int, default=int(os.environ.get("LOCAL_RANK", 0)))
args = parser.parse_args()
