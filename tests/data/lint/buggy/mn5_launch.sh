#!/bin/bash
# Reproduces: torchrun asked to restart failed workers, with a script that cannot resume.
# Provenance: https://docs.pytorch.org/tutorials/beginner/ddp_series_fault_tolerance.html
set -euo pipefail
torchrun --nnodes=1 --nproc-per-node=4 --max-restarts=3 mn5_train_no_resume.py  # expect: MN5
