#!/usr/bin/env python3
"""PyTorch reference for scripts/bench: a darknet cfg's network, trained in PyTorch.

    bench_torch.py CFG --size PX [--batch 8] [--threads 2] [--iters 6] [--warmup 2]
                       [--modes fp32,fp32-cl,bf16,bf16-cl,bf16-compile-cl] [--darknet-weights FILE]
    bench_torch.py CFG --size PX --device cuda [--batch 8] [--iters 6] [--warmup 2]
                       [--modes fp32,fp16-cl,bf16-cl,fp16-compile-cl]
    bench_torch.py CFG --size PX --flops-only

Builds the architecture of a darknet cfg (convolutional with or without
batch_normalize, leaky or linear; maxpool, including the size-2 stride-1
maxpool that darknet pads on the right and bottom; route; shortcut between
tensors of the same shape; upsample; yolo) as a
torch module, and trains it at batch B and PX x PX input with SGD (lr 1e-4,
momentum 0.9, weight decay 5e-4, darknet's defaults for yolov3-tiny but a small
lr) on random inputs, on the given number of threads, in each mode:

    fp32             float32, eager, NCHW
    fp32-cl          the same in channels_last (NHWC: model and input), the
                     fastest on CPUs without bfloat16 instructions
    bf16             torch.autocast('cpu', dtype=torch.bfloat16), eager, NCHW
    bf16-cl          the same in channels_last (NHWC: model and input)
    bf16-compile     bf16 with the model through torch.compile (Inductor), NCHW
    bf16-compile-cl  the same in channels_last

With --device cuda (GPU 0) the step runs on the GPU with TF32 off in every
mode (torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
False: darknet's amp=0 is plain FP32 too) and cudnn.benchmark on (its
search falls in the warm-up); each step is timed from a synchronised device
to a synchronised device, as darknet's driver times it, and the modes are:

    fp32             float32, eager, NCHW
    fp32-cl          the same in channels_last
    fp16-cl          torch.autocast('cuda', dtype=torch.float16) with a
                     GradScaler (dynamic loss scale), eager, channels_last
    bf16-cl          torch.autocast('cuda', dtype=torch.bfloat16), eager,
                     channels_last (no scaler: bfloat16 has float32's range)
    fp16, bf16       the same two in NCHW
    fp16-compile-cl  fp16-cl with the model through torch.compile (Inductor)
    bf16-compile-cl  bf16-cl through torch.compile

and each mode's line also gives the peak of torch.cuda.max_memory_allocated
over its steps (the tensors PyTorch allocated: its caching allocator's
reserve, the CUDA context and library workspaces outside it are not counted).
The float16 modes need --device cuda; --threads is the host's thread count.

torch.compile compiles during the warm-up steps, which are not timed. A
compile mode that fails (no C++ compiler, no Python.h, an Inductor error) is
reported as `bench_torch: <mode> failed: <why>` and the other modes go on; a
failing eager mode is an error.

The loss is a stand-in: the mean squared error between the logistic of each
yolo head's input and a fixed random target. darknet's yolo loss (anchor
matching, IoU) is cheap next to the convolutions (FACTS: 22 ms of 1,152 per
iteration for all non-convolutional layers together), so the step's compute --
forward, backward and update of the same convolutions, batch-norms, pools and
routes -- is the network's, which is what images/s compares.

Prints `bench_torch: convolution forward flops per image N` (2 * k * k *
c/groups * filters * out_h * out_w summed over the convolutions; read from the
cfg without torch, and all that --flops-only prints), `bench_torch: params N`
(trainable parameters: convolution weights, conv biases or batch-norm scales
and biases), then one line per mode: `bench_torch: <mode> <images/s> images/s
(<iters> iterations after <warmup> warm-up taking <s> s; ...)`, on a GPU with
`; peak <MiB> MiB` before the closing parenthesis. With --darknet-weights FILE (a weights file darknet saved for the
same cfg) it also checks that the file holds exactly the same number of floats
(parameters plus batch-norm running means and variances) and exits 1 if not.
"""
import argparse
import gc
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


