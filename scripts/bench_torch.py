#!/usr/bin/env python3
"""PyTorch reference for scripts/bench: a darknet cfg's network, trained in PyTorch.

    bench_torch.py CFG --size PX [--batch 8] [--threads 2] [--iters 6] [--warmup 2]
                       [--modes fp32,bf16] [--darknet-weights FILE]

Builds the architecture of a darknet cfg (convolutional with or without
batch_normalize, leaky or linear; maxpool, including the size-2 stride-1
maxpool that darknet pads on the right and bottom; route; upsample; yolo) as a
torch module, and trains it at batch B and PX x PX input with SGD (lr 1e-4,
momentum 0.9, weight decay 5e-4, darknet's defaults for yolov3-tiny but a small
lr) on random inputs, in float32 and under torch.autocast('cpu',
dtype=torch.bfloat16), on the given number of threads.

The loss is a stand-in: the mean squared error between the logistic of each
yolo head's input and a fixed random target. darknet's yolo loss (anchor
matching, IoU) is cheap next to the convolutions (FACTS: 22 ms of 1,152 per
iteration for all non-convolutional layers together), so the step's compute --
forward, backward and update of the same convolutions, batch-norms, pools and
routes -- is the network's, which is what images/s compares.

Prints `bench_torch: params N` (trainable parameters: convolution weights,
conv biases or batch-norm scales and biases), then one line per mode:
`bench_torch: <mode> <images/s> images/s (<iters> iterations after <warmup>
warm-up)`. With --darknet-weights FILE (a weights file darknet saved for the
same cfg) it also checks that the file holds exactly the same number of floats
(parameters plus batch-norm running means and variances) and exits 1 if not.
"""
import argparse
import os
import struct
import sys
import time


def parse_cfg(path):
    """darknet cfg -> list of (section, {key: value}) in file order."""
    sections = []
    with open(path) as f:
        for n, raw in enumerate(f, 1):
            line = raw.split('#', 1)[0].strip()
            if not line or line.startswith(';'):
                continue
            if line.startswith('['):
                if not line.endswith(']'):
                    sys.exit(f"bench_torch: {path}:{n}: bad section line {raw.strip()!r}")
                sections.append((line[1:-1].strip(), {}))
            elif '=' in line:
                if not sections:
                    sys.exit(f"bench_torch: {path}:{n}: key before the first section")
                k, v = line.split('=', 1)
                sections[-1][1][k.strip()] = v.strip()
            else:
                sys.exit(f"bench_torch: {path}:{n}: cannot parse {raw.strip()!r}")
    if not sections or sections[0][0] not in ('net', 'network'):
        sys.exit(f"bench_torch: {path}: the first section must be [net]")
    return sections


