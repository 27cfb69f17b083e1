# Correct: rank 0 prepares the object, every rank joins the broadcast; point-to-point send/recv in
# complementary branches.
import torch
import torch.distributed as dist


def share_config(rank):
    if rank == 0:
        objects = [{"lr": 3e-4}]
    else:
        objects = [None]
    dist.broadcast_object_list(objects, src=0)
    return objects[0]


def ping(rank):
    t = torch.zeros(1)
    if rank == 0:
        dist.send(t + 1, dst=1)
    else:
        dist.recv(t, src=0)
    return t


def symmetric(rank, t):
    if rank == 0:
        dist.broadcast(t, src=0)
    else:
        dist.broadcast(t, src=0)