def plan(sections, size):
    """The network's layers with their output shapes, without torch.

    Returns a list of (kind, options, (c, h, w) out) and the forward
    multiply-add work of the convolutions, in flops (2 per multiply-add), per
    image: 2*k*k*c/groups*filters*out_h*out_w for each convolution.
    """
    net = sections[0][1]
    c, h, w = int(net.get('channels', 3)), size, size
    layers, flops = [], 0
    for i, (kind, o) in enumerate(sections[1:]):
        o = dict(o)
        if kind in ('convolutional', 'conv'):
            n, k = int(o.get('filters', 1)), int(o.get('size', 1))
            s, g = int(o.get('stride', 1)), int(o.get('groups', 1))
            pad = k // 2 if int(o.get('pad', 0)) else int(o.get('padding', 0))
            if c % g or n % g:
                sys.exit(f"bench_torch: layer {i}: groups={g} does not divide {c} inputs and {n} filters")
            o.update(_c=c, _n=n, _k=k, _s=s, _g=g, _pad=pad)
            c, h, w = n, (h + 2 * pad - k) // s + 1, (w + 2 * pad - k) // s + 1
            flops += 2 * k * k * (o['_c'] // g) * n * h * w
        elif kind in ('maxpool', 'max'):
            k = int(o.get('size', 1))
            s = int(o.get('stride', 1))
            p = int(o.get('padding', k - 1))  # darknet's default: size-1, offset -p/2
            o.update(_k=k, _s=s, _p=p, _h=h, _w=w)
            h, w = (h + p - k) // s + 1, (w + p - k) // s + 1
        elif kind == 'route':
            idx = [int(v) for v in o['layers'].split(',')]
            idx = [j if j >= 0 else i + j for j in idx]
            if any(j < 0 or j >= i for j in idx):
                sys.exit(f"bench_torch: layer {i}: route to {o['layers']} out of range")
            shapes = [layers[j][2] for j in idx]
            if len({sh[1:] for sh in shapes}) != 1:
                sys.exit(f"bench_torch: layer {i}: route inputs differ in size")
            # groups: each input's channels in that many slices, group_id's taken
            g, gid = int(o.get('groups', 1)), int(o.get('group_id', 0))
            if g < 1 or not 0 <= gid < g or any(sh[0] % g for sh in shapes):
                sys.exit(f"bench_torch: layer {i}: route groups={g} group_id={gid} do not divide "
                         "its inputs")
            o.update(_idx=idx, _groups=g, _gid=gid)
            c, h, w = sum(sh[0] // g for sh in shapes), shapes[0][1], shapes[0][2]
        elif kind == 'upsample':
            s = int(o.get('stride', 2))
            o.update(_s=s)
            h, w = h * s, w * s
        elif kind == 'shortcut':
            j = int(o.get('from', 0))
            j = j if j >= 0 else i + j
            if j < 0 or j >= i:
                sys.exit(f"bench_torch: layer {i}: shortcut from {o.get('from')} out of range")
            # darknet also adds tensors of other sizes (strided, over the
            # common channels); the cfgs benchmarked add equal shapes only
            if layers[j][2] != (c, h, w):
                sys.exit(f"bench_torch: layer {i}: shortcut adds {layers[j][2]} to {(c, h, w)}: "
                         "only equal shapes are supported")
            o.update(_from=j)
        elif kind == 'yolo':
            pass
        else:
            sys.exit(f"bench_torch: layer {i}: [{kind}] is not supported")
        layers.append((kind, o, (c, h, w)))
    return layers, flops


def build(torch, layers):
    """plan()'s layers -> (module, yolo layer indices, BN channels)."""
    nn = torch.nn
    F = torch.nn.functional
    mods, yolos, routes, shortcuts = nn.ModuleList(), [], {}, {}
    bn_channels = 0
    for i, (kind, o, _) in enumerate(layers):
        if kind in ('convolutional', 'conv'):
            bn = int(o.get('batch_normalize', 0))
            act = o.get('activation', 'logistic')
            if act not in ('leaky', 'linear'):
                sys.exit(f"bench_torch: layer {i}: activation {act} not supported (leaky, linear)")
            seq = [nn.Conv2d(o['_c'], o['_n'], o['_k'], o['_s'], o['_pad'], groups=o['_g'], bias=not bn)]
            if bn:
                # darknet: momentum .01 on the rolling statistics, eps 1e-5 (close enough: timing)
                seq.append(nn.BatchNorm2d(o['_n'], eps=1e-5, momentum=0.01))
                bn_channels += o['_n']
            if act == 'leaky':
                seq.append(nn.LeakyReLU(0.1))
            mods.append(nn.Sequential(*seq))
        elif kind in ('maxpool', 'max'):

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

            mods.append(MaxPool(o['_k'], o['_s'], o['_p'], o['_h'], o['_w']))
        elif kind == 'route':
            routes[i] = (o['_idx'], o['_groups'], o['_gid'])
            mods.append(nn.Identity())
        elif kind == 'shortcut':
            act = o.get('activation', 'linear')  # darknet's default for shortcut
            if act not in ('leaky', 'linear'):
                sys.exit(f"bench_torch: layer {i}: activation {act} not supported (leaky, linear)")
            shortcuts[i] = o['_from']
            mods.append(nn.LeakyReLU(0.1) if act == 'leaky' else nn.Identity())
        elif kind == 'upsample':
            mods.append(nn.Upsample(scale_factor=o['_s'], mode='nearest'))
        elif kind == 'yolo':
            yolos.append(i)
            mods.append(nn.Identity())

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = mods

        def forward(self, x):
            outs, heads = [], []
            for i, layer in enumerate(self.layers):
                if i in routes:
                    idx, g, gid = routes[i]
                    srcs = [outs[j] if g == 1 else outs[j].chunk(g, 1)[gid] for j in idx]
                    x = srcs[0] if len(srcs) == 1 else torch.cat(srcs, 1)
                elif i in shortcuts:
                    x = layer(x + outs[shortcuts[i]])
                else:
                    x = layer(x)
                if i in yolos:
                    heads.append(x)
                outs.append(x)
            return heads

    return Net(), yolos, bn_channels


def darknet_floats(path):
    """Number of floats in a darknet weights file (after its header)."""
    size = os.path.getsize(path)
    with open(path, 'rb') as f:
        major, minor, _ = struct.unpack('<3i', f.read(12))
    header = 12 + (8 if major * 10 + minor >= 2 and major < 1000 and minor < 1000 else 4)
    if (size - header) % 4:
        sys.exit(f"bench_torch: {path}: size {size} is not a header plus floats")
    return (size - header) // 4


MODES = {  # mode: (autocast dtype, channels_last, torch.compile)
    'fp32': (None, False, False),
    'fp32-cl': (None, True, False),
    'bf16': ('bf16', False, False),
    'bf16-cl': ('bf16', True, False),
    'bf16-compile': ('bf16', False, True),
    'bf16-compile-cl': ('bf16', True, True),
    'fp16': ('fp16', False, False),  # float16: --device cuda only
    'fp16-cl': ('fp16', True, False),
    'fp16-compile-cl': ('fp16', True, True),
}
DEFAULT_MODES = {'cpu': 'fp32,fp32-cl,bf16,bf16-cl,bf16-compile-cl',
                 'cuda': 'fp32,fp16-cl,bf16-cl,fp16-compile-cl'}


def run_mode(torch, a, mode, layers, yolos, batches, targets):
    """Trains a fresh copy of the network in one mode; returns images/s, the
    warm-up's seconds (torch.compile compiles during the first step), the
    last loss and, on a GPU, the peak of allocated device memory in MiB."""
    half, cl, compiled = MODES[mode]
    cuda = a.device == 'cuda'
    dtype = {None: None, 'bf16': torch.bfloat16, 'fp16': torch.float16}[half]
    torch.manual_seed(1)
    m, *_ = build(torch, layers)
    m = m.to(a.device)
    m.train()
    opt = torch.optim.SGD(m.parameters(), lr=1e-4, momentum=0.9, weight_decay=5e-4)
    # float16's range needs a loss scale (darknet's AMP float16 scales dynamically too)
    scaler = torch.amp.GradScaler('cuda') if half == 'fp16' else None
    if cl:
        # oneDNN's and cuDNN's convolutions want NHWC; in NCHW PyTorch reorders around each one
        m = m.to(memory_format=torch.channels_last)
        batches = [x.to(memory_format=torch.channels_last) for x in batches]
    step = torch.compile(m) if compiled else m
    want = [layers[i][2] for i in yolos]
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if cuda:
        sync()
        torch.cuda.reset_peak_memory_stats()
    times = []
    for it in range(a.warmup + a.iters):
        x = batches[it % len(batches)]
        sync()
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(a.device, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            heads = step(x)
            loss = sum(torch.nn.functional.mse_loss(torch.sigmoid(hd.float()), tg)
                       for hd, tg in zip(heads, targets))
        if it == 0:
            got = [tuple(hd.shape[1:]) for hd in heads]
            if got != want:
                sys.exit(f"bench_torch: {mode}: yolo heads came out {got}, darknet's are {want}")
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        sync()
        times.append(time.perf_counter() - t)
        if not torch.isfinite(loss):
            sys.exit(f"bench_torch: {mode}: loss is {loss.item()} at iteration {it + 1}")
    peak = torch.cuda.max_memory_allocated() / (1 << 20) if cuda else None
    return a.batch * a.iters / sum(times[a.warmup:]), sum(times[:a.warmup]), loss.item(), peak


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('cfg')
    ap.add_argument('--size', type=int, required=True)
    ap.add_argument('--batch', type=int, default=8)
    ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('--iters', type=int, default=6)
    ap.add_argument('--warmup', type=int, default=2)
    ap.add_argument('--device', choices=('cpu', 'cuda'), default='cpu')
    ap.add_argument('--modes', help=f"default: {DEFAULT_MODES['cpu']}; "
                    f"with --device cuda: {DEFAULT_MODES['cuda']}")
    ap.add_argument('--darknet-weights')
    ap.add_argument('--flops-only', action='store_true')
    a = ap.parse_args()
    modes = (a.modes or DEFAULT_MODES[a.device]).split(',')
    if any(m not in MODES for m in modes) or a.iters < 1 or a.warmup < 0:
        ap.error(f"--modes takes some of {','.join(MODES)}; --iters >= 1, --warmup >= 0")
    if a.device == 'cpu' and any(MODES[m][0] == 'fp16' for m in modes):
        ap.error('the float16 modes need --device cuda')
    if any(MODES[m][2] for m in modes) and a.warmup < 1:
        ap.error('torch.compile modes need --warmup >= 1: the first step compiles')
    sections = parse_cfg(a.cfg)
    layers, flops = plan(sections, a.size)
    print(f"bench_torch: convolution forward flops per image {flops}")
    if a.flops_only:
        return 0

    import torch  # after argument checks: importing takes seconds
    torch.set_num_threads(a.threads)
    where = f"{a.threads} threads"
    if a.device == 'cuda':
        if not torch.cuda.is_available():
            print("bench_torch: --device cuda: torch finds no usable CUDA device", file=sys.stderr)
            return 1
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = True
        cc = torch.cuda.get_device_capability(0)
        if cc < (8, 0) and any(MODES[m][0] == 'bf16' for m in modes):
            ap.error(f"the bfloat16 modes need compute capability 8.0; GPU 0 has {cc[0]}.{cc[1]}")
        where = (f"{torch.cuda.get_device_name(0)} (compute capability {cc[0]}.{cc[1]}), "
                 f"CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}, TF32 off")
    torch.manual_seed(1)
    model, yolos, bn_channels = build(torch, layers)
    params = sum(p.numel() for p in model.parameters())
    print(f"bench_torch: torch {torch.__version__}, {where}, {a.cfg} at {a.size} px, "
          f"batch {a.batch}; yolo heads {[layers[i][2] for i in yolos]}")
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
    batches = [torch.rand(a.batch, channels, a.size, a.size, device=a.device) for _ in range(2)]
    targets = [torch.rand(a.batch, *layers[i][2], device=a.device) for i in yolos]
    for mode in modes:
        try:
            rate, warm, loss, peak = run_mode(torch, a, mode, layers, yolos, batches, targets)
        except Exception as e:  # noqa: BLE001 -- only torch.compile's failures are reported, not raised
            oom = 'out of memory' in str(e).lower()
            if not MODES[mode][2] and not oom:
                raise
            why = ' '.join(str(e).split(' Set TORCHDYNAMO_VERBOSE')[0].split())[:300] or '(no message)'
            print(f"bench_torch: {mode} failed: {type(e).__name__}: {why}", flush=True)
            if a.device == 'cuda':  # the failed mode's tensors back, for the next mode
                gc.collect()
                torch.cuda.empty_cache()
            continue
        mem = '' if peak is None else f"; peak {peak:.0f} MiB"
        print(f"bench_torch: {mode} {rate:.1f} images/s ({a.iters} iterations after {a.warmup} "
              f"warm-up taking {warm:.1f} s; last loss {loss:.5f}{mem})", flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