def build(torch, sections, size):
    """Returns (module, yolo layer indices, layer output shapes, BN channels)."""
    nn = torch.nn
    F = torch.nn.functional
    net = sections[0][1]
    c, h, w = int(net.get('channels', 3)), size, size
    layers, shapes, yolos = nn.ModuleList(), [], []
    kinds, routes = [], {}
    bn_channels = 0
    for i, (kind, o) in enumerate(sections[1:]):
        if kind in ('convolutional', 'conv'):
            n, k = int(o.get('filters', 1)), int(o.get('size', 1))
            s, bn = int(o.get('stride', 1)), int(o.get('batch_normalize', 0))
            pad = k // 2 if int(o.get('pad', 0)) else int(o.get('padding', 0))
            act = o.get('activation', 'logistic')
            if act not in ('leaky', 'linear'):
                sys.exit(f"bench_torch: layer {i}: activation {act} not supported (leaky, linear)")
            mods = [nn.Conv2d(c, n, k, s, pad, bias=not bn)]
            if bn:
                # darknet: momentum .01 on the rolling statistics, eps 1e-5 (close enough: timing)
                mods.append(nn.BatchNorm2d(n, eps=1e-5, momentum=0.01))
                bn_channels += n
            if act == 'leaky':
                mods.append(nn.LeakyReLU(0.1))
            layers.append(nn.Sequential(*mods))
            c, h, w = n, (h + 2 * pad - k) // s + 1, (w + 2 * pad - k) // s + 1
        elif kind in ('maxpool', 'max'):
            k = int(o.get('size', 1))
            s = int(o.get('stride', 1))
            p = int(o.get('padding', k - 1))  # darknet's default: size-1, offset -p/2

            class MaxPool(nn.Module):
                def __init__(self, k, s, p, h, w):
                    super().__init__()
                    self.k, self.s, self.lo, self.hi = k, s, p // 2, p - p // 2
                    # darknet's padding only matters where a window reaches
                    # it (the stride-1 pool); elsewhere skip the copy, as
                    # darknet's bounds check costs nothing either
                    if not self.lo and all((n - k) // s == (n + p - k) // s for n in (h, w)):
                        self.hi = 0

                def forward(self, x):
                    if self.lo or self.hi:
                        x = F.pad(x, (self.lo, self.hi, self.lo, self.hi), value=float('-inf'))
                    return F.max_pool2d(x, self.k, self.s)

            layers.append(MaxPool(k, s, p, h, w))
            h, w = (h + p - k) // s + 1, (w + p - k) // s + 1
        elif kind == 'route':
            idx = [int(v) for v in o['layers'].split(',')]
            idx = [j if j >= 0 else i + j for j in idx]
            if any(j < 0 or j >= i for j in idx):
                sys.exit(f"bench_torch: layer {i}: route to {o['layers']} out of range")
            if len({shapes[j][1:] for j in idx}) != 1:
                sys.exit(f"bench_torch: layer {i}: route inputs differ in size")
            routes[i] = idx
            layers.append(nn.Identity())
            c, h, w = sum(shapes[j][0] for j in idx), shapes[idx[0]][1], shapes[idx[0]][2]
        elif kind == 'upsample':
            s = int(o.get('stride', 2))
            layers.append(nn.Upsample(scale_factor=s, mode='nearest'))
            h, w = h * s, w * s
        elif kind == 'yolo':
            yolos.append(i)
            layers.append(nn.Identity())
        else:
            sys.exit(f"bench_torch: layer {i}: [{kind}] is not supported")
        kinds.append(kind)
        shapes.append((c, h, w))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = layers

        def forward(self, x):
            outs, heads = [], []
            for i, layer in enumerate(self.layers):
                if i in routes:
                    srcs = [outs[j] for j in routes[i]]
                    x = srcs[0] if len(srcs) == 1 else torch.cat(srcs, 1)
                else:
                    x = layer(x)
                if i in yolos:
                    heads.append(x)
                outs.append(x)
            return heads

    return Net(), yolos, shapes, bn_channels


def darknet_floats(path):
    """Number of floats in a darknet weights file (after its header)."""
    size = os.path.getsize(path)
    with open(path, 'rb') as f:
        major, minor, _ = struct.unpack('<3i', f.read(12))
    header = 12 + (8 if major * 10 + minor >= 2 and major < 1000 and minor < 1000 else 4)
    if (size - header) % 4:
        sys.exit(f"bench_torch: {path}: size {size} is not a header plus floats")
    return (size - header) // 4


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('cfg')
    ap.add_argument('--size', type=int, required=True)
    ap.add_argument('--batch', type=int, default=8)
    ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('--iters', type=int, default=6)
    ap.add_argument('--warmup', type=int, default=2)
    ap.add_argument('--modes', default='fp32,bf16')
    ap.add_argument('--darknet-weights')
    a = ap.parse_args()
    modes = a.modes.split(',')
    if any(m not in ('fp32', 'bf16') for m in modes) or a.iters < 1 or a.warmup < 0:
        ap.error('--modes takes fp32 and/or bf16; --iters >= 1, --warmup >= 0')

    import torch  # after argument checks: importing takes seconds
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    sections = parse_cfg(a.cfg)
    model, yolos, shapes, bn_channels = build(torch, sections, a.size)
    params = sum(p.numel() for p in model.parameters())
    print(f"bench_torch: torch {torch.__version__}, {a.threads} threads, {a.cfg} at {a.size} px, "
          f"batch {a.batch}; yolo heads {[shapes[i] for i in yolos]}")
    print(f"bench_torch: params {params}")
    if a.darknet_weights:
        floats = darknet_floats(a.darknet_weights)
        expect = params + 2 * bn_channels  # darknet also saves rolling mean and variance
        ok = floats == expect
        print(f"bench_torch: darknet weights {a.darknet_weights}: {floats} floats; torch: {params} "
              f"parameters + {2 * bn_channels} batch-norm running statistics = {expect}: "
              f"{'same' if ok else 'DIFFERENT'}")
        if not ok:
            return 1

    channels = int(sections[0][1].get('channels', 3))
    batches = [torch.rand(a.batch, channels, a.size, a.size) for _ in range(2)]
    targets = [torch.rand(a.batch, *shapes[i]) for i in yolos]
    for mode in modes:
        torch.manual_seed(1)
        m, *_ = build(torch, sections, a.size)
        m.train()
        opt = torch.optim.SGD(m.parameters(), lr=1e-4, momentum=0.9, weight_decay=5e-4)
        times = []
        for it in range(a.warmup + a.iters):
            x = batches[it % len(batches)]
            t = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            with torch.autocast('cpu', dtype=torch.bfloat16, enabled=(mode == 'bf16')):
                heads = m(x)
                loss = sum(torch.nn.functional.mse_loss(torch.sigmoid(hd.float()), tg)
                           for hd, tg in zip(heads, targets))
            if it == 0:
                got = [tuple(hd.shape[1:]) for hd in heads]
                if got != [shapes[i] for i in yolos]:
                    sys.exit(f"bench_torch: yolo heads came out {got}, darknet's are "
                             f"{[shapes[i] for i in yolos]}")
            loss.backward()
            opt.step()
            times.append(time.perf_counter() - t)
            if not torch.isfinite(loss):
                sys.exit(f"bench_torch: {mode}: loss is {loss.item()} at iteration {it + 1}")
        timed = sum(times[a.warmup:])
        print(f"bench_torch: {mode} {a.batch * a.iters / timed:.1f} images/s "
              f"({a.iters} iterations after {a.warmup} warm-up; last loss {loss.item():.5f})")
    return 0


if __name__ == '__main__':
    sys.exit(main())
