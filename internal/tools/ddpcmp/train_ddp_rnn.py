#!/usr/bin/python3
"""shared/anchors/train_ddp.py with the recurrent classifiers: PyTorch's
side of `internal/tools/ddpcmp/run.sh N lstm` (and gru).

The model is internal/tools/lstmbench/lstm_step.py's Classifier, the twin
of internal/models.LSTMClassifier (GRUClassifier): a 1-layer LSTM (GRU),
input 28, hidden 64, batch first, over the 28 rows of each image, the last
step's output through a Linear to 10 classes. Everything else is
train_ddp.py's own code, imported and run as it is: the data, the
DistributedSampler, batch 64 per rank, SGD lr 0.01 momentum 0.9 (the
optimizer of examples/ddp-fashion-mnist for every model), one thread per
rank, the timing between barriers and the JSON it prints. Only its
make_model is replaced, in each worker process.

  ANCHORS=../shared/anchors /usr/bin/python3 train_ddp_rnn.py --model lstm --world 2 [--no-ddp] [--epochs N]

ANCHORS is the directory of train_ddp.py (default: ../shared/anchors from
the repository root).
"""
import argparse
import json
import os
import socket
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ANCHORS = os.environ.get("ANCHORS") or os.path.join(HERE, "..", "..", "..", "..", "shared", "anchors")
sys.path.insert(0, os.path.abspath(ANCHORS))
sys.path.insert(0, os.path.join(HERE, "..", "lstmbench"))

import train_ddp  # noqa: E402

RECURRENT = ("lstm", "gru")


def make_model(nn, kind, _anchor=train_ddp.make_model):
    """train_ddp.make_model, and the recurrent classifiers over the rows of
    (N, 1, 28, 28) images."""
    if kind not in RECURRENT:
        return _anchor(nn, kind)
    from lstm_step import Classifier

    class Rows(Classifier):
        def forward(self, x):
            return super().forward(x.reshape(x.size(0), 28, 28))

    return Rows(kind)


def worker(rank, world, port, args, q):
    train_ddp.make_model = make_model  # in this (spawned) process
    train_ddp.worker(rank, world, port, args, q)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["mlp", "cnn", *RECURRENT], default="lstm")
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--no-ddp", action="store_true", help="as train_ddp.py's")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    procs = [ctx.Process(target=worker, args=(r, args.world, port, args, q)) for r in range(args.world)]
    for p in procs:
        p.start()
    res = q.get()
    for p in procs:
        p.join()
    print(json.dumps(res))
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
